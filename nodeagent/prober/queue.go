package prober

import (
	"context"
	"errors"
	"sync/atomic"

	"k8s.io/utils/clock"

	"github.com/fleetlet/fleetlet/internal/delayqueue"
)

// QueueConfig wires a Queue.
type QueueConfig struct {
	// Clock times the probes of every Manager on the queue, and is their
	// clock unless they are given one (it must be the same); nil means the
	// real clock.
	Clock clock.WithTickerAndDelayedExecution
	// Workers bounds the probes that run at once, of all the Managers on
	// the queue; 0 means DefaultWorkers.
	Workers int
}

// Queue times and runs the probes of one or many Managers: their next runs
// wait in one client-go delaying queue, and at most Workers goroutines run
// those that are due, as KWOK's node lease controller serves every node's
// lease. A fleet makes one and gives it to every agent's Manager
// (Config.Queue), so that its probes cost a few goroutines in all; a Manager
// without one makes its own.
type Queue struct {
	clock clock.WithTickerAndDelayedExecution
	q     *delayqueue.Queue[*slot]
	// started guards Start; done is closed once the queue has stopped.
	started atomic.Bool
	done    chan struct{}
}

// NewQueue returns a Queue for cfg. Start it (or Run it) and end its context
// when the Managers on it are done: probes run only while it runs.
func NewQueue(cfg QueueConfig) *Queue {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	return &Queue{
		clock: cfg.Clock,
		q: delayqueue.New(delayqueue.Config[*slot]{
			Clock: cfg.Clock, Workers: cfg.Workers, Serve: serveSlot,
		}),
		done: make(chan struct{}),
	}
}

// Start runs due probes until ctx ends; Wait then returns once the probes in
// flight have. Besides the delaying queue's waiting loop, the Queue takes
// goroutines only while probes are due. Call it once.
func (q *Queue) Start(ctx context.Context) error {
	if !q.started.CompareAndSwap(false, true) {
		return errors.New("prober: Queue.Start called twice; start a probe queue once")
	}
	q.q.Start()
	context.AfterFunc(ctx, func() {
		q.q.Stop()
		close(q.done)
	})
	return nil
}

// Wait returns once the queue has stopped after its context ended.
func (q *Queue) Wait() { <-q.done }

// Run is Start, then Wait once ctx has ended.
func (q *Queue) Run(ctx context.Context) {
	_ = q.Start(ctx)
	<-ctx.Done()
	q.Wait()
}

// serveSlot serves the worker in a slot that came due; an empty slot is
// dropped.
func serveSlot(s *slot) {
	if w := s.w.Load(); w != nil {
		w.m.serve(w)
	}
}
