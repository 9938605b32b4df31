package loadprofiles

import (
	"context"
	"time"

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
	timer := timerAt(l.clock, now.Add(reservation.DelayFrom(now)))
	if timer == nil {
		return nil
	}
	defer timer.Stop()
	select {
	case <-timer.C():
		return nil
	case <-ctx.Done():
		reservation.CancelAt(l.clock.Now())
		return ctx.Err()
	}
}

// timerSlack is how far the clock may move while timerAt makes a timer
// before the timer counts as late and is made again.
const timerSlack = 100 * time.Microsecond

// timerAt returns a timer that fires when clk reaches at, or nil if it has.
//
// clock.Clock takes a duration, which must be computed from a reading of the
// clock taken before the timer exists: if the clock moves on in between (the
// goroutine is descheduled on a busy machine, or a test steps a fake clock),
// the timer fires late by as much. So the clock is read again once the timer
// exists, and a timer that would be late is made again. This keeps due times
// exact, which the driver's tests check to the nanosecond.
func timerAt(clk clock.Clock, at time.Time) clock.Timer {
	for {
		before := clk.Now()
		if !at.After(before) {
			return nil
		}
		timer := clk.NewTimer(at.Sub(before))
		if clk.Since(before) <= timerSlack {
			return timer
		}
		timer.Stop()
	}
}
