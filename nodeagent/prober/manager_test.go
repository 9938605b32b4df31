package prober

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/internal/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

func TestThresholds(t *testing.T) {
	const (
		S = Success
		F = Failure
		U = Unknown
		W = Warning
	)
	cases := []struct {
		name             string
		kind             Kind
		success, failure int32
		answers          []Result
		// want is the cached result after each period, the first probe
		// running at once.
		want    []Result
		updates []Result
		// calls is how many probes ran, fewer than answers if the worker
		// holds; 0 means all.
		calls int
	}{
		{name: "readiness needs successThreshold successes in a row", kind: Readiness, success: 2, failure: 3,
			answers: []Result{S, F, S, S, S}, want: []Result{F, F, F, S, S}, updates: []Result{S}},
		{name: "readiness needs failureThreshold failures in a row", kind: Readiness, success: 1, failure: 3,
			answers: []Result{S, F, F, S, F, F, F}, want: []Result{S, S, S, S, S, S, F}, updates: []Result{S, F}},
		{name: "readiness sends only changes", kind: Readiness, success: 1, failure: 1,
			answers: []Result{F, S, S, F, F, S}, want: []Result{F, S, S, F, F, S}, updates: []Result{S, F, S}},
		{name: "liveness fails at the threshold, then holds", kind: Liveness, success: 1, failure: 2,
			answers: []Result{F, S, F, F, S, S}, want: []Result{S, S, S, F, F, F}, updates: []Result{F}, calls: 4},
		{name: "an unknown result counts as a failure", kind: Readiness, success: 1, failure: 1,
			answers: []Result{S, U}, want: []Result{S, F}, updates: []Result{S, F}},
		{name: "a warning counts as a success", kind: Readiness, success: 1, failure: 1,
			answers: []Result{W}, want: []Result{S}, updates: []Result{S}},
		{name: "startup passes, then holds", kind: Startup, success: 1, failure: 3,
			answers: []Result{F, F, S, S}, want: []Result{U, U, S, S}, updates: []Result{S}, calls: 3},
		{name: "startup fails at the threshold, then holds", kind: Startup, success: 1, failure: 2,
			answers: []Result{F, F, F}, want: []Result{U, F, F}, updates: []Result{F}, calls: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 2)
			for _, r := range tc.answers {
				h.runner.script("cid", tc.kind, answer{res: r, out: "out"})
			}
			c := corev1.Container{}
			p := execProbe(tc.kind, withThresholds(tc.success, tc.failure))
			switch tc.kind {
			case Liveness:
				c.LivenessProbe = p
			case Readiness:
				c.ReadinessProbe = p
			case Startup:
				c.StartupProbe = p
			}
			pod := newPod("u1", c)
			h.m.ContainerStarted(pod, "c0", "cid", t0)
			var updates []Result
			for i, want := range tc.want {
				if i > 0 {
					h.step(10 * time.Second)
				}
				h.settle()
				if got, _ := h.m.Get(tc.kind, "cid"); got != want {
					t.Errorf("after probe %d: result = %v, want %v", i+1, got, want)
				}
				for _, u := range h.updates() {
					if u.ContainerID != "cid" || u.Kind != tc.kind || u.PodUID != "u1" || u.ContainerName != "c0" {
						t.Errorf("update %+v does not name the container and kind", u)
					}
					updates = append(updates, u.Result)
				}
			}
			if !slices.Equal(updates, tc.updates) {
				t.Errorf("updates = %v, want %v", updates, tc.updates)
			}
			calls := tc.calls
			if calls == 0 {
				calls = len(tc.answers)
			}
			if got := len(h.runner.callsOf("cid/" + tc.kind.String())); got != calls {
				t.Errorf("probes run = %d, want %d", got, calls)
			}
		})
	}
}

