package prober

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/internal/testutil"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestThousandWorkersBoundedGoroutines is the reason for the queue: the
// kubelet would run 1,000 goroutines for 1,000 probe workers; here every one
// of them is due at once and still only the queue's workers run.
func TestThousandWorkersBoundedGoroutines(t *testing.T) {
	const (
		workers    = 8
		pods       = 250
		perPod     = 4
		probeCount = pods * perPod
	)
	h := newHarness(t, workers)
	hold := make(chan struct{})
	h.runner.hold = hold
	h.settle()
	base := runtime.NumGoroutine()

	for i := range pods {
		cs := make([]corev1.Container, perPod)
		for j := range cs {
			cs[j].ReadinessProbe = execProbe(Readiness)
		}
		pod := newPod(fmt.Sprintf("u%d", i), cs...)
		for j := range cs {
			h.m.ContainerStarted(pod, cs[j].Name, fmt.Sprintf("p%d-c%d", i, j), t0)
		}
	}
	testutil.WaitFor(t, "the pool is busy", func() bool { return h.runner.inProgress() == workers })
	if d := runtime.NumGoroutine() - base; d > workers+2 {
		t.Errorf("%d probe workers, all due, took %d goroutines; want at most the pool's %d (+2)", probeCount, d, workers)
	}
	h.runner.mu.Lock()
	h.runner.hold = nil
	h.runner.mu.Unlock()
	close(hold)
	h.settle()
	if n := h.runner.total(); n != probeCount {
		t.Errorf("%d probes ran, want %d", n, probeCount)
	}
	if h.runner.maxRunning > workers {
		t.Errorf("%d probes ran at once, want at most %d", h.runner.maxRunning, workers)
	}
	// Idle again: the queue's workers are gone, only Run's and the queue's
	// waiting loop are left.
	testutil.WaitFor(t, "the pool goroutines end", func() bool { return runtime.NumGoroutine() <= base })
	h.step(10 * time.Second)
	if n := h.runner.total(); n != 2*probeCount {
		t.Errorf("%d probes after a period, want %d", n, 2*probeCount)
	}
}

// countingRunner answers every probe with a Success at once.
type countingRunner struct{ n atomic.Int64 }

func (c *countingRunner) Exec(context.Context, string, []string, time.Duration) (Result, string, error) {
	c.n.Add(1)
	return Success, "", nil
}
func (c *countingRunner) Network(context.Context, Kind, *corev1.Pod, *corev1.Container, string, *corev1.Probe) (Result, string, error) {
	c.n.Add(1)
	return Success, "", nil
}

// BenchmarkScheduling runs rounds of probes of many workers on one node's
// queue: one op is one period in which every worker probes once.
func BenchmarkScheduling(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			clk := clocktesting.NewFakeClock(t0)
			r := &countingRunner{}
			m := NewManager(Config{Clock: clk, Runner: r, Workers: DefaultWorkers})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); m.Run(ctx) }()
			go func() {
				// The agent's side: consume every update.
				for {
					select {
					case <-m.Updates():
					case <-ctx.Done():
						return
					}
				}
			}()
			defer func() { cancel(); <-done }()

			for i := range n / 10 {
				cs := make([]corev1.Container, 10)
				for j := range cs {
					cs[j].ReadinessProbe = execProbe(Readiness, withPeriod(1))
				}
				pod := newPod(fmt.Sprintf("u%d", i), cs...)
				for j := range cs {
					m.ContainerStarted(pod, cs[j].Name, fmt.Sprintf("p%d-c%d", i, j), t0)
				}
			}
			want := int64(n)
			spinUntil(func() bool { return r.n.Load() == want })
			spinUntil(func() bool { return m.quiescent(clk.Now()) })
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				want += int64(n)
				clk.Step(time.Second)
				spinUntil(func() bool { return r.n.Load() == want })
				spinUntil(func() bool { return m.quiescent(clk.Now()) })
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/probe")
		})
	}
}

// BenchmarkContainerStarted is the bookkeeping of a container with the three
// probes through its life: started, then its pod removed.
func BenchmarkContainerStarted(b *testing.B) {
	m := NewManager(Config{Clock: clocktesting.NewFakeClock(t0), Runner: &countingRunner{}})
	pod := newPod("u1", corev1.Container{
		StartupProbe: execProbe(Startup), LivenessProbe: execProbe(Liveness), ReadinessProbe: execProbe(Readiness),
	})
	b.ReportAllocs()
	for i := range b.N {
		m.ContainerStarted(pod, "c0", "cid"+fmt.Sprint(i&1), t0)
		m.RemovePod("u1")
	}
}

func spinUntil(cond func() bool) {
	for !cond() {
		runtime.Gosched()
	}
}
