package reports

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// t0 is an arbitrary wall-clock time without a monotonic reading, as a fake
// clock gives.
var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func phaseByName(t *testing.T, phases []Phase, name string) Phase {
	t.Helper()
	for _, p := range phases {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no phase %q in %d phases", name, len(phases))
	return Phase{}
}

func TestCollectorFirstStampWins(t *testing.T) {
	c := NewCollector()
	c.Mark("a", Created, t0)
	c.Mark("a", Scheduled, t0.Add(10*time.Millisecond))
	// A retry and a resync stamp again later; neither may move the stamps.
	c.Mark("a", Created, t0.Add(5*time.Second))
	c.Mark("a", Scheduled, t0.Add(7*time.Second))

	p := phaseByName(t, c.Phases(DefaultPhases), "create_to_scheduled")
	if p.Count != 1 || p.Hist.TotalCount() != 1 {
		t.Fatalf("count = %d (hist %d), want 1", p.Count, p.Hist.TotalCount())
	}
	if got := p.Hist.Max(); !p.Hist.ValuesAreEquivalent(got, 10000) {
		t.Errorf("create_to_scheduled = %d µs, want 10000 µs (the first stamps)", got)
	}
	if got := c.Count(Created); got != 1 {
		t.Errorf("Count(Created) = %d after two stamps of one pod, want 1", got)
	}
}

// TestCollectorEarliestObserverWins: two watches see the same binding; the
// one that saw it later may call Mark first, and must not win.
func TestCollectorEarliestObserverWins(t *testing.T) {
	c := NewCollector()
	c.Mark("a", Created, t0)
	c.Mark("a", Scheduled, t0.Add(30*time.Millisecond)) // the driver's watch, called first
	c.Mark("a", Scheduled, t0.Add(20*time.Millisecond)) // the agent's, which saw it first
	c.Mark("a", AgentObserved, t0.Add(20*time.Millisecond))
	if h := phaseByName(t, c.Phases(DefaultPhases), "create_to_scheduled").Hist; !h.ValuesAreEquivalent(h.Max(), 20000) {
		got := h.Max()
		t.Errorf("create_to_scheduled = %d µs, want the earliest observation, 20000 µs", got)
	}
	if p := phaseByName(t, c.Phases(DefaultPhases), "scheduled_to_agent_observed"); p.Anomalies != 0 || p.Count != 1 {
		t.Errorf("scheduled_to_agent_observed: %d pods, %d anomalies; want 1 and none", p.Count, p.Anomalies)
	}
	if got := c.Count(Scheduled); got != 1 {
		t.Errorf("Count(Scheduled) = %d, want 1", got)
	}
}

func TestCollectorPhasesNeedBothStamps(t *testing.T) {
	c := NewCollector()
	c.Mark("both", Created, t0)
	c.Mark("both", Scheduled, t0.Add(3*time.Millisecond))
	c.Mark("only-created", Created, t0)
	c.Mark("only-scheduled", Scheduled, t0.Add(time.Millisecond))

	phases := c.Phases(DefaultPhases)
	if len(phases) != len(DefaultPhases) {
		t.Fatalf("got %d phases, want %d", len(phases), len(DefaultPhases))
	}
	for i, p := range phases {
		if p.Name != DefaultPhases[i].Name {
			t.Errorf("phase %d is %q, want %q (the order of the specs)", i, p.Name, DefaultPhases[i].Name)
		}
		want := 0
		if p.Name == "create_to_scheduled" {
			want = 1
		}
		if p.Count != want || p.Hist.TotalCount() != int64(want) {
			t.Errorf("phase %s: count %d (hist %d), want %d", p.Name, p.Count, p.Hist.TotalCount(), want)
		}
	}
}

func TestCollectorCounts(t *testing.T) {
	c := NewCollector()
	for i := range 10 {
		pod := types.UID(fmt.Sprintf("pod-%d", i))
		c.Mark(pod, Created, t0)
		if i < 7 {
			c.Mark(pod, RunningObserved, t0.Add(time.Second))
		}
		if i < 4 {
			c.Mark(pod, DeleteIssued, t0.Add(2*time.Second))
			c.Mark(pod, DeleteIssued, t0.Add(3*time.Second)) // counted once
		}
		if i < 2 {
			c.Mark(pod, Gone, t0.Add(4*time.Second))
		}
	}
	want := PodCounts{Created: 10, Running: 7, Deleted: 4, Gone: 2}
	if got := c.PodCounts(); got != want {
		t.Errorf("PodCounts() = %+v, want %+v", got, want)
	}
	if got := c.Count(Scheduled); got != 0 {
		t.Errorf("Count(Scheduled) = %d, want 0", got)
	}
	if got := c.Count(Milestone(99)); got != 0 {
		t.Errorf("Count(99) = %d, want 0", got)
	}
}

func TestCollectorNegativeDifferenceIsAnomaly(t *testing.T) {
	c := NewCollector()
	c.Mark("good", Created, t0)
	c.Mark("good", Scheduled, t0.Add(2*time.Millisecond))
	// Stamped with a clock that runs behind, or milestones swapped.
	c.Mark("bad", Created, t0.Add(time.Second))
	c.Mark("bad", Scheduled, t0)

	p := phaseByName(t, c.Phases(DefaultPhases), "create_to_scheduled")
	if p.Anomalies != 1 {
		t.Errorf("anomalies = %d, want 1", p.Anomalies)
	}
	if p.Count != 1 || p.Hist.TotalCount() != 1 {
		t.Errorf("count = %d (hist %d), want 1: the anomaly must not be recorded", p.Count, p.Hist.TotalCount())
	}
	if s := p.Summary(); s.Anomalies != 1 || s.MaxMs != 2 {
		t.Errorf("summary = %+v, want anomalies 1 and max 2 ms", s)
	}
}

func TestCollectorOverflowAndInvalidInput(t *testing.T) {
	c := NewCollector()
	c.Mark("slow", Created, t0)
	c.Mark("slow", RunningObserved, t0.Add(2*time.Hour))
	c.Mark("zero", Created, time.Time{})          // dropped
	c.Mark("bogus", Milestone(-1), t0)            // dropped
	c.Mark("bogus", Milestone(numMilestones), t0) // dropped

	if got := c.Count(Created); got != 1 {
		t.Errorf("Count(Created) = %d, want 1: a zero time is not a stamp", got)
	}
	phases := c.Phases([]PhaseSpec{
		{Name: "create_to_running_observed", From: Created, To: RunningObserved},
		{Name: "bogus", From: Milestone(-1), To: Gone},
	})
	p := phases[0]
	if p.Count != 1 || p.Overflows != 1 {
		t.Errorf("count %d overflows %d, want 1 and 1", p.Count, p.Overflows)
	}
	if got, want := p.Summary().MaxMs, float64(time.Hour/time.Millisecond); math.Abs(got-want) > want*0.001 {
		t.Errorf("max = %v ms, want about %v ms (clamped to the histogram's top)", got, want)
	}
	if phases[1].Count != 0 || phases[1].Hist.TotalCount() != 0 {
		t.Errorf("a spec with an unknown milestone recorded %d pods", phases[1].Count)
	}
}

func TestCollectorMicrosecondPrecision(t *testing.T) {
	c := NewCollector()
	// The real clock: both stamps carry a monotonic reading.
	start := time.Now()
	c.Mark("a", AgentObserved, start)
	c.Mark("a", SandboxReady, start.Add(1234*time.Microsecond+999*time.Nanosecond))
	// A fake clock: wall time only.
	c.Mark("b", AgentObserved, t0)
	c.Mark("b", SandboxReady, t0.Add(1500*time.Microsecond))

	p := phaseByName(t, c.Phases(DefaultPhases), "agent_observed_to_sandbox_ready")
	// Values below 2048 µs are exact at 3 significant figures; the difference
	// is truncated to whole microseconds.
	if lo, hi := p.Hist.Min(), p.Hist.Max(); lo != 1234 || hi != 1500 {
		t.Errorf("min, max = %d, %d µs; want 1234, 1500", lo, hi)
	}
	s := p.Summary()
	if s.MinMs != 1.234 || s.MaxMs != 1.5 {
		t.Errorf("summary min, max = %v, %v ms; want 1.234, 1.5", s.MinMs, s.MaxMs)
	}
}

func TestCollectorPercentiles(t *testing.T) {
	c := NewCollector()
	// 1000 pods, pod i took i ms: the known distribution 1..1000 ms.
	for i := 1; i <= 1000; i++ {
		pod := types.UID(fmt.Sprintf("pod-%d", i))
		c.Mark(pod, Created, t0)
		c.Mark(pod, RunningObserved, t0.Add(time.Duration(i)*time.Millisecond))
	}
	s := phaseByName(t, c.Phases(DefaultPhases), "create_to_running_observed").Summary()
	if s.Count != 1000 {
		t.Fatalf("count = %d, want 1000", s.Count)
	}
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"min", s.MinMs, 1},
		{"p50", s.P50Ms, 500},
		{"p90", s.P90Ms, 900},
		{"p99", s.P99Ms, 990},
		{"max", s.MaxMs, 1000},
		{"mean", s.MeanMs, 500.5},
	} {
		// HdrHistogram at 3 significant figures: within 0.1%.
		if math.Abs(tc.got-tc.want) > tc.want*0.001 {
			t.Errorf("%s = %v ms, want %v ms within 0.1%%", tc.name, tc.got, tc.want)
		}
	}
}

