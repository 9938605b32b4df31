package nodeagent

import (
	"context"

	"k8s.io/klog/v2"
)

// A runnable is one part of a running agent: a loop, such as the PLEG's, or
// a step of its start, such as the node's registration. Run starts the
// agent's runnables one at a time in the order of its list and stops them in
// reverse: it ends a runnable's context and waits for it before it stops the
// one started before it, as controller-runtime's manager stops its runnables.
type runnable interface {
	// Start brings the part up and returns once the parts after it may
	// start; a loop it starts runs until ctx ends. An error ends the agent's
	// start, and a part whose Start failed has released what it took.
	Start(ctx context.Context) error
	// Wait returns once the part has stopped, after its context ended,
	// having released what Start took.
	Wait()
}

// part is a runnable and the name it goes by in the agent's log.
type part struct {
	name string
	runnable
}

// loop is a runnable that runs in a goroutine of its own until its context
// ends: most of the agent's parts.
type loop struct {
	run  func(ctx context.Context)
	done chan struct{}
}

func newLoop(run func(ctx context.Context)) *loop {
	return &loop{run: run, done: make(chan struct{})}
}

// Start implements runnable.
func (l *loop) Start(ctx context.Context) error {
	go func() {
		defer close(l.done)
		l.run(ctx)
	}()
	return nil
}

// Wait implements runnable.
func (l *loop) Wait() { <-l.done }

// step is a runnable with no goroutine: start does its work before the next
// part starts, and stop, if set, undoes it once the parts started after it
// have stopped.
type step struct {
	start func(ctx context.Context) error
	stop  func()
}

// Start implements runnable.
func (s step) Start(ctx context.Context) error { return s.start(ctx) }

// Wait implements runnable.
func (s step) Wait() {
	if s.stop != nil {
		s.stop()
	}
}

// runParts starts parts in order, skipping those without a runnable, and,
// once ctx ends, stops them: every part's context ends at once, as the
// agent's one context did before it had parts, and then each is waited for
// in reverse, so that a part releases what it holds only once the parts
// started after it have stopped. Ending the contexts one at a time instead
// would keep the lease renewing while the later parts stop, and cut more of
// its updates off in flight. While a part starts, the end of ctx ends its
// start, so that a start that waits (a registration, a cache sync) gives up
// with the agent. If a part fails to start, the parts started before it are
// stopped the same way and its error is returned.
func runParts(ctx context.Context, parts []part) error {
	logger := klog.FromContext(ctx)
	// The parts' context carries ctx's values; it ends when runParts
	// returns, not before.
	partsCtx, stopAll := context.WithCancel(context.WithoutCancel(ctx))
	var waits []func()
	defer func() {
		stopAll()
		for i := len(waits) - 1; i >= 0; i-- {
			waits[i]()
		}
	}()
	for _, p := range parts {
		if p.runnable == nil {
			continue
		}
		startCtx, cancelStart := context.WithCancel(partsCtx)
		unlink := context.AfterFunc(ctx, cancelStart)
		logger.V(4).Info("Starting", "part", p.name)
		// The part keeps startCtx, which ends with partsCtx: cancelStart
		// only ends a start that ctx's end interrupted.
		err := p.Start(startCtx)
		unlink()
		if err != nil {
			cancelStart()
			return err
		}
		waits = append(waits, func() {
			p.Wait()
			cancelStart()
			logger.V(4).Info("Stopped", "part", p.name)
		})
	}
	logger.V(2).Info("Node agent started")
	<-ctx.Done()
	return nil
}
