package prober

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/internal/testutil"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// fleetHarness runs several Managers on one shared Queue and a fake clock,
// as a fleet's agents run.
type fleetHarness struct {
	t      *testing.T
	clock  *clocktesting.FakeClock
	runner *fakeRunner
	queue  *Queue
	ms     []*Manager
	got    [][]Update
}

func newFleetHarness(t *testing.T, managers, workers int) *fleetHarness {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	h := &fleetHarness{t: t, clock: clk, runner: newFakeRunner(clk), got: make([][]Update, managers)}
	h.queue = NewQueue(QueueConfig{Clock: clk, Workers: workers})
	ctx, cancel := context.WithCancel(context.Background())
	if err := h.queue.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range managers {
		// No Clock: a Manager on a Queue takes the Queue's.
		m := NewManager(Config{Runner: h.runner, Queue: h.queue, Seed: uint64(i)})
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		h.ms = append(h.ms, m)
	}
	t.Cleanup(func() {
		cancel()
		for _, m := range h.ms {
			m.Wait()
		}
		h.queue.Wait()
	})
	return h
}

func (h *fleetHarness) settle() {
	h.t.Helper()
	testutil.WaitFor(h.t, "every probe manager is quiescent", func() bool {
		for i, m := range h.ms {
			for len(m.Updates()) > 0 {
				h.got[i] = append(h.got[i], <-m.Updates())
			}
		}
		for _, m := range h.ms {
			if !m.quiescent(h.clock.Now()) {
				return false
			}
		}
		return true
	})
}

func (h *fleetHarness) step(d time.Duration) {
	h.t.Helper()
	h.settle()
	h.clock.Step(d)
	h.settle()
}

// TestSharedQueueServesManyManagers: one queue times the probes of several
// nodes, each on its own schedule, with the thresholds, startup gating and
// updates of each node kept apart, and the queue's bound on the probes that
// run at once holding across the nodes.
func TestSharedQueueServesManyManagers(t *testing.T) {
	const nodes, workers = 3, 2
	h := newFleetHarness(t, nodes, workers)
	for i, m := range h.ms {
		id := fmt.Sprintf("n%d", i)
		// Node i's readiness probe has a period of i+1 s and an initial
		// delay of i s; its startup probe passes on the second try.
		h.runner.script(id, Startup, answer{res: Failure})
		pod := newPod("u"+id, corev1.Container{
			StartupProbe:   execProbe(Startup, withPeriod(1)),
			ReadinessProbe: execProbe(Readiness, withPeriod(int32(i+1)), withDelay(int32(i))),
		})
		m.ContainerStarted(pod, "c0", id, t0)
	}
	for range 6 {
		h.step(time.Second)
	}
	sec := func(s ...int) []time.Duration {
		var d []time.Duration
		for _, n := range s {
			d = append(d, time.Duration(n)*time.Second)
		}
		return d
	}
	want := map[string][]time.Duration{
		// Startup passes at 1s and triggers readiness at once; then every
		// period from there.
		"n0/Readiness": sec(1, 2, 3, 4, 5, 6),
		"n1/Readiness": sec(1, 3, 5),
		"n2/Readiness": sec(1, 4),
		"n0/Startup":   sec(0, 1),
		"n1/Startup":   sec(0, 1),
		"n2/Startup":   sec(0, 1),
	}
	for key, at := range want {
		if got := h.runner.callsOf(key); !slices.Equal(got, at) {
			t.Errorf("%s probed at %v, want %v", key, got, at)
		}
	}
	for i := range h.ms {
		var got []string
		for _, u := range h.got[i] {
			if u.ContainerID != fmt.Sprintf("n%d", i) {
				t.Errorf("node %d got an update of another node: %+v", i, u)
			}
			got = append(got, u.Kind.String()+"="+u.Result.String())
		}
		if want := []string{"Startup=Success", "Readiness=Success"}; !slices.Equal(got, want) {
			t.Errorf("node %d updates = %v, want %v", i, got, want)
		}
	}
	if h.runner.maxRunning > workers {
		t.Errorf("%d probes ran at once on a queue of %d workers", h.runner.maxRunning, workers)
	}
}

