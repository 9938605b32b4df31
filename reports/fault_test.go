package reports

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSpreadOf(t *testing.T) {
	s := func(sec ...float64) []time.Duration {
		out := make([]time.Duration, len(sec))
		for i, x := range sec {
			out[i] = time.Duration(x * float64(time.Second))
		}
		return out
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(100-i) * time.Second // 100 s down to 1 s
	}
	for _, tc := range []struct {
		name string
		ds   []time.Duration
		want Spread
	}{
		{"empty", nil, Spread{}},
		{"one", s(41.5), Spread{Count: 1, P50Seconds: 41.5, P99Seconds: 41.5, MaxSeconds: 41.5}},
		// Nearest rank: p50 of 4 is the 2nd value (⌈2⌉), not the mean of
		// the 2nd and 3rd; p99 of 4 is the 4th.
		{"four", s(4, 1, 3, 2), Spread{Count: 4, P50Seconds: 2, P99Seconds: 4, MaxSeconds: 4}},
		// p50 of 5 is the 3rd (⌈2.5⌉).
		{"five", s(50, 10, 40, 20, 30), Spread{Count: 5, P50Seconds: 30, P99Seconds: 50, MaxSeconds: 50}},
		// p99 of 100 is the 99th, of 101 the 100th (⌈99.99⌉).
		{"hundred", hundred, Spread{Count: 100, P50Seconds: 50, P99Seconds: 99, MaxSeconds: 100}},
		{"hundred and one", append(slices.Clone(hundred), 101*time.Second), Spread{Count: 101, P50Seconds: 51, P99Seconds: 100, MaxSeconds: 101}},
		// Microsecond resolution, no float noise.
		{"sub-second", s(0.0123456789, 0.1, 0.3), Spread{Count: 3, P50Seconds: 0.1, P99Seconds: 0.3, MaxSeconds: 0.3}},
		{"nanoseconds", []time.Duration{1234567 * time.Nanosecond}, Spread{Count: 1, P50Seconds: 0.001235, P99Seconds: 0.001235, MaxSeconds: 0.001235}},
		// Seen before the time it is measured from: 0, and counted.
		{"negative", s(-2, 5), Spread{Count: 2, P50Seconds: 0, P99Seconds: 5, MaxSeconds: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.ds)
			if got := SpreadOf(tc.ds); got != tc.want {
				t.Errorf("SpreadOf = %+v, want %+v", got, tc.want)
			}
			if !slices.Equal(tc.ds, before) {
				t.Errorf("SpreadOf changed its input: %v, was %v", tc.ds, before)
			}
		})
	}
}

// sampleFaults are a profile's two fault phases: a zone partitioned for
// 2 min, which the control plane tainted and evicted from, and a slow
// runtime still going at the report on a control plane not ours, which
// did nothing.
func sampleFaults() []Fault {
	return []Fault{
		{
			Phase: "partition-zone-a", Kind: "partition", Selector: "pool zone-a", Nodes: 5,
			Start: t0.Add(30 * time.Second), End: t0.Add(150 * time.Second), Seconds: 120,
			NotReady:         Spread{Count: 5, P50Seconds: 41.2, P99Seconds: 44.8, MaxSeconds: 44.8},
			UnreachableTaint: Spread{Count: 5, P50Seconds: 46.1, P99Seconds: 95.3, MaxSeconds: 95.3},
			NotReadyTaint:    Spread{},
			// 5 nodes tainted over 49.2 s: 4 gaps.
			TaintRatePerSecond: 0.081, NodeEvictionRate: 0.1, SecondaryNodeEvictionRate: 0.01,
			PodsEvicted: 12, PodsRescheduled: 10,
			RescheduledStartup: Spread{Count: 10, P50Seconds: 0.8125, P99Seconds: 1.92, MaxSeconds: 2.04},
			ReadyAgain:         Spread{Count: 4, P50Seconds: 1.3, P99Seconds: 10.5, MaxSeconds: 10.5},
			NotReadyAtReport:   1,
			PodsLost:           2,
			PodsDuplicated:     1,
			Notes: []string{
				"the zone was fully disrupted: the controller tainted at the normal rate",
				"2 bare pods were evicted and are gone for good",
			},
		},
		{
			Phase: "slow-runtime", Kind: "runtimeSlow", Selector: "10% of every pool", Nodes: 1,
			Start: t0.Add(200 * time.Second), Seconds: 12.5,
			ContainerRestarts: 1,
		},
	}
}

