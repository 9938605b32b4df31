package reports

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNetworkProgramming(t *testing.T) {
	n := NewNetworkProgramming()
	if s := n.Summary(); s.Count != 0 || s.Name != SLINetworkProgramming {
		t.Fatalf("empty collector: %+v", s)
	}
	if got := n.PerNode(); got.Nodes != 0 {
		t.Fatalf("empty collector per node: %+v", got)
	}
	// Ten nodes apply every change within 1 s; node-9 also applies a
	// change 40 s late.
	for i := range 10 {
		for range 100 {
			n.ObserveNetworkProgramming(fmt.Sprint("node-", i), 500*time.Millisecond)
		}
	}
	n.ObserveNetworkProgramming("node-9", 40*time.Second)
	n.ObserveNetworkProgramming("node-3", -time.Second) // a trigger time ahead of our clock
	s := n.Summary()
	if s.Count != 1002 {
		t.Errorf("count %d, want 1002", s.Count)
	}
	if s.P50Ms < 499 || s.P50Ms > 501 || s.MaxMs < 39_900 || s.MinMs != 0 {
		t.Errorf("summary %+v: want p50 500 ms, max 40 s, min 0", s)
	}
	if h, err := DecodeHistogram(s.Histogram); err != nil || h.TotalCount() != 1002 {
		t.Errorf("histogram decodes to %v, %v", h, err)
	}
	per := n.PerNode()
	if per.Nodes != 10 || per.WorstNode != "node-9" {
		t.Errorf("per node %+v: want 10 nodes, worst node-9", per)
	}
	if per.P99MedianMs < 450 || per.P99MedianMs > 550 {
		t.Errorf("median node's p99 %v ms, want about 500 (one significant digit)", per.P99MedianMs)
	}

	r := &Report{SLIs: []PhaseSummary{s}}
	var got []SLOResult
	for _, res := range CheckSLOs(r, SLOThresholds{}) {
		if res.Name == SLONetworkProgrammingLatency {
			got = append(got, res)
		}
	}
	if len(got) != 1 || !got[0].Pass || got[0].ThresholdMs != 30_000 {
		t.Fatalf("network programming SLO at the default threshold: %+v", got)
	}
	for _, res := range CheckSLOs(r, SLOThresholds{NetworkProgrammingP99: metav1.Duration{Duration: 100 * time.Millisecond}}) {
		if res.Name == SLONetworkProgrammingLatency && res.Pass {
			t.Errorf("p99 %v ms passed a 100 ms limit", res.ObservedMs)
		}
	}
	// A run without the SLI has no verdict for it, rather than a skip in
	// every pods-only report.
	for _, res := range CheckSLOs(&Report{}, SLOThresholds{}) {
		if res.Name == SLONetworkProgrammingLatency {
			t.Errorf("a report without the SLI has a verdict: %+v", res)
		}
	}
}
