package loadprofiles

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/types"
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
// One goroutine, reap, keeps every live pod's due time in a heap and waits on
// one timer for the earliest, the way KWOK's lease controller serves every
// node from one queue, rather than a goroutine and a timer per pod.
//
// It learns what the watch saw from the run's tracker, so there is one record
// of each pod. Lock order: c.mu, then the tracker's.
type churner struct {
	r                 *run
	lifetime, timeout time.Duration
	deleteLimit       int // concurrent delete calls, as maxInFlight at the creates' rate

	// wake (capacity 1) tells reap that a pod was added, a delete call
	// returned or creating stopped; drained is closed by reap once creating
	// has stopped and every pod it created has been deleted and seen gone
	// (or failed to delete).
	wake    chan struct{}
	drained chan struct{}

	deleteFailures failureCount

	mu           sync.Mutex
	all          []types.UID             // every pod created, in the order the creates returned
	queue        dueQueue                // pods not yet deleted, earliest due first
	waiting      map[types.UID]*churnPod // queued pods not yet seen Running
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

// churnPod is one live pod of the phase. due is when it is to be deleted:
// createdAt + timeout until it is seen Running, then runningAt + lifetime.
type churnPod struct {
	ref     podRef
	running bool
	due     time.Time
	index   int // in the queue, kept by dueQueue
}

func newChurner(r *run, lifetime, timeout time.Duration, qps float64) *churner {
	return &churner{
		r:            r,
		lifetime:     lifetime,
		timeout:      timeout,
		deleteLimit:  maxInFlight(qps),
		wake:         make(chan struct{}, 1),
		drained:      make(chan struct{}),
		waiting:      map[types.UID]*churnPod{},
		deleting:     map[types.UID]bool{},
		deleteFailed: map[types.UID]bool{},
	}
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
// has already seen it Running, reap's next step moves its deadline.
func (c *churner) add(ref podRef, createdAt time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := &churnPod{ref: ref, due: createdAt.Add(c.timeout)}
	c.all = append(c.all, ref.uid)
	heap.Push(&c.queue, p)
	c.waiting[ref.uid] = p
	c.notify()
}

// stopCreating tells reap that no pod will be added: once the queue is empty
// and every deleted pod gone, the phase is drained.
func (c *churner) stopCreating() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.creatingDone = true
	c.notify()
}

// deleted records the outcome of a delete call reap sent.
func (c *churner) deleted(uid types.UID, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight--
	if ok {
		c.deleting[uid] = true // NotFound too: the tracker has it gone, and step drops it
	} else {
		c.deleteFailed[uid] = true
	}
	c.notify()
}

// step brings the pods up to date with the watch, takes out those due at now
// and reports when the next is due (zero if none) and whether the phase is
// drained. The caller sends a delete for each pod it returns.
func (c *churner) step(now time.Time) (due []*churnPod, next time.Time, drained bool) {
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
			switch {
			case v.running:
				// Its lifetime starts at its RunningObserved stamp, so that
				// DeleteIssued - RunningObserved is the lifetime asked for.
				// If it is gone already, its delete finds it NotFound.
				p.running, p.due = true, v.runningAt.Add(c.lifetime)
				heap.Fix(&c.queue, p.index)
				delete(c.waiting, uid)
			case v.gone: // removed by someone else before it ran
				heap.Remove(&c.queue, p.index)
				delete(c.waiting, uid)
				c.addNeverRan(uid)
			}
			continue
		}
		if v.gone {
			delete(c.deleting, uid)
		}
	}

	for c.queue.Len() > 0 && !c.queue[0].due.After(now) {
		p := heap.Pop(&c.queue).(*churnPod)
		if !p.running {
			delete(c.waiting, p.ref.uid)
			c.addNeverRan(p.ref.uid)
		}
		c.inFlight++
		c.deletesSent++
		due = append(due, p)
	}
	if c.queue.Len() > 0 {
		next = c.queue[0].due
	}
	drained = c.creatingDone && c.queue.Len() == 0 && c.inFlight == 0 && len(c.deleting) == 0
	return due, next, drained
}

// addNeverRan counts a pod that was not seen Running by its deadline and
// names it as the watch sees it now; the caller holds c.mu.
func (c *churner) addNeverRan(uid types.UID) {
	c.neverRan++
	if len(c.neverRanNamed) < straggleLimit {
		c.neverRanNamed = append(c.neverRanNamed, c.r.pods.describePod(uid))
	}
}

// reap sends each pod's delete when it is due, until the phase is drained,
// stop is closed or ctx ends, and returns once its delete calls have.
func (c *churner) reap(ctx context.Context, stop <-chan struct{}) {
	var g errgroup.Group
	g.SetLimit(c.deleteLimit)
	defer func() { _ = g.Wait() }() // the goroutines return nil
	for {
		// Taken before step looks at the tracker, so that a change in
		// between wakes the select below at once.
		changed := c.r.pods.changes()
		due, next, drained := c.step(c.r.clock.Now())
		for _, p := range due {
			// Blocks while deleteLimit calls are out; they finish without
			// reap, which they only wake.
			g.Go(func() error {
				c.deleted(p.ref.uid, c.r.deletePod(ctx, p.ref, &c.deleteFailures))
				return nil
			})
		}
		if drained {
			close(c.drained)
			return
		}
		if !c.wait(ctx, stop, changed, next) {
			return
		}
	}
}

// wait blocks until the tracker changes, reap is woken, or next (if not
// zero) comes; false when stop is closed or ctx ends. It takes a fresh timer
// each time because the earliest due time moves with every pod seen Running.
func (c *churner) wait(ctx context.Context, stop <-chan struct{}, changed <-chan struct{}, next time.Time) bool {
	var fire <-chan time.Time
	if !next.IsZero() {
		timer := timerAt(c.r.clock, next)
		if timer == nil { // due already, unless the phase is over
			select {
			case <-stop:
				return false
			case <-ctx.Done():
				return false
			default:
				return true
			}
		}
		defer timer.Stop()
		fire = timer.C()
	}
	select {
	case <-fire:
	case <-changed:
	case <-c.wake:
	case <-stop:
		return false
	case <-ctx.Done():
		return false
	}
	return true
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

// dueQueue is a min-heap of pods by due time, for container/heap.
type dueQueue []*churnPod

func (q dueQueue) Len() int { return len(q) }

func (q dueQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }

func (q dueQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}

func (q *dueQueue) Push(x any) {
	p := x.(*churnPod)
	p.index = len(*q)
	*q = append(*q, p)
}

func (q *dueQueue) Pop() any {
	old := *q
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	p.index = -1
	return p
}
