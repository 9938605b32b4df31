package reports

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// sampleCollector holds 200 pods that went through every milestone with
// known, distinct phase lengths, and a few that did not finish.
func sampleCollector() *Collector {
	c := NewCollector()
	for i := 1; i <= 200; i++ {
		pod := types.UID(fmt.Sprintf("pod-%03d", i))
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		step := func(m Milestone, d time.Duration) {
			at = at.Add(d)
			c.Mark(pod, m, at)
		}
		ms := time.Millisecond
		step(Created, 0)
		step(Scheduled, time.Duration(i)*ms/4)
		step(AgentObserved, 2*ms+time.Duration(i%7)*ms)
		step(VolumesMounted, 10*ms)
		step(SandboxReady, 30*ms+time.Duration(i)*ms/10)
		if i%10 == 0 { // every tenth pod pulls its image: out of pod_startup
			step(PullStarted, 0)
		}
		step(ImagesPulled, 0)
		step(ContainersStarted, 15*ms)
		step(RunningSet, 1*ms)
		step(RunningReported, 2*ms+time.Duration(i%5)*ms)
		step(ReadyReported, 1*ms)
		step(RunningObserved, 2*ms)
		if i <= 150 {
			step(DeleteIssued, 30*time.Second)
			step(Gone, 800*ms+time.Duration(i)*ms)
		}
	}
	// Still pending at the end of the run.
	c.Mark("pod-pending", Created, t0)
	// Stamped by a caller with a clock running behind.
	c.Mark("pod-skewed", Created, t0.Add(time.Second))
	c.Mark("pod-skewed", Scheduled, t0)
	return c
}

// sampleReport is a full report of a small run: every section filled in,
// one SLO failing (PATCH pods/status), so every renderer shows everything.
func sampleReport() *Report {
	r := sampleReportBase()
	c := sampleCollector()
	r.SLIs = Summaries(c.Phases(SLIPhases))
	d := sampleMetricsDiff()
	r.APIServerLatency = d.APICallLatencies()
	r.Series = Series{Pods: c.PodSeries(), API: sampleAPISeries()}
	r.Scheduling = SchedulingFrom(r.Series.Pods, d)
	r.Heartbeat = &HeartbeatStats{
		Nodes: 10, Renewals: 80, LeaseUpdatesPerSecond: 1.0, NodeStatusPatchesPerSecond: 0.11, OpenWatches: 20,
		BytesSentPerSecond: 2048, BytesReceivedPerSecond: 8192,
	}
	late := Phase{Name: "lease_renewal_lateness", Hist: NewHistogram()}
	for i := range 80 {
		recordMicros(late.Hist, time.Duration(i*5)*time.Millisecond)
		late.Count++
	}
	r.Heartbeat.Lateness = late.Summary()
	writes := Phase{Name: leaseWriteLatency, Hist: NewHistogram()}
	for i := range 80 {
		recordMicros(writes.Hist, time.Duration(2+i%9)*time.Millisecond)
		writes.Count++
	}
	r.Heartbeat.LeaseWriteLatency = writes.Summary()
	r.EvaluateSLOs(SLOThresholds{})
	return r
}

