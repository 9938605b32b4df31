package reports

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// MinOutage is the shortest stretch without an answer that counts as an
// outage: any request of the fleet can fail alone (a broken connection, one
// timeout), but 5 s in which every request fails and none is answered is the
// API server gone, from the nodes' side.
const MinOutage = 5 * time.Second

// Outage is a stretch of time in which the API server answered none of the
// fleet's requests while some were sent: from the first request left
// unanswered (a connection refused or reset, a timeout, a 5xx) after the
// last answered one, to the next answered one. A 429 is an answer: the
// server is up and shedding load.
type Outage struct {
	Start time.Time `json:"start"`
	// End is zero while the outage goes on when the report is made.
	End     time.Time `json:"end,omitzero"`
	Seconds float64   `json:"seconds"`
	// FailedRequests are the fleet's requests left unanswered in it.
	FailedRequests int64 `json:"failedRequests"`

	// What it cost, from the control plane's view once it was back; filled
	// in by the run, which watches the fleet's Nodes.

	// NodesNotReady counts the fleet's nodes whose Ready condition was not
	// True at some time from the outage's start until every node was
	// Ready again (the node lifecycle controller marks nodes whose leases
	// it finds stale Unknown).
	NodesNotReady int `json:"nodesNotReady"`
	// ReadyAgainSeconds is from the outage's end until the last of those
	// nodes was Ready again, by the Ready conditions' lastTransitionTime
	// (1 s precision); 0 when no node went NotReady, -1 when some were
	// still not Ready when the report was made.
	ReadyAgainSeconds float64 `json:"readyAgainSeconds"`
	// NodeNotReadyEvents counts the node lifecycle controller's events for
	// the fleet's nodes from the outage's start on.
	NodeNotReadyEvents int `json:"nodeNotReadyEvents"`
}

// availability finds outages from the outcomes of the requests the fleet
// sends. It sits on every request's path: an answered request costs one
// atomic load while the server answers.
type availability struct {
	// failingSince is the first unanswered request since the last answered
	// one, in Unix nanoseconds; 0 while requests are answered.
	failingSince atomic.Int64
	failed       atomic.Int64

	mu      sync.Mutex
	outages []Outage
}

// observe records one request's outcome at now: resp and err as the
// transport returned them, for a request whose context was still live (a
// request its caller cancelled says nothing about the server).
func (a *availability) observe(now time.Time, req *http.Request, resp *http.Response, err error) {
	answered := err == nil && resp.StatusCode < 500
	if !answered {
		if req.Context().Err() != nil {
			return
		}
		a.failingSince.CompareAndSwap(0, now.UnixNano())
		a.failed.Add(1)
		return
	}
	if a.failingSince.Load() == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	since := a.failingSince.Swap(0)
	failed := a.failed.Swap(0)
	if since == 0 {
		return // another answer ended it first
	}
	start := time.Unix(0, since)
	if d := now.Sub(start); d >= MinOutage {
		a.outages = append(a.outages, Outage{Start: start, End: now, Seconds: d.Seconds(), FailedRequests: failed})
	}
}

// snapshot returns the outages so far, with one still going on at now if
// it has lasted MinOutage already.
func (a *availability) snapshot(now time.Time) []Outage {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := append([]Outage(nil), a.outages...)
	if since := a.failingSince.Load(); since != 0 {
		start := time.Unix(0, since)
		if d := now.Sub(start); d >= MinOutage {
			out = append(out, Outage{Start: start, Seconds: d.Seconds(), FailedRequests: a.failed.Load()})
		}
	}
	return out
}

// Outages returns the stretches in which the API server answered none of
// the requests counted here, oldest first; the last may still go on (its
// End is zero).
func (a *APICounter) Outages() []Outage { return a.avail.snapshot(time.Now()) }
