package prober

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/nodeagent/metrics/metricstest"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/internal/testutil"
	"github.com/fleetlet/fleetlet/nodeagent/metrics"
)

// scrape encodes the manager's families as a scrape does and parses them:
// series by label set, rendered as "k=v,...".
func scrape(t *testing.T, m *Manager) map[string]map[string]*dto.Metric {
	t.Helper()
	fams := metricstest.Parse(t, metrics.Gather(m.Gather()...))
	out := map[string]map[string]*dto.Metric{}
	for name, mf := range fams {
		out[name] = map[string]*dto.Metric{}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + ","
			}
			out[name][key] = m
		}
	}
	return out
}

func totalKey(kind, result string) string {
	return "container=c0,namespace=ns,pod=pod-u1,pod_uid=u1,probe_type=" + kind + ",result=" + result + ","
}

func durationKey(kind string) string {
	return "container=c0,namespace=ns,pod=pod-u1,probe_type=" + kind + ","
}

func TestProbeMetrics(t *testing.T) {
	h := newHarness(t, 2)
	boom := errors.New("boom")
	h.runner.script("cid", Readiness, answer{res: Success}, answer{res: Failure}, answer{res: Warning}, answer{res: Unknown})
	h.runner.script("cid", Liveness, answer{err: boom}, answer{err: boom}, answer{err: boom})
	pod := newPod("u1", corev1.Container{
		ReadinessProbe: execProbe(Readiness, withThresholds(1, 5)),
		LivenessProbe:  execProbe(Liveness, withThresholds(1, 5)),
	})
	if fams := scrape(t, h.m); len(fams) != 0 {
		t.Errorf("families before any probe: %v", fams)
	}
	h.m.ContainerStarted(pod, "c0", "cid", t0)
	for range 3 {
		h.step(10 * time.Second)
	}
	fams := scrape(t, h.m)
	total := fams["prober_probe_total"]
	for key, want := range map[string]float64{
		// Success and Warning are successes; Failure and Unknown failures.
		totalKey("Readiness", "successful"): 2,
		totalKey("Readiness", "failed"):     2,
		// The errored tries are thrown away; the next answers succeed.
		totalKey("Liveness", "successful"): 3,
	} {
		if got := total[key].GetCounter().GetValue(); got != want {
			t.Errorf("prober_probe_total{%s} = %v, want %v", key, got, want)
		}
	}
	if len(total) != 3 {
		t.Errorf("prober_probe_total has %d series, want 3 (no result is counted before it happens): %v", len(total), total)
	}
	if n := fams["prober_probe_duration_seconds"][durationKey("Readiness")].GetHistogram().GetSampleCount(); n != 2 {
		t.Errorf("readiness durations %d, want the 2 successes", n)
	}

	// A restarted container keeps its series, as the kubelet's worker
	// does: probed at once and a period later, two more successes.
	h.m.ContainerStarted(pod, "c0", "cid2", h.clock.Now())
	h.step(10 * time.Second)
	if got := scrape(t, h.m)["prober_probe_total"][totalKey("Readiness", "successful")].GetCounter().GetValue(); got != 4 {
		t.Errorf("successful readiness probes %v after a restart, want 4", got)
	}
	// Liveness stops with the pod's termination, and its series with it.
	h.m.StopLivenessAndStartup(pod.UID)
	fams = scrape(t, h.m)
	if _, ok := fams["prober_probe_total"][totalKey("Liveness", "successful")]; ok {
		t.Error("liveness series served after liveness probing stopped")
	}
	if _, ok := fams["prober_probe_total"][totalKey("Readiness", "successful")]; !ok {
		t.Error("readiness series gone while readiness is still probed")
	}
	h.m.RemovePod(pod.UID)
	if fams := scrape(t, h.m); len(fams) != 0 {
		t.Errorf("families after the pod was removed: %v", fams)
	}
}

// slowRunner takes took on the manager's clock to answer.
type slowRunner struct {
	clock *clocktesting.FakeClock
	took  time.Duration
}

func (r slowRunner) Exec(context.Context, string, []string, time.Duration) (Result, string, error) {
	r.clock.Step(r.took)
	return Success, "", nil
}

func (r slowRunner) Network(context.Context, Kind, *corev1.Pod, *corev1.Container, string, *corev1.Probe) (Result, string, error) {
	r.clock.Step(r.took)
	return Success, "", nil
}

func TestProbeDurationIsTheProbesTime(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	m := NewManager(Config{Clock: clk, Runner: slowRunner{clk, 300 * time.Millisecond}, Events: record.NewFakeRecorder(10), Seed: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	m.ContainerStarted(newPod("u1", corev1.Container{ReadinessProbe: execProbe(Readiness)}), "c0", "cid", t0)
	var h *dto.Histogram
	testutil.WaitFor(t, "the first probe is recorded", func() bool {
		h = scrape(t, m)["prober_probe_duration_seconds"][durationKey("Readiness")].GetHistogram()
		return h.GetSampleCount() > 0
	})
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 0.3 {
		t.Fatalf("durations: count %d sum %v, want one of 0.3 s", h.GetSampleCount(), h.GetSampleSum())
	}
	for _, b := range h.GetBucket() {
		want := uint64(0)
		if b.GetUpperBound() >= 0.5 {
			want = 1
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
}

// TestRecordingAProbeDoesNotAllocate: a probe's series are counts in its
// worker, so a node nobody scrapes pays nothing per probe run.
func TestRecordingAProbeDoesNotAllocate(t *testing.T) {
	var p probeMetrics
	if a := testing.AllocsPerRun(100, func() { p.record(Success, nil, time.Millisecond) }); a != 0 {
		t.Errorf("recording a probe allocates %v times, want 0", a)
	}
}
