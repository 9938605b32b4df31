package loadprofiles

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/internal/delayqueue"
)

// churn runs a ChurnPhase: creates at c.QPS for c.Duration while a churner
// deletes each pod when its time is up, then waits for the churner to see
// every pod it deleted gone, for at most c.Lifetime + c.Timeout. Failures do
// not stop the phase; it reports them all at the end, in one line.
func (r *run) churn(ctx context.Context, phase string, c *ChurnPhase) error {
	count := churnCount(c.QPS, c.Duration.Duration)
	r.pods.setPhase(phase, r.pods.progress().Created+count)

	ch := newChurner(r, c.Lifetime.Duration, c.Timeout.Duration, c.QPS)
	stop := make(chan struct{})
	var reaper sync.WaitGroup
	reaper.Go(func() { ch.reap(ctx, stop) })
	stopReaper := sync.OnceFunc(func() {
		close(stop)
		reaper.Wait()
	})
	defer stopReaper()

	// Creates go as in a create phase, at most count of them. When the API
	// server falls behind, Duration ends them early instead: the phase
	// promises a rate for a time, and a slow server should not stretch the
	// time.
	end := r.clock.Now().Add(c.Duration.Duration)
	limiter := newClockLimiter(c.QPS, r.clock)
	var g errgroup.Group
	g.SetLimit(maxInFlight(c.QPS))
	var createFailures failureCount
	attempts := 0
	for range count {
		if limiter.Wait(ctx) != nil || !r.clock.Now().Before(end) {
			break
		}
		pod := r.podFor(phase, &c.Template)
		attempts++
		g.Go(func() error {
			if ref, at, ok := r.createPod(ctx, pod, &createFailures); ok {
				ch.add(ref, at)
			}
			return nil
		})
	}
	_ = g.Wait() // the goroutines return nil; failures are counted instead
	ch.stopCreating()

	bound := c.Lifetime.Duration + c.Timeout.Duration
	var expired <-chan time.Time
	if timer := timerAt(r.clock, r.clock.Now().Add(bound)); timer != nil {
		defer timer.Stop()
		expired = timer.C()
	} else {
		expired = closedTimeChan() // the clock leapt past the bound already
	}
	timedOut := false
	select {
	case <-ch.drained:
	case <-expired:
		timedOut = true
	case <-ctx.Done():
	}
	stopReaper() // before reading its results, and so that no delete is sent after the phase
	if err := ctx.Err(); err != nil {
		return err
	}
	errs := []error{createFailures.err("pod creates", attempts)}
	errs = append(errs, ch.problems(timedOut, bound)...)
	return joinLine(errs)
}

// closedTimeChan is a timer channel that has fired.
func closedTimeChan() <-chan time.Time {
	ch := make(chan time.Time)
	close(ch)
	return ch
}

// churnCount is how many pods a churn makes when the API server keeps up:
// one at once and one every 1/qps while under d, ⌈qps × d⌉. A fraction of a
// millionth of a pod is float noise (0.3/s for 10s is 3.0000000000000004),
// not a reason for one more.
func churnCount(qps float64, d time.Duration) int {
	return int(math.Ceil(qps*d.Seconds() - 1e-6))
}

// churner deletes a churn phase's pods when their time is up: Lifetime after
// the watch saw them Running, or Timeout after their create if it has not.
// Each live pod's delete waits in one delaying queue for its deadline, and a
// few workers send those that are due, the way KWOK's lease controller
// serves every node from one queue, rather than a goroutine and a timer per
// pod. One goroutine, reap, moves a deadline when the watch sees the pod
// Running and tells when the phase is drained.
//
// It learns what the watch saw from the run's tracker, so there is one record
// of each pod. Lock order: c.mu, then the tracker's; the queue's workers
// call send holding neither.
type churner struct {
	r                 *run
	lifetime, timeout time.Duration

	// deletes holds each live pod until its deadline, and sends its delete
	// on one of at most maxInFlight workers at the creates' rate, with ctx,
	// reap's.
	deletes *delayqueue.Queue[*churnPod]
	ctx     context.Context

	// wake (capacity 1) tells reap that a pod was added, a delete call
	// returned or creating stopped; drained is closed by reap once creating
	// has stopped and every pod it created has been deleted and seen gone
	// (or failed to delete).
	wake    chan struct{}
	drained chan struct{}

	deleteFailures failureCount

	mu           sync.Mutex
	all          []types.UID             // every pod created, in the order the creates returned
	live         map[types.UID]*churnPod // pods whose delete waits for its deadline
	waiting      map[types.UID]*churnPod // live pods not yet seen Running
	deleting     map[types.UID]bool      // delete sent and succeeded, not yet seen gone
	deleteFailed map[types.UID]bool
	inFlight     int // delete calls sent that have not returned
	deletesSent  int
	creatingDone bool
	// neverRan counts pods not seen Running by their deadline, and names
	// the first few as they were then.
	neverRan      int
	neverRanNamed []string
}