// TestProbesWaitForStart: a container reported before Start is probed on
// its schedule from Start on, and nothing runs before, even when due.
func TestProbesWaitForStart(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	runner := newFakeRunner(clk)
	m := NewManager(Config{Clock: clk, Runner: runner, Seed: 1})
	pod := newPod("u1", corev1.Container{ReadinessProbe: execProbe(Readiness, withDelay(5))})
	m.ContainerStarted(pod, "c0", "cid", t0)
	clk.Step(7 * time.Second)
	if n := runner.total(); n != 0 {
		t.Fatalf("%d probes ran before Start", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err == nil {
		t.Error("a second Start did not fail")
	}
	h := &harness{t: t, clock: clk, runner: runner, m: m}
	h.settle()
	h.step(8 * time.Second)
	// Due at 5s, run at Start (7s); the period keeps the grid of 5s.
	if got, want := runner.callsOf("cid/Readiness"), []time.Duration{7 * time.Second, 15 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("probes at %v, want %v", got, want)
	}
	if u := h.updates(); len(u) != 1 || u[0].Result != Success {
		t.Errorf("updates = %+v, want readiness Success", u)
	}
	cancel()
	m.Wait()
	clk.Step(time.Minute)
	time.Sleep(10 * time.Millisecond)
	if n := runner.total(); n != 2 {
		t.Errorf("%d probes ran after the context ended", n-2)
	}
}

// TestUpdatesBeyondTheBuffer: an agent that does not take its updates for a
// while gets them all, in order, once it does, and the goroutine that held
// them ends.
func TestUpdatesBeyondTheBuffer(t *testing.T) {
	const containers = 3 * updatesBuffer
	// One worker: the probes, hence the updates, come in the order the
	// containers started.
	h := newHarness(t, 1)
	h.settle()
	base := runtime.NumGoroutine()
	cs := make([]corev1.Container, containers)
	for i := range cs {
		cs[i].ReadinessProbe = execProbe(Readiness)
	}
	pod := newPod("u1", cs...)
	for i := range cs {
		h.m.ContainerStarted(pod, cs[i].Name, fmt.Sprintf("cid%02d", i), t0)
	}
	testutil.WaitFor(t, "every probe ran", func() bool { return h.runner.total() == containers })
	testutil.WaitFor(t, "the updates wait for the agent", func() bool {
		h.m.mu.Lock()
		defer h.m.mu.Unlock()
		return len(h.m.pending) == containers-updatesBuffer
	})
	if d := runtime.NumGoroutine() - base; d > 1 {
		t.Errorf("%d goroutines hold the updates, want 1", d)
	}
	h.settle()
	got := h.updates()
	if len(got) != containers {
		t.Fatalf("%d updates, want %d", len(got), containers)
	}
	ids := make([]string, len(got))
	for i, u := range got {
		ids[i] = u.ContainerID
	}
	if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != containers {
		t.Errorf("updates out of order or repeated: %v", ids)
	}
	testutil.WaitFor(t, "the delivering goroutine ends", func() bool { return runtime.NumGoroutine() <= base })
}

// gatedRunner answers Success once its gate, if any, opens.
type gatedRunner struct {
	mu    sync.Mutex
	gate  chan struct{}
	calls int
}

func (g *gatedRunner) total() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

func (g *gatedRunner) wait() {
	g.mu.Lock()
	g.calls++
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

func (g *gatedRunner) set(gate chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate = gate
}

func (g *gatedRunner) Exec(context.Context, string, []string, time.Duration) (Result, string, error) {
	g.wait()
	return Success, "", nil
}
func (g *gatedRunner) Network(context.Context, Kind, *corev1.Pod, *corev1.Container, string, *corev1.Probe) (Result, string, error) {
	g.wait()
	return Success, "", nil
}

// TestGoroutinesPerNode counts what probing 1,000 containers costs: a
// Manager on its own queue takes the queue's waiting loop while idle and
// the pool besides while probes run (Run's own goroutine aside); Managers on
// a shared queue take none of their own, however many.
func TestGoroutinesPerNode(t *testing.T) {
	const containers = 1000
	addContainers := func(m *Manager, clk *clocktesting.FakeClock, node int) {
		for i := range containers / 10 {
			cs := make([]corev1.Container, 10)
			for j := range cs {
				cs[j].ReadinessProbe = execProbe(Readiness)
			}
			pod := newPod(fmt.Sprintf("n%d-u%d", node, i), cs...)
			for j := range cs {
				m.ContainerStarted(pod, cs[j].Name, fmt.Sprintf("n%d-p%d-c%d", node, i, j), clk.Now())
			}
		}
	}
	// measure probes n nodes' containers, all due at once on a held runner,
	// and returns the goroutines added while idle and while probing.
	measure := func(t *testing.T, nodes int, shared bool, run bool) (idle, probing int) {
		clk := clocktesting.NewFakeClock(t0)
		runner := &gatedRunner{}
		base := testutil.SettledGoroutines()
		ctx, cancel := context.WithCancel(context.Background())
		var q *Queue
		if shared {
			q = NewQueue(QueueConfig{Clock: clk})
			_ = q.Start(ctx)
		}
		var ms []*Manager
		done := make(chan struct{})
		for i := range nodes {
			m := NewManager(Config{Clock: clk, Runner: runner, Queue: q, Seed: 1})
			ms = append(ms, m)
			if run {
				go func() { m.Run(ctx); done <- struct{}{} }()
			} else if err := m.Start(ctx); err != nil {
				t.Fatal(err)
			}
			// The agent's side: take every update.
			go func() {
				for {
					select {
					case <-m.Updates():
					case <-ctx.Done():
						return
					}
				}
			}()
			addContainers(m, clk, i)
		}
		consumers := nodes
		testutil.WaitFor(t, "the first probes ran", func() bool { return runner.total() == nodes*containers })
		idle = testutil.SettledGoroutines() - base - consumers
		gate := make(chan struct{})
		runner.set(gate)
		clk.Step(10 * time.Second)
		probing = testutil.SettledGoroutines() - base - consumers
		close(gate)
		cancel()
		for _, m := range ms {
			if run {
				<-done
			} else {
				m.Wait()
			}
		}
		if q != nil {
			q.Wait()
		}
		return idle, probing
	}

	idle, probing := measure(t, 1, false, true)
	t.Logf("Run, own queue: %d goroutines idle, %d probing", idle, probing)
	if idle > 2 || probing > 2+DefaultWorkers {
		t.Errorf("Run on its own queue: %d goroutines idle, %d probing; want at most 2 and %d", idle, probing, 2+DefaultWorkers)
	}
	idle, probing = measure(t, 1, false, false)
	t.Logf("Start, own queue: %d goroutines idle, %d probing", idle, probing)
	if idle > 1 || probing > 1+DefaultWorkers {
		t.Errorf("Start on its own queue: %d goroutines idle, %d probing; want at most 1 and %d", idle, probing, 1+DefaultWorkers)
	}
	const nodes = 10
	idle, probing = measure(t, nodes, true, false)
	t.Logf("Start, %d nodes on a shared queue: %d goroutines idle, %d probing", nodes, idle, probing)
	if idle > 1 || probing > 1+DefaultWorkers {
		t.Errorf("%d nodes on a shared queue: %d goroutines idle, %d probing; want at most 1 and %d in all", nodes, idle, probing, 1+DefaultWorkers)
	}
}
