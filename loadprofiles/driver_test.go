package loadprofiles

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/internal/testutil"
	"github.com/fleetlet/fleetlet/reports"
)

// patience bounds how long a test waits for something that happens within
// milliseconds when the machine is idle; it is generous because CI runs on a
// loaded 2-core machine. No assertion depends on it being short.
const patience = 30 * time.Second

// recorder is a reports.Recorder that keeps every pod's first stamps.
type recorder struct {
	mu    sync.Mutex
	marks map[types.UID]map[reports.Milestone]time.Time
}

func newRecorder() *recorder {
	return &recorder{marks: map[types.UID]map[reports.Milestone]time.Time{}}
}

func (r *recorder) Mark(pod types.UID, m reports.Milestone, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.marks[pod] == nil {
		r.marks[pod] = map[reports.Milestone]time.Time{}
	}
	if _, ok := r.marks[pod][m]; !ok {
		r.marks[pod][m] = at
	}
}

// count is the number of pods stamped with m.
func (r *recorder) count(m reports.Milestone) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ms := range r.marks {
		if _, ok := ms[m]; ok {
			n++
		}
	}
	return n
}

// fakeAPI is the fake clientset with what a real API server does on create
// and the fake does not: a name from generateName, and a UID. Pods are named
// <generateName><n> in the order their creates arrive, n from 1.
type fakeAPI struct {
	*fake.Clientset
	creates atomic.Int64
}

func newFakeAPI(t *testing.T, fail func(n int64) error) *fakeAPI {
	t.Helper()
	api := &fakeAPI{Clientset: fake.NewClientset()}
	api.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		n := api.creates.Add(1)
		if fail != nil {
			if err := fail(n); err != nil {
				return true, nil, err
			}
		}
		pod := action.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		pod.Name = fmt.Sprintf("%s%05d", pod.GenerateName, n)
		pod.UID = types.UID(fmt.Sprintf("uid-%05d", n))
		return false, nil, nil // the default reactor stores it
	})
	// Play the controller-manager's serviceaccount controller: a new
	// namespace gets its default ServiceAccount. The tracker is used
	// directly because reactors run under the fake client's lock.
	api.PrependReactor("create", "namespaces", func(action k8stesting.Action) (bool, runtime.Object, error) {
		ns := action.(k8stesting.CreateAction).GetObject().(*corev1.Namespace)
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.Name}}
		if err := api.Tracker().Add(sa); err != nil {
			t.Errorf("adding the default ServiceAccount: %v", err)
		}
		return false, nil, nil
	})
	return api
}

// playNodes stands in for the scheduler and the kubelets the fake clientset
// lacks: it binds every new pod to node-1 and, unless stuck says otherwise,
// then reports it Running. It stops with ctx.
func playNodes(ctx context.Context, t *testing.T, api *fakeAPI, stuck func(name string) bool) {
	t.Helper()
	pods := api.CoreV1().Pods(DefaultNamespace)
	w, err := pods.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watching the fake's pods: %v", err)
	}
	// The watch only queues names: the fake's watch channel is bounded and
	// panics when full, so its reader must never block on API calls.
	todo := make(chan string, 10000)
	go func() {
		defer close(todo)
		for {
			select {
			case <-ctx.Done():
				w.Stop()
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if pod, isPod := ev.Object.(*corev1.Pod); isPod && ev.Type == watch.Added {
					todo <- pod.Name
				}
			}
		}
	}()
	go func() {
		for name := range todo {
			pod, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue // deleted already
			}
			pod.Spec.NodeName = "node-1"
			if pod, err = pods.Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
				continue
			}
			if stuck != nil && stuck(name) {
				continue
			}
			pod.Status.Phase = corev1.PodRunning
			_, _ = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		}
	}()
}

// testContext sends the driver's log lines to the test's log.
func testContext(t *testing.T) (context.Context, context.CancelFunc) {
	_, ctx := ktesting.NewTestContext(t)
	return context.WithCancel(ctx)
}