func TestInitialResults(t *testing.T) {
	h := newHarness(t, 1)
	pod := newPod("u1", corev1.Container{
		StartupProbe:   execProbe(Startup, withDelay(5)),
		LivenessProbe:  execProbe(Liveness, withDelay(5)),
		ReadinessProbe: execProbe(Readiness, withDelay(5)),
	})
	h.m.ContainerStarted(pod, "c0", "cid", t0)
	h.step(4 * time.Second)
	want := map[Kind]Result{Startup: Unknown, Liveness: Success, Readiness: Failure}
	for k, w := range want {
		if got, ok := h.m.Get(k, "cid"); !ok || got != w {
			t.Errorf("%v before the first probe = (%v, %v), want %v as the kubelet starts it", k, got, ok, w)
		}
	}
	if h.m.Started("cid") || h.m.Readiness("cid") != Failure {
		t.Errorf("Started = %v, Readiness = %v before any probe, want false, Failure", h.m.Started("cid"), h.m.Readiness("cid"))
	}
	if u := h.updates(); len(u) != 0 {
		t.Errorf("initial values were sent as updates: %+v", u)
	}
	if n := h.runner.total(); n != 0 {
		t.Errorf("%d probes ran within the initial delay", n)
	}
}

func TestFirstRunAndNextTick(t *testing.T) {
	p := params{initialDelay: 15 * time.Second, period: 10 * time.Second}
	now := t0.Add(time.Hour)
	cases := []struct {
		name      string
		startedAt time.Time
		jitter    float64
		want      time.Time
	}{
		{"a new container waits for its initial delay", now, 0.5, now.Add(15 * time.Second)},
		{"one started a while ago waits the rest", now.Add(-10 * time.Second), 0.5, now.Add(5 * time.Second)},
		{"one past its delay runs at once", now.Add(-time.Minute), 0.5, now},
		{"no start time counts from now", time.Time{}, 0.5, now.Add(15 * time.Second)},
		{"one from before the manager started waits a random part of the period", t0.Add(-time.Minute), 0.25, now.Add(2500 * time.Millisecond)},
		{"and still its initial delay", t0.Add(-time.Second), 0.25, now.Add(2500 * time.Millisecond)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := firstRun(now, tc.startedAt, t0, p, tc.jitter); !got.Equal(tc.want) {
				t.Errorf("firstRun = %v, want %v", got.Sub(now), tc.want.Sub(now))
			}
		})
	}
	// With the initial delay still to come, it wins over a shorter jitter.
	if got := firstRun(t0, t0.Add(-time.Second), t0, p, 0.1); !got.Equal(t0.Add(14 * time.Second)) {
		t.Errorf("firstRun of a restarted container in its delay = %v, want 14s", got.Sub(t0))
	}

	ticks := []struct {
		name           string
		scheduled, now time.Duration
		want           time.Duration
	}{
		{"one period after the run", 0, time.Second, 10 * time.Second},
		{"a run that overran skips missed ticks", 0, 25 * time.Second, 30 * time.Second},
		{"a run that ended on a tick skips it", 0, 20 * time.Second, 30 * time.Second},
		{"the grid is the first run's", 3 * time.Second, 4 * time.Second, 13 * time.Second},
	}
	for _, tc := range ticks {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextTick(t0.Add(tc.scheduled), t0.Add(tc.now), 10*time.Second); !got.Equal(t0.Add(tc.want)) {
				t.Errorf("nextTick = %v, want %v", got.Sub(t0), tc.want)
			}
		})
	}
}

func TestParamsDefaults(t *testing.T) {
	got := paramsOf(&corev1.Probe{})
	want := params{period: 10 * time.Second, timeout: time.Second, success: 1, failure: 3}
	if got != want {
		t.Errorf("paramsOf(zero probe) = %+v, want the API defaults %+v", got, want)
	}
}

func TestInitialDelayAndPeriod(t *testing.T) {
	h := newHarness(t, 2)
	pod := newPod("u1", corev1.Container{ReadinessProbe: execProbe(Readiness, withDelay(15), withPeriod(10))})
	h.m.ContainerStarted(pod, "c0", "cid", t0)
	for range 36 {
		h.step(time.Second)
	}
	want := []time.Duration{15 * time.Second, 25 * time.Second, 35 * time.Second}
	if got := h.runner.callsOf("cid/Readiness"); !slices.Equal(got, want) {
		t.Errorf("probes ran at %v, want %v", got, want)
	}
}

