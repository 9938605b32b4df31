package main

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetlet/fleetlet/fleet"
	"github.com/fleetlet/fleetlet/reports"
)

// nodeReadiness keeps every Ready condition the run's driver saw on the
// fleet's Nodes, so that the report can say what an API server outage cost:
// which nodes went NotReady and when they were Ready again. The times are
// the conditions' lastTransitionTime (1 s precision), not the times they
// were seen: after an outage the driver's watch comes back with its own
// back-off, late, and delivers what it missed in order.
type nodeReadiness struct {
	nodes map[string]bool
	stop  context.CancelFunc

	mu sync.Mutex
	// seen are each node's Ready conditions, in the order seen, one per
	// change of status or transition time.
	seen map[string][]readyState
}

type readyState struct {
	ready bool
	at    time.Time
}

// watchReadiness starts watching names' Nodes; stop it with close.
func watchReadiness(ctx context.Context, client kubernetes.Interface, names []string) *nodeReadiness {
	ctx, cancel := context.WithCancel(ctx)
	r := &nodeReadiness{nodes: make(map[string]bool, len(names)), stop: cancel, seen: map[string][]readyState{}}
	for _, n := range names {
		r.nodes[n] = true
	}
	lw := fleet.NodesListWatch(client)
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.observe,
		UpdateFunc: func(_, obj any) { r.observe(obj) },
	})
	go inf.RunWithContext(ctx)
	return r
}

func (r *nodeReadiness) close() { r.stop() }

func (r *nodeReadiness) observe(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok || !r.nodes[n.Name] {
		return
	}
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		st := readyState{ready: c.Status == corev1.ConditionTrue, at: c.LastTransitionTime.Time}
		r.mu.Lock()
		if prev := r.seen[n.Name]; len(prev) == 0 || prev[len(prev)-1] != st {
			r.seen[n.Name] = append(prev, st)
		}
		r.mu.Unlock()
		return
	}
}

// cost fills in what outage o cost the fleet's nodes, looking at the
// Ready conditions that changed from its start until until (the next
// outage's start, or now).
func (r *nodeReadiness) cost(o *reports.Outage, until time.Time) {
	// Transition times are whole seconds: a node marked in the outage's
	// first second has a time before its start.
	from := o.Start.Truncate(time.Second)
	r.mu.Lock()
	defer r.mu.Unlock()
	var lastReady time.Time
	stillNot := false
	for _, states := range r.seen {
		down := false
		var readyAt time.Time
		for _, s := range states {
			if s.at.Before(from) || !s.at.Before(until) {
				continue
			}
			// A Ready condition that turned True in the window was not
			// True before: the watch may have missed the other state (a
			// relist after the outage shows only the latest).
			down = true
			if s.ready {
				readyAt = s.at
			} else {
				readyAt = time.Time{}
			}
		}
		if !down {
			continue
		}
		o.NodesNotReady++
		if readyAt.IsZero() {
			stillNot = true
		} else if readyAt.After(lastReady) {
			lastReady = readyAt
		}
	}
	switch {
	case o.NodesNotReady == 0:
		o.ReadyAgainSeconds = 0
	case stillNot || o.End.IsZero():
		o.ReadyAgainSeconds = -1
	default:
		o.ReadyAgainSeconds = max(0, lastReady.Sub(o.End).Seconds())
	}
}

// outages are the run's API server outages with what each cost: nodes
// NotReady and when they were Ready again, from readiness (nil: not
// watched), and the node lifecycle controller's NodeNotReady events.
func outages(ctx context.Context, counter *reports.APICounter, readiness *nodeReadiness, client kubernetes.Interface, now time.Time) []reports.Outage {
	out := counter.Outages()
	if len(out) == 0 {
		return nil
	}
	var events []corev1.Event
	if client != nil {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if list, err := client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "reason=NodeNotReady"}); err == nil {
			events = list.Items
		}
	}
	for i := range out {
		until := now
		if i+1 < len(out) {
			until = out[i+1].Start
		}
		if readiness != nil {
			readiness.cost(&out[i], until)
		}
		from := out[i].Start.Truncate(time.Second)
		for _, e := range events {
			at := e.LastTimestamp.Time
			if at.IsZero() {
				at = e.EventTime.Time
			}
			if e.InvolvedObject.Kind == "Node" && (readiness == nil || readiness.nodes[e.InvolvedObject.Name]) &&
				!at.Before(from) && at.Before(until) {
				out[i].NodeNotReadyEvents++
			}
		}
	}
	return out
}