// profile is a defaulted, valid profile with one pool and the given phases.
func profile(t *testing.T, phases ...Phase) *Profile {
	t.Helper()
	p := &Profile{
		Name:      "test",
		NodePools: []NodePool{{Name: "default", Count: 1}},
		Phases:    phases,
	}
	p.Default()
	if err := p.Validate(); err != nil {
		t.Fatalf("test profile is invalid: %v", err)
	}
	return p
}

func createPhase(count int, qps float64) Phase {
	return Phase{Name: "create", Create: &CreatePhase{
		Count: count,
		QPS:   qps,
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "test"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
		},
	}}
}

func wait(d time.Duration) *WaitPhase { return &WaitPhase{Timeout: metav1.Duration{Duration: d}} }

// runAsync starts d.Run and returns a channel with its result.
func runAsync(ctx context.Context, d *Driver, p *Profile) <-chan error {
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, p) }()
	return done
}

func TestDriverFullRun(t *testing.T) {
	ctx, cancel := testContext(t)
	defer cancel()
	api := newFakeAPI(t, nil)
	playNodes(ctx, t, api, nil)
	rec := newRecorder()
	d := &Driver{Client: api, Recorder: rec}

	const pods = 20
	p := profile(t,
		createPhase(pods, 1000),
		Phase{Name: "wait-running", WaitRunning: wait(patience)},
		Phase{Name: "delete", Delete: &DeletePhase{QPS: 1000}},
		Phase{Name: "wait-gone", WaitGone: wait(patience)},
		Phase{Name: "pause", Sleep: &SleepPhase{Duration: metav1.Duration{Duration: time.Millisecond}}},
	)
	if err := d.Run(ctx, p); err != nil {
		t.Fatalf("Run: %v", err)
	}

	ns, err := api.CoreV1().Namespaces().Get(ctx, DefaultNamespace, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("namespace not created: %v", err)
	}
	if ns.Labels["app.kubernetes.io/managed-by"] != "fleetlet" {
		t.Errorf("namespace labels = %v", ns.Labels)
	}
	left, _ := api.CoreV1().Pods(DefaultNamespace).List(ctx, metav1.ListOptions{})
	if len(left.Items) != 0 {
		t.Errorf("%d pods left after the run", len(left.Items))
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.marks) != pods {
		t.Fatalf("recorder saw %d pods, want %d", len(rec.marks), pods)
	}
	order := []reports.Milestone{reports.Created, reports.Scheduled, reports.RunningObserved, reports.DeleteIssued, reports.Gone}
	for uid, ms := range rec.marks {
		for _, m := range order {
			if _, ok := ms[m]; !ok {
				t.Errorf("pod %s: no %s stamp", uid, m)
			}
		}
		// The watch may see a pod before its create call returns, so
		// Created and Scheduled are not ordered; the rest are causal.
		if ms[reports.Gone].Before(ms[reports.RunningObserved]) || ms[reports.RunningObserved].Before(ms[reports.Scheduled]) {
			t.Errorf("pod %s: milestones out of order: %v", uid, ms)
		}
	}
}

func TestDriverLabelsPods(t *testing.T) {
	ctx, cancel := testContext(t)
	defer cancel()
	api := newFakeAPI(t, nil)
	d := &Driver{Client: api, Namespace: "elsewhere"}
	if err := d.Run(ctx, profile(t, createPhase(2, 1000))); err != nil {
		t.Fatalf("Run: %v", err)
	}
	list, err := api.CoreV1().Pods("elsewhere").List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("listing pods: %d pods, %v", len(list.Items), err)
	}
	for _, pod := range list.Items {
		if pod.GenerateName != "create-" || pod.Labels[LabelPhase] != "create" || len(pod.Labels[LabelRun]) != 8 || pod.Labels["app"] != "test" {
			t.Errorf("pod %s: generateName %q labels %v", pod.Name, pod.GenerateName, pod.Labels)
		}
	}
	if list.Items[0].Labels[LabelRun] != list.Items[1].Labels[LabelRun] {
		t.Errorf("one run, two run labels: %v, %v", list.Items[0].Labels, list.Items[1].Labels)
	}
}