func TestStartupGatesLivenessAndReadiness(t *testing.T) {
	h := newHarness(t, 2)
	h.runner.script("cid", Startup, answer{res: Failure}, answer{res: Failure}, answer{res: Success})
	pod := newPod("u1", corev1.Container{
		StartupProbe:   execProbe(Startup, withPeriod(2), withThresholds(1, 10)),
		LivenessProbe:  execProbe(Liveness),
		ReadinessProbe: execProbe(Readiness),
	})
	h.m.ContainerStarted(pod, "c0", "cid", t0)
	h.settle()
	for s := 0; s < 4; s++ {
		if h.m.Started("cid") || h.m.Readiness("cid") != Failure {
			t.Fatalf("at %ds: Started = %v, Readiness = %v before the startup probe passed", s, h.m.Started("cid"), h.m.Readiness("cid"))
		}
		h.step(time.Second)
	}
	if !h.m.Started("cid") {
		t.Fatalf("Started is false after the startup probe passed")
	}
	for range 11 {
		h.step(time.Second)
	}
	if got, want := h.runner.callsOf("cid/Startup"), []time.Duration{0, 2 * time.Second, 4 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("startup probes at %v, want %v", got, want)
	}
	// Readiness runs as soon as the container has started, as the kubelet's
	// manual trigger makes it, then every period from there.
	if got, want := h.runner.callsOf("cid/Readiness"), []time.Duration{4 * time.Second, 14 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("readiness probes at %v, want %v", got, want)
	}
	if got, want := h.runner.callsOf("cid/Liveness"), []time.Duration{10 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("liveness probes at %v, want %v", got, want)
	}
	var got []string
	for _, u := range h.updates() {
		got = append(got, u.Kind.String()+"="+u.Result.String())
	}
	if want := []string{"Startup=Success", "Readiness=Success"}; !slices.Equal(got, want) {
		t.Errorf("updates = %v, want %v", got, want)
	}
	if h.m.Readiness("cid") != Success {
		t.Errorf("Readiness = %v after the readiness probe passed", h.m.Readiness("cid"))
	}
}

func TestHungRunnerTimesOut(t *testing.T) {
	h := newHarness(t, 2)
	h.runner.script("cid", Liveness, answer{hang: true})
	pod := newPod("u1", corev1.Container{LivenessProbe: execProbe(Liveness, withThresholds(1, 1))})
	h.m.ContainerStarted(pod, "c0", "cid", t0)
	testutil.WaitFor(t, "the probe is running", func() bool { return h.runner.inProgress() == 1 })
	h.clock.Step(time.Second)
	if got, _ := h.m.Get(Liveness, "cid"); got != Success {
		t.Fatalf("liveness = %v before the grace after the timeout", got)
	}
	h.clock.Step(timeoutGrace)
	h.settle()
	if got, _ := h.m.Get(Liveness, "cid"); got != Failure {
		t.Fatalf("liveness = %v after the probe hung past its timeout, want Failure", got)
	}
	u := h.updates()
	if len(u) != 1 || !u[0].KillsContainer() {
		t.Errorf("updates = %+v, want one that kills the container", u)
	}
	if ev := h.drainEvents(); len(ev) != 1 || ev[0] != "Warning Unhealthy Liveness probe failed: probe did not complete within 1s: context canceled" {
		t.Errorf("events = %q", ev)
	}
}

func TestErrorsAreRetriedAndNotCounted(t *testing.T) {
	h := newHarness(t, 2)
	boom := errors.New("boom")
	h.runner.script("cid", Liveness, answer{err: boom}, answer{err: boom}, answer{err: boom}, answer{err: boom}, answer{err: boom}, answer{err: boom})
	pod := newPod("u1", corev1.Container{LivenessProbe: execProbe(Liveness, withThresholds(1, 1))})
	h.m.ContainerStarted(pod, "c0", "cid", t0)
	h.step(10 * time.Second)
	if got := h.runner.callsOf("cid/Liveness"); !slices.Equal(got, []time.Duration{0, 0, 0, 10 * time.Second, 10 * time.Second, 10 * time.Second}) {
		t.Errorf("probes ran at %v, want three tries a period", got)
	}
	if got, _ := h.m.Get(Liveness, "cid"); got != Success {
		t.Errorf("liveness = %v: an errored probe was counted", got)
	}
	want := "Warning Unhealthy Liveness probe errored and resulted in unknown state: boom"
	if ev := h.drainEvents(); len(ev) != 2 || ev[0] != want {
		t.Errorf("events = %q, want twice %q", ev, want)
	}
	if u := h.updates(); len(u) != 0 {
		t.Errorf("updates = %+v, want none", u)
	}
}

