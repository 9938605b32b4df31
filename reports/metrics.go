package reports

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// The control-plane metrics a report uses. Everything else in a scrape is
// dropped as it is parsed, so a Metrics stays small.
const (
	metricRequestDuration  = "apiserver_request_duration_seconds"
	metricScheduleAttempts = "scheduler_schedule_attempts_total"
	metricSchedulingSLI    = "scheduler_pod_scheduling_sli_duration_seconds"
)

// Metrics is what a report keeps of the control plane's own /metrics: from
// kube-apiserver, the request latency histogram; from kube-scheduler, its
// attempts by result and its pod scheduling SLI histogram. A scrape holds
// cumulative values since each component started; Diff turns two scrapes
// into what happened between them, which is what a report shows.
//
// The methods of a nil *Metrics return nothing, so that a run whose scrape
// failed still builds its report.
type Metrics struct {
	// Start is the time of the earlier scrape for a Diff, zero for a scrape.
	Start time.Time
	// At is when the scrape (the later one, for a Diff) began.
	At time.Time

	requests map[requestLabels]*bucketHistogram
	// attempts is scheduler_schedule_attempts_total by result, summed over
	// scheduler profiles; nil when no scrape had it.
	attempts map[string]float64
	// schedulingSLI is scheduler_pod_scheduling_sli_duration_seconds summed
	// over its attempts label; nil when no scrape had it.
	schedulingSLI *bucketHistogram
	// scheduler is set when a scrape was of a kube-scheduler (it had
	// scheduler_* metrics). The scheduler's labelled counters only appear
	// once counted, so a scheduler that scheduled nothing yet has no
	// scheduler_schedule_attempts_total: that means 0, not unknown.
	scheduler bool
}

// requestLabels are the labels of apiserver_request_duration_seconds a
// report keeps. The others (dry_run, component) are summed away: they split
// one kind of call into rows that the SLOs do not tell apart.
type requestLabels struct {
	verb, group, version, resource, subresource, scope string
}

// bucketHistogram is a Prometheus classic histogram: cumulative counts of
// observations at or below each finite upper bound, ascending, and the total
// count, which is the +Inf bucket's. Values are in the metric's unit
// (seconds).
type bucketHistogram struct {
	bounds []float64
	counts []float64 // cumulative, one per bound
	count  float64
	sum    float64
}

// Scrape reads the Prometheus text exposition at each URL with client (which
// carries the credentials: the control plane's admin client certificate) and
// keeps the metrics a report uses. The URLs are normally kube-apiserver's and
// kube-scheduler's /metrics; the same metric from several URLs (apiservers
// of an HA control plane) is summed.
//
// A URL that fails does not stop the others: Scrape returns what it read
// together with an error that names each failure, so that a report can carry
// both. The result is nil only if every URL failed.
func Scrape(ctx context.Context, client *http.Client, urls ...string) (*Metrics, error) {
	m := &Metrics{At: time.Now()}
	var errs []error
	ok := false
	for _, u := range urls {
		if err := m.scrapeOne(ctx, client, u); err != nil {
			errs = append(errs, err)
			continue
		}
		ok = true
	}
	if !ok && len(urls) > 0 {
		return nil, errors.Join(errs...)
	}
	return m, errors.Join(errs...)
}

func (m *Metrics) scrapeOne(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("scraping metrics from %s: %w", url, err)
	}
	// Ask for the classic text format; protobuf would also decode, but the
	// text is what a person would look at to check a number.
	req.Header.Set("Accept", string(expfmt.FmtText))
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("scraping metrics from %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("scraping metrics from %s: %s: %s (the client needs credentials allowed to GET /metrics, such as the admin kubeconfig's)",
			url, resp.Status, strings.TrimSpace(string(body)))
	}
	format := expfmt.ResponseFormat(resp.Header)
	if format == expfmt.FmtUnknown {
		format = expfmt.FmtText
	}
	if err := m.decode(expfmt.NewDecoder(resp.Body, format)); err != nil {
		return fmt.Errorf("scraping metrics from %s: %w", url, err)
	}
	return nil
}

// ParseMetrics reads a Prometheus text exposition (as saved from a /metrics
// endpoint) taken at the time at, and keeps what a report uses.
func ParseMetrics(r io.Reader, at time.Time) (*Metrics, error) {
	m := &Metrics{At: at}
	if err := m.decode(expfmt.NewDecoder(r, expfmt.FmtText)); err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	return m, nil
}

func (m *Metrics) decode(d expfmt.Decoder) error {
	for {
		var mf dto.MetricFamily
		err := d.Decode(&mf)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		m.add(&mf)
	}
}

