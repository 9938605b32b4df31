package reports

import (
	"net/http"
	"strings"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/prometheus/client_golang/prometheus"
)

// leaseWriteLatency names the lease PUTs' latency distribution.
const leaseWriteLatency = "lease_write_latency"

// leasePathPrefix is where every node's Lease lives.
const leasePathPrefix = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"

// LeaseLateness measures, at the agents' client transport, how late each
// node's lease renewal came: the gap since that node's previous successful
// renewal, less the renew interval. A renewal on time counts as 0. This is
// what keeps nodes Ready: a node whose renewals fall behind by the lease
// duration (40 s) is marked NotReady by the node lifecycle controller.
//
// Lateness has two parts: the lease controller's own jitter (it waits
// 0-4 % longer than the interval, up to 400 ms, by design) and how long
// the PUT took. The second is measured apart, as the write latency, so a
// reader can tell the API server's share from the agents'.
type LeaseLateness struct {
	interval time.Duration
	now      func() time.Time

	mu     sync.Mutex
	last   map[string]time.Time
	hist   *hdrhistogram.Histogram
	writes *hdrhistogram.Histogram
	// sends is how late each renewal was sent: lateness without its own
	// PUT's latency, the fleet's part alone.
	sends    *hdrhistogram.Histogram
	renewals int64
	// latest is the largest lateness since the last TakeLatest.
	latest time.Duration

	// The same two distributions as Prometheus histograms, never reset:
	// a report has the window's figures, a scrape shows when in a long run
	// the tail grew.
	latenessMetric, writeMetric prometheus.Histogram
}

// NewLeaseLateness tracks renewals expected every interval (the lease
// controller's renew interval: 10 s by default).
func NewLeaseLateness(interval time.Duration) *LeaseLateness {
	// 5 ms to 41 s: from a fast PUT to a lease already expired.
	buckets := prometheus.ExponentialBuckets(0.005, 2, 14)
	return &LeaseLateness{
		interval: interval, now: time.Now, last: map[string]time.Time{}, hist: NewHistogram(), writes: NewHistogram(), sends: NewHistogram(),
		latenessMetric: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fleetlet_lease_renewal_lateness_seconds",
			Help:    "How long after the renew interval each node's lease renewal came, measured at the agents' transport.",
			Buckets: buckets,
		}),
		writeMetric: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fleetlet_lease_write_duration_seconds",
			Help:    "How long each successful lease PUT took, from the agent's client to its response.",
			Buckets: buckets,
		}),
	}
}

// Collectors are the Prometheus histograms of the lateness and the lease
// PUTs' latency, for the fleet's debug endpoint.
func (l *LeaseLateness) Collectors() []prometheus.Collector {
	return []prometheus.Collector{l.latenessMetric, l.writeMetric}
}

// Wrap observes lease updates going through rt; usable as a
// rest.Config WrapTransport, chained with APICounter.Wrap.
func (l *LeaseLateness) Wrap(rt http.RoundTripper) http.RoundTripper {
	return &wrappedTransport{next: rt, roundTrip: func(req *http.Request) (*http.Response, error) {
		name, isLease := strings.CutPrefix(req.URL.Path, leasePathPrefix)
		isLease = isLease && req.Method == http.MethodPut && !strings.Contains(name, "/")
		var sent time.Time
		if isLease {
			sent = l.now()
		}
		resp, err := rt.RoundTrip(req)
		if isLease && err == nil && resp.StatusCode/100 == 2 {
			l.renewed(name, sent, l.now())
		}
		return resp, err
	}}
}

// wrappedTransport is a RoundTrip function around next, which it names to
// client-go (k8s.io/apimachinery/pkg/util/net): without it, closing a
// client's idle connections, as a kubelet does after its heartbeat failed
// twice, cannot reach the transport that holds them.
type wrappedTransport struct {
	next      http.RoundTripper
	roundTrip func(*http.Request) (*http.Response, error)
}

func (t *wrappedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.roundTrip(req)
}

func (t *wrappedTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

func (l *LeaseLateness) renewed(lease string, sent, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	took := at.Sub(sent)
	recordMicros(l.writes, took)
	l.writeMetric.Observe(took.Seconds())
	if prev, ok := l.last[lease]; ok {
		late := max(at.Sub(prev)-l.interval, 0)
		recordMicros(l.hist, late)
		recordMicros(l.sends, max(sent.Sub(prev)-l.interval, 0))
		l.latest = max(l.latest, late)
		l.latenessMetric.Observe(late.Seconds())
		l.renewals++
	}
	l.last[lease] = at
}

// Forget drops the last renewal of lease, so that its next renewal starts
// afresh: a node that was powered off did not renew late, it was off.
func (l *LeaseLateness) Forget(lease string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.last, lease)
}

