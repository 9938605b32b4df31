package reports

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// shardReports splits 1000 pods between two collectors (two processes) and
// also records them all in one (the run as a single process), and returns
// the reports of the two shards and of the whole.
func shardReports(t *testing.T) (a, b, whole *Report) {
	t.Helper()
	cols := []*Collector{NewCollector(), NewCollector(), NewCollector()}
	for i := 1; i <= 1000; i++ {
		pod := types.UID(fmt.Sprintf("pod-%d", i))
		shard := cols[i%2]
		// Shard 1's pods start 2 s after shard 0's, so their series are
		// offset on the wall clock.
		start := t0.Add(time.Duration(i%2) * 2 * time.Second).Add(time.Duration(i) * 5 * time.Millisecond)
		for _, c := range []*Collector{shard, cols[2]} {
			c.Mark(pod, Created, start)
			c.Mark(pod, Scheduled, start.Add(time.Duration(i*i)*time.Microsecond))
			if i%7 == 0 {
				c.Mark(pod, PullStarted, start.Add(time.Millisecond))
			}
			c.Mark(pod, RunningReported, start.Add(time.Duration(i)*time.Millisecond))
			c.Mark(pod, RunningObserved, start.Add(time.Duration(i)*time.Millisecond+time.Millisecond))
		}
	}
	report := func(c *Collector, nodes int) *Report {
		return &Report{
			Profile: "shards", StartedAt: t0, FinishedAt: t0.Add(time.Minute), WallSeconds: 60, Nodes: nodes,
			Pods: c.PodCounts(), Phases: Summaries(c.Phases(DefaultPhases)), SLIs: Summaries(c.Phases(SLIPhases)),
			Series: Series{Pods: c.PodSeries()},
		}
	}
	return report(cols[0], 5), report(cols[1], 7), report(cols[2], 12)
}

func TestMergeIsExact(t *testing.T) {
	a, b, whole := shardReports(t)
	a.Fleet = FleetStats{PeakRSSBytes: 100 << 20, Goroutines: 500, CPUSeconds: 10.25, GCPercent: 50}
	b.Fleet = FleetStats{PeakRSSBytes: 120 << 20, Goroutines: 700, CPUSeconds: 12.5, GCPercent: 50}
	a.Errors, b.Errors = []string{"shard a: late"}, []string{"shard b: early"}
	a.Settings = map[string]string{"maxPods": "250", "nodeStatusUpdateFrequency": "20s"}
	b.Settings = map[string]string{"maxPods": "110", "nodeStatusUpdateFrequency": "20s"}
	b.StartedAt, b.FinishedAt = t0.Add(-time.Second), t0.Add(70*time.Second)

	m, err := Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if m.Nodes != 12 || m.Pods != whole.Pods {
		t.Errorf("nodes %d pods %+v, want 12 and %+v", m.Nodes, m.Pods, whole.Pods)
	}
	for _, pair := range []struct {
		name      string
		got, want []PhaseSummary
	}{{"phases", m.Phases, whole.Phases}, {"SLIs", m.SLIs, whole.SLIs}} {
		if len(pair.got) != len(pair.want) {
			t.Fatalf("%s: %d merged, want %d", pair.name, len(pair.got), len(pair.want))
		}
		for i := range pair.want {
			g, w := pair.got[i], pair.want[i]
			gh, _ := DecodeHistogram(g.Histogram)
			wh, _ := DecodeHistogram(w.Histogram)
			if !gh.Equals(wh) {
				t.Errorf("%s %s: merged histogram differs from the whole run's", pair.name, w.Name)
			}
			g.Histogram, w.Histogram = "", ""
			if g != w {
				t.Errorf("%s %s: merged %+v, whole %+v", pair.name, w.Name, g, w)
			}
		}
	}
	// The series line up on the wall clock.
	if !m.Series.Pods.Start.Equal(whole.Series.Pods.Start) ||
		!slices.Equal(m.Series.Pods.Created, whole.Series.Pods.Created) ||
		!slices.Equal(m.Series.Pods.Scheduled, whole.Series.Pods.Scheduled) ||
		!slices.Equal(m.Series.Pods.Running, whole.Series.Pods.Running) {
		t.Errorf("merged pod series differ from the whole run's:\n%+v\n%+v", m.Series.Pods, whole.Series.Pods)
	}
	if m.Scheduling.Pods != 1000 || m.Scheduling.MaxPerSecond != milestoneThroughput(whole.Series.Pods.Scheduled).MaxPerSecond {
		t.Errorf("merged scheduling = %+v", m.Scheduling)
	}
	if m.Fleet != (FleetStats{PeakRSSBytes: 220 << 20, Goroutines: 1200, CPUSeconds: 22.75, GCPercent: 50}) {
		t.Errorf("fleet = %+v, want the sum of the processes', and their one GC target", m.Fleet)
	}
	// Shards that ran with different GC targets have none in common.
	b.Fleet.GCPercent = 100
	if m, err := Merge(a, b); err != nil || m.Fleet.GCPercent != 0 {
		t.Errorf("merged GC target of shards at 50 and 100 = %d (%v), want 0, unknown", m.Fleet.GCPercent, err)
	}
	if !m.StartedAt.Equal(t0.Add(-time.Second)) || !m.FinishedAt.Equal(t0.Add(70*time.Second)) || m.WallSeconds != 71 {
		t.Errorf("merged span %v to %v (%v s)", m.StartedAt, m.FinishedAt, m.WallSeconds)
	}
	if !slices.Equal(m.Errors, []string{"shard a: late", "shard b: early"}) {
		t.Errorf("errors = %q", m.Errors)
	}
	if m.Settings["maxPods"] != "110 | 250" || m.Settings["nodeStatusUpdateFrequency"] != "20s" {
		t.Errorf("settings = %v, want differing values kept side by side", m.Settings)
	}
}