// TestDriverCreateRate drives the rate limiter with a fake clock and counts
// the creates that reach the API at each step: at 2/s, one at once, then one
// more per 500ms and never one early.
func TestDriverCreateRate(t *testing.T) {
	ctx, cancel := testContext(t)
	defer cancel()
	api := newFakeAPI(t, nil)
	clk := testingclock.NewFakeClock(time.Now())
	d := &Driver{Client: api, Clock: clk}
	done := runAsync(ctx, d, profile(t, createPhase(5, 2)))

	for want := int64(1); want <= 4; want++ {
		// The limiter's timer is the only thing that waits on the clock.
		testutil.WaitFor(t, fmt.Sprintf("create %d and the limiter waiting", want), func() bool {
			return api.creates.Load() == want && clk.Waiters() == 1
		})
		clk.Step(499 * time.Millisecond)
		if got := api.creates.Load(); got != want || clk.Waiters() != 1 {
			t.Fatalf("after %d.499s: %d creates (want %d), %d clock waiters", want-1, got, want, clk.Waiters())
		}
		clk.Step(time.Millisecond)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(patience):
		t.Fatal("Run did not return")
	}
	if got := api.creates.Load(); got != 5 {
		t.Errorf("%d creates, want 5", got)
	}
}

func TestDriverWaitRunningTimeout(t *testing.T) {
	ctx, cancel := testContext(t)
	defer cancel()
	api := newFakeAPI(t, nil)
	playNodes(ctx, t, api, func(name string) bool { return name == "create-00004" })
	rec := newRecorder()
	clk := testingclock.NewFakeClock(time.Now())
	d := &Driver{Client: api, Recorder: rec, Clock: clk}
	done := runAsync(ctx, d, profile(t,
		createPhase(4, 1000),
		Phase{Name: "wait-running", WaitRunning: wait(5 * time.Minute)},
	))

	// Let the limiter through, then wait until the watch has seen every pod
	// bound and three Running, with only the wait's timer on the clock.
	testutil.WaitFor(t, "4 creates", func() bool {
		if api.creates.Load() < 4 && clk.Waiters() > 0 {
			clk.Step(time.Millisecond)
		}
		return api.creates.Load() == 4
	})
	testutil.WaitFor(t, "4 pods scheduled, 3 running, the wait armed", func() bool {
		return rec.count(reports.Scheduled) == 4 && rec.count(reports.RunningObserved) == 3 && clk.Waiters() == 1
	})
	clk.Step(5 * time.Minute)

	var err error
	select {
	case err = <-done:
	case <-time.After(patience):
		t.Fatal("Run did not return after the timeout")
	}
	want := `phase "wait-running": 1 of 4 pods not Running after 5m0s: fleetlet-load/create-00004 (Pending, node-1)`
	if err == nil || err.Error() != want {
		t.Fatalf("Run error:\n got: %v\nwant: %s", err, want)
	}
}

func TestStragglersNamesAFew(t *testing.T) {
	tr := newTracker()
	for i := 1; i <= 5; i++ {
		uid := types.UID(fmt.Sprint(i))
		tr.created(uid, fmt.Sprintf("ns/p%d", i))
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}}
		switch i {
		case 1:
			pod.Spec.NodeName, pod.Status.Phase = "node-3", corev1.PodRunning
		case 3:
			pod.Status.Phase = corev1.PodPending
		case 4:
			pod.Spec.NodeName, pod.Status.Phase = "node-1", corev1.PodFailed
			pod.DeletionTimestamp = &metav1.Time{}
		}
		if i != 2 {
			tr.observe(pod, time.Time{})
		}
	}
	err := tr.stragglers("Running", time.Minute,
		func(p *podRecord) bool { return p.created },
		func(p *podRecord) bool { return p.running })
	want := "4 of 5 pods not Running after 1m0s: ns/p2 (not seen by the watch), ns/p3 (Pending, unscheduled), ns/p4 (Failed, node-1, terminating), ..."
	if err.Error() != want {
		t.Errorf("stragglers:\n got: %s\nwant: %s", err, want)
	}
}

