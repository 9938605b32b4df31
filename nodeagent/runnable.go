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
// once ctx ends, stops them in reverse. Each part has a context of its own,
// which carries ctx's values but ends only when the part is stopped, so that
// a part never stops before those started after it; while the part starts,
// the end of ctx ends it too, so that a start that waits (a registration, a
// cache sync) gives up with the agent. If a part fails to start, the parts
// started before it are stopped and its error is returned.
func runParts(ctx context.Context, parts []part) error {
	logger := klog.FromContext(ctx)
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	for _, p := range parts {
		if p.runnable == nil {
			continue
		}
		partCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		unlink := context.AfterFunc(ctx, cancel)
		logger.V(4).Info("Starting", "part", p.name)
		err := p.Start(partCtx)
		unlink()
		if err != nil {
			cancel()
			return err
		}
		stops = append(stops, func() {
			cancel()
			p.Wait()
			logger.V(4).Info("Stopped", "part", p.name)
		})
	}
	logger.V(2).Info("Node agent started")
	<-ctx.Done()
	return nil
}
