package proxy

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// boundedFrequencyRunner runs fn when asked to, but no sooner than
// minInterval after its previous run ended, and at least once per
// maxInterval, or per retryInterval after a run that failed. It mirrors
// kube-proxy's pkg/proxy/runner/bounded_frequency_runner.go (1.37), which
// the nftables and iptables proxiers make with minInterval = MinSyncPeriod,
// retryInterval = SyncPeriod and maxInterval = proxyutil.FullSyncPeriod
// (one hour). Releases before 1.3x had a burst of runs and a maxInterval of
// SyncPeriod; 1.37's runner has neither.
type boundedFrequencyRunner struct {
	minInterval   time.Duration
	retryInterval time.Duration
	maxInterval   time.Duration

	// run holds at most one request: requests made while one waits are one
	// run, as upstream's.
	run   chan struct{}
	fn    func() error
	clock clock.Clock
}

func newBoundedFrequencyRunner(fn func() error, minInterval, retryInterval, maxInterval time.Duration, c clock.Clock) *boundedFrequencyRunner {
	return &boundedFrequencyRunner{
		minInterval:   minInterval,
		retryInterval: retryInterval,
		maxInterval:   maxInterval,
		run:           make(chan struct{}, 1),
		fn:            fn,
		clock:         c,
	}
}

// Loop runs fn as Run asks and the intervals bound, until ctx ends.
// Upstream's Loop, except that it stops on a context and that a timer
// stopped after it fired is drained: a fake clock's timers keep a value a
// Reset does not clear, and a stale one would end the next cool-down at
// once. Real timers (Go 1.23 and later) never hold one.
func (r *boundedFrequencyRunner) Loop(ctx context.Context) {
	minTimer := r.clock.NewTimer(r.minInterval)
	defer minTimer.Stop()
	nextTimer := r.clock.NewTimer(r.maxInterval)
	defer nextTimer.Stop()

	for {
		select {
		case <-ctx.Done():
			return
		case <-nextTimer.C():
		case <-r.run:
		}
		// Upstream stops both timers while fn runs, so that tests on a fake
		// clock can tell a run in progress (no waiters) from an idle loop.
		stopTimer(minTimer)
		stopTimer(nextTimer)

		next := r.maxInterval
		if err := r.fn(); err != nil && r.retryInterval < next {
			next = r.retryInterval
		}
		minTimer.Reset(r.minInterval)
		nextTimer.Reset(next)

		// The cool-down: a request made now waits for its end.
		select {
		case <-ctx.Done():
			return
		case <-minTimer.C():
		}
	}
}

// Run asks for a run as soon as the bounds allow. It never blocks.
func (r *boundedFrequencyRunner) Run() {
	select {
	case r.run <- struct{}{}:
	default:
	}
}

func stopTimer(t clock.Timer) {
	if !t.Stop() {
		select {
		case <-t.C():
		default:
		}
	}
}
