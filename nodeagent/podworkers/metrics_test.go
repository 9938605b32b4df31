package podworkers

import (
	"context"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/nodeagent/metrics/metricstest"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/internal/testutil"
	"github.com/fleetlet/fleetlet/nodeagent/metrics"
)

// workerDurations scrapes kubelet_pod_worker_duration_seconds: the number
// of observations by operation type.
func workerDurations(t *testing.T, m *metrics.Kubelet) map[string]uint64 {
	t.Helper()
	fs := m.Gather(metrics.Runtime{})
	defer metrics.Release(fs)
	fams := metricstest.Parse(t, fs)
	out := map[string]uint64{}
	for _, s := range fams["kubelet_pod_worker_duration_seconds"].GetMetric() {
		out[s.GetLabel()[0].GetValue()] = s.GetHistogram().GetSampleCount()
	}
	return out
}

// TestWorkerDurationsByOperationType: each worker iteration is timed and
// labelled with the type of the update it took up, as the kubelet's pod
// workers label kubelet_pod_worker_duration_seconds.
func TestWorkerDurationsByOperationType(t *testing.T) {
	s := &syncer{}
	clk := clocktesting.NewFakeClock(time.Now())
	m := metrics.NewKubelet("n1", clk.Now())
	p := New(s, clk, nil)
	p.SetMetrics(m)
	ctx, cancel := context.WithCancel(context.Background())
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); p.Wait() })

	calls := func(n int) {
		t.Helper()
		testutil.WaitFor(t, "the worker's calls", func() bool { return len(s.snapshot()) >= n })
	}
	p.UpdatePodOfType(pod("1"), SyncPodCreate)
	calls(1)
	p.UpdatePodOfType(pod("2"), SyncPodUpdate)
	calls(2)
	testutil.WaitFor(t, "the resync is scheduled", func() bool { return clk.HasWaiters() })
	clk.Step(2 * ResyncInterval) // the resync: a sync
	calls(3)
	p.KillPod(pod("3"))
	calls(5) // terminating, then terminated
	testutil.WaitFor(t, "the pod is terminated", func() bool { return p.IsTerminated("u1") })

	got := workerDurations(t, m)
	want := map[string]uint64{"create": 1, "update": 1, "sync": 1, "kill": 1, "terminated": 1}
	for op, n := range want {
		if got[op] != n {
			t.Errorf("%s durations %d, want %d (all: %v)", op, got[op], n, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("durations by type %v, want %v", got, want)
	}
}
