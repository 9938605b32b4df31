package prober

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/internal/testutil"
)

// TestStoppedManagerIsReleasedByASharedQueue: a node that stops (its agent's
// context ends) leaves probes queued on the fleet's Queue, which runs on;
// the Queue must then not keep the Manager, nor through it the node's pods
// and agent, alive until those probes come due, nor run them.
func TestStoppedManagerIsReleasedByASharedQueue(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	runner := newFakeRunner(clk)
	q := NewQueue(QueueConfig{Clock: clk})
	qctx, stopQueue := context.WithCancel(context.Background())
	defer func() { stopQueue(); q.Wait() }()
	if err := q.Start(qctx); err != nil {
		t.Fatal(err)
	}

	// One long period: the probes wait in the queue for an hour.
	hour := withPeriod(3600)
	var ran int
	released := func() weak.Pointer[Manager] {
		ctx, stop := context.WithCancel(context.Background())
		m := NewManager(Config{Runner: runner, Queue: q})
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		pod := newPod("u1", corev1.Container{
			ReadinessProbe: execProbe(Readiness, hour), LivenessProbe: execProbe(Liveness, hour),
		})
		m.ContainerStarted(pod, "c0", "cid", t0)
		testutil.WaitFor(t, "the first probes ran", func() bool { return runner.total() == 2 && q.q.Idle() })
		stop()
		m.Wait()
		ran = runner.total()
		return weak.Make(m)
	}()
	testutil.WaitFor(t, "the stopped Manager is collected", func() bool {
		runtime.GC()
		return released.Value() == nil
	})
	// Their time comes: nothing runs.
	clk.Step(2 * time.Hour)
	testutil.WaitFor(t, "the queue is idle", q.q.Idle)
	if n := runner.total() - ran; n != 0 {
		t.Errorf("%d probes of a stopped Manager ran", n)
	}
}