func TestCollectorConcurrentMarks(t *testing.T) {
	c := NewCollector()
	const agents, podsPerAgent = 32, 200
	var wg sync.WaitGroup
	for a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range podsPerAgent {
				pod := types.UID(fmt.Sprintf("agent-%d-pod-%d", a, i))
				// Every pod is stamped twice per milestone, the second time
				// later, as a resync would; and read meanwhile.
				for rep := range 2 {
					at := t0.Add(time.Duration(rep) * time.Hour)
					c.Mark(pod, Created, at)
					c.Mark(pod, Scheduled, at.Add(time.Duration(i+1)*time.Millisecond))
				}
				if i%50 == 0 {
					c.Count(Created)
					c.Phases(DefaultPhases[:1])
				}
			}
		}()
	}
	wg.Wait()

	if got := c.Count(Created); got != agents*podsPerAgent {
		t.Errorf("Count(Created) = %d, want %d", got, agents*podsPerAgent)
	}
	p := phaseByName(t, c.Phases(DefaultPhases), "create_to_scheduled")
	if p.Count != agents*podsPerAgent || p.Anomalies != 0 {
		t.Errorf("count %d anomalies %d, want %d and 0", p.Count, p.Anomalies, agents*podsPerAgent)
	}
	if got := p.Hist.Max(); got > 201*1000 {
		t.Errorf("max = %d µs; a later stamp replaced a first one", got)
	}
}

