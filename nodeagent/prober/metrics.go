package prober

import (
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fleetlet/fleetlet/nodeagent/metrics"
)

// The kubelet's probe metrics (pkg/kubelet/prober prober_manager.go),
// served on /metrics/probes.
var (
	probeTotalDesc = metrics.NewDesc("prober_probe_total",
		"[BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
		dto.MetricType_COUNTER, nil, "probe_type", "result", "container", "pod", "namespace", "pod_uid")
	probeDurationDesc = metrics.NewDesc("prober_probe_duration_seconds",
		"[ALPHA] Duration in seconds for a probe response.",
		dto.MetricType_HISTOGRAM, metrics.DefBuckets, "probe_type", "container", "pod", "namespace")
)

// The result label's values.
const (
	resultSuccessful = iota
	resultFailed
	resultUnknown
	numResults
)

var resultNames = [numResults]string{"successful", "failed", "unknown"}

// probeMetrics are one worker's series, kept in the worker under the
// manager's lock and handed to the worker that replaces it for a new
// container ID: the kubelet's series live as long as its worker for the
// (pod, container, kind), across container restarts, and go with it when
// the pod is removed or its liveness and startup probes stop. A result's
// series exists once it has been counted.
type probeMetrics struct {
	results  [numResults]uint64
	duration metrics.Counts
}

// record counts one probe as the kubelet's worker does: a probe that could
// not run (err) is thrown away; a success (a warning too) is counted and
// timed; a failure (an unknown outcome is one for the kubelet) is counted.
func (p *probeMetrics) record(res Result, err error, took time.Duration) {
	if err != nil {
		return
	}
	switch res {
	case Success, Warning:
		p.results[resultSuccessful]++
		p.duration.Observe(took.Seconds())
	default:
		p.results[resultFailed]++
	}
}

// Gather builds the families of /metrics/probes from the node's probe
// workers, under the manager's lock: a family copies only the strings'
// headers.
func (m *Manager) Gather() []*metrics.Family {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, pe := range m.pods {
		n += len(pe.workers)
	}
	total := probeTotalDesc.Family(2 * n)
	duration := probeDurationDesc.Family(n)
	for _, pe := range m.pods {
		for _, w := range pe.workers {
			kind, ctr, pod, ns := w.kind.String(), w.container.Name, w.pod.Name, w.pod.Namespace
			for r, c := range w.metrics.results {
				if c > 0 {
					total.Add(float64(c), kind, resultNames[r], ctr, pod, ns, string(w.pod.UID))
				}
			}
			if w.metrics.duration.Count() > 0 {
				duration.AddCounts(&w.metrics.duration, kind, ctr, pod, ns)
			}
		}
	}
	return []*metrics.Family{total, duration}
}
