package loadprofiles

import (
	"context"

	"golang.org/x/time/rate"
	"k8s.io/utils/clock"
)

// clockLimiter is a token bucket (golang.org/x/time/rate) that waits on an
// injected clock rather than on time.Now, so that a fake clock drives the
// rate in tests and the rate agrees with the milestones' timestamps.
type clockLimiter struct {
	bucket *rate.Limiter
	clock  clock.Clock
}

// newClockLimiter allows qps events per second with a burst of one: calls
// are spaced evenly from the first, which goes at once.
func newClockLimiter(qps float64, clk clock.Clock) *clockLimiter {
	return &clockLimiter{bucket: rate.NewLimiter(rate.Limit(qps), 1), clock: clk}
}

// Wait blocks until the next event may happen or ctx ends.
func (l *clockLimiter) Wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := l.clock.Now()
	reservation := l.bucket.ReserveN(now, 1) // burst 1, n 1: always OK
	delay := reservation.DelayFrom(now)
	if delay <= 0 {
		return nil
	}
	timer := l.clock.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-timer.C():
		return nil
	case <-ctx.Done():
		reservation.CancelAt(l.clock.Now())
		return ctx.Err()
	}
}
