package loadprofiles

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/internal/testutil"
	"github.com/fleetlet/fleetlet/reports"
)

func churnPhase(qps float64, duration, lifetime, timeout time.Duration) Phase {
	return Phase{Name: "churn", Churn: &ChurnPhase{
		QPS:      qps,
		Duration: metav1.Duration{Duration: duration},
		Lifetime: metav1.Duration{Duration: lifetime},
		Timeout:  metav1.Duration{Duration: timeout},
		Template: createPhase(1, 1).Create.Template,
	}}
}

// tick is how far driveChurn steps the fake clock at a time. Every create
// interval, lifetime and timeout the churn tests use is a multiple of it, so
// each due time falls on a step.
const tick = 100 * time.Millisecond

// churnScript says what the fake API and nodes do with the pods of a churn,
// by create call number (the n in churn-0000n, from 1).
type churnScript struct {
	fail    map[int64]bool // the create call fails
	stuck   map[int64]bool // never reported Running
	lingers map[int64]bool // the delete succeeds but the pod stays
}

// upTo counts the members of set among the first n create calls.
func (s churnScript) upTo(set map[int64]bool, n int64) int64 {
	var c int64
	for i := range set {
		if i <= n {
			c++
		}
	}
	return c
}

// dueDeletes counts the pods whose delete is due at now by the churn's rule:
// lifetime after RunningObserved, or timeout after Created if not Running.
func (r *recorder) dueDeletes(now time.Time, lifetime, timeout time.Duration) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ms := range r.marks {
		created, ok := ms[reports.Created]
		if !ok {
			continue
		}
		due := created.Add(timeout)
		if ran, ok := ms[reports.RunningObserved]; ok {
			due = ran.Add(lifetime)
		}
		if !due.After(now) {
			n++
		}
	}
	return n
}

// lingering counts the pods of lingers (by create call number) whose delete
// was sent: they are deleted but will not be gone.
func (r *recorder) lingering(lingers map[int64]bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for i := range lingers {
		if _, ok := r.marks[types.UID(fmt.Sprintf("uid-%05d", i))][reports.DeleteIssued]; ok {
			n++
		}
	}
	return n
}

// snapshot copies the stamps.
func (r *recorder) snapshot() map[types.UID]map[reports.Milestone]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[types.UID]map[reports.Milestone]time.Time, len(r.marks))
	for uid, ms := range r.marks {
		out[uid] = make(map[reports.Milestone]time.Time, len(ms))
		for m, at := range ms {
			out[uid][m] = at
		}
	}
	return out
}

// driveChurn steps clk through a churn phase one tick at a time and returns
// Run's result. Before each step it waits until everything due by then has
// happened: the creates the rate allows, each bound and (unless stuck) seen
// Running, each delete that is due and each deleted pod gone (unless it
// lingers). So every stamp lands on the tick it is due, and one that comes
// early or late shows up as a count that does not match.
func driveChurn(t *testing.T, clk *testingclock.FakeClock, api *fakeAPI, rec *recorder, done <-chan error, c *ChurnPhase, s churnScript) error {
	t.Helper()
	start := clk.Now()
	interval := time.Duration(float64(time.Second) / c.QPS)
	total := int64(churnCount(c.QPS, c.Duration.Duration))
	lifetime, timeout := c.Lifetime.Duration, c.Timeout.Duration
	for now := start; now.Sub(start) <= c.Duration.Duration+lifetime+timeout+time.Second; now = now.Add(tick) {
		elapsed := now.Sub(start)
		calls := min(total, int64(elapsed/interval)+1)
		created := calls - s.upTo(s.fail, calls)
		running := created - s.upTo(s.stuck, calls)
		testutil.WaitFor(t, fmt.Sprintf("at +%v: %d creates sent, %d created and bound, %d Running, due deletes sent, deleted pods gone", elapsed, calls, created, running), func() bool {
			if api.creates.Load() != calls || int64(rec.count(reports.Created)) != created ||
				int64(rec.count(reports.Scheduled)) != created || int64(rec.count(reports.RunningObserved)) != running {
				return false
			}
			deletes := rec.count(reports.DeleteIssued)
			return deletes == rec.dueDeletes(now, lifetime, timeout) &&
				rec.count(reports.Gone) == deletes-rec.lingering(s.lingers)
		})
		select {
		case err := <-done:
			return err
		default:
		}
		clk.Step(tick)
	}
	// Nothing is due any more: the phase's own bound has passed. Stepping
	// may have outrun the driver's goroutines; give them real time.
	select {
	case err := <-done:
		return err
	case <-time.After(patience):
		t.Fatal("the churn did not end")
		return nil
	}
}