func TestFaultsInTheReport(t *testing.T) {
	rep := &Report{Faults: sampleFaults()}
	var md, page, term bytes.Buffer
	if err := RenderMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	if err := RenderHTML(&page, rep); err != nil {
		t.Fatal(err)
	}
	RenderSummary(&term, rep)

	const (
		heading1 = "partition-zone-a (partition) on 5 nodes (pool zone-a), 05:06:37 UTC, for 120.0 s"
		notReady = "5 of 5 nodes, p50 41.2 s, max 44.8 s after the start"
		taints   = "unreachable on 5 nodes (p50 46.1 s, max 95.3 s), not-ready on 0 nodes; added at 0.08 nodes/s (controller: --node-eviction-rate 0.1, secondary 0.01)"
		pods     = "12 evicted by taint, 10 replaced by their controllers (startup p50 812.5 ms, p99 1.9 s), 2 lost, 1 duplicated, 0 container restarts"
		again    = "4 of 5 nodes, p50 1.3 s, max 10.5 s after the end; 1 still not Ready"
		note     = "the zone was fully disrupted: the controller tainted at the normal rate"

		heading2 = "slow-runtime (runtimeSlow) on 1 node (10% of every pool), 05:09:27 UTC, still going at the report, 12.5 s so far"
		nothing  = "0 of 1 node: no node went NotReady"
		noTaint  = "no NoExecute taint added (the controller's configured rates unknown: not fleetlet's control plane)"
		pods2    = "0 evicted by taint, 0 replaced by their controllers, 0 lost, 0 duplicated, 1 container restart"
		again2   = "no node went NotReady"
	)
	for _, want := range []string{
		"\n## Faults\n",
		"\n### " + heading1 + "\n",
		"| **NotReady** | " + notReady + " |",
		"| **Taints** | " + taints + " |",
		"| **Pods** | " + pods + " |",
		"| **Ready again** | " + again + " |",
		"\n- " + note + "\n",
		"\n### " + heading2 + "\n",
		"| **NotReady** | " + nothing + " |",
		"| **Taints** | " + noTaint + " |",
		"| **Pods** | " + pods2 + " |",
		"| **Ready again** | " + again2 + " |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}
	// The section comes after the outages and before the fleet.
	if i, j := strings.Index(md.String(), "## Faults"), strings.Index(md.String(), "## Fleet"); i < 0 || i > j {
		t.Errorf("Markdown's Faults section is not before its Fleet section")
	}

	for _, want := range []string{
		"\nfaults:\n",
		"  " + heading1 + ":\n",
		"    NotReady: " + notReady + "\n",
		"    Taints: " + taints + "\n",
		"    Pods: " + pods + "\n",
		"    Ready again: " + again + "\n",
		"    note: " + note + "\n",
		"  " + heading2 + ":\n",
		"    Ready again: " + again2 + "\n",
	} {
		if !strings.Contains(term.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, term.String())
		}
	}

	if err := checkWellFormed(page.Bytes()); err != nil {
		t.Fatalf("report.html is not well-formed: %v", err)
	}
	for _, want := range []string{
		`<section id="faults">`,
		`<h3 style="margin-top:18px">` + heading1 + `</h3>`,
		"<tr><th>Taints</th><td>" + taints + "</td></tr>",
		"<tr><th>Ready again</th><td>" + again2 + "</td></tr>",
		`<p class="note">` + note + `</p>`,
	} {
		// html/template escapes the apostrophe of "controller's".
		if got := strings.ReplaceAll(page.String(), "&#39;", "'"); !strings.Contains(got, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}

	// Without faults, no section.
	md.Reset()
	if err := RenderMarkdown(&md, &Report{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(md.String(), "Faults") {
		t.Errorf("a report without faults has a Faults section")
	}
}

// TestFaultViewsWording: the lines a fault's numbers can take besides the
// sample's.
func TestFaultViewsWording(t *testing.T) {
	facts := func(f Fault) map[string]string {
		v := faultViews(&Report{Faults: []Fault{f}})
		m := map[string]string{"heading": v[0].Heading}
		for _, kv := range v[0].Facts {
			m[kv.Key] = kv.Value
		}
		return m
	}
	// One node tainted: no rate; the controller's secondary rate
	// configured as 0; a fault without a selector.
	got := facts(Fault{
		Phase: "down", Kind: "nodeDown", Nodes: 1, Start: t0, End: t0.Add(time.Minute), Seconds: 60,
		NotReady: Spread{Count: 1, P50Seconds: 40, MaxSeconds: 40}, NotReadyTaint: Spread{Count: 1, P50Seconds: 41, MaxSeconds: 41},
		NodeEvictionRate: 0.1,
	})
	for key, want := range map[string]string{
		"heading":     "down (nodeDown) on 1 node, 05:06:07 UTC, for 60.0 s",
		"Taints":      "unreachable on 0 nodes, not-ready on 1 node (p50 41.0 s, max 41.0 s); too few to give a rate (controller: --node-eviction-rate 0.1, secondary 0)",
		"Ready again": "0 of 1 node; 0 still not Ready",
	} {
		if got[key] != want {
			t.Errorf("%s = %q, want %q", key, got[key], want)
		}
	}
	// Nodes NotReady while the fault still goes on.
	got = facts(Fault{Phase: "p", Kind: "partition", Nodes: 3, Start: t0, Seconds: 50, NotReady: Spread{Count: 3, P50Seconds: 40, MaxSeconds: 42}, NotReadyAtReport: 3})
	if want := "the fault was still going at the report; 3 still not Ready"; got["Ready again"] != want {
		t.Errorf("Ready again = %q, want %q", got["Ready again"], want)
	}
}

func TestFaultsJSONRoundTrip(t *testing.T) {
	want := sampleReport()
	want.Faults = sampleFaults()
	path := filepath.Join(t.TempDir(), "report.json")
	if err := WriteJSON(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	want.SchemaVersion = SchemaVersion
	if !reflect.DeepEqual(got.Faults, want.Faults) {
		gj, _ := json.MarshalIndent(got.Faults, "", " ")
		wj, _ := json.MarshalIndent(want.Faults, "", " ")
		t.Errorf("round trip changed the faults:\ngot  %s\nwant %s", gj, wj)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip changed the report")
	}

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Faults []map[string]any `json:"faults"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Faults) != 2 {
		t.Fatalf("report.json has %d faults, want 2", len(doc.Faults))
	}
	keys := []string{"phase", "kind", "selector", "nodes", "start", "seconds",
		"notReady", "unreachableTaint", "notReadyTaint", "taintRatePerSecond",
		"podsEvicted", "podsRescheduled", "rescheduledStartup", "readyAgain", "notReadyAtReport",
		"containerRestarts", "podsLost", "podsDuplicated"}
	optional := []string{"end", "nodeEvictionRate", "secondaryNodeEvictionRate", "notes"}
	for _, k := range append(keys, optional...) {
		if _, ok := doc.Faults[0][k]; !ok {
			t.Errorf("faults[0] has no %q field", k)
		}
	}
	// The second, still going on a control plane not ours, with no notes,
	// leaves the optional fields out; zeros of the others are results.
	for _, k := range keys {
		if _, ok := doc.Faults[1][k]; !ok {
			t.Errorf("faults[1] has no %q field", k)
		}
	}
	for _, k := range optional {
		if _, ok := doc.Faults[1][k]; ok {
			t.Errorf("faults[1] has %q, which is empty", k)
		}
	}
	spread, _ := doc.Faults[1]["notReady"].(map[string]any)
	for _, k := range []string{"count", "p50Seconds", "p99Seconds", "maxSeconds"} {
		if _, ok := spread[k]; !ok {
			t.Errorf("faults[1].notReady has no %q field", k)
		}
	}

	// A report without faults has no key.
	if err := WriteJSON(path, sampleReport()); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(path)
	if strings.Contains(string(data), `"faults"`) {
		t.Errorf("a report without faults has the key")
	}
}

func TestMergeFaults(t *testing.T) {
	// The zone's nodes are in two shards: 3 in a, 2 in b. b also saw the
	// slow runtime, which a did not.
	a := &Report{Profile: "p", Nodes: 3, Faults: []Fault{{
		Phase: "partition-zone-a", Kind: "partition", Selector: "pool zone-a", Nodes: 3,
		Start: t0.Add(30 * time.Second), End: t0.Add(150 * time.Second), Seconds: 120,
		NotReady:           Spread{Count: 3, P50Seconds: 41, P99Seconds: 44, MaxSeconds: 44},
		UnreachableTaint:   Spread{Count: 3, P50Seconds: 46, P99Seconds: 90, MaxSeconds: 90},
		TaintRatePerSecond: 0.05, NodeEvictionRate: 0.1, SecondaryNodeEvictionRate: 0.01,
		PodsEvicted: 7, PodsRescheduled: 6, RescheduledStartup: Spread{Count: 6, P50Seconds: 0.8, P99Seconds: 1.2, MaxSeconds: 1.2},
		ReadyAgain: Spread{Count: 3, P50Seconds: 1, P99Seconds: 2, MaxSeconds: 2},
		PodsLost:   1,
		Notes:      []string{"the zone was fully disrupted"},
	}}}
	b := &Report{Profile: "p", Nodes: 2, Faults: []Fault{
		{
			Phase: "slow-runtime", Kind: "runtimeSlow", Selector: "10% of every pool", Nodes: 1,
			Start: t0.Add(200 * time.Second), Seconds: 12.5, ContainerRestarts: 1,
		},
		{
			Phase: "partition-zone-a", Kind: "partition", Selector: "pool zone-a", Nodes: 2,
			// This shard's clock saw it 10 ms later, and its end 20 ms later.
			Start: t0.Add(30*time.Second + 10*time.Millisecond), End: t0.Add(150*time.Second + 20*time.Millisecond), Seconds: 120.01,
			NotReady:           Spread{Count: 2, P50Seconds: 42, P99Seconds: 43, MaxSeconds: 43},
			UnreachableTaint:   Spread{Count: 2, P50Seconds: 60, P99Seconds: 95, MaxSeconds: 95},
			TaintRatePerSecond: 0.03, NodeEvictionRate: 0.1, SecondaryNodeEvictionRate: 0.01,
			PodsEvicted: 5, PodsRescheduled: 4, RescheduledStartup: Spread{Count: 4, P50Seconds: 0.9, P99Seconds: 1.1, MaxSeconds: 1.1},
			ReadyAgain: Spread{Count: 1, P50Seconds: 10, P99Seconds: 10, MaxSeconds: 10}, NotReadyAtReport: 1,
			PodsLost: 1, PodsDuplicated: 1,
			Notes: []string{"the zone was fully disrupted", "one node never came back"},
		},
	}}
	aBefore := slices.Clone(a.Faults[0].Notes)

	m, err := Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	want := []Fault{
		{
			Phase: "partition-zone-a", Kind: "partition", Selector: "pool zone-a", Nodes: 5,
			Start: t0.Add(30 * time.Second), End: t0.Add(150*time.Second + 20*time.Millisecond), Seconds: 120.02,
			NotReady: Spread{Count: 5, P50Seconds: 42, P99Seconds: 44, MaxSeconds: 44},
			// Percentiles: the shards' largest, an upper bound.
			UnreachableTaint:   Spread{Count: 5, P50Seconds: 60, P99Seconds: 95, MaxSeconds: 95},
			TaintRatePerSecond: 0.08, NodeEvictionRate: 0.1, SecondaryNodeEvictionRate: 0.01,
			PodsEvicted: 12, PodsRescheduled: 10, RescheduledStartup: Spread{Count: 10, P50Seconds: 0.9, P99Seconds: 1.2, MaxSeconds: 1.2},
			ReadyAgain: Spread{Count: 4, P50Seconds: 10, P99Seconds: 10, MaxSeconds: 10}, NotReadyAtReport: 1,
			PodsLost: 2, PodsDuplicated: 1,
			Notes: []string{"the zone was fully disrupted", "one node never came back"},
		},
		b.Faults[0],
	}
	if !reflect.DeepEqual(m.Faults, want) {
		gj, _ := json.MarshalIndent(m.Faults, "", " ")
		wj, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("merged faults:\n%s\nwant\n%s", gj, wj)
	}
	if !slices.Equal(a.Faults[0].Notes, aBefore) || a.Faults[0].Nodes != 3 {
		t.Errorf("Merge changed its input: %+v", a.Faults[0])
	}

	// A fault still going in one shard is still going in the merge.
	b.Faults[1].End = time.Time{}
	m, err = Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if f := m.Faults[0]; !f.End.IsZero() || f.Seconds != 120.01 {
		t.Errorf("merged fault end %v, %v s; want still going, the longest shard's 120.01 s", f.End, f.Seconds)
	}
	// Shards reporting no faults leave them as they are.
	m, err = Merge(&Report{Profile: "p"}, a)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.Faults, a.Faults) {
		t.Errorf("merging with a shard without faults changed them: %+v", m.Faults)
	}
}
