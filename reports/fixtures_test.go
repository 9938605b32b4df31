package reports

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// apiserverBuckets are apiserver_request_duration_seconds's buckets in
// Kubernetes 1.37 (k8s.io/apiserver/pkg/endpoints/metrics).
var apiserverBuckets = []float64{0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60}

// promSeries is one labelled histogram series and its observations, in
// seconds.
type promSeries struct {
	labels string // `verb="GET",resource="pods"`
	obs    []float64
}

// promHistogramText writes series as the Prometheus text format does,
// HELP and TYPE lines included, cumulative buckets ending at +Inf.
func promHistogramText(name string, bounds []float64, series []promSeries) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# HELP %s A test histogram.\n# TYPE %s histogram\n", name, name)
	for _, s := range series {
		sum := 0.0
		for _, o := range s.obs {
			sum += o
		}
		for _, ub := range bounds {
			n := 0
			for _, o := range s.obs {
				if o <= ub {
					n++
				}
			}
			fmt.Fprintf(&b, "%s_bucket{%s,le=%q} %d\n", name, s.labels, strconv.FormatFloat(ub, 'g', -1, 64), n)
		}
		fmt.Fprintf(&b, "%s_bucket{%s,le=\"+Inf\"} %d\n", name, s.labels, len(s.obs))
		fmt.Fprintf(&b, "%s_sum{%s} %s\n", name, s.labels, strconv.FormatFloat(sum, 'g', -1, 64))
		fmt.Fprintf(&b, "%s_count{%s} %d\n", name, s.labels, len(s.obs))
	}
	return b.String()
}

// spread returns n observations from lo to hi seconds, evenly.
func spread(n int, lo, hi float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = lo + (hi-lo)*float64(i)/float64(max(n-1, 1))
	}
	return out
}

// apiLabels is the label set the apiserver gives a request's series.
func apiLabels(verb, group, version, resource, subresource, scope string) string {
	return fmt.Sprintf(`component="apiserver",dry_run="",group=%q,resource=%q,scope=%q,subresource=%q,verb=%q,version=%q`,
		group, resource, scope, subresource, verb, version)
}

// sampleAPIServerText returns the apiserver's and scheduler's /metrics at
// the start of a run (before) and at its end (after). Between them: the
// sample run's calls, PATCH pods/status with a tail above 1 s.
func sampleAPIServerText() (before, after string) {
	startup := []promSeries{
		{apiLabels("POST", "", "v1", "nodes", "", "resource"), spread(10, 0.004, 0.03)},
		{apiLabels("PUT", "coordination.k8s.io", "v1", "leases", "", "resource"), spread(20, 0.002, 0.012)},
		{apiLabels("LIST", "", "v1", "pods", "", "cluster"), spread(3, 0.01, 0.05)},
		{apiLabels("WATCH", "", "v1", "pods", "", "cluster"), spread(10, 30, 50)},
	}
	run := []promSeries{
		{apiLabels("POST", "", "v1", "nodes", "", "resource"), append(spread(10, 0.004, 0.03), spread(2, 0.01, 0.02)...)},
		{apiLabels("PUT", "coordination.k8s.io", "v1", "leases", "", "resource"), append(spread(20, 0.002, 0.012), spread(95, 0.002, 0.04)...)},
		{apiLabels("LIST", "", "v1", "pods", "", "cluster"), append(spread(3, 0.01, 0.05), spread(12, 0.08, 0.9)...)},
		{apiLabels("WATCH", "", "v1", "pods", "", "cluster"), spread(30, 30, 60)},
		{apiLabels("POST", "", "v1", "pods", "", "resource"), spread(202, 0.008, 0.09)},
		{apiLabels("POST", "", "v1", "pods", "binding", "resource"), spread(200, 0.004, 0.06)},
		{apiLabels("POST", "", "v1", "events", "", "resource"), spread(412, 0.003, 0.04)},
		{apiLabels("GET", "", "v1", "pods", "", "resource"), spread(400, 0.002, 0.3)},
		{apiLabels("PATCH", "", "v1", "pods", "status", "resource"), append(spread(390, 0.01, 0.7), spread(10, 1.1, 2.4)...)},
		{apiLabels("PATCH", "", "v1", "nodes", "status", "resource"), spread(20, 0.01, 0.05)},
		{apiLabels("DELETE", "", "v1", "pods", "", "resource"), spread(150, 0.01, 0.12)},
		// The same call seen through an aggregated component, summed.
		{`component="apiextensions-apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="DELETE",version="v1"`, spread(1, 0.02, 0.02)},
		{apiLabels("LIST", "", "v1", "nodes", "", "cluster"), spread(5, 0.01, 0.02)},
		{apiLabels("GET", "", "", "", "", ""), spread(7, 0.001, 0.002)}, // /healthz
	}
	sched := func(scheduled, unschedulable int, sli []float64) string {
		return fmt.Sprintf(`# HELP scheduler_schedule_attempts_total Number of attempts to schedule pods, by the result.
# TYPE scheduler_schedule_attempts_total counter
scheduler_schedule_attempts_total{profile="default-scheduler",result="error"} 0
scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"} %d
scheduler_schedule_attempts_total{profile="default-scheduler",result="unschedulable"} %d
`, scheduled, unschedulable) + promHistogramText("scheduler_pod_scheduling_sli_duration_seconds",
			[]float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12}, []promSeries{{`attempts="1"`, sli}})
	}
	// A family the report does not keep, to be skipped.
	noise := "# HELP process_cpu_seconds_total CPU.\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\n"
	before = noise + promHistogramText(metricRequestDuration, apiserverBuckets, startup) + sched(12, 0, spread(12, 0.005, 0.03))
	after = noise + promHistogramText(metricRequestDuration, apiserverBuckets, run) +
		sched(212, 2, append(spread(12, 0.005, 0.03), spread(200, 0.01, 0.6)...))
	return before, after
}