func TestEvents(t *testing.T) {
	h := newHarness(t, 2)
	h.runner.script("cid", Readiness, answer{res: Failure, out: "HTTP probe failed with statuscode: 503"}, answer{res: Warning, out: "Probe terminated redirects, Response body: "})
	h.runner.script("cid", Liveness, answer{res: Failure, out: "dead"})
	pod := newPod("u1", corev1.Container{ReadinessProbe: execProbe(Readiness), LivenessProbe: execProbe(Liveness)})
	h.m.ContainerStarted(pod, "c0", "cid", t0)
	h.step(10 * time.Second)
	got := h.drainEvents()
	slices.Sort(got)
	want := []string{
		"Warning Unhealthy Liveness probe failed: dead",
		"Warning ProbeWarning Readiness probe warning: Probe terminated redirects, Response body: ",
		"Warning Unhealthy Readiness probe failed: HTTP probe failed with statuscode: 503",
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("events =\n%q\nwant\n%q", got, want)
	}
	if h.m.Readiness("cid") != Success {
		t.Errorf("a warning did not count as a success")
	}
}

// refRecorder keeps the objects events are about.
type refRecorder struct{ refs chan *corev1.ObjectReference }

func (r refRecorder) Event(o runtime.Object, _, _, _ string) { r.refs <- o.(*corev1.ObjectReference) }
func (r refRecorder) Eventf(o runtime.Object, t, re, f string, _ ...any) {
	r.Event(o, t, re, f)
}
func (r refRecorder) AnnotatedEventf(o runtime.Object, _ map[string]string, t, re, f string, _ ...any) {
	r.Event(o, t, re, f)
}

func TestSidecarsAreProbedInitContainersNot(t *testing.T) {
	clkH := newHarness(t, 2)
	refs := refRecorder{make(chan *corev1.ObjectReference, 10)}
	clkH.m.events = refs
	pod := newPod("u1", corev1.Container{ReadinessProbe: execProbe(Readiness)})
	pod.ResourceVersion = "7"
	pod.Spec.InitContainers = []corev1.Container{
		{Name: "init", ReadinessProbe: execProbe(Readiness)},
		{Name: "side", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways), ReadinessProbe: execProbe(Readiness)},
	}
	clkH.runner.script("side-id", Readiness, answer{res: Failure, out: "no"})
	clkH.m.ContainerStarted(pod, "init", "init-id", t0)
	clkH.m.ContainerStarted(pod, "side", "side-id", t0)
	clkH.m.ContainerStarted(pod, "c0", "app-id", t0)
	clkH.settle()
	if n := len(clkH.runner.callsOf("init-id/Readiness")); n != 0 {
		t.Errorf("a regular init container was probed %d times", n)
	}
	if n := len(clkH.runner.callsOf("side-id/Readiness")); n != 1 {
		t.Errorf("the sidecar was probed %d times, want 1", n)
	}
	if n := len(clkH.runner.callsOf("app-id/Readiness")); n != 1 {
		t.Errorf("the app container was probed %d times, want 1", n)
	}
	ref := <-refs.refs
	want := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "ns", Name: "pod-u1", UID: "u1", ResourceVersion: "7", FieldPath: "spec.initContainers{side}"}
	if *ref != want {
		t.Errorf("event about %+v, want %+v", *ref, want)
	}
}