// sampleReportBase is the report with only the sections of the first
// schema release.
func sampleReportBase() *Report {
	c := sampleCollector()
	start := t0
	return &Report{
		Profile:     "density-small",
		StartedAt:   start,
		FinishedAt:  start.Add(95*time.Second + 250*time.Millisecond),
		WallSeconds: 95.25,
		Nodes:       10,
		Pods:        c.PodCounts(),
		Phases:      Summaries(c.Phases(DefaultPhases)),
		API: []APIStat{
			{Verb: "create", Resource: "events", Count: 412, BytesSent: 412 * 900, BytesReceived: 412 * 1000, P50Ms: 1.9, P99Ms: 7.25, Codes: map[string]int64{"2xx": 412}},
			{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Count: 95, BytesSent: 95 * 400, BytesReceived: 95 * 450, P50Ms: 1.2, P99Ms: 4.05, Codes: map[string]int64{"2xx": 95}},
			{Verb: "patch", Resource: "nodes", Subresource: "status", Count: 20, BytesSent: 20 * 3000, BytesReceived: 20 * 6000, P50Ms: 3.1, P99Ms: 9.9, Codes: map[string]int64{"2xx": 20}},
			{Verb: "watch", Resource: "pods", Count: 10, BytesReceived: 3 << 20, P50Ms: 0.8, P99Ms: 1.45, Codes: map[string]int64{"2xx": 10}, OpenWatches: 10, Events: 2345},
			{Verb: "patch", Resource: "pods", Subresource: "status", Count: 400, BytesSent: 400 * 1500, BytesReceived: 400 * 4000, P50Ms: 2.3, P99Ms: 12.65, Errors: 3, Codes: map[string]int64{"2xx": 397, "5xx": 3}},
			{Verb: "get", Path: "/version", Count: 1, BytesReceived: 263, P50Ms: 0.4, P99Ms: 0.4, Codes: map[string]int64{"2xx": 1}},
			{Component: ComponentKubeProxy, Verb: "watch", Resource: "endpointslices", Group: "discovery.k8s.io", Count: 10, BytesReceived: 40 << 10, P50Ms: 0.9, P99Ms: 1.6, Codes: map[string]int64{"2xx": 10}, OpenWatches: 10, Events: 120},
		},
		Fleet:    FleetStats{PeakRSSBytes: 187 << 20, Goroutines: 1234, CPUSeconds: 41.5, GCPercent: 50},
		Settings: map[string]string{"nodeStatusUpdateFrequency": "20s", "maxPods": "250"},
		Errors:   []string{"pod load-1/pod-pending: not Running after 60s"},
	}
}

func TestReportJSONRoundTrip(t *testing.T) {
	want := sampleReport()
	path := filepath.Join(t.TempDir(), "runs", "r1", "report.json") // the directories do not exist yet
	if err := WriteJSON(path, want); err != nil {
		t.Fatal(err)
	}
	if want.SchemaVersion != "" {
		t.Errorf("WriteJSON changed the caller's report")
	}
	got, err := ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	want.SchemaVersion = SchemaVersion
	if !reflect.DeepEqual(got, want) {
		gj, _ := json.MarshalIndent(got, "", " ")
		wj, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("round trip changed the report:\ngot  %s\nwant %s", gj, wj)
	}
}

