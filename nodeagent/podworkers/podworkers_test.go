package podworkers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/internal/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
)

// syncer records calls; a call can be held until released, to observe what
// arrives while a sync is in flight.
type syncer struct {
	mu       sync.Mutex
	calls    []string
	inFlight int
	maxInFl  int
	hold     chan struct{}
	failures int
}

func (s *syncer) record(call string) error {
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.inFlight++
	if s.inFlight > s.maxInFl {
		s.maxInFl = s.inFlight
	}
	hold := s.hold
	fail := s.failures > 0
	if fail {
		s.failures--
	}
	s.mu.Unlock()
	if hold != nil {
		<-hold
	}
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
	if fail {
		return errors.New("injected failure")
	}
	return nil
}

func (s *syncer) SyncPod(_ context.Context, pod *corev1.Pod) (bool, func(), error) {
	return pod.Labels["terminal"] == "true", nil, s.record("sync:" + pod.ResourceVersion)
}
func (s *syncer) SyncTerminatingPod(_ context.Context, pod *corev1.Pod, grace int64) error {
	return s.record(fmt.Sprintf("terminating:%s:%d", pod.ResourceVersion, grace))
}
func (s *syncer) SyncTerminatedPod(_ context.Context, pod *corev1.Pod) error {
	return s.record("terminated:" + pod.ResourceVersion)
}

func (s *syncer) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func pod(rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", ResourceVersion: rv}}
}

func newWorkers(t *testing.T, s *syncer) (*PodWorkers, *clocktesting.FakeClock) {
	ctx, cancel := context.WithCancel(context.Background())
	clk := clocktesting.NewFakeClock(time.Now())
	p := New(s, clk, nil)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); p.Wait() })
	return p, clk
}

func TestUpdatesCoalesceWhileSyncing(t *testing.T) {
	s := &syncer{hold: make(chan struct{})}
	p, _ := newWorkers(t, s)
	p.UpdatePod(pod("1"))
	testutil.WaitFor(t, "the first sync starts", func() bool { return len(s.snapshot()) == 1 })
	// Three updates while the first sync runs: only the newest is synced next.
	p.UpdatePod(pod("2"))
	p.UpdatePod(pod("3"))
	p.UpdatePod(pod("4"))
	close(s.hold)
	testutil.WaitFor(t, "the newest update is synced", func() bool { return len(s.snapshot()) == 2 })
	if got := s.snapshot(); got[0] != "sync:1" || got[1] != "sync:4" {
		t.Errorf("calls = %v, want [sync:1 sync:4]", got)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.maxInFl != 1 {
		t.Errorf("%d syncs of one pod ran at once, want 1", s.maxInFl)
	}
}

func TestDeletionTerminatesOnce(t *testing.T) {
	s := &syncer{}
	p, _ := newWorkers(t, s)
	p.UpdatePod(pod("1"))
	deleted := pod("2")
	deleted.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	deleted.DeletionGracePeriodSeconds = new(int64)
	*deleted.DeletionGracePeriodSeconds = 30
	p.UpdatePod(deleted)
	testutil.WaitFor(t, "the pod is terminated", func() bool { return p.IsTerminated("u1") })
	// Updates after termination are ignored: a terminated pod never runs again.
	p.UpdatePod(pod("3"))
	got := s.snapshot()
	want := []string{"terminating:2:30", "terminated:2"}
	if len(got) < 2 || got[len(got)-2] != want[0] || got[len(got)-1] != want[1] {
		t.Errorf("calls = %v, want them to end with %v", got, want)
	}
	for _, c := range got {
		if c == "sync:3" {
			t.Errorf("a terminated pod was synced again: %v", got)
		}
	}
}

func TestFailedSyncRetriesAfterBackOff(t *testing.T) {
	s := &syncer{failures: 1}
	p, clk := newWorkers(t, s)
	p.UpdatePod(pod("1"))
	testutil.WaitFor(t, "the failing sync ran and armed its retry", func() bool { return len(s.snapshot()) == 1 && clk.HasWaiters() })
	clk.Step(BackOffPeriod - time.Millisecond)
	if n := len(s.snapshot()); n != 1 {
		t.Fatalf("retried before the back-off period: %d calls", n)
	}
	// The retry comes within the jitter: at most half the period later.
	clk.Step(BackOffPeriod/2 + time.Millisecond)
	testutil.WaitFor(t, "the retry", func() bool { return len(s.snapshot()) == 2 })
}

func TestSucceededSyncIsRepeatedAtTheResyncInterval(t *testing.T) {
	s := &syncer{}
	p, clk := newWorkers(t, s)
	p.UpdatePod(pod("1"))
	testutil.WaitFor(t, "the sync ran and armed its resync", func() bool { return len(s.snapshot()) == 1 && clk.HasWaiters() })
	clk.Step(ResyncInterval - time.Millisecond)
	if n := len(s.snapshot()); n != 1 {
		t.Fatalf("resynced before the interval: %d calls", n)
	}
	// Within the jitter, at most half the interval later, and then again.
	clk.Step(ResyncInterval/2 + time.Millisecond)
	testutil.WaitFor(t, "the resync", func() bool { return len(s.snapshot()) == 2 && clk.HasWaiters() })
	clk.Step(ResyncInterval * 3 / 2)
	testutil.WaitFor(t, "the next resync", func() bool { return len(s.snapshot()) == 3 })
	if got := s.snapshot(); got[1] != "sync:1" || got[2] != "sync:1" {
		t.Errorf("calls = %v, want the same pod synced again", got)
	}
}

func TestTerminatedPodIsNotResynced(t *testing.T) {
	s := &syncer{}
	p, clk := newWorkers(t, s)
	terminal := pod("1")
	terminal.Labels = map[string]string{"terminal": "true"}
	p.UpdatePod(terminal)
	testutil.WaitFor(t, "the pod is terminated", func() bool { return p.IsTerminated("u1") })
	// Its worker is gone and left no timer: nothing can sync it again.
	testutil.WaitFor(t, "the worker's timers stopped", func() bool { return !clk.HasWaiters() })
	if got := s.snapshot(); got[len(got)-1] != "terminated:1" {
		t.Errorf("calls = %v, want them to end with the clean-up", got)
	}
}

func TestForceDeleteKillsWithZeroGrace(t *testing.T) {
	if g := gracePeriod(&corev1.Pod{}); g != corev1.DefaultTerminationGracePeriodSeconds {
		t.Errorf("default grace = %d", g)
	}
	s := &syncer{}
	p, _ := newWorkers(t, s)
	p.UpdatePod(pod("1"))
	p.KillPod(pod("1"))
	testutil.WaitFor(t, "the pod is terminated", func() bool { return p.IsTerminated("u1") })
	found := false
	for _, c := range s.snapshot() {
		found = found || c == "terminating:1:0"
	}
	if !found {
		t.Errorf("calls = %v, want a termination with grace 0", s.snapshot())
	}
}

func TestTerminalPodIsTerminatedWithoutDeletion(t *testing.T) {
	s := &syncer{}
	p, _ := newWorkers(t, s)
	done := pod("1")
	done.Labels = map[string]string{"terminal": "true"}
	p.UpdatePod(done)
	testutil.WaitFor(t, "the completed pod is terminated", func() bool { return p.IsTerminated("u1") })
	got := s.snapshot()
	want := []string{"sync:1", "terminating:1:30", "terminated:1"}
	if len(got) != len(want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("calls = %v, want %v", got, want)
			break
		}
	}
}