func TestMergeAPIAndControlPlaneMetrics(t *testing.T) {
	hist := func(from, to int64) string {
		h := NewHistogram()
		for v := from; v <= to; v++ {
			_ = h.RecordValue(v)
		}
		return encodeHistogram(h)
	}
	a := &Report{Profile: "p", API: []APIStat{
		{Verb: "patch", Resource: "pods", Subresource: "status", Count: 100, BytesSent: 1000, Errors: 1, Codes: map[string]int64{"2xx": 99, "5xx": 1}, Histogram: hist(1, 100)},
		{Verb: "get", Path: "/version", Count: 1, P50Ms: 0.4, P99Ms: 0.4}, // no histogram, only here: kept as is
		{Verb: "watch", Resource: "pods", Count: 2, BytesReceived: 300, OpenWatches: 2, Events: 40, Histogram: hist(1, 2)},
	}}
	b := &Report{Profile: "p", API: []APIStat{
		{Verb: "patch", Resource: "pods", Subresource: "status", Count: 100, BytesSent: 2000, Codes: map[string]int64{"2xx": 100}, Histogram: hist(101, 200)},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Count: 5, Histogram: hist(5, 9)},
		{Verb: "watch", Resource: "pods", Count: 3, BytesReceived: 700, OpenWatches: 1, Events: 25, Histogram: hist(3, 5)},
	}}
	d := sampleMetricsDiff()
	a.APIServerLatency = d.APICallLatencies()
	a.Scheduling = SchedulingFrom(PodSeries{}, d)
	b.APIServerLatency = d.APICallLatencies()[:2]

	m, err := Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, s := range m.API {
		rows = append(rows, s.Verb+" "+s.Label())
	}
	if !slices.Equal(rows, []string{"update leases.coordination.k8s.io", "watch pods", "patch pods/status", "get /version"}) {
		t.Errorf("merged API rows = %q", rows)
	}
	if w := m.API[1]; w.Count != 5 || w.BytesReceived != 1000 || w.OpenWatches != 3 || w.Events != 65 {
		t.Errorf("merged watch row = %+v, want count 5, 1000 bytes received, 3 open, 65 events", w)
	}
	patch := m.API[2]
	if patch.Count != 200 || patch.BytesSent != 3000 || patch.Errors != 1 || !mapsEqual(patch.Codes, map[string]int64{"2xx": 199, "5xx": 1}) {
		t.Errorf("merged patch row = %+v", patch)
	}
	// 1..200 µs recorded: p50 100 µs, p99 198 µs.
	if patch.P50Ms != 0.1 || patch.P99Ms != 0.198 {
		t.Errorf("merged patch p50 %v p99 %v ms, want 0.1 and 0.198 (from the merged histogram)", patch.P50Ms, patch.P99Ms)
	}
	if m.API[3].P99Ms != 0.4 {
		t.Errorf("a row from one report lost its percentiles: %+v", m.API[3])
	}

	// Server-side rows add bucket by bucket.
	first := d.APICallLatencies()[0]
	got := m.APIServerLatency[0]
	if got.Verb != first.Verb || got.Resource != first.Resource || got.Count != 2*first.Count {
		t.Errorf("merged server row = %+v, want twice %+v", got, first)
	}
	for i := range first.Buckets {
		if got.Buckets[i].Count != 2*first.Buckets[i].Count {
			t.Errorf("bucket le=%v: %d, want %d", first.Buckets[i].LeSeconds, got.Buckets[i].Count, 2*first.Buckets[i].Count)
		}
	}
	if got.P99Ms != first.P99Ms {
		t.Errorf("doubling every bucket moved p99 from %v to %v", first.P99Ms, got.P99Ms)
	}
	if len(m.APIServerLatency) != len(a.APIServerLatency) {
		t.Errorf("merged %d server rows, want %d", len(m.APIServerLatency), len(a.APIServerLatency))
	}
	if m.Scheduling.SchedulerScheduled != 200 || m.Scheduling.SchedulerSeconds != 95 || m.Scheduling.SchedulingSLI == nil || m.Scheduling.SchedulingSLI.Count != 200 {
		t.Errorf("merged scheduler stats = %+v", m.Scheduling)
	}
}