// churnPod is one pod of the phase. due is when it is to be deleted:
// createdAt + timeout until it is seen Running, then runningAt + lifetime.
// It waits in the queue under its pointer, and the queue keeps the earlier
// of two times for one item, so a pod may come due before its deadline, or
// once it is no longer live; take sees to both.
type churnPod struct {
	ref     podRef
	running bool
	due     time.Time
}

func newChurner(r *run, lifetime, timeout time.Duration, qps float64) *churner {
	c := &churner{
		r:            r,
		lifetime:     lifetime,
		timeout:      timeout,
		wake:         make(chan struct{}, 1),
		drained:      make(chan struct{}),
		live:         map[types.UID]*churnPod{},
		waiting:      map[types.UID]*churnPod{},
		deleting:     map[types.UID]bool{},
		deleteFailed: map[types.UID]bool{},
	}
	c.deletes = delayqueue.New(delayqueue.Config[*churnPod]{
		Clock: r.clock, Workers: maxInFlight(qps), Serve: c.send,
	})
	return c
}

// notify wakes reap without blocking: one pending wake is enough, since reap
// looks at everything each time it wakes.
func (c *churner) notify() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// add takes a pod whose create, sent at createdAt, succeeded. If the watch
// has already seen it Running, reap's next sync moves its deadline.
func (c *churner) add(ref podRef, createdAt time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := &churnPod{ref: ref}
	c.all = append(c.all, ref.uid)
	c.live[ref.uid] = p
	c.waiting[ref.uid] = p
	c.dueLocked(p, createdAt.Add(c.timeout))
	c.notify()
}

// dueLocked sets p's deadline, replacing the one it had.
func (c *churner) dueLocked(p *churnPod, at time.Time) {
	p.due = at
	c.deletes.AddAt(p, at)
}

// stopCreating tells reap that no pod will be added: once no delete waits
// and every deleted pod is gone, the phase is drained.
func (c *churner) stopCreating() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.creatingDone = true
	c.notify()
}

// deleted records the outcome of a delete call.
func (c *churner) deleted(uid types.UID, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight--
	if ok {
		c.deleting[uid] = true // NotFound too: the tracker has it gone, and sync drops it
	} else {
		c.deleteFailed[uid] = true
	}
	c.notify()
}

// catchUpLocked brings a pod waiting to be seen Running up to date with
// what the watch saw of it: its lifetime starts at its RunningObserved
// stamp, so that DeleteIssued - RunningObserved is the lifetime asked for
// (if it is gone already, its delete finds it NotFound); one removed by
// someone else before it ran is not deleted, and counts as never run. It
// reports whether p is still live.
func (c *churner) catchUpLocked(p *churnPod, v podView) bool {
	switch {
	case v.running:
		p.running = true
		delete(c.waiting, p.ref.uid)
		c.dueLocked(p, v.runningAt.Add(c.lifetime))
	case v.gone: // its entry in the queue is dropped when due
		delete(c.waiting, p.ref.uid)
		delete(c.live, p.ref.uid)
		c.addNeverRan(p.ref.uid)
		return false
	}
	return true
}

// sync brings the pods up to date with the watch and reports whether the
// phase is drained.
func (c *churner) sync() (drained bool) {
	c.mu.Lock()
	defer c.mu.Unlock()

	uids := make([]types.UID, 0, len(c.waiting)+len(c.deleting))
	for uid := range c.waiting {
		uids = append(uids, uid)
	}
	for uid := range c.deleting {
		uids = append(uids, uid)
	}
	for i, v := range c.r.pods.views(uids) {
		uid := uids[i]
		if p, ok := c.waiting[uid]; ok {
			c.catchUpLocked(p, v)
			continue
		}
		if v.gone {
			delete(c.deleting, uid)
		}
	}
	return c.creatingDone && len(c.live) == 0 && c.inFlight == 0 && len(c.deleting) == 0
}