// TestDriverChurn runs a churn of 2 pods/s for 3 s with a 1.2 s lifetime on a
// fake clock: a create every 500 ms from the start, six in all, each pod
// deleted exactly 1.2 s after the watch saw it Running, and all gone when
// the phase returns.
func TestDriverChurn(t *testing.T) {
	ctx, cancel := testContext(t)
	defer cancel()
	api := newFakeAPI(t, nil)
	playNodes(ctx, t, api, nil)
	rec := newRecorder()
	clk := testingclock.NewFakeClock(time.Now())
	var mu sync.Mutex
	var progress []Progress
	d := &Driver{Client: api, Recorder: rec, Clock: clk, Progress: func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		progress = append(progress, p)
	}}
	const lifetime = 1200 * time.Millisecond
	p := profile(t, churnPhase(2, 3*time.Second, lifetime, time.Minute))
	start := clk.Now()
	if err := driveChurn(t, clk, api, rec, runAsync(ctx, d, p), p.Phases[0].Churn, churnScript{}); err != nil {
		t.Fatalf("Run: %v", err)
	}

	left, _ := api.CoreV1().Pods(DefaultNamespace).List(ctx, metav1.ListOptions{})
	if len(left.Items) != 0 {
		t.Errorf("%d pods left after the churn", len(left.Items))
	}
	marks := rec.snapshot()
	if len(marks) != 6 {
		t.Fatalf("recorder saw %d pods, want 6", len(marks))
	}
	var created []time.Duration
	for uid, ms := range marks {
		for _, m := range []reports.Milestone{reports.Created, reports.Scheduled, reports.RunningObserved, reports.DeleteIssued, reports.Gone} {
			if _, ok := ms[m]; !ok {
				t.Errorf("pod %s: no %s stamp", uid, m)
			}
		}
		if lived := ms[reports.DeleteIssued].Sub(ms[reports.RunningObserved]); lived != lifetime {
			t.Errorf("pod %s: deleted %v after it was seen Running, want %v", uid, lived, lifetime)
		}
		if ms[reports.Gone].Before(ms[reports.DeleteIssued]) {
			t.Errorf("pod %s: gone before its delete: %v", uid, ms)
		}
		created = append(created, ms[reports.Created].Sub(start))
	}
	sort.Slice(created, func(i, j int) bool { return created[i] < created[j] })
	for i, at := range created {
		if want := time.Duration(i) * 500 * time.Millisecond; at != want {
			t.Errorf("create %d sent at +%v, want +%v", i+1, at, want)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	var sawChurn bool
	for _, p := range progress {
		if p.Phase == "churn" {
			sawChurn = true
			if p.Target != 6 {
				t.Errorf("progress target = %d, want qps × duration = 6", p.Target)
			}
		}
	}
	if !sawChurn {
		t.Errorf("no progress during the churn: %+v", progress)
	}
}

// TestDriverChurnFailures: a create that fails, a pod that never runs and one
// that does not go away all fail the phase, in one line that counts and names
// them; the pod that never ran is deleted timeout after its create.
func TestDriverChurnFailures(t *testing.T) {
	ctx, cancel := testContext(t)
	defer cancel()
	script := churnScript{
		fail:    map[int64]bool{2: true},
		stuck:   map[int64]bool{4: true},
		lingers: map[int64]bool{5: true},
	}
	api := newFakeAPI(t, func(n int64) error {
		if script.fail[n] {
			return errors.New("injected failure")
		}
		return nil
	})
	api.PrependReactor("delete", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.(k8stesting.DeleteAction).GetName() == "churn-00005" {
			return true, nil, nil // accepted, but the pod stays: a finalizer that never clears
		}
		return false, nil, nil
	})
	playNodes(ctx, t, api, func(name string) bool { return name == "churn-00004" })
	rec := newRecorder()
	clk := testingclock.NewFakeClock(time.Now())
	d := &Driver{Client: api, Recorder: rec, Clock: clk}
	const lifetime, timeout = 1200 * time.Millisecond, 2 * time.Second
	p := profile(t, churnPhase(2, 3*time.Second, lifetime, timeout))
	err := driveChurn(t, clk, api, rec, runAsync(ctx, d, p), p.Phases[0].Churn, script)

	want := `phase "churn": 1 of 6 pod creates failed; the first: injected failure; ` +
		`1 of 5 pods not Running within 2s of their create, deleted then: fleetlet-load/churn-00004 (Pending, node-1); ` +
		`1 of 5 pods not gone 3.2s after the last create: fleetlet-load/churn-00005 (Running, node-1)`
	if err == nil || err.Error() != want {
		t.Fatalf("Run error:\n got: %v\nwant: %s", err, want)
	}
	stuck := marks(t, api, rec, "churn-00004")
	if _, ran := stuck[reports.RunningObserved]; ran {
		t.Error("the stuck pod was seen Running")
	}
	if waited := stuck[reports.DeleteIssued].Sub(stuck[reports.Created]); waited != timeout {
		t.Errorf("the stuck pod was deleted %v after its create, want the timeout %v", waited, timeout)
	}
	if _, gone := stuck[reports.Gone]; !gone {
		t.Error("the stuck pod is not gone")
	}
}