func TestReportJSONFieldNames(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.json")
	if err := WriteJSON(path, sampleReport()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	// The schema's names, which readers of report.json depend on.
	requireKeys := func(what string, m any, keys ...string) {
		t.Helper()
		obj, ok := m.(map[string]any)
		if !ok {
			t.Fatalf("%s is %T, want an object", what, m)
		}
		for _, k := range keys {
			if _, ok := obj[k]; !ok {
				t.Errorf("%s has no %q field", what, k)
			}
		}
	}
	requireKeys("report", doc, "schemaVersion", "profile", "startedAt", "finishedAt", "wallSeconds",
		"nodes", "pods", "phases", "api", "fleet", "settings", "errors",
		"slis", "apiServerLatency", "scheduling", "series", "sloThresholds", "slos")
	if doc["schemaVersion"] != "fleetlet.io/v1alpha1" {
		t.Errorf("schemaVersion = %v", doc["schemaVersion"])
	}
	requireKeys("pods", doc["pods"], "created", "running", "deleted", "gone")
	requireKeys("fleet", doc["fleet"], "peakRSSBytes", "goroutines", "cpuSeconds")
	requireKeys("phase", doc["phases"].([]any)[0], "name", "count", "minMs", "meanMs", "p50Ms", "p90Ms", "p99Ms", "maxMs", "anomalies", "histogram")
	requireKeys("api", doc["api"].([]any)[0], "verb", "resource", "count", "bytesSent", "bytesReceived", "p50Ms", "p99Ms", "errors")
	requireKeys("sli", doc["slis"].([]any)[4], "name", "count", "p99Ms", "excluded", "histogram")
	requireKeys("apiServerLatency", doc["apiServerLatency"].([]any)[0], "verb", "resource", "scope", "count", "p50Ms", "p90Ms", "p99Ms", "buckets")
	requireKeys("scheduling", doc["scheduling"], "pods", "maxPerSecond", "avgPerSecond", "schedulerScheduled", "schedulerSeconds", "schedulerPerSecond", "schedulingSLI")
	requireKeys("series", doc["series"], "pods", "api")
	requireKeys("series.pods", doc["series"].(map[string]any)["pods"], "start", "created", "scheduled", "running")
	requireKeys("series.api", doc["series"].(map[string]any)["api"], "start", "verbs")
	requireKeys("sloThresholds", doc["sloThresholds"], "mutatingAPICallP99", "readOnlyResourceAPICallP99", "readOnlyNamespaceAPICallP99", "readOnlyClusterAPICallP99", "podStartupP99")
	requireKeys("slo", doc["slos"].([]any)[0], "name", "subject", "thresholdMs", "observedMs", "count", "pass")
	if got := doc["sloThresholds"].(map[string]any)["podStartupP99"]; got != "5s" {
		t.Errorf("sloThresholds.podStartupP99 = %v, want \"5s\"", got)
	}

	// A report of the first release's shape has none of the optional
	// sections, and says so by leaving them out rather than as nulls.
	if err := WriteJSON(path, sampleReportBase()); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(path)
	doc = nil
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"slis", "apiServerLatency", "scheduling", "series", "sloThresholds", "slos"} {
		if _, ok := doc[k]; ok {
			t.Errorf("a report without %s has the key", k)
		}
	}
}

func TestReadJSONRejectsOtherSchemas(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, doc, wantErr string
	}{
		{"newer", `{"schemaVersion":"fleetlet.io/v1beta1","profile":"x"}`, `schemaVersion "fleetlet.io/v1beta1" is not supported (this fleetlet reads "fleetlet.io/v1alpha1")`},
		{"missing", `{"profile":"x"}`, "no schemaVersion, so it is not a fleetlet report"},
		{"not-json", `profile: x`, "not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".json")
			if err := os.WriteFile(path, []byte(tc.doc), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadJSON(path)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), path) {
				t.Fatalf("ReadJSON = %v, want an error naming %s and saying %q", err, path, tc.wantErr)
			}
			var sv *SchemaVersionError
			if errors.As(err, &sv) != (tc.name == "newer") {
				t.Errorf("errors.As(SchemaVersionError) = %v for %s", !(tc.name == "newer"), tc.name)
			}
		})
	}
	if _, err := ReadJSON(filepath.Join(dir, "absent.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadJSON of a missing file = %v, want ErrNotExist", err)
	}
}

func TestEncodedHistogramsDecodeAndMerge(t *testing.T) {
	c := sampleCollector()
	phases := c.Phases(DefaultPhases)
	for _, p := range phases {
		s := p.Summary()
		h, err := DecodeHistogram(s.Histogram)
		if err != nil {
			t.Fatalf("phase %s: %v", p.Name, err)
		}
		if !h.Equals(p.Hist) {
			t.Errorf("phase %s: decoded histogram differs from the recorded one", p.Name)
		}
		for _, q := range []float64{50, 90, 99, 100} {
			if got, want := h.ValueAtPercentile(q), p.Hist.ValueAtPercentile(q); got != want {
				t.Errorf("phase %s p%v: decoded %d µs, recorded %d µs", p.Name, q, got, want)
			}
		}
	}

	// Two processes' halves of a run merge into exactly the whole.
	whole, half1, half2 := NewCollector(), NewCollector(), NewCollector()
	for i := 1; i <= 1000; i++ {
		pod := types.UID(fmt.Sprintf("pod-%d", i))
		d := time.Duration(i*i) * time.Microsecond
		half := half1
		if i%2 == 0 {
			half = half2
		}
		for _, col := range []*Collector{whole, half} {
			col.Mark(pod, Created, t0)
			col.Mark(pod, Scheduled, t0.Add(d))
		}
	}
	spec := DefaultPhases[:1]
	merged, err := DecodeHistogram(half1.Phases(spec)[0].Summary().Histogram)
	if err != nil {
		t.Fatal(err)
	}
	other, err := DecodeHistogram(half2.Phases(spec)[0].Summary().Histogram)
	if err != nil {
		t.Fatal(err)
	}
	if dropped := merged.Merge(other); dropped != 0 {
		t.Fatalf("merge dropped %d values", dropped)
	}
	if !merged.Equals(whole.Phases(spec)[0].Hist) {
		t.Errorf("merged halves differ from the whole")
	}

	if _, err := DecodeHistogram(""); err == nil {
		t.Errorf("DecodeHistogram(\"\") = nil error")
	}
}

func TestWriteJSONLeavesNoTempFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	for range 2 { // the second write replaces the first
		if err := WriteJSON(path, sampleReport()); err != nil {
			t.Fatal(err)
		}
	}
	assertOnly := func(names ...string) {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.Name())
		}
		if strings.Join(got, ",") != strings.Join(names, ",") {
			t.Errorf("directory holds %q, want %q", got, names)
		}
	}
	assertOnly("report.json")
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("report.json mode = %v, %v; want 0644", fi.Mode(), err)
	}

	// A write that fails at the rename (the target is a directory) leaves the
	// temporary file behind neither.
	if err := os.Mkdir(filepath.Join(dir, "taken"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(filepath.Join(dir, "taken"), sampleReport()); err == nil {
		t.Fatal("WriteJSON over a directory succeeded")
	}
	assertOnly("report.json", "taken")
}

func TestRenderSummaryGolden(t *testing.T) {
	var buf bytes.Buffer
	r := sampleReport()
	r.SchemaVersion = SchemaVersion
	RenderSummary(&buf, r)
	checkGolden(t, "summary.golden", buf.Bytes())
}

func TestRenderSummaryEmptyReport(t *testing.T) {
	var buf bytes.Buffer
	RenderSummary(&buf, &Report{})
	want := "profile (none): 0 nodes, 0 pods created (0 Running, 0 deleted, 0 gone), wall 0s, peak RSS unknown\n"
	if buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}
}

func TestReadGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(73))
	if got := ReadGCPercent(); got != 73 {
		t.Errorf("ReadGCPercent() = %d after SetGCPercent(73)", got)
	}
}

func TestPeakRSS(t *testing.T) {
	status := "Name:\tfleetlet\nVmPeak:\t 2000000 kB\nVmHWM:\t  123456 kB\nVmRSS:\t  100000 kB\n"
	got, err := parseStatusKB(strings.NewReader(status), "VmHWM")
	if err != nil || got != 123456*1024 {
		t.Errorf("VmHWM = %d, %v; want %d", got, err, 123456*1024)
	}
	if got, err := parseStatusKB(strings.NewReader(status), "VmRSS"); err != nil || got != 100000*1024 {
		t.Errorf("VmRSS = %d, %v; want %d", got, err, 100000*1024)
	}
	if _, err := parseStatusKB(strings.NewReader("VmHWM:\tlots\n"), "VmHWM"); err == nil {
		t.Errorf("a malformed line was accepted")
	}
	if _, err := parseStatusKB(strings.NewReader("Name:\tx\n"), "VmHWM"); err == nil {
		t.Errorf("a status without VmHWM was accepted")
	}
	// fleetlet runs on Linux only (see the README), where /proc is there.
	if n, err := ReadPeakRSS(); err != nil || n <= 0 {
		t.Errorf("ReadPeakRSS() = %d, %v; want a positive size", n, err)
	}
	if n, err := ReadRSS(); err != nil || n <= 0 {
		t.Errorf("ReadRSS() = %d, %v; want a positive size", n, err)
	}
}