func TestDriverCreateFailures(t *testing.T) {
	ctx, cancel := testContext(t)
	defer cancel()
	api := newFakeAPI(t, func(n int64) error {
		if n%2 == 0 {
			return errors.New("injected failure")
		}
		return nil
	})
	err := (&Driver{Client: api}).Run(ctx, profile(t, createPhase(5, 1000)))
	want := `phase "create": 2 of 5 pod creates failed; the first: injected failure`
	if err == nil || err.Error() != want {
		t.Fatalf("Run error:\n got: %v\nwant: %s", err, want)
	}
}

func TestDriverCancel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		phase string
		p     func(t *testing.T) *Profile
		clock *testingclock.FakeClock // nil: the real clock
		nodes bool                    // play the scheduler and kubelets
		ready func(api *fakeAPI, rec *recorder, clk *testingclock.FakeClock) bool
	}{{
		name:  "while waiting for Running",
		phase: "wait-running",
		p: func(t *testing.T) *Profile {
			return profile(t, createPhase(3, 1000), Phase{Name: "wait-running", WaitRunning: wait(time.Hour)})
		},
		clock: testingclock.NewFakeClock(time.Now()),
		ready: func(api *fakeAPI, _ *recorder, clk *testingclock.FakeClock) bool {
			if api.creates.Load() < 3 {
				if clk.Waiters() == 2 { // the progress timer and the limiter's
					clk.Step(time.Millisecond)
				}
				return false
			}
			// The limiter is done: the second timer is the wait's.
			return clk.Waiters() == 2
		},
	}, {
		name:  "while rate-limited",
		phase: "create",
		p:     func(t *testing.T) *Profile { return profile(t, createPhase(3, 0.001)) },
		ready: func(api *fakeAPI, _ *recorder, _ *testingclock.FakeClock) bool { return api.creates.Load() == 1 },
	}, {
		name:  "while sleeping",
		phase: "nap",
		p: func(t *testing.T) *Profile {
			return profile(t, Phase{Name: "nap", Sleep: &SleepPhase{Duration: metav1.Duration{Duration: time.Hour}}})
		},
		clock: testingclock.NewFakeClock(time.Now()),
		// The sleep's timer and the progress timer.
		ready: func(_ *fakeAPI, _ *recorder, clk *testingclock.FakeClock) bool { return clk.Waiters() == 2 },
	}, {
		name:  "while churning",
		phase: "churn",
		p: func(t *testing.T) *Profile {
			return profile(t, churnPhase(0.001, time.Hour, time.Hour, time.Hour))
		},
		ready: func(api *fakeAPI, _ *recorder, _ *testingclock.FakeClock) bool { return api.creates.Load() == 1 },
	}, {
		name:  "while a churned pod lives out its lifetime",
		phase: "churn",
		p: func(t *testing.T) *Profile {
			return profile(t, churnPhase(1000, time.Millisecond, time.Hour, time.Hour))
		},
		nodes: true,
		ready: func(_ *fakeAPI, rec *recorder, _ *testingclock.FakeClock) bool {
			return rec.count(reports.RunningObserved) == 1
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := testContext(t)
			defer cancel()
			api := newFakeAPI(t, nil)
			if tc.nodes {
				playNodes(ctx, t, api, nil)
			}
			rec := newRecorder()
			var progress atomic.Int64
			d := &Driver{Client: api, Recorder: rec, Progress: func(Progress) { progress.Add(1) }}
			if tc.clock != nil {
				d.Clock = tc.clock
			}
			done := runAsync(ctx, d, tc.p(t))
			testutil.WaitFor(t, "the run to reach the phase", func() bool { return tc.ready(api, rec, tc.clock) })
			cancel()
			select {
			case err := <-done:
				want := fmt.Sprintf("phase %q: context canceled", tc.phase)
				if !errors.Is(err, context.Canceled) || err.Error() != want {
					t.Errorf("Run error = %v, want %s wrapping context.Canceled", err, want)
				}
			case <-time.After(patience):
				t.Fatal("Run did not return after cancel")
			}
			// Nothing runs on after Run returned.
			calls := progress.Load()
			time.Sleep(10 * time.Millisecond)
			if progress.Load() != calls {
				t.Error("Progress called after Run returned")
			}
		})
	}
}

