package nodeagent

import (
	"context"
	"sync"

	internalapi "k8s.io/cri-api/pkg/apis"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/fleetlet/fleetlet/nodeagent/nodestatus"
)

// runtimeUp is the kubelet's updateRuntimeUp loop: it asks the runtime's
// Status once at its start, so that the first node status knows it, and then
// every nodestatus.RuntimeUpPeriod, into the node's runtime state, which the
// node status reads. It runs on clock timers rather than a goroutine of its
// own: a fleet runs thousands, and a goroutine waiting 5 s buys nothing.
type runtimeUp struct {
	cri   internalapi.RuntimeService
	state *nodestatus.RuntimeSync
	clock clock.WithTickerAndDelayedExecution

	mu      sync.Mutex
	ctx     context.Context
	timer   clock.Timer
	stopped bool
	// checks counts the check in flight, so that Wait outlasts it.
	checks sync.WaitGroup
}

// Start implements runnable.
func (r *runtimeUp) Start(ctx context.Context) error {
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
	r.check(ctx)
	r.arm()
	return nil
}

// Wait implements runnable: no check runs once it returns.
func (r *runtimeUp) Wait() {
	r.mu.Lock()
	r.stopped = true
	if r.timer != nil && r.timer.Stop() {
		r.checks.Done()
	}
	r.mu.Unlock()
	r.checks.Wait()
}

// arm schedules the next check, unless the loop stopped.
func (r *runtimeUp) arm() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	ctx := r.ctx
	r.checks.Add(1)
	// The check runs on a goroutine of its own: a fake clock calls the
	// function while it holds its lock, which the check's reading of the
	// clock and the next timer need.
	r.timer = r.clock.AfterFunc(nodestatus.RuntimeUpPeriod, func() {
		go func() {
			defer r.checks.Done()
			r.check(ctx)
			r.arm()
		}()
	})
}

// check asks the runtime's Status once, as updateRuntimeUp: a runtime
// that does not answer, or is not ready, is logged; the node status finds
// it down once it has not been ready for long enough.
func (r *runtimeUp) check(ctx context.Context) {
	resp, err := r.cri.Status(ctx, false)
	if err = r.state.Update(resp, err, r.clock.Now()); err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).Error(err, "Container runtime sanity check failed")
	}
}