func TestNewContainerIDResetsTheWorker(t *testing.T) {
	h := newHarness(t, 2)
	h.runner.script("old", Liveness, answer{res: Failure})
	h.runner.script("new", Liveness, answer{res: Failure}, answer{res: Failure})
	pod := newPod("u1", corev1.Container{LivenessProbe: execProbe(Liveness, withThresholds(1, 2))})
	h.m.ContainerStarted(pod, "c0", "old", t0)
	h.step(5 * time.Second)

	h.m.ContainerStarted(pod, "c0", "new", h.clock.Now())
	h.settle()
	if _, ok := h.m.Get(Liveness, "old"); ok {
		t.Errorf("the old container's result is still cached")
	}
	// One failure each: had the counter carried over, this would be the
	// second in a row and kill the new container.
	if got, _ := h.m.Get(Liveness, "new"); got != Success {
		t.Errorf("new container's liveness = %v after its first failure, want Success", got)
	}
	h.m.ContainerStarted(pod, "c0", "new", h.clock.Now()) // again: nothing changes
	h.step(10 * time.Second)
	if got, _ := h.m.Get(Liveness, "new"); got != Failure {
		t.Errorf("new container's liveness = %v after two failures, want Failure", got)
	}
	if got := h.runner.callsOf("old/Liveness"); len(got) != 1 {
		t.Errorf("the old container was probed at %v after it was replaced", got)
	}
	if got, want := h.runner.callsOf("new/Liveness"), []time.Duration{5 * time.Second, 15 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("new container probed at %v, want %v", got, want)
	}
	if u := h.updates(); len(u) != 1 || u[0].ContainerID != "new" || !u[0].KillsContainer() {
		t.Errorf("updates = %+v, want one kill of the new container", u)
	}
}

func TestContainerStoppedAndRemovePod(t *testing.T) {
	h := newHarness(t, 2)
	pod := newPod("u1", corev1.Container{ReadinessProbe: execProbe(Readiness), LivenessProbe: execProbe(Liveness)})
	h.m.ContainerStarted(pod, "c0", "cid", t0)
	h.settle()
	if h.m.Readiness("cid") != Success {
		t.Fatalf("Readiness = %v after a passing probe", h.m.Readiness("cid"))
	}
	h.updates()

	h.m.ContainerStopped("cid")
	h.step(30 * time.Second)
	if n := h.runner.total(); n != 2 {
		t.Errorf("%d probes ran, want none after the container stopped", n-2)
	}
	if u := h.updates(); len(u) != 1 || u[0].Kind != Readiness || u[0].Result != Failure {
		t.Errorf("updates = %+v, want readiness Failure only", u)
	}
	if got, _ := h.m.Get(Liveness, "cid"); got != Success {
		t.Errorf("a stopped container's liveness = %v, want it kept", got)
	}

	h.m.RemovePod("u1")
	if _, ok := h.m.Get(Readiness, "cid"); ok {
		t.Errorf("results survive RemovePod")
	}
	if u := h.updates(); len(u) != 0 {
		t.Errorf("RemovePod sent updates %+v", u)
	}
	h.m.ContainerStopped("cid") // unknown now: a no-op
	h.m.RemovePod("u1")
}

func TestRemovePodStopsProbing(t *testing.T) {
	h := newHarness(t, 2)
	pod := newPod("u1", corev1.Container{ReadinessProbe: execProbe(Readiness)}, corev1.Container{StartupProbe: execProbe(Startup)})
	h.m.ContainerStarted(pod, "c0", "a", t0)
	h.m.ContainerStarted(pod, "c1", "b", t0)
	h.step(10 * time.Second)
	before := h.runner.total()
	h.m.RemovePod("u1")
	h.step(10 * time.Second)
	h.step(10 * time.Second)
	if n := h.runner.total() - before; n != 0 {
		t.Errorf("%d probes ran after RemovePod", n)
	}
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	// The removed workers were dropped from the queue when they came due.
	if len(h.m.pods) != 0 || len(h.m.containers) != 0 || !h.m.queue.q.Idle() {
		t.Errorf("state left after RemovePod: %d pods, %d containers, queue idle %v", len(h.m.pods), len(h.m.containers), h.m.queue.q.Idle())
	}
	for k, r := range h.m.results {
		if len(r) != 0 {
			t.Errorf("%v results left after RemovePod: %v", Kind(k), r)
		}
	}
}

