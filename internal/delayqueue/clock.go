package delayqueue

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// timerSlack is how far the clock may move while a timer is made before the
// timer counts as late and is made again.
const timerSlack = 100 * time.Microsecond

// exactClock is the clock the client-go delaying queue is given, so that its
// timers fire when due. The queue's waiting loop reads Now, then asks for a
// timer of the time left until its earliest item; a clock that moves in
// between (the goroutine is descheduled on a busy machine, or a test steps a
// fake clock) would make that timer late by as much. So exactClock remembers
// the last reading it gave and makes each timer for that reading plus the
// duration, on the clock's time, not on the duration.
//
// The waiting loop's reading is the last one before its NewTimer unless an
// AddAfter read the clock in between; that AddAfter then sends its item to
// the loop, which wakes, reads again and makes a new timer, so no item waits
// on a late timer. Nothing else reads this clock: the Queue reads its own.
type exactClock struct {
	clock.Clock

	mu   sync.Mutex
	last time.Time
}

func (c *exactClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = c.Clock.Now()
	return c.last
}

func (c *exactClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	at := c.last
	c.mu.Unlock()
	if at.IsZero() {
		at = c.Clock.Now()
	}
	at = at.Add(d)
	for {
		before := c.Clock.Now()
		if !at.After(before) {
			return firedTimer(before)
		}
		timer := c.Clock.NewTimer(at.Sub(before))
		if c.Clock.Since(before) <= timerSlack {
			return timer
		}
		// The clock moved while the timer was made: it may be late.
		timer.Stop()
	}
}

func (c *exactClock) NewTicker(d time.Duration) clock.Ticker {
	if t, ok := c.Clock.(clock.WithTicker); ok {
		return t.NewTicker(d)
	}
	return stillTicker{}
}

type stillTicker struct{}

func (stillTicker) C() <-chan time.Time { return nil }

func (stillTicker) Stop() {}

// firedTimer returns a timer that has fired at t. The waiting loop only
// reads and stops its timers; Reset is not supported.
func firedTimer(t time.Time) clock.Timer {
	ch := make(chan time.Time, 1)
	ch <- t
	return fired{ch}
}

type fired struct{ ch chan time.Time }

func (f fired) C() <-chan time.Time { return f.ch }

func (fired) Stop() bool { return false }

func (fired) Reset(time.Duration) bool { panic("delayqueue: Reset of a fired timer") }