// Restart forgets the lateness recorded so far, keeping each node's last
// renewal so that the next one is measured from it: a window that starts
// once a fleet has registered then excludes the registration storm.
func (l *LeaseLateness) Restart() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hist.Reset()
	l.writes.Reset()
	l.sends.Reset()
	l.renewals = 0
}

// TakeLatest returns the largest lateness of any renewal since the previous
// call (or the start), and starts a new interval: a soak's per-interval
// worst, which Restart's window would lose.
func (l *LeaseLateness) TakeLatest() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	latest := l.latest
	l.latest = 0
	return latest
}

// HeartbeatStats is the load a fleet's heartbeats put on the control plane,
// from the agents' side: lease renewals and node status patches per second,
// and how late renewals came.
type HeartbeatStats struct {
	// Nodes that renewed their lease at least once.
	Nodes int `json:"nodes"`
	// Renewals counted for lateness: every renewal after a node's first.
	Renewals int64 `json:"renewals"`
	// LeaseUpdatesPerSecond and NodeStatusPatchesPerSecond are over the
	// run's wall time, from the client-side API counts.
	LeaseUpdatesPerSecond      float64 `json:"leaseUpdatesPerSecond"`
	NodeStatusPatchesPerSecond float64 `json:"nodeStatusPatchesPerSecond"`
	// OpenWatches held by the agents when the report was made.
	OpenWatches int `json:"openWatches"`
	// BytesSentPerSecond and BytesReceivedPerSecond are all the agents'
	// traffic with the API server, heartbeats and pod work together.
	BytesSentPerSecond     float64 `json:"bytesSentPerSecond"`
	BytesReceivedPerSecond float64 `json:"bytesReceivedPerSecond"`
	// Lateness is the renewal lateness: how long after the renew interval
	// each renewal came.
	Lateness PhaseSummary `json:"lateness"`
	// LeaseWriteLatency is how long each successful lease PUT took, from
	// the request leaving the agent's client to its response: the API
	// server's part of the lateness.
	LeaseWriteLatency PhaseSummary `json:"leaseWriteLatency"`
	// SendLateness (optional) is how late each renewal left the agent:
	// from the previous renewal's response plus the interval to this
	// renewal's request, the lease controller's jitter and the fleet's own
	// delays (its scheduling, its client's limiter) without the API
	// server's.
	SendLateness PhaseSummary `json:"sendLateness,omitzero"`
}

// Heartbeat summarises the fleet's heartbeats over wallSeconds.
func Heartbeat(l *LeaseLateness, api []APIStat, openWatches int, wallSeconds float64) HeartbeatStats {
	l.mu.Lock()
	hist := hdrhistogram.Import(l.hist.Export())
	writes := hdrhistogram.Import(l.writes.Export())
	sends := hdrhistogram.Import(l.sends.Export())
	st := HeartbeatStats{Nodes: len(l.last), Renewals: l.renewals, OpenWatches: openWatches}
	l.mu.Unlock()
	st.Lateness = Phase{Name: "lease_renewal_lateness", Count: int(hist.TotalCount()), Hist: hist}.Summary()
	st.LeaseWriteLatency = Phase{Name: leaseWriteLatency, Count: int(writes.TotalCount()), Hist: writes}.Summary()
	st.SendLateness = Phase{Name: "lease_renewal_send_lateness", Count: int(sends.TotalCount()), Hist: sends}.Summary()
	if wallSeconds <= 0 {
		return st
	}
	var sent, received int64
	for _, a := range api {
		sent += a.BytesSent
		received += a.BytesReceived
		switch {
		case a.Verb == "update" && a.Resource == "leases" && a.Subresource == "":
			st.LeaseUpdatesPerSecond += float64(a.Count) / wallSeconds
		case a.Verb == "patch" && a.Resource == "nodes" && a.Subresource == "status":
			st.NodeStatusPatchesPerSecond += float64(a.Count) / wallSeconds
		}
	}
	st.BytesSentPerSecond = float64(sent) / wallSeconds
	st.BytesReceivedPerSecond = float64(received) / wallSeconds
	return st
}