// sampleMetricsDiff is the sample run's control-plane metrics over its 95 s.
// It panics on a broken fixture, which is a bug in this file.
func sampleMetricsDiff() *Metrics {
	b, a := sampleAPIServerText()
	before, err := ParseMetrics(strings.NewReader(b), t0.Add(-2*time.Second))
	if err != nil {
		panic(err)
	}
	after, err := ParseMetrics(strings.NewReader(a), t0.Add(93*time.Second))
	if err != nil {
		panic(err)
	}
	return Diff(before, after)
}

// sampleAPISeries is a fleet's client-side request rate: the fleet starts
// 10 s before the first pod is created; leases renew all along; pods bring
// events, status patches and gets.
func sampleAPISeries() APISeries {
	rt := newRateTable(t0.Add(-10 * time.Second))
	at := func(sec float64) time.Time { return rt.base.Add(time.Duration(sec * float64(time.Second))) }
	for s := 0; s < 70; s++ {
		rt.add(at(float64(s)), seriesVerbIndex(verbUpdate)) // 10 nodes' leases every 10 s
		if s%5 == 0 {
			rt.add(at(float64(s)+0.5), seriesVerbIndex(verbPatch)) // node status
		}
	}
	for s := 0; s < 3; s++ {
		for n := 0; n < 10; n++ {
			rt.add(at(float64(s)), seriesVerbIndex(verbCreate)) // registration, leases
			rt.add(at(float64(s)), seriesVerbIndex(verbWatch))
			rt.add(at(float64(s)), seriesVerbIndex(verbList))
		}
	}
	for i := 1; i <= 200; i++ { // pods created at 100 ms intervals from second 10
		sec := 10 + float64(i)*0.1
		rt.add(at(sec+0.05), seriesVerbIndex(verbGet))
		rt.add(at(sec+0.08), seriesVerbIndex(verbPatch))
		rt.add(at(sec+0.06), seriesVerbIndex(verbCreate))
		rt.add(at(sec+0.07), seriesVerbIndex(verbCreate))
		if i <= 150 { // deleted 30 s later
			rt.add(at(sec+31), seriesVerbIndex(verbCreate)) // Killing event
			rt.add(at(sec+31.2), seriesVerbIndex(verbDelete))
		}
	}
	rt.add(at(3), seriesVerbIndex("post")) // a non-resource POST counts as other
	return rt.series()
}