// take decides what to do with a pod that came due at now: it returns the
// pod to delete, or false if the pod is no longer live, or its deadline has
// not come (it moved later, or the watch has seen it Running since reap last
// looked: it waits again), or the watch has seen it gone.
func (c *churner) take(p *churnPod, now time.Time) (podRef, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live[p.ref.uid] != p {
		return podRef{}, false
	}
	if !p.running {
		v := c.r.pods.views([]types.UID{p.ref.uid})[0]
		if !c.catchUpLocked(p, v) {
			c.notify()
			return podRef{}, false
		}
	}
	if p.due.After(now) {
		c.deletes.AddAt(p, p.due)
		return podRef{}, false
	}
	if !p.running {
		delete(c.waiting, p.ref.uid)
		c.addNeverRan(p.ref.uid)
	}
	delete(c.live, p.ref.uid)
	c.inFlight++
	c.deletesSent++
	return p.ref, true
}

// send is a queue worker's handling of a pod that came due.
func (c *churner) send(p *churnPod) {
	ref, ok := c.take(p, c.r.clock.Now())
	if !ok {
		return
	}
	c.deleted(ref.uid, c.r.deletePod(c.ctx, ref, &c.deleteFailures))
}

// addNeverRan counts a pod that was not seen Running by its deadline and
// names it as the watch sees it now; the caller holds c.mu.
func (c *churner) addNeverRan(uid types.UID) {
	c.neverRan++
	if len(c.neverRanNamed) < straggleLimit {
		c.neverRanNamed = append(c.neverRanNamed, c.r.pods.describePod(uid))
	}
}

// reap lets the deletes go when due and follows the watch until the phase is
// drained, stop is closed or ctx ends, and returns once the delete calls in
// flight have; no delete is sent after.
func (c *churner) reap(ctx context.Context, stop <-chan struct{}) {
	c.ctx = ctx
	c.deletes.Start()
	defer c.deletes.Stop()
	for {
		// Taken before sync looks at the tracker, so that a change in
		// between wakes the select below at once.
		changed := c.r.pods.changes()
		if c.sync() {
			close(c.drained)
			return
		}
		select {
		case <-changed:
		case <-c.wake:
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

// problems describes what went wrong once reap has stopped: pods that never
// ran, deletes that failed and, if the phase gave up waiting after bound,
// pods not gone.
func (c *churner) problems(timedOut bool, bound time.Duration) []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	if c.neverRan > 0 {
		list := strings.Join(c.neverRanNamed, ", ")
		if c.neverRan > len(c.neverRanNamed) {
			list += ", ..."
		}
		errs = append(errs, fmt.Errorf("%d of %d pods not Running within %v of their create, deleted then: %s",
			c.neverRan, len(c.all), c.timeout, list))
	}
	errs = append(errs, c.deleteFailures.err("pod deletes", c.deletesSent))
	if timedOut {
		// Pods whose delete failed are not waited for: the failure above
		// already accounts for them.
		var waited []types.UID
		for _, uid := range c.all {
			if !c.deleteFailed[uid] {
				waited = append(waited, uid)
			}
		}
		total, missing, list := c.r.pods.unfinished(waited,
			func(*podRecord) bool { return true },
			func(p *podRecord) bool { return p.gone })
		if missing > 0 {
			errs = append(errs, fmt.Errorf("%d of %d pods not gone %v after the last create: %s", missing, total, bound, list))
		}
	}
	return errs
}

// joinLine joins the non-nil errors in one line, "; " between them, as a
// phase's error is printed on one line; nil if there are none.
func joinLine(errs []error) error {
	var kept []error
	for _, err := range errs {
		if err != nil {
			kept = append(kept, err)
		}
	}
	switch len(kept) {
	case 0:
		return nil
	case 1:
		return kept[0]
	}
	return lineErrors(kept)
}

// lineErrors is several errors printed on one line; errors.Is and errors.As
// see each of them.
type lineErrors []error

func (e lineErrors) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e lineErrors) Unwrap() []error { return e }
