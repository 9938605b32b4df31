package reports

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestLeaseLateness(t *testing.T) {
	// Each PUT takes 2 ms on the server.
	const took = 2 * time.Millisecond
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now = now.Add(took)
		if r.URL.Path == leasePathPrefix+"failing" {
			http.Error(w, "conflict", http.StatusConflict)
		}
	}))
	defer server.Close()
	l := NewLeaseLateness(10 * time.Second)
	l.now = func() time.Time { return now }
	rt := l.Wrap(http.DefaultTransport)
	// put's PUT completes after since the previous one did.
	put := func(path string, after time.Duration) {
		now = now.Add(after - took)
		req, _ := http.NewRequest(http.MethodPut, server.URL+path, nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	put(leasePathPrefix+"n1", 0)              // first renewal: no gap yet
	put(leasePathPrefix+"n1", 10*time.Second) // on time
	put(leasePathPrefix+"n1", 10*time.Second+250*time.Millisecond)
	put(leasePathPrefix+"n1", 13*time.Second) // 3 s late
	put(leasePathPrefix+"n2", 0)
	put(leasePathPrefix+"n2", 9*time.Second)    // early counts as 0
	put(leasePathPrefix+"failing", 0)           // not a renewal
	put("/api/v1/nodes/n1/status", time.Second) // not a lease

	st := Heartbeat(l, []APIStat{
		{Verb: "update", Resource: "leases", Count: 6, BytesSent: 600, BytesReceived: 1200},
		{Verb: "patch", Resource: "nodes", Subresource: "status", Count: 2},
	}, 4, 60)
	if st.Nodes != 2 || st.Renewals != 4 || st.OpenWatches != 4 {
		t.Errorf("nodes %d renewals %d watches %d, want 2, 4, 4", st.Nodes, st.Renewals, st.OpenWatches)
	}
	if st.Lateness.Count != 4 || st.Lateness.MaxMs < 2990 || st.Lateness.MaxMs > 3010 || st.Lateness.P50Ms != 0 {
		t.Errorf("lateness %+v, want 4 renewals, max 3 s, median 0", st.Lateness)
	}
	// Sent 2 ms before each response: the send lateness is 2 ms less.
	if sl := st.SendLateness; sl.Count != 4 || sl.MaxMs < 2990 || sl.MaxMs > 3000 || sl.P50Ms != 0 {
		t.Errorf("send lateness %+v, want 4 renewals, max 2.998 s, median 0", sl)
	}
	if w := st.LeaseWriteLatency; w.Count != 6 || w.P50Ms < 1.9 || w.MaxMs > 2.1 {
		t.Errorf("write latency %+v, want 6 successful PUTs of 2 ms", w)
	}
	if st.LeaseUpdatesPerSecond != 0.1 || st.BytesReceivedPerSecond != 20 {
		t.Errorf("rates: %+v", st)
	}

	// The Prometheus histograms hold the same observations, in seconds.
	wantMetrics := `
# HELP fleetlet_lease_renewal_lateness_seconds How long after the renew interval each node's lease renewal came, measured at the agents' transport.
# TYPE fleetlet_lease_renewal_lateness_seconds histogram
fleetlet_lease_renewal_lateness_seconds_bucket{le="0.005"} 2
fleetlet_lease_renewal_lateness_seconds_bucket{le="0.01"} 2
fleetlet_lease_renewal_lateness_seconds_bucket{le="0.02"} 2
fleetlet_lease_renewal_lateness_seconds_bucket{le="0.04"} 2
fleetlet_lease_renewal_lateness_seconds_bucket{le="0.08"} 2
fleetlet_lease_renewal_lateness_seconds_bucket{le="0.16"} 2
fleetlet_lease_renewal_lateness_seconds_bucket{le="0.32"} 3
fleetlet_lease_renewal_lateness_seconds_bucket{le="0.64"} 3
fleetlet_lease_renewal_lateness_seconds_bucket{le="1.28"} 3
fleetlet_lease_renewal_lateness_seconds_bucket{le="2.56"} 3
fleetlet_lease_renewal_lateness_seconds_bucket{le="5.12"} 4
fleetlet_lease_renewal_lateness_seconds_bucket{le="10.24"} 4
fleetlet_lease_renewal_lateness_seconds_bucket{le="20.48"} 4
fleetlet_lease_renewal_lateness_seconds_bucket{le="40.96"} 4
fleetlet_lease_renewal_lateness_seconds_bucket{le="+Inf"} 4
fleetlet_lease_renewal_lateness_seconds_sum 3.25
fleetlet_lease_renewal_lateness_seconds_count 4
`
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(l.Collectors()...)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(wantMetrics), "fleetlet_lease_renewal_lateness_seconds"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "fleetlet_lease_write_duration_seconds"); n != 1 {
		t.Errorf("%d lease write duration series, want 1", n)
	}

	// A window that starts after registration: what came before is
	// forgotten, and the next renewal is measured from the last one, n1's
	// 10 s before (the puts since then took 10 s).
	l.Restart()
	put(leasePathPrefix+"n1", 500*time.Millisecond)
	st = Heartbeat(l, nil, 0, 0)
	if st.Renewals != 1 || st.Lateness.Count != 1 || st.Lateness.MaxMs < 499 || st.Lateness.MaxMs > 501 {
		t.Errorf("after Restart: %d renewals, lateness %+v; want one, 500 ms late", st.Renewals, st.Lateness)
	}
}