func TestMergeChecksSLOsAgain(t *testing.T) {
	a, b, _ := shardReports(t)
	th := SLOThresholds{PodStartupP99: metav1.Duration{Duration: 900 * time.Millisecond}}
	a.EvaluateSLOs(th)
	b.EvaluateSLOs(th)
	m, err := Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if m.SLOThresholds == nil || m.SLOThresholds.PodStartupP99.Duration != 900*time.Millisecond {
		t.Fatalf("merged thresholds = %+v", m.SLOThresholds)
	}
	var pod SLOResult
	for _, s := range m.SLOs {
		if s.Name == SLOPodStartupLatency {
			pod = s
		}
	}
	var sli PhaseSummary
	for _, s := range m.SLIs {
		if s.Name == SLIPodStartup {
			sli = s
		}
	}
	if pod.ObservedMs != sli.P99Ms || pod.Count != int64(sli.Count) || pod.Count != 1000-142 {
		t.Errorf("merged pod startup SLO = %+v, want the merged SLI's p99 over %d pods", pod, 1000-142)
	}
	if pod.Pass || !m.Failed() {
		t.Errorf("pod startup p99 %v ms against 900 ms: pass %v", pod.ObservedMs, pod.Pass)
	}
}

func TestMergeRefuses(t *testing.T) {
	base := func() *Report { return &Report{Profile: "p"} }
	withPhase := func(h string) *Report {
		r := base()
		r.Phases = []PhaseSummary{{Name: "create_to_scheduled", Count: 3, Histogram: h}}
		return r
	}
	other := base()
	other.SchemaVersion = "fleetlet.io/v1beta1"
	otherProfile := base()
	otherProfile.Profile = "q"
	th1, th2 := base(), base()
	th1.EvaluateSLOs(SLOThresholds{})
	th2.EvaluateSLOs(SLOThresholds{PodStartupP99: metav1.Duration{Duration: time.Second}})
	noHist1, noHist2 := base(), base()
	noHist1.API = []APIStat{{Verb: "get", Resource: "pods", Count: 1, Histogram: encodeHistogram(NewHistogram())}}
	noHist2.API = []APIStat{{Verb: "get", Resource: "pods", Count: 1}}

	for _, tc := range []struct {
		name    string
		reports []*Report
		want    string
	}{
		{"none", nil, "no reports"},
		{"nil", []*Report{base(), nil}, "report 2 is missing"},
		{"schema", []*Report{base(), other}, `report 2 has schemaVersion "fleetlet.io/v1beta1"`},
		{"profile", []*Report{base(), otherProfile}, `report 2 is of profile "q", report 1 of "p"`},
		{"thresholds", []*Report{th1, th2}, "other thresholds"},
		{"bad histogram", []*Report{withPhase(encodeHistogram(NewHistogram())), withPhase("not base64!")}, "report 2, phase create_to_scheduled: decoding histogram"},
		{"no histogram", []*Report{withPhase(""), base()}, "report 1, phase create_to_scheduled"},
		{"api without histogram", []*Report{noHist1, noHist2}, "get pods is in 2 reports but report 2 has no latency histogram"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Merge(tc.reports...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Merge = %v, %v; want an error saying %q", m, err, tc.want)
			}
		})
	}

	// Thresholds written out in full equal the defaults they spell.
	th3 := base()
	th3.EvaluateSLOs(SLOThresholds{PodStartupP99: metav1.Duration{Duration: DefaultPodStartupP99}})
	if _, err := Merge(th1, th3); err != nil {
		t.Errorf("defaults spelled out were refused: %v", err)
	}
}

func TestMergeOfOneIsItself(t *testing.T) {
	r := sampleReport()
	r.API = nil // the sample's hand-written API rows have no histograms
	m, err := Merge(r)
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	RenderSummary(&a, r)
	RenderSummary(&b, m)
	if a.String() != b.String() {
		t.Errorf("merging one report changed it:\n%s\nvs\n%s", a.String(), b.String())
	}
}