// TestDriverChurnRealClock runs a short, fast churn on the real clock, for the
// race detector: creates, Running updates, deletes and removals all overlap.
func TestDriverChurnRealClock(t *testing.T) {
	ctx, cancel := testContext(t)
	defer cancel()
	api := newFakeAPI(t, nil)
	playNodes(ctx, t, api, nil)
	rec := newRecorder()
	d := &Driver{Client: api, Recorder: rec}
	p := profile(t, churnPhase(1000, 20*time.Millisecond, 20*time.Millisecond, patience))
	if err := d.Run(ctx, p); err != nil {
		t.Fatalf("Run: %v", err)
	}
	created := rec.count(reports.Created)
	if created == 0 || created > 20 {
		t.Fatalf("%d pods created, want 1 to 20", created)
	}
	for _, m := range []reports.Milestone{reports.RunningObserved, reports.DeleteIssued, reports.Gone} {
		if got := rec.count(m); got != created {
			t.Errorf("%d pods stamped %s, want all %d", got, m, created)
		}
	}
	left, _ := api.CoreV1().Pods(DefaultNamespace).List(ctx, metav1.ListOptions{})
	if len(left.Items) != 0 {
		t.Errorf("%d pods left after the churn", len(left.Items))
	}
}

// marks returns the stamps of the pod named name, by the fake's UID scheme.
func marks(t *testing.T, api *fakeAPI, rec *recorder, name string) map[reports.Milestone]time.Time {
	t.Helper()
	var n int
	if _, err := fmt.Sscanf(name, "churn-%05d", &n); err != nil {
		t.Fatalf("pod name %q: %v", name, err)
	}
	ms := rec.snapshot()[types.UID(fmt.Sprintf("uid-%05d", n))]
	if ms == nil {
		t.Fatalf("no stamps for %s", name)
	}
	return ms
}

