package podworkers

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/internal/testutil"
)

// idle is how long a test watches for a call that must not come. It can
// only let a wrong worker pass, never fail a right one on a slow machine.
const idle = 100 * time.Millisecond

// quiet fails the test if s records a call beyond its first n within idle.
func quiet(t *testing.T, s *syncer, n int, what string) {
	t.Helper()
	deadline := time.Now().Add(idle)
	for time.Now().Before(deadline) {
		if got := s.snapshot(); len(got) > n {
			t.Fatalf("%s: calls = %v, want no more than the first %d", what, got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStallHoldsEverySyncUntilResumed: while stalled, no worker syncs, not
// an update, not a new pod, not a resync or a termination; on resume each
// syncs the newest version of its pod, once.
func TestStallHoldsEverySyncUntilResumed(t *testing.T) {
	s := &syncer{}
	p, clk := newWorkers(t, s)
	p.UpdatePod(pod("1"))
	testutil.WaitFor(t, "the first sync ran and armed its resync", func() bool { return len(s.snapshot()) == 1 && clk.HasWaiters() })

	p.Stall(true)
	p.Stall(true) // already stalled: nothing changes
	if !p.Stalled() {
		t.Fatal("Stalled() = false after Stall(true)")
	}
	p.UpdatePod(pod("2"))
	p.UpdatePod(pod("3"))
	other := pod("a")
	other.UID = "u2"
	p.UpdatePodOfType(other, SyncPodCreate)
	gone := pod("b")
	gone.UID = "u3"
	gone.DeletionTimestamp = &metav1.Time{Time: clk.Now()}
	p.UpdatePod(gone)
	// The resync of the first sync comes due, and passes.
	clk.Step(2 * ResyncInterval)
	quiet(t, s, 1, "stalled")
	if p.IsTerminated("u3") {
		t.Error("a deleted pod was terminated while the workers were stalled")
	}

	p.Stall(false)
	p.Stall(false) // already going: nothing changes
	testutil.WaitFor(t, "every worker caught up", func() bool { return p.IsTerminated("u3") && len(s.snapshot()) >= 5 })
	got := s.snapshot()
	for _, want := range []string{"sync:3", "sync:a", "terminating:b:30", "terminated:b"} {
		if !slices.Contains(got[1:], want) {
			t.Errorf("calls after resume = %v, want %s among them", got[1:], want)
		}
	}
	if slices.Contains(got, "sync:2") {
		t.Errorf("calls = %v: the update superseded during the stall was synced", got)
	}
}

// TestStallLetsTheSyncInFlightEnd: a sync that started before the stall
// ends; the worker's next step (here, terminating the pod) waits.
func TestStallLetsTheSyncInFlightEnd(t *testing.T) {
	s := &syncer{hold: make(chan struct{})}
	p, _ := newWorkers(t, s)
	terminal := pod("1")
	terminal.Labels = map[string]string{"terminal": "true"}
	p.UpdatePod(terminal)
	testutil.WaitFor(t, "the sync is in flight", func() bool { return len(s.snapshot()) == 1 })
	p.Stall(true)
	s.mu.Lock()
	hold := s.hold
	s.hold = nil
	s.mu.Unlock()
	close(hold)
	testutil.WaitFor(t, "the sync in flight ended", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.inFlight == 0
	})
	quiet(t, s, 1, "stalled after the sync in flight")
	p.Stall(false)
	testutil.WaitFor(t, "the terminal pod is terminated", func() bool { return p.IsTerminated("u1") })
}

// TestStalledWorkersStopWithTheirContext: a worker waiting on the stall
// returns when the workers' context ends, and has left no timer.
func TestStalledWorkersStopWithTheirContext(t *testing.T) {
	s := &syncer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clocktesting.NewFakeClock(time.Now())
	p := New(s, clk, nil)
	p.Stall(true) // before Start, as a node booted wedged
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p.UpdatePod(pod("1"))
	quiet(t, s, 0, "stalled from the start")
	cancel()
	done := make(chan struct{})
	go func() { p.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(testutil.Patience):
		t.Fatal("a stalled worker did not return when its context ended")
	}
	if len(s.snapshot()) != 0 {
		t.Errorf("calls = %v, want none", s.snapshot())
	}
	if clk.HasWaiters() {
		t.Error("a stalled worker left a timer behind")
	}
}
