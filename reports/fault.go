package reports

import (
	"slices"
	"time"
)

// Fault is one fault phase of the profile: what it did to which nodes, and
// what the control plane did about it, as the run's watches of Nodes and
// pods saw it (nanosecond times of the watch events, not the objects' 1 s
// timestamps). Filled in by the run.
type Fault struct {
	// Phase is the profile phase's name.
	Phase string `json:"phase"`
	// Kind is what was injected: partition, nodeDown, runtimeDown,
	// runtimeSlow, registryErrors, cniMissing or syncLoopStall; shardDown
	// when a shard process of a sharded fleet failed.
	Kind string `json:"kind"`
	// Selector says in words which nodes it aimed at: "pool zone-a", "5
	// nodes of pool default", "label topology.kubernetes.io/zone=a", "10%
	// of every pool".
	Selector string `json:"selector"`
	// Nodes is how many nodes it hit.
	Nodes int       `json:"nodes"`
	Start time.Time `json:"start"`
	// End (optional) is zero while the fault goes on when the report is
	// made.
	End     time.Time `json:"end,omitzero"`
	Seconds float64   `json:"seconds"`

	// The nodes' side: each a spread over the hit nodes of the time from
	// the fault's start (Count is how many nodes got there).

	// NotReady: their Ready condition no longer True (Unknown from the node
	// lifecycle controller, or False from the agent).
	NotReady Spread `json:"notReady"`
	// UnreachableTaint: the node.kubernetes.io/unreachable NoExecute taint
	// added.
	UnreachableTaint Spread `json:"unreachableTaint"`
	// NotReadyTaint: the node.kubernetes.io/not-ready NoExecute taint added.
	NotReadyTaint Spread `json:"notReadyTaint"`
	// TaintRatePerSecond is the rate at which the node lifecycle controller
	// added NoExecute taints to the hit nodes: nodes per second between the
	// first and the last (0 with fewer than two).
	TaintRatePerSecond float64 `json:"taintRatePerSecond"`
	// NodeEvictionRate and SecondaryNodeEvictionRate (optional) are the
	// rates the controller was configured with, nodes per second (its
	// --node-eviction-rate and --secondary-node-eviction-rate); both 0 when
	// unknown (a control plane not ours). A secondary rate of 0 beside a
	// known NodeEvictionRate is configured as 0.
	NodeEvictionRate          float64 `json:"nodeEvictionRate,omitempty"`
	SecondaryNodeEvictionRate float64 `json:"secondaryNodeEvictionRate,omitempty"`

	// PodsEvicted are the hit nodes' pods the taint eviction controller
	// deleted (their DisruptionTarget condition, reason
	// DeletionByTaintManager).
	PodsEvicted int `json:"podsEvicted"`
	// PodsRescheduled are the pods that replaced the evicted ones: made
	// by their controllers after the first eviction, on whatever node the
	// scheduler chose (one of the fault's own, once it no longer has the
	// taints, is possible).
	PodsRescheduled int `json:"podsRescheduled"`
	// RescheduledStartup is the rescheduled pods' startup latency, from the
	// watch seeing them created to seeing them Running (Count is pods).
	RescheduledStartup Spread `json:"rescheduledStartup"`

	// ReadyAgain is the spread, over the hit nodes that went NotReady, of
	// the time from the fault's end to their Ready condition True again;
	// NotReadyAtReport counts those still not Ready when the report was
	// made.
	ReadyAgain       Spread `json:"readyAgain"`
	NotReadyAtReport int    `json:"notReadyAtReport"`
	// ContainerRestarts is the sum over the hit nodes' pods of their
	// containers' restartCount increase from the fault's start to the
	// report: a partitioned node's agent must not restart anything.
	ContainerRestarts int `json:"containerRestarts"`
	// PodsLost are the run's own pods (made by the driver, not by a
	// controller) that were removed without the driver deleting them: a
	// bare pod evicted from a dead node is gone for good.
	PodsLost int `json:"podsLost"`
	// PodsDuplicated are the pods (namespace/name) that ran on two nodes at
	// once: a StatefulSet pod recreated elsewhere while the old copy still
	// ran on a partitioned node.
	PodsDuplicated int `json:"podsDuplicated"`
	// Notes (optional) say in words what the numbers alone do not (for
	// example "the zone was fully disrupted: the controller tainted at the
	// normal rate").
	Notes []string `json:"notes,omitempty"`
}

// Spread is how a time spreads over a fault's nodes or pods: Count of them
// got there, with the median, 99th percentile and maximum, in seconds with
// microsecond resolution. All 0 when Count is.
type Spread struct {
	Count      int     `json:"count"`
	P50Seconds float64 `json:"p50Seconds"`
	P99Seconds float64 `json:"p99Seconds"`
	MaxSeconds float64 `json:"maxSeconds"`
}

// SpreadOf builds a Spread from durations, one per node or pod that got
// there. Its percentiles are exact, by nearest rank (the smallest value
// with at least that share of the values at or below it), as HdrHistogram
// gives them for the rest of the report, without its 0.1% error: a fault
// hits few nodes, so every value is kept. A negative duration (an event the
// watch saw before the time it is measured from) counts as 0. ds is not
// changed.
func SpreadOf(ds []time.Duration) Spread {
	if len(ds) == 0 {
		return Spread{}
	}
	sorted := make([]time.Duration, len(ds))
	for i, d := range ds {
		sorted[i] = max(d, 0)
	}
	slices.Sort(sorted)
	seconds := func(d time.Duration) float64 { return roundTo(d.Seconds(), 6) }
	return Spread{
		Count:      len(sorted),
		P50Seconds: seconds(nearestRank(sorted, 50)),
		P99Seconds: seconds(nearestRank(sorted, 99)),
		MaxSeconds: seconds(sorted[len(sorted)-1]),
	}
}

// nearestRank is the pct-th percentile of sorted values (not empty): the
// value of rank ⌈pct/100 × n⌉, counted from 1.
func nearestRank(sorted []time.Duration, pct int) time.Duration {
	n := len(sorted)
	rank := (pct*n + 99) / 100
	return sorted[min(max(rank, 1), n)-1]
}
