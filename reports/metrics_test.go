package reports

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A scrape as kube-apiserver writes it, trimmed: the one histogram we keep
// (two series of one call that differ only in labels we drop, one of
// another), and families we do not keep.
const apiserverScrape = `# HELP apiserver_request_duration_seconds [STABLE] Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1",le="0.005"} 1
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1",le="0.025"} 3
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1",le="+Inf"} 4
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 0.5
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 4
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="All",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1",le="0.005"} 0
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="All",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1",le="0.025"} 2
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="All",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1",le="+Inf"} 2
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="All",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 0.03
apiserver_request_duration_seconds_count{component="apiserver",dry_run="All",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 2
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1",le="0.005"} 10
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1",le="0.025"} 10
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1",le="+Inf"} 10
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 0.02
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 10
# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 6
# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 412
`

func TestParseMetricsKeepsAndSums(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(apiserverScrape), t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.requests) != 2 {
		t.Fatalf("kept %d request series, want 2 (dry_run summed away): %v", len(m.requests), m.requests)
	}
	patch := m.requests[requestLabels{verb: "PATCH", version: "v1", resource: "pods", subresource: "status", scope: "resource"}]
	if patch == nil {
		t.Fatalf("no PATCH pods/status series in %v", m.requests)
	}
	if patch.count != 6 || patch.sum != 0.53 {
		t.Errorf("PATCH pods/status count %v sum %v, want 6 and 0.53", patch.count, patch.sum)
	}
	wantBounds, wantCounts := []float64{0.005, 0.025}, []float64{1, 5}
	if !equalFloats(patch.bounds, wantBounds) || !equalFloats(patch.counts, wantCounts) {
		t.Errorf("PATCH pods/status buckets %v %v, want %v %v (no +Inf: it is the count)", patch.bounds, patch.counts, wantBounds, wantCounts)
	}
	if _, ok := m.ScheduleAttempts("scheduled"); ok {
		t.Errorf("an apiserver scrape has scheduler attempts")
	}
	if _, ok := m.SchedulingSLI(); ok {
		t.Errorf("an apiserver scrape has the scheduling SLI")
	}

	if _, err := ParseMetrics(strings.NewReader("apiserver_request_duration_seconds_bucket{le=\"0.1\" 3\n"), t0); err == nil {
		t.Errorf("ParseMetrics accepted a malformed line")
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestBucketQuantile checks the estimate against PromQL's histogram_quantile
// on the same buckets, worked by hand from promql/quantile.go.
func TestBucketQuantile(t *testing.T) {
	// 100 observations: 10 ≤ 0.1, 50 ≤ 0.5, 90 ≤ 1, 100 ≤ +Inf.
	h := &bucketHistogram{bounds: []float64{0.1, 0.5, 1}, counts: []float64{10, 50, 90}, count: 100}
	for _, tc := range []struct {
		q, want float64
	}{
		{0.05, 0.05}, // first bucket: from 0 to 0.1, rank 5 of 10
		{0.1, 0.1},   // exactly at a bound
		{0.3, 0.3},   // 0.1 + 0.4 × (30-10)/(50-10)
		{0.5, 0.5},
		{0.7, 0.75}, // 0.5 + 0.5 × 20/40
		{0.9, 1},
		{0.95, 1}, // in the +Inf bucket: the highest finite bound
		{0.99, 1},
		{1, 1},
		{0, 0},
	} {
		if got := h.quantile(tc.q); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := h.quantile(-0.1); !math.IsInf(got, -1) {
		t.Errorf("quantile(-0.1) = %v, want -Inf", got)
	}
	if got := h.quantile(1.1); !math.IsInf(got, +1) {
		t.Errorf("quantile(1.1) = %v, want +Inf", got)
	}
	if got := (&bucketHistogram{bounds: []float64{1}, counts: []float64{0}}).quantile(0.5); !math.IsNaN(got) {
		t.Errorf("quantile of no observations = %v, want NaN", got)
	}
	// A negative first bound is returned as is, as Prometheus does.
	neg := &bucketHistogram{bounds: []float64{-1, 1}, counts: []float64{5, 10}, count: 10}
	if got := neg.quantile(0.2); got != -1 {
		t.Errorf("quantile in a first bucket bounded at -1 = %v, want -1", got)
	}
	// Counts that decrease are raised to the envelope.
	bumpy := &bucketHistogram{bounds: []float64{0.1, 0.2, 0.3}, counts: []float64{10, 8, 20}, count: 20}
	// Rank 15 is in the third bucket, which starts from 10 (not 8): 0.2 +
	// 0.1 × 5/10.
	if got := bumpy.quantile(0.75); math.Abs(got-0.25) > 1e-12 {
		t.Errorf("quantile(0.75) of non-monotonic buckets = %v, want 0.25", got)
	}
	// And in the report's unit: milliseconds, µs resolution, no NaN.
	l := h.latency()
	if l.Count != 100 || l.P50Ms != 500 || l.P90Ms != 1000 || l.P99Ms != 1000 {
		t.Errorf("latency() = %+v", l)
	}
	if l := (&bucketHistogram{}).latency(); l.P99Ms != 0 || l.Count != 0 {
		t.Errorf("latency() of nothing = %+v, want zeros", l)
	}
}

func TestDiff(t *testing.T) {
	before, after := &Metrics{At: t0}, &Metrics{At: t0.Add(90 * time.Second)}
	k := requestLabels{verb: "GET", resource: "pods", scope: "resource"}
	restarted := requestLabels{verb: "LIST", resource: "pods", scope: "cluster"}
	born := requestLabels{verb: "POST", resource: "pods", scope: "resource"}
	before.requests = map[requestLabels]*bucketHistogram{
		k:                                  {bounds: []float64{0.1, 1}, counts: []float64{5, 8}, count: 10, sum: 3},
		restarted:                          {bounds: []float64{0.1, 1}, counts: []float64{50, 60}, count: 70, sum: 30},
		{verb: "GET", resource: "secrets"}: {bounds: []float64{0.1}, counts: []float64{1}, count: 1},
	}
	after.requests = map[requestLabels]*bucketHistogram{
		k:         {bounds: []float64{0.1, 1}, counts: []float64{25, 48}, count: 60, sum: 13},
		restarted: {bounds: []float64{0.1, 1}, counts: []float64{2, 3}, count: 3, sum: 1},
		born:      {bounds: []float64{0.1, 1}, counts: []float64{7, 7}, count: 7, sum: 0.2},
	}
	before.attempts = map[string]float64{"scheduled": 12, "unschedulable": 4}
	after.attempts = map[string]float64{"scheduled": 212, "unschedulable": 1, "error": 1}
	before.schedulingSLI = &bucketHistogram{bounds: []float64{0.01}, counts: []float64{3}, count: 4}
	after.schedulingSLI = &bucketHistogram{bounds: []float64{0.01}, counts: []float64{13}, count: 24}

	d := Diff(before, after)
	if got := d.Seconds(); got != 90 {
		t.Errorf("Seconds() = %v, want 90", got)
	}
	for _, tc := range []struct {
		k      requestLabels
		counts []float64
		count  float64
	}{
		{k, []float64{20, 40}, 50},      // subtracted bucket by bucket
		{restarted, []float64{2, 3}, 3}, // the apiserver restarted: after alone
		{born, []float64{7, 7}, 7},      // began between the scrapes
	} {
		h := d.requests[tc.k]
		if h == nil || !equalFloats(h.counts, tc.counts) || h.count != tc.count {
			t.Errorf("diff of %+v = %+v, want counts %v count %v", tc.k, h, tc.counts, tc.count)
		}
	}
	if len(d.requests) != 3 {
		t.Errorf("diff has %d series, want 3 (those gone before the end are dropped)", len(d.requests))
	}
	if n, _ := d.ScheduleAttempts("scheduled"); n != 200 {
		t.Errorf("scheduled attempts = %v, want 200", n)
	}
	if n, _ := d.ScheduleAttempts("unschedulable"); n != 1 {
		t.Errorf("unschedulable attempts after a restart = %v, want 1", n)
	}
	if l, ok := d.SchedulingSLI(); !ok || l.Count != 20 || l.Buckets[0].Count != 10 {
		t.Errorf("scheduling SLI diff = %+v, %v; want 20 observations, 10 in the first bucket", l, ok)
	}
	// The inputs are left alone.
	if before.requests[k].count != 10 || after.requests[k].count != 60 {
		t.Errorf("Diff changed its inputs")
	}

	if Diff(nil, after) != after {
		t.Errorf("Diff(nil, after) is not after")
	}
	if Diff(before, nil) != nil {
		t.Errorf("Diff(before, nil) is not nil")
	}
	var none *Metrics
	if none.APICallLatencies() != nil || none.Seconds() != 0 {
		t.Errorf("a nil *Metrics is not empty")
	}
}

func TestAPICallLatencies(t *testing.T) {
	d := sampleMetricsDiff()
	rows := d.APICallLatencies()
	var got []string
	for _, r := range rows {
		got = append(got, r.Verb+" "+r.Label()+" "+r.Scope)
		if r.Verb == "WATCH" {
			t.Errorf("WATCH is in the table")
		}
		if r.Count == 0 {
			t.Errorf("%s %s has no calls but is in the table", r.Verb, r.Label())
		}
	}
	want := []string{
		"POST events resource", "PUT leases.coordination.k8s.io resource", "LIST nodes cluster", "POST nodes resource",
		"PATCH nodes/status resource", "DELETE pods resource", "GET pods resource", "LIST pods cluster", "POST pods resource",
		"POST pods/binding resource", "PATCH pods/status resource", "GET (non-resource) ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, r := range rows {
		switch r.Verb + " " + r.Label() {
		case "DELETE pods":
			if r.Count != 151 {
				t.Errorf("DELETE pods: %d calls, want 151 (both components summed)", r.Count)
			}
		case "POST nodes":
			if r.Count != 2 {
				t.Errorf("POST nodes: %d calls, want the 2 made between the scrapes", r.Count)
			}
		case "PATCH pods/status":
			// 396th of 400: 393 at or below 1.5 s, 397 at or below 2 s.
			if r.P99Ms != 1875 {
				t.Errorf("PATCH pods/status p99 = %v ms, want 1875", r.P99Ms)
			}
			if len(r.Buckets) != len(apiserverBuckets) || r.Buckets[len(r.Buckets)-1].Count != 400 {
				t.Errorf("PATCH pods/status buckets = %+v", r.Buckets)
			}
		}
	}
}

func TestScrape(t *testing.T) {
	_, after := sampleAPIServerText()
	var accept string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer admin" {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		accept = r.Header.Get("Accept")
		switch r.URL.Path {
		case "/metrics":
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			w.Write([]byte(after))
		case "/garbage":
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			w.Write([]byte("this is { not metrics\n"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	client := &http.Client{Transport: &bearer{token: "admin", next: srv.Client().Transport}}

	m, err := Scrape(context.Background(), client, srv.URL+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(accept, "text/plain") {
		t.Errorf("Accept = %q, want the text format", accept)
	}
	if m.At.IsZero() || len(m.APICallLatencies()) == 0 {
		t.Errorf("scrape kept nothing: %+v", m)
	}
	if n, ok := m.ScheduleAttempts("scheduled"); !ok || n != 212 {
		t.Errorf("scheduled attempts = %v, %v", n, ok)
	}

	// One URL failing leaves the others' metrics, and says which failed.
	m, err = Scrape(context.Background(), client, srv.URL+"/metrics", srv.URL+"/nope", srv.URL+"/garbage")
	if m == nil || len(m.APICallLatencies()) == 0 {
		t.Errorf("a failing URL lost the others' metrics")
	}
	if err == nil || !strings.Contains(err.Error(), "/nope: 404") || !strings.Contains(err.Error(), "/garbage") {
		t.Errorf("error = %v, want one naming /nope's 404 and /garbage", err)
	}

	// Without credentials: an error that says what is needed.
	m, err = Scrape(context.Background(), srv.Client(), srv.URL+"/metrics")
	if m != nil || err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "credentials") {
		t.Errorf("unauthorized scrape = %v, %v", m, err)
	}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func TestSchedulingFrom(t *testing.T) {
	pods := PodSeries{Scheduled: []int{0, 0, 4, 10, 0, 6, 0, 0}}
	st := SchedulingFrom(pods, nil)
	// 20 pods over seconds 2 to 5: 4 windows.
	if st.Pods != 20 || st.MaxPerSecond != 10 || st.AvgPerSecond != 5 {
		t.Errorf("from milestones: %+v, want 20 pods, max 10/s, avg 5/s", st)
	}
	if st.SchedulerSeconds != 0 || st.SchedulingSLI != nil {
		t.Errorf("without scheduler metrics: %+v", st)
	}
	st = SchedulingFrom(pods, sampleMetricsDiff())
	if st.SchedulerScheduled != 200 || st.SchedulerUnschedulable != 2 || st.SchedulerSeconds != 95 || st.SchedulerPerSecond != 2.11 {
		t.Errorf("from the scheduler: %+v, want 200 bound in 95 s (2.11/s), 2 unschedulable", st)
	}
	if st.SchedulingSLI == nil || st.SchedulingSLI.Count != 200 {
		t.Errorf("scheduling SLI = %+v", st.SchedulingSLI)
	}
	if st := SchedulingFrom(PodSeries{}, nil); st != (SchedulingStats{}) {
		t.Errorf("nothing scheduled: %+v", st)
	}
}

func TestSchedulerThatScheduledNothing(t *testing.T) {
	// kube-scheduler's labelled counters appear only once counted: before
	// its first attempt, a scrape has no scheduler_schedule_attempts_total.
	idle := "# HELP scheduler_pending_pods [STABLE] Number of pending pods.\n# TYPE scheduler_pending_pods gauge\n" +
		"scheduler_pending_pods{queue=\"active\"} 0\n"
	busy := idle + "# TYPE scheduler_schedule_attempts_total counter\n" +
		"scheduler_schedule_attempts_total{profile=\"default-scheduler\",result=\"unschedulable\"} 2\n"
	before, err := ParseMetrics(strings.NewReader(idle), t0)
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := before.ScheduleAttempts("scheduled"); !ok || n != 0 {
		t.Errorf("idle scheduler: %v, %v; want 0 known", n, ok)
	}
	after, _ := ParseMetrics(strings.NewReader(busy), t0.Add(10*time.Second))
	st := SchedulingFrom(PodSeries{}, Diff(before, after))
	if st.SchedulerSeconds != 10 || st.SchedulerUnschedulable != 2 || st.SchedulerScheduled != 0 {
		t.Errorf("scheduler stats = %+v, want 10 s, 2 unschedulable", st)
	}
	// An apiserver scrape says nothing about the scheduler.
	api, _ := ParseMetrics(strings.NewReader(apiserverScrape), t0)
	if st := SchedulingFrom(PodSeries{}, Diff(api, api)); st.SchedulerSeconds != 0 {
		t.Errorf("scheduler stats from an apiserver scrape: %+v", st)
	}
}