func TestCompare(t *testing.T) {
	a := sampleReport()
	b := sampleReport()
	b.StartedAt = b.StartedAt.Add(time.Hour)
	a.Phases[0].P50Ms, a.Phases[0].P99Ms = 25, 50
	b.Phases[0].P50Ms, b.Phases[0].P99Ms = 30, 100
	b.Phases = b.Phases[:len(b.Phases)-1] // delete_to_gone not measured in B
	b.SLIs[4].P99Ms = 6000
	b.APIServerLatency = b.APIServerLatency[:9] // PATCH pods/status not scraped
	b.EvaluateSLOs(SLOThresholds{})

	c := Compare(a, b)
	if c.A.Profile != "density-small" || !c.A.Failed || !c.B.Failed {
		t.Errorf("runs = %+v / %+v", c.A, c.B)
	}
	d := c.Phases[0]
	if d.P50DeltaMs != 5 || d.P50DeltaPct != 20 || d.P99DeltaMs != 50 || d.P99DeltaPct != 100 {
		t.Errorf("create_to_scheduled delta = %+v", d)
	}
	if last := c.Phases[len(c.Phases)-1]; last.Name != "delete_to_gone" || last.Missing != "B" || last.P99DeltaMs != 0 {
		t.Errorf("a phase only A has: %+v", last)
	}
	var pod, patch *SLODelta
	for i := range c.SLOs {
		switch c.SLOs[i].Subject {
		case "pod_startup":
			pod = &c.SLOs[i]
		case "PATCH pods/status":
			patch = &c.SLOs[i]
		}
	}
	if pod == nil || !pod.A.Pass || pod.B.Pass {
		t.Errorf("pod startup verdicts = %+v", pod)
	}
	if patch == nil || patch.A == nil || patch.B != nil {
		t.Errorf("a check only A has = %+v", patch)
	}

	var buf bytes.Buffer
	RenderComparison(&buf, c)
	checkGolden(t, "compare.golden", buf.Bytes())
}

func TestMergeRefusesTheSameRunTwice(t *testing.T) {
	// Shards as separate processes stamp them: their clocks read apart in
	// the nanoseconds, and they finish apart.
	shard := func(nodes int, started time.Duration) *Report {
		return &Report{Profile: "p", Nodes: nodes, StartedAt: t0.Add(started), FinishedAt: t0.Add(time.Minute + 3*started)}
	}
	a, b, c := shard(5, 0), shard(5, 1234), shard(7, 99*time.Millisecond)
	// The same report read twice from its file: equal, not identical.
	path := filepath.Join(t.TempDir(), "report.json")
	if err := WriteJSON(path, a); err != nil {
		t.Fatal(err)
	}
	read := func() *Report {
		r, err := ReadJSON(path)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	const once = "; each shard's report is merged once, so give it once"
	inMemory := &Report{Profile: "p"}

	for _, tc := range []struct {
		name    string
		reports []*Report
		want    string // "" for a merge that must succeed
	}{
		{"one file twice", []*Report{read(), read()},
			`merging reports: reports 1 and 2 are the same run (profile "p", started 2026-03-04T05:06:07Z)` + once},
		{"a shard again, third", []*Report{a, b, read()},
			`merging reports: reports 1 and 3 are the same run (profile "p", started 2026-03-04T05:06:07Z)` + once},
		{"the second shard again", []*Report{a, b, c, b},
			`merging reports: reports 2 and 4 are the same run (profile "p", started 2026-03-04T05:06:07.000001234Z)` + once},
		{"one report in memory twice", []*Report{inMemory, inMemory},
			`merging reports: reports 1 and 2 are the same run (profile "p")` + once},
		{"shards apart in the nanoseconds", []*Report{a, b, c}, ""},
		// The fixtures of the tests above: one start and end, told apart by
		// their node counts.
		{"shards of one start and end", []*Report{shard(5, 0), shard(7, 0)}, ""},
		{"shards of one start", []*Report{a, {Profile: "p", Nodes: 5, StartedAt: a.StartedAt, FinishedAt: a.FinishedAt.Add(time.Nanosecond)}}, ""},
		// Reports built in memory have no times to tell them apart by.
		{"reports without times", []*Report{{Profile: "p"}, {Profile: "p"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Merge(tc.reports...)
			if tc.want != "" {
				if err == nil || err.Error() != tc.want {
					t.Errorf("Merge = %v\nwant    %s", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Merge refused different shards: %v", err)
			}
			nodes := 0
			for _, r := range tc.reports {
				nodes += r.Nodes
			}
			if m.Nodes != nodes {
				t.Errorf("merged %d nodes, want %d", m.Nodes, nodes)
			}
		})
	}
}