// add keeps the families a report uses, summing series that differ only in
// labels the report drops.
func (m *Metrics) add(mf *dto.MetricFamily) {
	if strings.HasPrefix(mf.GetName(), "scheduler_") {
		m.scheduler = true
	}
	switch mf.GetName() {
	case metricRequestDuration:
		if mf.GetType() != dto.MetricType_HISTOGRAM {
			return
		}
		for _, s := range mf.GetMetric() {
			l := labelsOf(s)
			k := requestLabels{
				verb: l["verb"], group: l["group"], version: l["version"],
				resource: l["resource"], subresource: l["subresource"], scope: l["scope"],
			}
			if m.requests == nil {
				m.requests = make(map[requestLabels]*bucketHistogram)
			}
			m.requests[k] = addHistogram(m.requests[k], histogramOf(s.GetHistogram()))
		}
	case metricScheduleAttempts:
		if mf.GetType() != dto.MetricType_COUNTER {
			return
		}
		for _, s := range mf.GetMetric() {
			if m.attempts == nil {
				m.attempts = make(map[string]float64)
			}
			m.attempts[labelsOf(s)["result"]] += s.GetCounter().GetValue()
		}
	case metricSchedulingSLI:
		if mf.GetType() != dto.MetricType_HISTOGRAM {
			return
		}
		for _, s := range mf.GetMetric() {
			m.schedulingSLI = addHistogram(m.schedulingSLI, histogramOf(s.GetHistogram()))
		}
	}
}