func benchmarkUIDs(n int) []types.UID {
	uids := make([]types.UID, n)
	for i := range uids {
		uids[i] = types.UID(fmt.Sprintf("0f6a3c2e-8d4b-4e1a-9c7f-%012d", i))
	}
	return uids
}

// BenchmarkCollectorMark stamps milestones of a fixed set of pods from all
// cores at once: after the first round each Mark finds its pod and keeps the
// first stamp, the common case of an agent's resync. shards=1 is the single
// mutex that sharding replaces.
func BenchmarkCollectorMark(b *testing.B) {
	uids := benchmarkUIDs(1 << 16)
	for _, shards := range []int{1, numShards} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			c := newCollector(shards)
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				// Each goroutine starts elsewhere in the pod set.
				i := int(next.Add(1)) * 7919
				for pb.Next() {
					c.Mark(uids[i&(len(uids)-1)], Milestone(i%int(numMilestones)), t0)
					i++
				}
			})
		})
	}
}

// BenchmarkCollectorMarkNewPods stamps pods never seen before: each Mark
// inserts into the map, the cost of a pod-creation burst.
func BenchmarkCollectorMarkNewPods(b *testing.B) {
	for _, shards := range []int{1, numShards} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			uids := benchmarkUIDs(b.N)
			c := newCollector(shards)
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					c.Mark(uids[next.Add(1)-1], Created, t0)
				}
			})
		})
	}
}
