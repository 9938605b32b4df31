package delayqueue

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/internal/testutil"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type tick struct{ id, n int }

// TestServedWhenDue serves periodic items, each re-added by its Serve one
// period on, and steps the fake clock as soon as what was due has been
// served, without waiting for the waiting loop to take the new times: each
// item is served on the step it is due, never early, never late.
func TestServedWhenDue(t *testing.T) {
	const items, steps = 20, 60
	clk := clocktesting.NewFakeClock(t0)
	period := func(id int) time.Duration { return time.Duration(id%7+1) * 100 * time.Millisecond }
	due := func(it tick) time.Time { return t0.Add(time.Duration(it.n+1) * period(it.id)) }
	var (
		mu     sync.Mutex
		served = map[int]int{} // id → ticks served
		wrong  []string
		q      *Queue[tick]
	)
	q = New(Config[tick]{Clock: clk, Workers: 3, Serve: func(it tick) {
		now := clk.Now()
		mu.Lock()
		defer mu.Unlock()
		if !now.Equal(due(it)) {
			wrong = append(wrong, fmt.Sprintf("item %d tick %d served at +%v, due +%v", it.id, it.n, now.Sub(t0), due(it).Sub(t0)))
		}
		served[it.id]++
		next := tick{it.id, it.n + 1}
		q.AddAt(next, due(next))
	}})
	defer q.Stop()
	for id := range items {
		q.AddAt(tick{id, 0}, due(tick{id, 0}))
	}
	q.Start()
	for s := 1; s <= steps; s++ {
		clk.Step(100 * time.Millisecond)
		elapsed := time.Duration(s) * 100 * time.Millisecond
		testutil.WaitFor(t, fmt.Sprintf("the items due by +%v are served", elapsed), func() bool {
			mu.Lock()
			defer mu.Unlock()
			for id := range items {
				if served[id] != int(elapsed/period(id)) {
					return false
				}
			}
			return true
		})
	}
	mu.Lock()
	defer mu.Unlock()
	for _, w := range wrong {
		t.Error(w)
	}
}

// TestWorkersBoundedAndStarted: nothing is served before Start; then at most
// Workers items at once, on goroutines that end when nothing is left.
func TestWorkersBoundedAndStarted(t *testing.T) {
	const items, workers = 50, 4
	clk := clocktesting.NewFakeClock(t0)
	gate := make(chan struct{})
	var mu sync.Mutex
	running, most, served := 0, 0, 0
	q := New(Config[int]{Clock: clk, Workers: workers, Serve: func(int) {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		<-gate
		mu.Lock()
		running--
		served++
		mu.Unlock()
	}})
	defer q.Stop()
	base := runtime.NumGoroutine()
	for i := range items {
		q.AddAt(i, t0)
	}
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	if running != 0 {
		t.Errorf("%d items served before Start", running)
	}
	mu.Unlock()
	q.Start()
	testutil.WaitFor(t, "the workers are busy", func() bool { mu.Lock(); defer mu.Unlock(); return running == workers })
	if d := runtime.NumGoroutine() - base; d > workers {
		t.Errorf("%d goroutines serve %d items; want at most %d", d, items, workers)
	}
	close(gate)
	testutil.WaitFor(t, "every item is served", func() bool { mu.Lock(); defer mu.Unlock(); return served == items })
	testutil.WaitFor(t, "the workers end", func() bool { return q.Idle() && runtime.NumGoroutine() <= base })
	if most != workers {
		t.Errorf("%d items served at once, want %d", most, workers)
	}
}

// TestStop: Stop waits for the item being served, and nothing is served
// after it, neither what was due nor what comes due.
func TestStop(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	inServe, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var served []int
	q := New(Config[int]{Clock: clk, Serve: func(i int) {
		if i == 0 {
			close(inServe)
			<-release
		}
		mu.Lock()
		served = append(served, i)
		mu.Unlock()
	}})
	q.Start()
	q.AddAt(0, t0)
	q.AddAt(1, t0)
	q.AddAt(2, t0.Add(time.Second))
	<-inServe
	stopped := make(chan struct{})
	go func() { q.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while an item was being served")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-stopped
	clk.Step(time.Second)
	q.AddAt(3, t0)
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(served) != "[0]" {
		t.Errorf("served %v, want only the item in flight at Stop", served)
	}
	q.Stop() // again: nothing
}

// TestExactClock: a timer asked for after the clock moved on from the last
// reading is set from that reading, and one already due has fired.
func TestExactClock(t *testing.T) {
	fake := clocktesting.NewFakeClock(t0)
	c := &exactClock{Clock: fake}
	now := c.Now()
	fake.Step(300 * time.Millisecond) // between the reading and the timer
	timer := c.NewTimer(time.Second)
	fake.Step(700*time.Millisecond - time.Nanosecond)
	select {
	case <-timer.C():
		t.Fatal("fired early")
	default:
	}
	fake.Step(time.Nanosecond)
	select {
	case at := <-timer.C():
		if !at.Equal(now.Add(time.Second)) {
			t.Errorf("fired at +%v, want +1s", at.Sub(t0))
		}
	default:
		t.Fatal("did not fire a second after the reading it was asked from")
	}

	c.Now()
	fake.Step(2 * time.Second)
	select {
	case <-c.NewTimer(time.Second).C():
	default:
		t.Error("a timer due already did not fire at once")
	}
}

// pausingClock holds the next timer's making until the test has stepped the
// clock, as a descheduled goroutine or a test stepping at the wrong moment
// would.
type pausingClock struct {
	*clocktesting.FakeClock
	mu      sync.Mutex
	paused  chan struct{} // closed when a NewTimer waits; nil: none to hold
	resumed chan struct{}
}

func (c *pausingClock) pauseNextTimer() (paused, resume chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paused, c.resumed = make(chan struct{}), make(chan struct{})
	return c.paused, c.resumed
}

func (c *pausingClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	paused, resumed := c.paused, c.resumed
	c.paused = nil
	c.mu.Unlock()
	if paused != nil {
		close(paused)
		<-resumed
	}
	return c.FakeClock.NewTimer(d)
}

// TestTimerMadeWhileTheClockMoves: the clock moves past an item's time while
// the waiting loop makes the timer for it; the item is still served on that
// step, not a timer's duration later.
func TestTimerMadeWhileTheClockMoves(t *testing.T) {
	clk := &pausingClock{FakeClock: clocktesting.NewFakeClock(t0)}
	served := make(chan time.Time, 1)
	q := New(Config[int]{Clock: clk, Serve: func(int) { served <- clk.Now() }})
	defer q.Stop()
	q.Start()
	paused, resume := clk.pauseNextTimer()
	q.AddAt(1, t0.Add(time.Second))
	<-paused
	clk.Step(1500 * time.Millisecond)
	close(resume)
	select {
	case at := <-served:
		if !at.Equal(t0.Add(1500 * time.Millisecond)) {
			t.Errorf("served at +%v, want +1.5s", at.Sub(t0))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the item was not served on the step past its time: its timer was late")
	}
}