// TestChurnerDecisions walks the churner's decisions without its goroutines,
// playing the queue's part by hand: deadlines from the create until the pod
// is seen Running, from then on lifetime after it, a pod that comes due
// early waiting again, and drained only once creating stopped and every
// deleted pod is gone.
func TestChurnerDecisions(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := &run{pods: newTracker(), clock: testingclock.NewFakeClock(t0)}
	c := newChurner(r, 10*time.Second, time.Minute, 1)
	defer c.deletes.Stop()
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	add := func(name string, at time.Time) {
		uid := types.UID(name)
		r.pods.created(uid, "ns/"+name)
		c.add(podRef{uid: uid, namespace: "ns", name: name}, at)
	}
	running := func(name string, at time.Time) {
		r.pods.observe(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{UID: types.UID(name), Namespace: "ns", Name: name},
			Spec:       corev1.PodSpec{NodeName: "node-1"},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning},
		}, at)
	}
	// deadlines are the live pods' deadlines, "name@+seconds", by name.
	deadlines := func() string {
		c.mu.Lock()
		defer c.mu.Unlock()
		var ds []string
		for uid, p := range c.live {
			ds = append(ds, fmt.Sprintf("%s@+%v", uid, p.due.Sub(t0).Seconds()))
		}
		sort.Strings(ds)
		return fmt.Sprint(ds)
	}
	// fire hands take every live pod due at now, as the queue would, and
	// returns the pods it says to delete.
	fire := func(now time.Time) string {
		c.mu.Lock()
		var due []*churnPod
		for _, p := range c.live {
			if !p.due.After(now) {
				due = append(due, p)
			}
		}
		c.mu.Unlock()
		var names []string
		for _, p := range due {
			if ref, ok := c.take(p, now); ok {
				names = append(names, ref.name)
			}
		}
		sort.Strings(names)
		return fmt.Sprint(names)
	}
	// early hands take a pod before its deadline, as the queue does when a
	// deadline moved later: it waits again.
	early := func(name string, now time.Time) {
		t.Helper()
		c.mu.Lock()
		p := c.live[types.UID(name)]
		c.mu.Unlock()
		if _, ok := c.take(p, now); ok {
			t.Errorf("%s deleted at +%v, before its deadline", name, now.Sub(t0).Seconds())
		}
	}
	check := func(what, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %s, want %s", what, got, want)
		}
	}

	add("a", sec(0))
	add("b", sec(1))
	check("drained", fmt.Sprint(c.sync()), "false")
	check("deadlines", deadlines(), "[a@+60 b@+61]") // to run
	running("a", sec(5))
	c.sync()
	check("deadlines once a ran", deadlines(), "[a@+15 b@+61]") // a's lifetime now
	// c is seen by the watch before its create returns.
	running("c", sec(6))
	add("c", sec(2))
	c.sync()
	check("deadlines once c ran", deadlines(), "[a@+15 b@+61 c@+16]")
	early("a", sec(14))
	check("deleted at +15", fire(sec(15)), "[a]")
	check("deleted at +16", fire(sec(16)), "[c]")
	check("deleted at +61", fire(sec(61)), "[b]") // b never ran
	// d is seen Running just as its deadline to run comes, before reap
	// looks: its deadline moves, it is not deleted as one that never ran.
	add("d", sec(17))
	running("d", sec(77))
	check("deleted at +77", fire(sec(77)), "[]")
	check("deadlines", deadlines(), "[d@+87]")
	check("deleted at +87", fire(sec(87)), "[d]")
	c.deleted("a", true)
	c.deleted("b", false)
	c.deleted("c", true)
	c.deleted("d", true)
	c.stopCreating()
	check("drained with a, c and d not gone", fmt.Sprint(c.sync()), "false")
	r.pods.observeGone("a")
	r.pods.observeGone("c")
	r.pods.observeGone("d")
	check("drained", fmt.Sprint(c.sync()), "true")
	check("deletes sent", fmt.Sprint(c.deletesSent), "4")

	want := "1 of 4 pods not Running within 1m0s of their create, deleted then: ns/b (not seen by the watch)"
	if errs := c.problems(false, 0); len(errs) != 2 || errs[0] == nil || errs[0].Error() != want || errs[1] != nil {
		t.Errorf("problems = %v, want [%s <nil>]", errs, want)
	}
}

func TestChurnCount(t *testing.T) {
	for _, tc := range []struct {
		qps  float64
		d    time.Duration
		want int
	}{
		{10, 2 * time.Minute, 1200},
		{2, 3 * time.Second, 6},
		{0.3, 10 * time.Second, 3}, // 3.0000000000000004 in floats
		{1, 1500 * time.Millisecond, 2},
		{1000, time.Millisecond, 1},
		{0.001, time.Second, 1},
	} {
		if got := churnCount(tc.qps, tc.d); got != tc.want {
			t.Errorf("churnCount(%v, %v) = %d, want %d", tc.qps, tc.d, got, tc.want)
		}
	}
}

// TestTimerAt: a timer for a time that has come is nil, and one for later
// fires at that time exactly.
func TestTimerAt(t *testing.T) {
	t0 := time.Now()
	clk := testingclock.NewFakeClock(t0)
	if timerAt(clk, t0) != nil || timerAt(clk, t0.Add(-time.Second)) != nil {
		t.Error("timers for now and the past should be nil")
	}
	timer := timerAt(clk, t0.Add(time.Second))
	clk.Step(time.Second - time.Nanosecond)
	select {
	case <-timer.C():
		t.Fatal("fired early")
	default:
	}
	clk.Step(time.Nanosecond)
	select {
	case <-timer.C():
	case <-time.After(patience):
		t.Fatal("did not fire on time")
	}
}

// TestJoinLine: one line, each error still reachable.
func TestJoinLine(t *testing.T) {
	a, b := errors.New("a"), context.Canceled
	if joinLine([]error{nil, nil}) != nil {
		t.Error("no errors should join to nil")
	}
	if err := joinLine([]error{nil, a}); err != a {
		t.Errorf("one error = %v, want it unchanged", err)
	}
	err := joinLine([]error{a, nil, b})
	if err.Error() != "a; context canceled" || !errors.Is(err, a) || !errors.Is(err, context.Canceled) {
		t.Errorf("joined = %q, Is(a) %v, Is(Canceled) %v", err, errors.Is(err, a), errors.Is(err, context.Canceled))
	}
}
