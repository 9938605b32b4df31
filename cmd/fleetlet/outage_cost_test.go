package main

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/reports"
)

func TestOutageCost(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	r := &nodeReadiness{nodes: map[string]bool{"a": true, "b": true, "c": true, "d": true}, stop: func() {}, seen: map[string][]readyState{}}
	node := func(name string, ready corev1.ConditionStatus, at time.Time) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(at)},
			}},
		}
	}
	// Registered Ready long before the outage (10.5 s to 70 s).
	for _, n := range []string{"a", "b", "c", "d"} {
		r.observe(node(n, corev1.ConditionTrue, at(-600)))
	}
	// a: marked Unknown as the controller comes back, Ready again at 95 s.
	r.observe(node("a", corev1.ConditionUnknown, at(72)))
	r.observe(node("a", corev1.ConditionUnknown, at(72))) // the same, seen again
	r.observe(node("a", corev1.ConditionTrue, at(95)))
	// b: never marked. c: marked, and Ready again at 130 s.
	r.observe(node("c", corev1.ConditionUnknown, at(73)))
	r.observe(node("c", corev1.ConditionTrue, at(130)))
	// d: its watch missed the Unknown (a relist after the outage shows
	// only the latest state), but its Ready turned True at 110 s.
	r.observe(node("d", corev1.ConditionTrue, at(110)))
	// Not a node of the fleet.
	r.observe(node("other", corev1.ConditionFalse, at(80)))
	if len(r.seen["a"]) != 3 {
		t.Errorf("a's states %+v, want three: a repeat is not a change", r.seen["a"])
	}

	o := reports.Outage{Start: at(10).Add(500 * time.Millisecond), End: at(70)}
	r.cost(&o, at(300))
	if o.NodesNotReady != 3 || o.ReadyAgainSeconds != 60 {
		t.Errorf("cost %+v, want 3 nodes NotReady, Ready again 60 s after the end", o)
	}

	// Measured before c was Ready again: some still not Ready.
	o = reports.Outage{Start: at(10), End: at(70)}
	r.cost(&o, at(100))
	if o.NodesNotReady != 2 || o.ReadyAgainSeconds != -1 {
		t.Errorf("cost until 100 s %+v, want 2 nodes NotReady, not all Ready again (-1)", o)
	}

	// An outage after all that cost nothing.
	o = reports.Outage{Start: at(200), End: at(220)}
	r.cost(&o, at(300))
	if o.NodesNotReady != 0 || o.ReadyAgainSeconds != 0 {
		t.Errorf("cost of a harmless outage %+v", o)
	}
}