func TestStopLivenessAndStartup(t *testing.T) {
	h := newHarness(t, 2)
	h.runner.script("cid", Startup, answer{res: Failure})
	pod := newPod("u1", corev1.Container{
		StartupProbe: execProbe(Startup), LivenessProbe: execProbe(Liveness), ReadinessProbe: execProbe(Readiness),
	})
	h.m.ContainerStarted(pod, "c0", "cid", t0)
	h.settle()
	h.m.StopLivenessAndStartup("u1")
	if !h.m.Started("cid") {
		t.Errorf("Started = false once the startup probe was stopped")
	}
	h.step(10 * time.Second)
	h.step(10 * time.Second)
	if got := len(h.runner.callsOf("cid/Liveness")) + len(h.runner.callsOf("cid/Startup")); got != 1 {
		t.Errorf("%d liveness and startup probes ran, want only the first startup probe", got)
	}
	if got := h.runner.callsOf("cid/Readiness"); len(got) != 2 {
		t.Errorf("readiness probes at %v, want them to go on during termination", got)
	}
	if _, ok := h.m.Get(Liveness, "cid"); ok {
		t.Errorf("a stopped liveness probe's result is still cached")
	}

	// A pod already terminating when its container is reported gets
	// readiness probes only, and a restart of it no liveness probe either.
	deleting := newPod("u2", corev1.Container{LivenessProbe: execProbe(Liveness), ReadinessProbe: execProbe(Readiness)})
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	h.m.ContainerStarted(deleting, "c0", "d", h.clock.Now())
	h.m.ContainerStarted(pod, "c0", "cid2", h.clock.Now())
	h.settle()
	if _, ok := h.m.Get(Liveness, "d"); ok {
		t.Errorf("a terminating pod got a liveness worker")
	}
	if _, ok := h.m.Get(Liveness, "cid2"); ok {
		t.Errorf("a stopped pod's restarted container got a liveness worker")
	}
	if n := len(h.runner.callsOf("d/Readiness")); n != 1 {
		t.Errorf("terminating pod's readiness probed %d times, want 1", n)
	}
}

func TestRestartedAgentKeepsStatusAndJitters(t *testing.T) {
	for _, ready := range []bool{true, false} {
		h := newHarness(t, 2)
		pod := newPod("u1", corev1.Container{
			StartupProbe: execProbe(Startup), LivenessProbe: execProbe(Liveness), ReadinessProbe: execProbe(Readiness),
		})
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: "c0", ContainerID: "containerd://cid", Started: ptr.To(true), Ready: ready,
		}}
		h.m.ContainerStarted(pod, "c0", "cid", t0.Add(-time.Hour))
		if !h.m.Started("cid") {
			t.Errorf("Started = false for a container the status said had started")
		}
		want := Failure
		if ready {
			want = Success
		}
		if got := h.m.Readiness("cid"); got != want {
			t.Errorf("status ready=%v: Readiness = %v before any probe, want %v", ready, got, want)
		}
		for range 10 {
			h.step(time.Second)
		}
		if n := len(h.runner.callsOf("cid/Startup")); n != 0 {
			t.Errorf("the startup probe of a started container ran %d times", n)
		}
		for _, k := range []Kind{Liveness, Readiness} {
			at := h.runner.callsOf("cid/" + k.String())
			if len(at) != 1 || at[0] == 0 || at[0] > 10*time.Second {
				t.Errorf("%v probes at %v, want one after a jitter within the period", k, at)
			}
		}
	}
}

func TestRunsOfOneWorkerNeverOverlap(t *testing.T) {
	h := newHarness(t, 4)
	hold := make(chan struct{})
	h.runner.hold = hold
	pod := newPod("u1", corev1.Container{ReadinessProbe: execProbe(Readiness, withPeriod(1))})
	h.m.ContainerStarted(pod, "c0", "cid", t0)
	testutil.WaitFor(t, "the probe is running", func() bool { return h.runner.inProgress() == 1 })
	for range 5 {
		h.clock.Step(time.Second / 2) // stays within timeout+grace
	}
	h.runner.mu.Lock()
	h.runner.hold = nil
	h.runner.mu.Unlock()
	close(hold)
	h.settle() // ended at 2.5s: next tick 3s
	h.step(time.Second / 2)
	if h.runner.overlap {
		t.Errorf("two runs of one worker overlapped")
	}
	// Ticks missed while the probe ran are dropped: one run at 0, one on
	// the next tick after it ended, none to catch up.
	if got, want := h.runner.callsOf("cid/Readiness"), []time.Duration{0, 3 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("probes at %v, want %v", got, want)
	}
}