// Two shards' heartbeats merge into what one process watching both would
// have measured, lateness and write latency alike; a report from before
// write latencies were measured merges as nothing.
func TestMergeHeartbeats(t *testing.T) {
	shards := []*LeaseLateness{NewLeaseLateness(10 * time.Second), NewLeaseLateness(10 * time.Second)}
	whole := NewLeaseLateness(10 * time.Second)
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	for i := range 200 {
		lease := fmt.Sprintf("node-%d", i%20)
		sent := at.Add(time.Duration(i) * time.Second)
		done := sent.Add(time.Duration(i*i%997) * time.Millisecond)
		shards[i%2].renewed(lease, sent, done)
		whole.renewed(lease, sent, done)
	}
	heartbeat := func(l *LeaseLateness) *HeartbeatStats { h := Heartbeat(l, nil, 0, 0); return &h }
	old := &Report{Heartbeat: &HeartbeatStats{Nodes: 1, Lateness: Phase{Name: "lease_renewal_lateness", Hist: NewHistogram()}.Summary()}}
	m, err := mergeHeartbeats([]*Report{{Heartbeat: heartbeat(shards[0])}, {Heartbeat: heartbeat(shards[1])}, old})
	if err != nil {
		t.Fatal(err)
	}
	want := heartbeat(whole)
	for _, pair := range [][2]PhaseSummary{{m.Lateness, want.Lateness}, {m.LeaseWriteLatency, want.LeaseWriteLatency}} {
		got, w := pair[0], pair[1]
		if got.Count != w.Count || got.P99Ms != w.P99Ms || got.MaxMs != w.MaxMs || got.Name != w.Name {
			t.Errorf("merged %+v, want %+v", got, w)
		}
	}
	if m.LeaseWriteLatency.Count != 200 {
		t.Errorf("merged write latencies: %d, want 200", m.LeaseWriteLatency.Count)
	}
}

// TestLeaseLatenessForget: a node powered off for 6 minutes and booted
// again is forgotten at the boot: its first renewal after it is not 6
// minutes late.
func TestLeaseLatenessForget(t *testing.T) {
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	server := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer server.Close()
	l := NewLeaseLateness(10 * time.Second)
	l.now = func() time.Time { return now }
	rt := l.Wrap(http.DefaultTransport)
	put := func(after time.Duration) {
		now = now.Add(after)
		req, _ := http.NewRequest(http.MethodPut, server.URL+leasePathPrefix+"n1", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	put(0)
	put(10 * time.Second)
	l.Forget("n1")
	put(6 * time.Minute)
	put(10 * time.Second)
	if st := Heartbeat(l, nil, 0, 60); st.Lateness.Count != 2 || st.Lateness.MaxMs > 1 {
		t.Errorf("lateness %+v, want 2 renewals on time: the power cut forgotten", st.Lateness)
	}
}
