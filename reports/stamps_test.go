package reports

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// stampOf is pod's stamp of m on c's clock, and whether it has one.
func stampOf(c *Collector, pod types.UID, m Milestone) (time.Time, bool) {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		p := s.pods[pod]
		s.mu.Unlock()
		if p != nil && p.set&(1<<m) != 0 {
			return c.base.Round(0).Add(p.at[m]), true
		}
	}
	return time.Time{}, false
}

// jsonRoundTrip sends s through JSON, as the driver fetches it.
func jsonRoundTrip(t *testing.T, s StampSet) StampSet {
	t.Helper()
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out StampSet
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// wantPhase checks that the phase holds exactly one pod, of want (below
// 2048 µs, which the histogram holds exactly).
func wantPhase(t *testing.T, c *Collector, name string, want time.Duration) {
	t.Helper()
	p := phaseByName(t, c.Phases(append(append([]PhaseSpec(nil), DefaultPhases...), SLIPhases...)), name)
	if p.Count != 1 || p.Anomalies != 0 {
		t.Fatalf("%s: %d pods, %d anomalies; want 1 and none", name, p.Count, p.Anomalies)
	}
	if got := time.Duration(p.Hist.Max()) * time.Microsecond; got != want {
		t.Errorf("%s = %v, want %v", name, got, want)
	}
}

// TestImportAcrossProcesses: a shard's Collector (A) stamps the agent's
// milestones on its clock, 250 ms ahead of the driver's (B), whose base is
// 37 minutes older; B stamps its own with its monotonic clock. After
// Export, JSON and Import with the offset, the phases that cross the two
// are exact.
func TestImportAcrossProcesses(t *testing.T) {
	shard, driver := NewCollector(), NewCollector()
	driver.base = driver.base.Add(-37 * time.Minute) // made long before the shard
	const off = 250 * time.Millisecond

	// The driver's own stamps: monotonic readings, as its real clock gives.
	created := time.Now()
	driver.Mark("p", Created, created)
	scheduled := created.Add(700 * time.Microsecond)
	driver.Mark("p", Scheduled, scheduled)
	// Where scheduled is on the driver's Collector clock, and so on the
	// shard's.
	onDriver := driver.base.Round(0).Add(scheduled.Sub(driver.base))
	onShard := onDriver.Add(off)

	// The agent's stamps, wall-only times of the shard's clock.
	shard.Mark("p", AgentObserved, onShard.Add(1234*time.Microsecond+567))
	shard.Mark("p", SandboxReady, onShard.Add(1500*time.Microsecond))
	shard.Mark("p", RunningReported, onShard.Add(1900*time.Microsecond))
	// The pod's second stamp of a milestone, and a pod of the shard only.
	shard.Mark("p", AgentObserved, onShard.Add(time.Second))
	shard.Mark("q", AgentObserved, shard.Now())
	shard.SetGroup("g-only", "group")

	set := jsonRoundTrip(t, shard.Export())
	if len(set.Pods) != 2 || set.Pods[0].UID != "p" || set.Pods[1].UID != "q" {
		t.Fatalf("exported pods %v, want p and q (the group-only pod left out)", set.Pods)
	}
	if err := driver.Import(set, func(time.Time) time.Duration { return off }); err != nil {
		t.Fatal(err)
	}
	// The driver's watch sees Running 800 µs after the agent reported it,
	// by its monotonic clock: after the import, as the run does it.
	driver.Mark("p", RunningObserved, scheduled.Add(1900*time.Microsecond+800*time.Microsecond))

	wantPhase(t, driver, "create_to_scheduled", 700*time.Microsecond)
	wantPhase(t, driver, "scheduled_to_agent_observed", 1234*time.Microsecond) // 567 ns truncated by the histogram
	wantPhase(t, driver, "agent_observed_to_sandbox_ready", 265*time.Microsecond)
	wantPhase(t, driver, "running_reported_to_running_observed", 800*time.Microsecond)
	if p := phaseByName(t, driver.Phases(DefaultPhases), "create_to_running_observed"); p.Count != 1 || !p.Hist.ValuesAreEquivalent(p.Hist.Max(), 3400) {
		t.Errorf("create_to_running_observed: %d pods, max %d µs; want 1 of 3400 µs", p.Count, p.Hist.Max())
	}
	// To the nanosecond, on the stamps themselves.
	sched, _ := stampOf(driver, "p", Scheduled)
	observed, _ := stampOf(driver, "p", AgentObserved)
	if got, want := observed.Sub(sched), 1234*time.Microsecond+567; got != want {
		t.Errorf("agent observed - scheduled = %v, want %v", got, want)
	}
	if got := driver.Count(AgentObserved); got != 2 {
		t.Errorf("Count(AgentObserved) = %d after the import, want 2", got)
	}
}

func TestExportShape(t *testing.T) {
	c := NewCollector()
	c.Mark("b", Created, t0)
	c.Mark("b", RunningObserved, t0.Add(3*time.Second+7))
	c.Mark("a", VolumesMounted, t0.Add(-time.Second))
	c.SetGroup("b", "phase/Pod")
	set := c.Export()
	if !set.Base.Equal(c.base) || strings.Contains(set.Base.String(), "m=") || set.Base.Location() != time.UTC {
		t.Errorf("Base = %v, want the base's wall reading, in UTC", set.Base)
	}
	data, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Base string `json:"base"`
		Pods []struct {
			UID    string           `json:"uid"`
			Stamps map[string]int64 `json:"stamps"`
		} `json:"pods"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Base != set.Base.Format(time.RFC3339Nano) {
		t.Errorf("base is %q in JSON, want RFC 3339 with nanoseconds %q", doc.Base, set.Base.Format(time.RFC3339Nano))
	}
	if len(doc.Pods) != 2 || doc.Pods[0].UID != "a" || doc.Pods[1].UID != "b" {
		t.Fatalf("pods = %+v, want a then b", doc.Pods)
	}
	wantB := map[string]int64{"created": int64(t0.Sub(c.base)), "running_observed": int64(t0.Add(3*time.Second + 7).Sub(c.base))}
	if got := doc.Pods[1].Stamps; len(got) != 2 || got["created"] != wantB["created"] || got["running_observed"] != wantB["running_observed"] {
		t.Errorf("b's stamps = %v, want %v", got, wantB)
	}
	if strings.Contains(string(data), "phase/Pod") {
		t.Errorf("the export carries the group: %s", data)
	}
	if got := doc.Pods[0].Stamps["volumes_mounted"]; got != int64(t0.Add(-time.Second).Sub(c.base)) {
		t.Errorf("a's volumes_mounted = %d", got)
	}

	// An empty Collector exports an empty list, not null.
	data, _ = json.Marshal(NewCollector().Export())
	if !strings.Contains(string(data), `"pods":[]`) {
		t.Errorf("an empty export is %s", data)
	}
}

func TestNow(t *testing.T) {
	c := NewCollector()
	before := time.Now()
	n := c.Now()
	after := time.Now()
	if strings.Contains(n.String(), "m=") {
		t.Errorf("Now() = %v has a monotonic reading", n)
	}
	// On this clock, Now is between two readings of the monotonic clock
	// taken around it.
	lo := c.base.Round(0).Add(before.Sub(c.base))
	hi := c.base.Round(0).Add(after.Sub(c.base))
	if n.Before(lo) || n.After(hi) {
		t.Errorf("Now() = %v, not within [%v, %v]", n, lo, hi)
	}
	// Marked, it is where a monotonic stamp taken then is.
	c.Mark("p", Created, n)
	c.Mark("p", Scheduled, after)
	at, _ := stampOf(c, "p", Created)
	if !at.Equal(n) {
		t.Errorf("Now() marked at %v, want %v", at, n)
	}
	if sched, _ := stampOf(c, "p", Scheduled); sched.Before(at) {
		t.Errorf("a monotonic stamp after Now() is before it on the Collector's clock")
	}
}

func TestImportEarliestWins(t *testing.T) {
	driver := NewCollector()
	driver.Mark("early", Scheduled, t0.Add(30*time.Millisecond))
	driver.Mark("late", Scheduled, t0.Add(30*time.Millisecond))
	set := StampSet{Base: t0.Add(-time.Hour), Pods: []PodStamps{
		// The agent saw "early" scheduled first, and "late" after the driver.
		{UID: "early", Stamps: map[string]int64{"scheduled": int64(time.Hour + 20*time.Millisecond)}},
		{UID: "late", Stamps: map[string]int64{"scheduled": int64(time.Hour + 40*time.Millisecond)}},
	}}
	if err := driver.Import(set, nil); err != nil {
		t.Fatal(err)
	}
	for pod, want := range map[types.UID]time.Time{"early": t0.Add(20 * time.Millisecond), "late": t0.Add(30 * time.Millisecond)} {
		if got, _ := stampOf(driver, pod, Scheduled); !got.Equal(want) {
			t.Errorf("%s scheduled at %v, want %v", pod, got, want)
		}
	}
	if got := driver.Count(Scheduled); got != 2 {
		t.Errorf("Count(Scheduled) = %d, want 2", got)
	}
	// Imported again, into a Collector that has them already: nothing moves.
	if err := driver.Import(set, func(time.Time) time.Duration { return -time.Second }); err != nil {
		t.Fatal(err)
	}
	if got, _ := stampOf(driver, "late", Scheduled); !got.Equal(t0.Add(30 * time.Millisecond)) {
		t.Errorf("a later import moved late's stamp to %v", got)
	}
}

func TestImportNilOffset(t *testing.T) {
	c := NewCollector()
	base := time.Date(2026, 3, 4, 5, 0, 0, 123456789, time.FixedZone("x", 3600))
	if err := c.Import(StampSet{Base: base, Pods: []PodStamps{{UID: "p", Stamps: map[string]int64{"agent_observed": 5, "running_reported": 1_500_007}}}}, nil); err != nil {
		t.Fatal(err)
	}
	for m, want := range map[Milestone]time.Time{AgentObserved: base.Add(5), RunningReported: base.Add(1_500_007)} {
		if got, ok := stampOf(c, "p", m); !ok || !got.Equal(want) {
			t.Errorf("%s at %v, want %v", m, got, want)
		}
	}
}

func TestImportOffsetFollowsDrift(t *testing.T) {
	// The shard's clock is 100 ms ahead at a1 and 136 ms ahead an hour
	// later (10 ppm fast). A stamp half way, on the shard's clock, lands
	// where it was on the driver's.
	a1 := t0
	sc := ShardClock{
		Start: ClockMeasurement{At: a1, OffsetSeconds: 0.100},
		End:   ClockMeasurement{At: a1.Add(time.Hour), OffsetSeconds: 0.136},
	}
	x := a1.Add(30 * time.Minute) // on the driver's clock
	r := x.Add(118 * time.Millisecond)
	c := NewCollector()
	set := StampSet{Base: r.Add(-time.Minute), Pods: []PodStamps{{UID: "p", Stamps: map[string]int64{"running_reported": int64(time.Minute)}}}}
	if err := c.Import(set, sc.RemoteOffsetAt); err != nil {
		t.Fatal(err)
	}
	if got, _ := stampOf(c, "p", RunningReported); !got.Equal(x) {
		t.Errorf("running_reported at %v, want %v (off by %v)", got, x, got.Sub(x))
	}
}

func TestImportErrors(t *testing.T) {
	c := NewCollector()
	set := StampSet{Base: t0, Pods: []PodStamps{
		{UID: "p", Stamps: map[string]int64{"created": 1, "teleported": 2}},
		{UID: "q", Stamps: map[string]int64{"teleported": 3, "agent_observed": 4, "beamed": 5}},
	}}
	err := c.Import(set, nil)
	if err == nil {
		t.Fatal("Import of unknown milestones succeeded")
	}
	for _, want := range []string{`"teleported" (pod p first)`, `"beamed" (pod q first)`, "the rest imported"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if c.Count(Created) != 1 || c.Count(AgentObserved) != 1 {
		t.Errorf("the known stamps were not imported: created %d, agent_observed %d", c.Count(Created), c.Count(AgentObserved))
	}

	err = NewCollector().Import(StampSet{Pods: []PodStamps{{UID: "p", Stamps: map[string]int64{"created": 1}}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "no base time") {
		t.Errorf("Import without a base: %v", err)
	}
	if err := NewCollector().Import(StampSet{}, nil); err != nil {
		t.Errorf("Import of nothing: %v", err)
	}
}

func TestCollectorStamp(t *testing.T) {
	c := NewCollector()
	at := c.Now().Add(time.Second)
	c.Mark("p", Scheduled, at)
	if got, ok := c.Stamp("p", Scheduled); !ok || !got.Equal(at) {
		t.Errorf("Stamp = %v, %v; want %v", got, ok, at)
	}
	if _, ok := c.Stamp("p", Created); ok {
		t.Error("a milestone never stamped has a stamp")
	}
	if _, ok := c.Stamp("q", Scheduled); ok {
		t.Error("an unknown pod has a stamp")
	}
	if _, ok := c.Stamp("p", numMilestones); ok {
		t.Error("an unknown milestone has a stamp")
	}
}