// TestDriverProgress steps a fake clock through a 3 s sleep and counts the
// Progress calls: one per second, never more.
func TestDriverProgress(t *testing.T) {
	ctx, cancel := testContext(t)
	defer cancel()
	clk := testingclock.NewFakeClock(time.Now())
	var mu sync.Mutex
	var seen []Progress
	d := &Driver{Client: newFakeAPI(t, nil), Clock: clk, Progress: func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, p)
	}}
	done := runAsync(ctx, d, profile(t, Phase{Name: "nap", Sleep: &SleepPhase{Duration: metav1.Duration{Duration: 3 * time.Second}}}))
	calls := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
	for step := 1; step <= 2; step++ {
		// The sleep's timer and the progress timer.
		testutil.WaitFor(t, "both timers armed", func() bool { return clk.Waiters() == 2 && calls() == step-1 })
		clk.Step(time.Second)
		testutil.WaitFor(t, fmt.Sprintf("progress call %d", step), func() bool { return calls() == step })
	}
	testutil.WaitFor(t, "both timers armed", func() bool { return clk.Waiters() == 2 })
	clk.Step(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 2 || len(seen) > 3 {
		t.Fatalf("%d Progress calls in 3 s", len(seen))
	}
	if seen[0] != (Progress{Phase: "nap"}) {
		t.Errorf("progress = %+v", seen[0])
	}
}

// TestClockLimiter checks the token bucket against a fake clock.
func TestClockLimiter(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	l := newClockLimiter(10, clk)
	ctx := context.Background()
	if err := l.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- l.Wait(ctx) }()
	testutil.WaitFor(t, "the second Wait to block", clk.HasWaiters)
	clk.Step(99 * time.Millisecond)
	select {
	case <-got:
		t.Fatal("second token came early")
	default:
	}
	clk.Step(time.Millisecond)
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	cctx, cancel := context.WithCancel(ctx)
	go func() { got <- l.Wait(cctx) }()
	testutil.WaitFor(t, "the third Wait to block", clk.HasWaiters)
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after cancel = %v", err)
	}
}

// TestTrackerDeletesWhatTheWatchSaw: a pod whose create call failed on the
// client's side but landed on the server is not counted as created, yet the
// delete phase removes it.
func TestTrackerDeletesWhatTheWatchSaw(t *testing.T) {
	tr := newTracker()
	tr.created("a", "ns/a")
	tr.observe(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "b", Namespace: "ns", Name: "b"}}, time.Time{})
	tr.observe(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "a", Namespace: "ns", Name: "a"}}, time.Time{})
	if p := tr.progress(); p.Created != 1 {
		t.Errorf("created = %d, want 1", p.Created)
	}
	refs := tr.toDelete()
	if len(refs) != 2 || refs[0].name != "a" || refs[1].name != "b" {
		t.Fatalf("toDelete = %+v, want a then b", refs)
	}
	tr.deleting("a", false)
	tr.deleting("b", true) // NotFound: gone without the watch
	if tr.allGone() {
		t.Error("a is not gone yet")
	}
	tr.observeGone("a")
	if !tr.allGone() {
		t.Error("both are gone")
	}
	if refs := tr.toDelete(); len(refs) != 0 {
		t.Errorf("toDelete after deleting = %+v", refs)
	}
}