func labelsOf(s *dto.Metric) map[string]string {
	l := make(map[string]string, len(s.GetLabel()))
	for _, p := range s.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// histogramOf converts a decoded histogram. The text format lists a +Inf
// bucket and protobuf does not; either way its count is the sample count.
func histogramOf(h *dto.Histogram) *bucketHistogram {
	out := &bucketHistogram{sum: h.GetSampleSum(), count: float64(h.GetSampleCount())}
	if h.SampleCountFloat != nil {
		out.count = h.GetSampleCountFloat()
	}
	for _, b := range h.GetBucket() {
		ub := b.GetUpperBound()
		if math.IsInf(ub, +1) || math.IsNaN(ub) {
			continue
		}
		c := float64(b.GetCumulativeCount())
		if b.CumulativeCountFloat != nil {
			c = b.GetCumulativeCountFloat()
		}
		out.bounds = append(out.bounds, ub)
		out.counts = append(out.counts, c)
	}
	return out
}

// addHistogram returns a+b, bucket by bucket. a may be nil (nothing yet). If
// their bounds differ (one metric from components of different versions),
// the result keeps the bounds both have: counting an observation in a
// coarser bucket stays true, while inventing finer ones would not.
func addHistogram(a, b *bucketHistogram) *bucketHistogram {
	if a == nil {
		return b
	}
	out := &bucketHistogram{count: a.count + b.count, sum: a.sum + b.sum}
	i, j := 0, 0
	for i < len(a.bounds) && j < len(b.bounds) {
		switch {
		case a.bounds[i] < b.bounds[j]:
			i++
		case a.bounds[i] > b.bounds[j]:
			j++
		default:
			out.bounds = append(out.bounds, a.bounds[i])
			out.counts = append(out.counts, a.counts[i]+b.counts[j])
			i++
			j++
		}
	}
	return out
}

// subHistogram returns after-before, the observations made between two
// scrapes. A count that went down means the component restarted in between
// and its counters began again from zero, as Prometheus's rate() assumes:
// then after alone is what happened since.
func subHistogram(after, before *bucketHistogram) *bucketHistogram {
	if before == nil {
		return after
	}
	if after.count < before.count || !slices.Equal(after.bounds, before.bounds) {
		return after
	}
	out := &bucketHistogram{
		bounds: after.bounds,
		counts: make([]float64, len(after.counts)),
		count:  after.count - before.count,
		sum:    after.sum - before.sum,
	}
	for i := range after.counts {
		out.counts[i] = after.counts[i] - before.counts[i]
		if out.counts[i] < 0 { // a reset that the total count did not show
			return after
		}
	}
	return out
}

// Diff returns what happened between two scrapes of the same components:
// every histogram's buckets and every counter, after minus before. Series
// only in after are taken whole (they began in between); series only in
// before are dropped. A nil before gives after, as from the components'
// start; a nil after gives nil.
func Diff(before, after *Metrics) *Metrics {
	if after == nil {
		return nil
	}
	if before == nil {
		return after
	}
	d := &Metrics{Start: before.At, At: after.At, scheduler: after.scheduler}
	for k, h := range after.requests {
		if d.requests == nil {
			d.requests = make(map[requestLabels]*bucketHistogram)
		}
		d.requests[k] = subHistogram(h, before.requests[k])
	}
	if after.attempts != nil {
		d.attempts = make(map[string]float64, len(after.attempts))
		for r, v := range after.attempts {
			if b := before.attempts[r]; v >= b {
				v -= b
			}
			d.attempts[r] = v
		}
	}
	if after.schedulingSLI != nil {
		d.schedulingSLI = subHistogram(after.schedulingSLI, before.schedulingSLI)
	}
	return d
}

// Seconds is the time between the two scrapes of a Diff, 0 for a scrape.
func (m *Metrics) Seconds() float64 {
	if m == nil || m.Start.IsZero() {
		return 0
	}
	return m.At.Sub(m.Start).Seconds()
}

// BucketLatency is a latency measured by a control-plane component as a
// Prometheus histogram, summarized like the rest of the report: counts and
// quantiles in milliseconds, estimated from the buckets by bucketQuantile
// (the method of PromQL's histogram_quantile).
type BucketLatency struct {
	// Count is the number of observations.
	Count int64 `json:"count"`
	// P50Ms, P90Ms and P99Ms are estimated by linear interpolation inside
	// the bucket that holds the quantile; their precision is the buckets'
	// (apiserver_request_duration_seconds has 23, from 5 ms to 60 s).
	P50Ms float64 `json:"p50Ms"`
	P90Ms float64 `json:"p90Ms"`
	P99Ms float64 `json:"p99Ms"`
	// Buckets are the cumulative counts at each finite upper bound; the
	// +Inf bucket's count is Count. They are kept so that Merge is exact.
	Buckets []Bucket `json:"buckets,omitempty"`
}

// Bucket is one bucket of a Prometheus histogram.
type Bucket struct {
	// LeSeconds is the bucket's inclusive upper bound, the le label.
	LeSeconds float64 `json:"le"`
	// Count is the cumulative count: observations at or below LeSeconds.
	Count int64 `json:"count"`
}

func (h *bucketHistogram) latency() BucketLatency {
	out := BucketLatency{
		Count: int64(math.Round(h.count)),
		P50Ms: secondsToMs(h.quantile(0.50)),
		P90Ms: secondsToMs(h.quantile(0.90)),
		P99Ms: secondsToMs(h.quantile(0.99)),
	}
	for i, b := range h.bounds {
		out.Buckets = append(out.Buckets, Bucket{LeSeconds: b, Count: int64(math.Round(h.counts[i]))})
	}
	return out
}

// histogramFromLatency rebuilds the histogram of a report's BucketLatency.
func histogramFromLatency(l BucketLatency) *bucketHistogram {
	h := &bucketHistogram{count: float64(l.Count)}
	for _, b := range l.Buckets {
		h.bounds = append(h.bounds, b.LeSeconds)
		h.counts = append(h.counts, float64(b.Count))
	}
	return h
}

// secondsToMs converts a quantile to the report's unit. NaN (no
// observations) becomes 0, which JSON can carry; callers check Count.
func secondsToMs(s float64) float64 {
	if math.IsNaN(s) || math.IsInf(s, 0) {
		return 0
	}
	return microsToMs(s * 1e6)
}

// quantile estimates the q-quantile (0 ≤ q ≤ 1) of h as PromQL's
// histogram_quantile does for classic histograms (bucketQuantile in
// prometheus/promql/quantile.go), so that our numbers match a Prometheus
// dashboard's over the same window:
//
//   - the observations are assumed spread evenly (linearly) inside each
//     bucket, and the quantile's rank q×count is located by interpolation
//     between the bucket's lower bound (the previous bucket's upper bound, or
//     0 for the first bucket when its upper bound is positive) and its upper
//     bound;
//   - if the rank falls in the +Inf bucket, the highest finite upper bound is
//     returned, as nothing better is known;
//   - if the first bucket's upper bound is 0 or less and the rank falls in
//     it, that bound is returned;
//   - cumulative counts that decrease (inconsistent data) are raised to
//     their predecessor's, the envelope Prometheus also takes;
//   - no observations, or no finite bucket, give NaN.
func (h *bucketHistogram) quantile(q float64) float64 {
	if h == nil || h.count <= 0 || len(h.bounds) == 0 || math.IsNaN(q) {
		return math.NaN()
	}
	if q < 0 {
		return math.Inf(-1)
	}
	if q > 1 {
		return math.Inf(+1)
	}
	// The buckets with +Inf appended, with a monotonic envelope.
	n := len(h.bounds) + 1
	bound := func(i int) float64 {
		if i == n-1 {
			return math.Inf(+1)
		}
		return h.bounds[i]
	}
	counts := make([]float64, n)
	copy(counts, h.counts)
	counts[n-1] = h.count
	for i := 1; i < n; i++ {
		counts[i] = max(counts[i], counts[i-1])
	}
	observations := counts[n-1]
	rank := q * observations
	// The first bucket whose cumulative count reaches the rank, among the
	// finite ones; n-1 (the +Inf bucket) if none does.
	b := sort.Search(n-1, func(i int) bool { return counts[i] >= rank })
	if b == n-1 {
		return bound(n - 2)
	}
	if b == 0 && bound(0) <= 0 {
		return bound(0)
	}
	start, end, count := 0.0, bound(b), counts[b]
	if b > 0 {
		start = bound(b - 1)
		count -= counts[b-1]
		rank -= counts[b-1]
	}
	if count == 0 {
		// Only reachable with q = 0 on an empty leading bucket; Prometheus
		// divides 0 by 0 here and returns NaN. The bucket's start is the
		// sensible answer and keeps NaN out of the report.
		return start
	}
	return start + (end-start)*(rank/count)
}

// APICallLatency is one row of the server-side API table: the apiserver's
// own measurement (apiserver_request_duration_seconds) of the calls of one
// kind between the two scrapes of a run, whoever made them: the fleet's
// agents, the load driver, the scheduler and the controllers.
type APICallLatency struct {
	// Verb is the apiserver's metric verb, upper case: GET, LIST, POST, PUT,
	// PATCH, APPLY, DELETE, DELETECOLLECTION.
	Verb string `json:"verb"`
	// Group is the API group, empty for the core group.
	Group string `json:"group,omitempty"`
	// Resource and Subresource name what was called; both are empty for a
	// request that is not for a resource (/healthz, discovery).
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
	// Scope is "resource" (one named object, or a create), "namespace" or
	// "cluster" (a collection), as the apiserver labels it; the read-only
	// SLO's threshold depends on it.
	Scope string `json:"scope"`
	BucketLatency
}

// Label is the row's name for people: resource[.group][/subresource].
func (c APICallLatency) Label() string {
	return APIStat{Group: c.Group, Resource: c.Resource, Subresource: c.Subresource, Path: "(non-resource)"}.Label()
}

// APICallLatencies returns the server-side API table, sorted by resource,
// subresource, verb, group and scope. Versions of one resource are summed,
// as the SLOs are per resource. WATCH and CONNECT calls are left out: the
// apiserver records how long such a stream stayed open, which is not a
// response time (the SLOs leave them out for the same reason). Rows with no
// calls are left out too.
func (m *Metrics) APICallLatencies() []APICallLatency {
	if m == nil {
		return nil
	}
	type rowKey struct{ verb, group, resource, subresource, scope string }
	rows := make(map[rowKey]*bucketHistogram)
	for k, h := range m.requests {
		switch k.verb {
		case "WATCH", "WATCHLIST", "CONNECT":
			continue
		}
		if h.count <= 0 {
			continue
		}
		rk := rowKey{k.verb, k.group, k.resource, k.subresource, k.scope}
		rows[rk] = addHistogram(rows[rk], h)
	}
	out := make([]APICallLatency, 0, len(rows))
	for k, h := range rows {
		out = append(out, APICallLatency{
			Verb: k.verb, Group: k.group, Resource: k.resource, Subresource: k.subresource, Scope: k.scope,
			BucketLatency: h.latency(),
		})
	}
	slices.SortFunc(out, compareAPICallLatency)
	return out
}

func compareAPICallLatency(x, y APICallLatency) int {
	if xr, yr := x.Resource == "", y.Resource == ""; xr != yr {
		if xr {
			return 1
		}
		return -1
	}
	return cmp.Or(
		cmp.Compare(x.Resource, y.Resource),
		cmp.Compare(x.Subresource, y.Subresource),
		cmp.Compare(x.Verb, y.Verb),
		cmp.Compare(x.Group, y.Group),
		cmp.Compare(x.Scope, y.Scope),
	)
}

// ScheduleAttempts returns scheduler_schedule_attempts_total for result
// ("scheduled", "unschedulable", "error"), summed over scheduler profiles,
// and whether a kube-scheduler was scraped at all.
func (m *Metrics) ScheduleAttempts(result string) (float64, bool) {
	if m == nil || (!m.scheduler && m.attempts == nil) {
		return 0, false
	}
	return m.attempts[result], true
}

// SchedulingSLI returns scheduler_pod_scheduling_sli_duration_seconds (the
// scheduler's own measure of a pod's time from entering its queue to being
// bound, over all attempts), and whether any scrape had it.
func (m *Metrics) SchedulingSLI() (BucketLatency, bool) {
	if m == nil || m.schedulingSLI == nil {
		return BucketLatency{}, false
	}
	return m.schedulingSLI.latency(), true
}
