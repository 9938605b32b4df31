// Package delayqueue serves items when they are due with a bounded number of
// goroutines, the way KWOK's node lease controller serves every node's lease
// (sigs.k8s.io/kwok pkg/kwok/controllers): the items wait in one client-go
// delaying queue (k8s.io/client-go/util/workqueue) on an injected clock, and
// a few workers take those that are due. Thousands of timers then cost the
// queue's one goroutine, not one each.
//
// Two things are added to the client-go queue. Workers are started when
// items are ready and end when none is left, so an idle queue costs only its
// waiting loop. And the waiting loop's timers are exact on any clock (see
// exactClock), so that a test stepping a fake clock sees every item served
// on the step it is due.
package delayqueue

import (
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Config wires a Queue.
type Config[T comparable] struct {
	// Clock times the items; nil means the real clock.
	Clock clock.Clock
	// Workers is the most goroutines that serve items at once; 0 means 1.
	Workers int
	// Serve handles an item that is due; required. It runs on one of the
	// queue's workers, so it must not wait for long on anything the queue's
	// other items need.
	Serve func(T)
}

// Queue holds items until they are due and serves them with at most Workers
// goroutines, while it is started. Its methods are safe for concurrent use.
type Queue[T comparable] struct {
	clock   clock.Clock
	delay   workqueue.TypedDelayingInterface[T]
	ready   *workqueue.Typed[T]
	serve   func(T)
	workers int

	mu      sync.Mutex
	started bool // Start was called and Stop not yet
	active  int  // worker goroutines alive
	busy    int  // of which serving an item
	wg      sync.WaitGroup
}

// New returns a Queue for cfg, not yet started: items added before Start
// wait for it. The client-go queue's waiting loop runs from here until Stop,
// so a Queue must be stopped. It panics without a Serve function, a wiring
// mistake that the caller's first test shows.
func New[T comparable](cfg Config[T]) *Queue[T] {
	if cfg.Serve == nil {
		panic("delayqueue.New: Config.Serve is nil; give the function that serves due items")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	q := &Queue[T]{clock: cfg.Clock, serve: cfg.Serve, workers: max(cfg.Workers, 1)}
	// Unnamed: the queues register no metrics and start no goroutine of
	// their own but the waiting loop.
	clk := &exactClock{Clock: cfg.Clock}
	q.ready = workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[T]{Clock: clk})
	q.delay = workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[T]{
		Clock: clk,
		Queue: readyQueue[T]{Typed: q.ready, q: q},
	})
	return q
}

// AddAt makes item due at at, at once if at has come. An item already
// waiting keeps the earlier of its two times, as the client-go queue keeps
// it, and nothing takes an item out: so Serve gets an item whose time moved
// later before that time, and one no longer wanted when its time comes. It
// checks the item's own record of when it is due, adds it again for that
// time, or drops it.
func (q *Queue[T]) AddAt(item T, at time.Time) {
	q.delay.AddAfter(item, at.Sub(q.clock.Now()))
}

// Start lets the workers serve due items, those that came due before it
// first.
func (q *Queue[T]) Start() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.started = true
	q.spawnLocked()
}

// Stop ends the queue: items not yet served never are, and it returns once
// the items being served are. Calling it again does nothing.
func (q *Queue[T]) Stop() {
	q.mu.Lock()
	q.started = false
	q.mu.Unlock()
	q.delay.ShutDown()
	q.wg.Wait()
}

// Idle reports whether no item is ready or being served: what is left
// waits for its time.
func (q *Queue[T]) Idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.active == 0 && q.ready.Len() == 0
}

// spawnLocked starts workers for the ready items that the workers alive and
// not serving will not take, up to the limit.
func (q *Queue[T]) spawnLocked() {
	for q.started && q.active < q.workers && q.active-q.busy < q.ready.Len() {
		q.active++
		q.wg.Add(1)
		go q.work()
	}
}

// work is a worker: it serves ready items until none is left.
func (q *Queue[T]) work() {
	defer q.wg.Done()
	q.mu.Lock()
	for q.started && q.ready.Len() > 0 {
		// Get does not block: an item is ready, and every Get is made
		// under q.mu, so no other worker takes it first.
		item, _ := q.ready.Get()
		q.busy++
		q.mu.Unlock()
		q.serve(item)
		q.ready.Done(item)
		q.mu.Lock()
		q.busy--
	}
	q.active--
	q.mu.Unlock()
}

// readyQueue is the client-go FIFO of due items, which the delaying queue
// adds to; an Add wakes a worker.
type readyQueue[T comparable] struct {
	*workqueue.Typed[T]
	q *Queue[T]
}

func (r readyQueue[T]) Add(item T) {
	r.Typed.Add(item)
	r.q.mu.Lock()
	r.q.spawnLocked()
	r.q.mu.Unlock()
}