func TestRetryAtBackOffExpiry(t *testing.T) {
	s := &syncer{}
	p, clk := newWorkers(t, s)
	until := clk.Now().Add(40 * time.Second)
	if d := p.retryDelay(retryAt(until)); d != 40*time.Second {
		t.Errorf("delay = %v, want the 40s left of the back-off", d)
	}
	if d := p.retryDelay(errors.New("plain")); d != BackOffPeriod {
		t.Errorf("delay = %v, want BackOffPeriod for a plain error", d)
	}
	if d := p.retryDelay(retryAt(clk.Now().Add(5 * time.Minute))); d != ResyncInterval {
		t.Errorf("delay = %v, want a long back-off capped at the resync interval", d)
	}
	if d := p.retryDelay(retryAt(clk.Now().Add(-time.Second))); d != 0 {
		t.Errorf("delay = %v, want 0 for a back-off already over", d)
	}
}

type retryAt time.Time

func (r retryAt) Error() string        { return "backing off" }
func (r retryAt) RetryTime() time.Time { return time.Time(r) }

// blockingSyncer's SyncPod waits for its context, as a sync waiting for a
// volume does.
type blockingSyncer struct {
	syncer
	started chan struct{}
}

func (s *blockingSyncer) SyncPod(ctx context.Context, pod *corev1.Pod) (bool, func(), error) {
	close(s.started)
	<-ctx.Done()
	return false, nil, ctx.Err()
}

func TestKillCancelsTheSyncInFlight(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &blockingSyncer{started: make(chan struct{})}
	p := New(s, clocktesting.NewFakeClock(time.Now()), nil)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1", ResourceVersion: "1"}}
	p.UpdatePod(pod)
	<-s.started
	p.KillPod(pod)
	err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return p.IsTerminated("u1"), nil
	})
	if err != nil {
		t.Fatalf("the pod was not terminated while its sync waited: calls %v", s.calls)
	}
}

// cache is a PLEG as the workers wait on it: each wait is recorded, and
// held until released.
type cache struct {
	mu      sync.Mutex
	waits   []time.Time
	release chan struct{}
}

func (c *cache) WaitNewerThan(ctx context.Context, _ types.UID, t time.Time) error {
	c.mu.Lock()
	c.waits = append(c.waits, t)
	c.mu.Unlock()
	select {
	case <-c.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *cache) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waits)
}

// slowSyncer's SyncPod takes a second of the fake clock, and its postSync
// records when it ran.
type slowSyncer struct {
	syncer
	clk      *clocktesting.FakeClock
	postSync chan time.Time
}

func (s *slowSyncer) SyncPod(ctx context.Context, pod *corev1.Pod) (bool, func(), error) {
	s.clk.Step(time.Second)
	_, _, err := s.syncer.SyncPod(ctx, pod)
	return false, func() { s.postSync <- s.clk.Now() }, err
}

