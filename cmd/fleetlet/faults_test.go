package main

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/loadprofiles"
)

// TestFaultCost builds, from what a watch saw of three partitioned nodes
// and their pods, what the report says the control plane did.
func TestFaultCost(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	w := &faultWatch{node: map[string]*nodeSeen{}, pods: map[types.UID]*podSeen{}}
	down := func(name string, notReady, tainted, ready float64) {
		s := &nodeSeen{ready: []readyState{{ready: true, at: at(-100)}, {ready: false, at: at(notReady)}, {ready: true, at: at(ready)}}}
		if tainted > 0 {
			s.unreachable = []time.Time{at(tainted)}
		}
		w.node[name] = s
	}
	down("n1", 40, 45, 75)
	down("n2", 42, 55, 78)
	down("n3", 44, 0, 80) // never tainted: the partition ended first
	w.node["n4"] = &nodeSeen{ready: []readyState{{ready: true, at: at(-100)}}}

	rs := types.UID("rs-1")
	w.pods["evicted-1"] = &podSeen{node: "n1", owner: rs, ownerKind: "ReplicaSet", firstSeen: at(-50), running: at(-49), evictedAt: at(50), disrupted: true}
	w.pods["evicted-2"] = &podSeen{node: "n2", owner: rs, ownerKind: "ReplicaSet", firstSeen: at(-50), running: at(-49), evictedAt: at(60), disrupted: true}
	w.pods["bare-lost"] = &podSeen{node: "n1", firstSeen: at(-50), running: at(-49), evictedAt: at(50), disrupted: true, goneAt: at(52)}
	w.pods["bare-kept"] = &podSeen{node: "n3", firstSeen: at(-50), running: at(-49), restarts: 2}
	w.pods["new-1"] = &podSeen{node: "n4", owner: rs, firstSeen: at(50.5), running: at(51)}
	w.pods["new-2"] = &podSeen{node: "n4", owner: rs, firstSeen: at(60.5), running: at(62.5)}
	// A replacement the scheduler put on a node of the fault counts too.
	w.pods["new-3"] = &podSeen{node: "n3", owner: rs, firstSeen: at(65), running: at(66)}
	w.pods["other"] = &podSeen{node: "n4", owner: "rs-2", firstSeen: at(61), running: at(62)}

	rec := &injectedFault{
		fault: loadprofiles.Fault{Phase: "cut", Spec: &loadprofiles.FaultPhase{Kind: loadprofiles.FaultPartition}, Selector: "3 nodes of pool p", Nodes: []string{"n1", "n2", "n3"}},
		start: t0, end: at(70),
		// bare-kept had restarted once before the partition.
		restartsAtStart: map[types.UID]int32{"evicted-1": 0, "evicted-2": 0, "bare-lost": 0, "bare-kept": 1},
	}
	got := w.cost(rec, at(120))
	if got.Nodes != 3 || got.Seconds != 70 {
		t.Errorf("nodes %d, seconds %v; want 3 and 70", got.Nodes, got.Seconds)
	}
	if got.NotReady.Count != 3 || got.NotReady.P50Seconds != 42 || got.NotReady.MaxSeconds != 44 {
		t.Errorf("NotReady %+v, want 3 nodes, p50 42 s, max 44 s", got.NotReady)
	}
	if got.UnreachableTaint.Count != 2 || got.UnreachableTaint.MaxSeconds != 55 {
		t.Errorf("unreachable taint %+v, want 2 nodes, max 55 s", got.UnreachableTaint)
	}
	if got.TaintRatePerSecond != 0.1 {
		t.Errorf("taint rate %v/s, want 0.1 (two taints 10 s apart)", got.TaintRatePerSecond)
	}
	if got.PodsEvicted != 3 || got.PodsLost != 1 {
		t.Errorf("%d evicted, %d lost; want 3 evicted, the bare one lost", got.PodsEvicted, got.PodsLost)
	}
	if got.PodsRescheduled != 3 || got.RescheduledStartup.Count != 3 || got.RescheduledStartup.MaxSeconds != 2 {
		t.Errorf("%d rescheduled, startup %+v; want the ReplicaSet's 3 new pods, the slowest 2 s", got.PodsRescheduled, got.RescheduledStartup)
	}
	if got.ContainerRestarts != 1 {
		t.Errorf("%d restarts, want 1 (counted from the fault's start)", got.ContainerRestarts)
	}
	if got.ReadyAgain.Count != 3 || got.ReadyAgain.MaxSeconds != 10 || got.NotReadyAtReport != 0 {
		t.Errorf("Ready again %+v, %d not Ready; want 3 nodes, the last 10 s after the end", got.ReadyAgain, got.NotReadyAtReport)
	}
}

// TestFaultCostOfAStall: a stall makes no node NotReady; the pods bound to
// it while it lasted and run only after are named in a note.
func TestFaultCostOfAStall(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	w := &faultWatch{node: map[string]*nodeSeen{"s": {ready: []readyState{{ready: true, at: t0.Add(-time.Minute)}}}}, pods: map[types.UID]*podSeen{}}
	for i, uid := range []types.UID{"a", "b"} {
		w.pods[uid] = &podSeen{node: "s", phase: corev1.PodRunning, firstSeen: t0.Add(time.Duration(i+1) * time.Second), running: t0.Add(25 * time.Second)}
	}
	// Deleted after the stall, as a run's last phases delete pods.
	w.pods["b"].goneAt = t0.Add(40 * time.Second)
	w.pods["c"] = &podSeen{node: "s", firstSeen: t0.Add(-time.Minute), running: t0.Add(-50 * time.Second)}
	rec := &injectedFault{
		fault: loadprofiles.Fault{Phase: "stall", Spec: &loadprofiles.FaultPhase{Kind: loadprofiles.FaultSyncLoopStall}, Nodes: []string{"s"}},
		start: t0, end: t0.Add(20 * time.Second),
	}
	got := w.cost(rec, t0.Add(time.Minute))
	if got.NotReady.Count != 0 || got.PodsEvicted != 0 {
		t.Errorf("stall: %+v, want no NotReady node and no eviction", got)
	}
	if len(got.Notes) != 1 || got.Notes[0] != "2 pods bound to these nodes while the fault lasted did not run until it ended" {
		t.Errorf("notes %q", got.Notes)
	}
}
