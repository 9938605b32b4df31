package prober

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/internal/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
)

// t0 is the fake clock's start; whole seconds keep the expected times easy
// to read.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type answer struct {
	res Result
	out string
	err error
	// hang waits for the context to end, as a runner that ignores its
	// timeout would.
	hang bool
}

type call struct {
	key string // containerID/Kind
	at  time.Duration
}

// fakeRunner answers probes from per-(container, kind) scripts, Success once
// a script is used up. Exec probes name their kind in the command (see
// execProbe). hold, when set, keeps every call waiting until it is closed.
type fakeRunner struct {
	clock *clocktesting.FakeClock

	mu       sync.Mutex
	scripts  map[string][]answer
	calls    []call
	inFlight map[string]int
	overlap  bool
	running  int
	// maxRunning is the most probes that ran at once.
	maxRunning int
	hold       chan struct{}
}

func newFakeRunner(clk *clocktesting.FakeClock) *fakeRunner {
	return &fakeRunner{clock: clk, scripts: map[string][]answer{}, inFlight: map[string]int{}}
}

func (f *fakeRunner) script(containerID string, k Kind, answers ...answer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := containerID + "/" + k.String()
	f.scripts[key] = append(f.scripts[key], answers...)
}

func (f *fakeRunner) Exec(ctx context.Context, containerID string, cmd []string, _ time.Duration) (Result, string, error) {
	return f.answer(ctx, containerID+"/"+cmd[0])
}

func (f *fakeRunner) Network(ctx context.Context, kind Kind, _ *corev1.Pod, _ *corev1.Container, containerID string, _ *corev1.Probe) (Result, string, error) {
	return f.answer(ctx, containerID+"/"+kind.String())
}

func (f *fakeRunner) answer(ctx context.Context, key string) (Result, string, error) {
	f.mu.Lock()
	f.calls = append(f.calls, call{key, f.clock.Since(t0)})
	f.inFlight[key]++
	if f.inFlight[key] > 1 {
		f.overlap = true
	}
	f.running++
	f.maxRunning = max(f.maxRunning, f.running)
	a := answer{res: Success}
	if s := f.scripts[key]; len(s) > 0 {
		a, f.scripts[key] = s[0], s[1:]
	}
	hold := f.hold
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight[key]--
		f.running--
		f.mu.Unlock()
	}()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
		}
	}
	if a.hang {
		<-ctx.Done()
		return Unknown, "", ctx.Err()
	}
	return a.res, a.out, a.err
}

// callsOf returns when each probe of key ran, as offsets from t0.
func (f *fakeRunner) callsOf(key string) []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	var at []time.Duration
	for _, c := range f.calls {
		if c.key == key {
			at = append(at, c.at)
		}
	}
	return at
}

func (f *fakeRunner) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeRunner) inProgress() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running
}

type harness struct {
	t      *testing.T
	clock  *clocktesting.FakeClock
	runner *fakeRunner
	events *record.FakeRecorder
	m      *Manager
	// got collects delivered updates, drained while settling so that a
	// burst larger than the channel's buffer does not stall the manager.
	got []Update
}

// newHarness runs a Manager on a fake clock at t0 until the test ends.
func newHarness(t *testing.T, workers int) *harness {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	h := &harness{t: t, clock: clk, runner: newFakeRunner(clk), events: record.NewFakeRecorder(1000)}
	h.m = NewManager(Config{Clock: clk, Runner: h.runner, Events: h.events, Workers: workers, Seed: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return h
}

// quiescent reports whether nothing will happen until the clock moves: the
// manager has started, no probe is due, ready or running, and every update
// is delivered. Stepping the clock only then keeps the tests deterministic;
// the queue's timers are exact even if its waiting loop has not yet taken
// the last runs scheduled.
func (m *Manager) quiescent(now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx == nil || len(m.pending) > 0 || m.delivering || !m.queue.q.Idle() {
		return false
	}
	for _, pe := range m.pods {
		for _, w := range pe.workers {
			if w.state == running || (w.state == scheduled && !w.next.After(now)) {
				return false
			}
		}
	}
	return true
}

func (h *harness) settle() {
	h.t.Helper()
	testutil.WaitFor(h.t, "the probe manager is quiescent", func() bool {
		h.collect()
		return h.m.quiescent(h.clock.Now())
	})
}

// step moves the clock once the manager is quiescent and waits until it is
// again: every probe due by then has run.
func (h *harness) step(d time.Duration) {
	h.t.Helper()
	h.settle()
	h.clock.Step(d)
	h.settle()
}

func (h *harness) collect() {
	for {
		select {
		case u := <-h.m.Updates():
			h.got = append(h.got, u)
		default:
			return
		}
	}
}

// updates returns the updates delivered since it was last called.
func (h *harness) updates() []Update {
	h.collect()
	got := h.got
	h.got = nil
	return got
}

func (h *harness) drainEvents() []string {
	var got []string
	for {
		select {
		case e := <-h.events.Events:
			got = append(got, e)
		default:
			return got
		}
	}
}

// execProbe is an exec probe whose command names its kind, which the fake
// runner keys its scripts on.
func execProbe(k Kind, mod ...func(*corev1.Probe)) *corev1.Probe {
	p := &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{k.String()}}},
		PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
	}
	for _, f := range mod {
		f(p)
	}
	return p
}

func withThresholds(success, failure int32) func(*corev1.Probe) {
	return func(p *corev1.Probe) { p.SuccessThreshold, p.FailureThreshold = success, failure }
}

func withPeriod(s int32) func(*corev1.Probe) { return func(p *corev1.Probe) { p.PeriodSeconds = s } }

func withDelay(s int32) func(*corev1.Probe) {
	return func(p *corev1.Probe) { p.InitialDelaySeconds = s }
}

// newPod returns a pod whose containers are named c0, c1, ... with the
// given probes each.
func newPod(uid string, containers ...corev1.Container) *corev1.Pod {
	for i := range containers {
		if containers[i].Name == "" {
			containers[i].Name = fmt.Sprintf("c%d", i)
		}
		containers[i].Image = "registry.k8s.io/pause:3.10"
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "ns", UID: types.UID(uid)},
		Spec:       corev1.PodSpec{Containers: containers},
	}
}