// TestTeardownWaitsForTheCache follows the kubelet's pod worker: each step
// of a teardown waits for a runtime status newer than the previous sync,
// and the containers count as possibly running until SyncTerminatingPod
// has stopped them. A postSync runs after the sync's end is recorded.
func TestTeardownWaitsForTheCache(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	clk := clocktesting.NewFakeClock(time.Now())
	s := &slowSyncer{clk: clk, postSync: make(chan time.Time, 1)}
	c := &cache{release: make(chan struct{})}
	p := New(s, clk, c)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); p.Wait() })
	if p.CouldHaveRunningContainers("u1") {
		t.Error("a pod without a worker could have running containers")
	}
	p.UpdatePod(pod("1"))
	synced := <-s.postSync
	if !p.CouldHaveRunningContainers("u1") {
		t.Error("a synced pod could not have running containers")
	}
	deleted := pod("2")
	deleted.DeletionTimestamp = &metav1.Time{Time: clk.Now()}
	p.UpdatePod(deleted)
	testutil.WaitFor(t, "the terminating step waits for the cache", func() bool { return c.count() == 1 })
	c.mu.Lock()
	if !c.waits[0].Equal(synced) {
		t.Errorf("waited for a status newer than %v, want the sync's end %v (before postSync ran)", c.waits[0], synced)
	}
	c.mu.Unlock()
	if n := len(s.snapshot()); n != 1 {
		t.Errorf("calls %v before the cache answered, want the first sync only", s.snapshot())
	}
	c.release <- struct{}{}
	testutil.WaitFor(t, "the terminated step waits for the cache", func() bool { return c.count() == 2 })
	if got := s.snapshot(); len(got) != 2 || got[1] != "terminating:2:30" {
		t.Errorf("calls %v, want the termination before the second wait", got)
	}
	if p.CouldHaveRunningContainers("u1") {
		t.Error("containers could still run after SyncTerminatingPod stopped them")
	}
	if p.IsTerminated("u1") {
		t.Error("terminated before SyncTerminatedPod ran")
	}
	c.release <- struct{}{}
	testutil.WaitFor(t, "the pod is terminated", func() bool { return p.IsTerminated("u1") })
	if got := s.snapshot(); len(got) != 3 || got[2] != "terminated:2" {
		t.Errorf("calls %v, want them to end with terminated:2", got)
	}
}

// TestFailedCleanUpRetriesOnlyTheCleanUp: the kubelet retries the step that
// failed; containers already stopped are not stopped again.
func TestFailedCleanUpRetriesOnlyTheCleanUp(t *testing.T) {
	s := &failingCleanUp{}
	ctx, cancel := context.WithCancel(context.Background())
	clk := clocktesting.NewFakeClock(time.Now())
	p := New(s, clk, nil)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); p.Wait() })
	p.KillPod(pod("1"))
	testutil.WaitFor(t, "the failed clean-up armed its retry", func() bool { return len(s.snapshot()) == 2 && clk.HasWaiters() })
	clk.Step(BackOffPeriod * 2)
	testutil.WaitFor(t, "the pod is terminated", func() bool { return p.IsTerminated("u1") })
	want := []string{"terminating:1:0", "terminated:1", "terminated:1"}
	if got := s.snapshot(); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("calls %v, want %v", got, want)
	}
}

type failingCleanUp struct{ syncer }

func (s *failingCleanUp) SyncTerminatedPod(ctx context.Context, pod *corev1.Pod) error {
	err := s.syncer.SyncTerminatedPod(ctx, pod)
	if len(s.snapshot()) == 2 {
		return errors.New("injected clean-up failure")
	}
	return err
}

// deadlineSyncer asks, from its first sync, for another sync at a time,
// as the agent does for a pod's active deadline.
type deadlineSyncer struct {
	syncer
	p     *PodWorkers
	clk   *clocktesting.FakeClock
	after time.Duration
}

func (s *deadlineSyncer) SyncPod(ctx context.Context, pod *corev1.Pod) (bool, func(), error) {
	if len(s.snapshot()) == 0 {
		s.p.SyncAt(pod.UID, s.clk.Now().Add(s.after))
	}
	return s.syncer.SyncPod(ctx, pod)
}

// TestSyncAtIsNotPushedBackByTheResync: the resync a successful sync arms
// (a minute or more away) must not replace the sooner sync that the same
// sync asked for.
func TestSyncAtIsNotPushedBackByTheResync(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	clk := clocktesting.NewFakeClock(time.Now())
	s := &deadlineSyncer{clk: clk, after: 5 * time.Second}
	p := New(s, clk, nil)
	s.p = p
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); p.Wait() })
	p.UpdatePod(pod("1"))
	testutil.WaitFor(t, "the first sync ran and armed its timer", func() bool { return len(s.snapshot()) == 1 && clk.HasWaiters() })
	clk.Step(5 * time.Second)
	testutil.WaitFor(t, "the sync asked for at 5 s", func() bool { return len(s.snapshot()) == 2 })
}
