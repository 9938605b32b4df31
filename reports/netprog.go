package reports

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// SLINetworkProgramming is the in-cluster network programming latency SLI of
// sig-scalability's slos/network_programming_latency.md, as kube-proxy's
// kubeproxy_network_programming_duration_seconds measures it: from an
// EndpointSlice's endpoints.kubernetes.io/last-change-trigger-time (the
// change to a pod or Service that the slice reflects) to the moment a node's
// kube-proxy has applied it. Every node's observations count: a change that
// reaches 2,000 nodes is 2,000 observations, as it is on a real cluster.
const SLINetworkProgramming = "network_programming"

// perNodeSigFigs is the precision of each node's own histogram: one
// significant digit keeps it to a few KiB, for thousands of nodes; the
// fleet-wide histogram keeps the report's three.
const perNodeSigFigs = 1

// NetworkProgramming collects the agents' kube-proxies' network programming
// latencies: one histogram for the fleet, one coarse one per node, so that
// the report can say whether the tail is every node's or a few nodes'. It is
// safe for concurrent use.
type NetworkProgramming struct {
	mu        sync.Mutex
	fleet     *hdrhistogram.Histogram
	overflows int
	nodes     map[string]*hdrhistogram.Histogram
}

// NewNetworkProgramming returns an empty collector.
func NewNetworkProgramming() *NetworkProgramming {
	return &NetworkProgramming{fleet: NewHistogram(), nodes: map[string]*hdrhistogram.Histogram{}}
}

// ObserveNetworkProgramming records one node's latency for one change.
func (n *NetworkProgramming) ObserveNetworkProgramming(node string, d time.Duration) {
	if d < 0 {
		// A trigger time ahead of this machine's clock: the controller's
		// clock and ours disagree; count it as immediate, as kube-proxy's
		// histogram would put it in its lowest bucket.
		d = 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if recordMicros(n.fleet, d) {
		n.overflows++
	}
	h := n.nodes[node]
	if h == nil {
		h = hdrhistogram.New(histLowestMicros, histHighestMicros, perNodeSigFigs)
		n.nodes[node] = h
	}
	recordMicros(h, d)
}

// Summary is the SLI as the report carries it, under SLINetworkProgramming;
// Count is 0 when no change reached any kube-proxy.
func (n *NetworkProgramming) Summary() PhaseSummary {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := statsOf(n.fleet)
	return PhaseSummary{
		Name: SLINetworkProgramming, Count: int(n.fleet.TotalCount()),
		MinMs: st.min, MeanMs: st.mean, P50Ms: st.p50, P90Ms: st.p90, P99Ms: st.p99, MaxMs: st.max,
		Overflows: n.overflows, Histogram: encodeHistogram(n.fleet),
	}
}

// NetworkProgrammingNodes summarizes the nodes' own p99s: the median node's
// and the worst node's, and how many nodes observed any change.
type NetworkProgrammingNodes struct {
	Nodes       int     `json:"nodes"`
	P99MedianMs float64 `json:"p99MedianMs"`
	P99MaxMs    float64 `json:"p99MaxMs"`
	// WorstNode is the node with the highest p99.
	WorstNode string `json:"worstNode,omitempty"`
}

// PerNode summarizes the per-node histograms; their p99s carry one
// significant digit.
func (n *NetworkProgramming) PerNode() NetworkProgrammingNodes {
	n.mu.Lock()
	defer n.mu.Unlock()
	type nodeP99 struct {
		name string
		p99  float64
	}
	var all []nodeP99
	for name, h := range n.nodes {
		all = append(all, nodeP99{name, microsToMs(float64(h.ValueAtPercentile(99)))})
	}
	if len(all) == 0 {
		return NetworkProgrammingNodes{}
	}
	slices.SortFunc(all, func(a, b nodeP99) int { return cmp.Or(cmp.Compare(a.p99, b.p99), strings.Compare(a.name, b.name)) })
	worst := all[len(all)-1]
	return NetworkProgrammingNodes{Nodes: len(all), P99MedianMs: all[len(all)/2].p99, P99MaxMs: worst.p99, WorstNode: worst.name}
}