// agentProbes is what the node agent asks of the prober (its
// kuberuntime.ProbeState and status.Probes): the Manager is that directly.
type agentProbes interface {
	Started(containerID string) bool
	Unhealthy(containerID string) bool
	Ready(containerID string) bool
}

var _ agentProbes = (*Manager)(nil)

func TestTheAgentsView(t *testing.T) {
	h := newHarness(t, 2)
	h.runner.script("live", Liveness, answer{res: Failure})
	h.runner.script("start", Startup, answer{res: Failure})
	pod := newPod("u1",
		corev1.Container{LivenessProbe: execProbe(Liveness, withThresholds(1, 1)), ReadinessProbe: execProbe(Readiness)},
		corev1.Container{StartupProbe: execProbe(Startup, withThresholds(1, 1))},
		corev1.Container{ReadinessProbe: execProbe(Readiness, withDelay(30))},
	)
	var view agentProbes = h.m
	h.m.ContainerStarted(pod, "c0", "live", t0)
	h.m.ContainerStarted(pod, "c1", "start", t0)
	h.m.ContainerStarted(pod, "c2", "waiting", t0)
	h.settle()
	cases := []struct {
		id                        string
		started, unhealthy, ready bool
	}{
		{"live", true, true, true},
		{"start", false, true, true},
		{"waiting", true, false, false},
		{"no-probes", true, false, true},
	}
	for _, tc := range cases {
		if got := [3]bool{view.Started(tc.id), view.Unhealthy(tc.id), view.Ready(tc.id)}; got != [3]bool{tc.started, tc.unhealthy, tc.ready} {
			t.Errorf("%s: Started, Unhealthy, Ready = %v, want %v", tc.id, got, [3]bool{tc.started, tc.unhealthy, tc.ready})
		}
	}
	// The restarted container starts healthy.
	h.m.ContainerStarted(pod, "c0", "live2", h.clock.Now())
	if view.Unhealthy("live2") || view.Unhealthy("live") {
		t.Errorf("Unhealthy after the restart: new %v, old %v", view.Unhealthy("live2"), view.Unhealthy("live"))
	}
}

func TestUnknownContainers(t *testing.T) {
	h := newHarness(t, 1)
	if !h.m.Started("nope") || h.m.Readiness("nope") != Success {
		t.Errorf("a container without probes must be started and ready")
	}
	if _, ok := h.m.Get(Kind(7), "nope"); ok {
		t.Errorf("Get of an invalid kind found a result")
	}
	pod := newPod("u1", corev1.Container{})
	h.m.ContainerStarted(pod, "c0", "cid", t0)       // no probes
	h.m.ContainerStarted(pod, "missing", "cid2", t0) // no such container
	h.settle()
	if h.runner.total() != 0 || len(h.m.pods) != 0 {
		t.Errorf("a container without probes got workers")
	}
}

func TestNewManagerNeedsARunner(t *testing.T) {
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(string), "Runner") {
			t.Errorf("NewManager without a Runner: panic %v, want one naming the Runner", p)
		}
	}()
	NewManager(Config{})
}

func TestRunnerPanicIsAnError(t *testing.T) {
	clk := newHarness(t, 1)
	m := clk.m
	m.runner = Join(panicky{}, panicky{})
	pod := newPod("u1", corev1.Container{LivenessProbe: execProbe(Liveness)})
	m.ContainerStarted(pod, "c0", "cid", t0)
	clk.settle()
	ev := clk.drainEvents()
	if len(ev) != 1 || !strings.Contains(ev[0], "probe runner panicked: oops") {
		t.Errorf("events = %q, want the panic reported as an error", ev)
	}
}

type panicky struct{}

func (panicky) Exec(_ context.Context, _ string, _ []string, _ time.Duration) (Result, string, error) {
	panic("oops")
}
func (panicky) Network(context.Context, Kind, *corev1.Pod, *corev1.Container, string, *corev1.Probe) (Result, string, error) {
	panic("oops")
}
