package reports

import (
	"bytes"
	"html"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// troubledReport is the sample run gone wrong in every way a renderer has
// to word: pod startup over its SLO (with a diagnosis), the API SLOs
// skipped for want of apiserver metrics, phases and SLIs with overflows and
// anomalies, pods left out of an SLI, no wall time (no request rates), a
// fleet whose cost was not measured, two errors, and two faults (one that
// the control plane acted on, one still going that did nothing).
func troubledReport() *Report {
	r := sampleReport()
	r.SchemaVersion = SchemaVersion
	r.WallSeconds = 0
	r.Fleet = FleetStats{}
	r.Series = Series{}
	r.APIServerLatency = nil
	r.Phases[1].Overflows = 2
	r.SLIs[1].Excluded = 1
	r.SLIs[2].Overflows = 1
	r.Errors = append(r.Errors, "node fleetlet-3: lease not renewed for 40s")
	groups := NewCollector()
	startPods(groups, GroupName("small", "Deployment"), 6, 900*time.Millisecond)
	startPods(groups, GroupName("big", "Deployment"), 4, 2500*time.Millisecond)
	startPods(groups, GroupName("latency", "Pod"), 2, 80*time.Millisecond)
	r.PodGroups = GroupSummaries(groups)
	r.Workloads = []PhaseSummary{DurationSummary("running/Deployment", []time.Duration{time.Second, 3 * time.Second})}
	r.Faults = sampleFaults()
	r.EvaluateSLOs(SLOThresholds{PodStartupP99: metav1.Duration{Duration: 100 * time.Millisecond}})
	return r
}

func TestRenderTroubledGolden(t *testing.T) {
	r := troubledReport()
	if Diagnosis(r) == "" {
		t.Fatal("the troubled fixture has no diagnosis")
	}
	var term, md, page bytes.Buffer
	RenderSummary(&term, r)
	checkGolden(t, "summary.troubled.golden", term.Bytes())
	if err := RenderMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "report.troubled.md.golden", md.Bytes())
	if err := RenderHTML(&page, r); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "report.troubled.html.golden", page.Bytes())
	if err := checkWellFormed(page.Bytes()); err != nil {
		t.Fatalf("report.html is not well-formed: %v", err)
	}
}

// TestRenderersAgree: every sentence and value of the view that the
// terminal, report.md and report.html all show is in each of them, in the
// same words, faults included. (The headline facts, the server-side API
// table and the Fleet section are report.md's and report.html's only; the
// terminal's header line has the fleet's cost.)
func TestRenderersAgree(t *testing.T) {
	for name, r := range map[string]*Report{"sample": sampleReport(), "troubled": troubledReport()} {
		t.Run(name, func(t *testing.T) {
			v := buildView(r)
			var term, md, page bytes.Buffer
			RenderSummary(&term, r)
			if err := RenderMarkdown(&md, r); err != nil {
				t.Fatal(err)
			}
			if err := RenderHTML(&page, r); err != nil {
				t.Fatal(err)
			}
			outputs := map[string]string{
				"summary":  term.String(),
				"markdown": mdUnescape.Replace(md.String()),
				"html":     html.UnescapeString(htmlTag.ReplaceAllString(page.String(), "")),
			}

			// report.html says the verdict with its pill, not VerdictLabel.
			if out := outputs["summary"] + outputs["markdown"]; strings.Count(out, v.VerdictLabel) < 2 {
				t.Errorf("the summary or report.md lacks the verdict %q", v.VerdictLabel)
			}
			want := []string{v.VerdictText}
			if v.Diagnosis != "" {
				want = append(want, v.Diagnosis)
			}
			want = append(want, v.SLINotes...)
			want = append(want, v.Notes...)
			for _, s := range v.SLOSummary {
				for _, f := range s.Failing {
					want = append(want, s.Name+": "+f)
				}
				if s.Note != "" {
					want = append(want, s.Note)
				}
			}
			for _, kv := range append(append(v.Scheduling, v.Heartbeat...), v.Settings...) {
				want = append(want, kv.Key, kv.Value)
			}
			want = append(want, v.Errors...)
			for _, f := range v.Faults {
				want = append(want, f.Heading)
				for _, kv := range f.Facts {
					want = append(want, kv.Key, kv.Value)
				}
				want = append(want, f.Notes...)
			}
			for _, row := range v.API {
				want = append(want, row.Resource, row.Rate, row.EventsPerNode, row.Sent, row.Received)
			}
			for _, p := range append(v.Phases, v.SLIs...) {
				want = append(want, p.Name, p.P50, p.P90, p.P99, p.Max)
			}
			for renderer, out := range outputs {
				for _, w := range want {
					if !strings.Contains(out, w) {
						t.Errorf("%s lacks %q", renderer, w)
					}
				}
			}
		})
	}
}

// mdUnescape undoes mdText's escapes.
var mdUnescape = strings.NewReplacer(`\\`, `\`, "\\`", "`", `\*`, `*`, `\_`, `_`, `\[`, `[`, `\]`, `]`, `\<`, `<`, `\>`, `>`, `\#`, `#`, `\|`, `|`)

var htmlTag = regexp.MustCompile(`<[^>]*>`)

func TestVerdictOf(t *testing.T) {
	pass := func(name string) SLOResult {
		return SLOResult{Name: name, Subject: "s", Pass: true, ThresholdMs: 10, ObservedMs: 1}
	}
	fail := func(name string) SLOResult {
		return SLOResult{Name: name, Subject: "s", ThresholdMs: 10, ObservedMs: 20}
	}
	skip := func(name string) SLOResult { return SLOResult{Name: name, Pass: true, Skipped: true} }
	for _, tc := range []struct {
		name         string
		slos         []SLOResult
		status, text string
	}{
		{"none", nil, "unchecked", "SLOs not checked"},
		{"all pass", []SLOResult{pass(SLOPodStartupLatency), pass(SLOMutatingAPICallLatency)}, "pass", "All 2 SLOs checked pass"},
		{"one passes", []SLOResult{pass(SLOPodStartupLatency), skip(SLOMutatingAPICallLatency)},
			"pass", "The 1 SLO checked passes (1 skipped: Mutating API call latency)"},
		{"one of one fails", []SLOResult{fail(SLOPodStartupLatency)}, "fail", "1 of 1 SLO failed: Pod startup latency"},
		// Skipped SLOs are not counted as checked.
		{"fails, one skipped", []SLOResult{fail(SLOPodStartupLatency), pass(SLOMutatingAPICallLatency), fail(SLOMutatingAPICallLatency), skip(SLOReadOnlyAPICallLatency)},
			"fail", "2 of 2 SLOs failed: Pod startup latency, Mutating API call latency (1 skipped: Read-only API call latency)"},
		{"all skipped", []SLOResult{skip(SLOPodStartupLatency), skip(SLOReadOnlyAPICallLatency)},
			"unchecked", "2 skipped: Pod startup latency, Read-only API call latency"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, text := verdictOf(&Report{SLOs: tc.slos})
			if status != tc.status || text != tc.text {
				t.Errorf("verdictOf = %q, %q; want %q, %q", status, text, tc.status, tc.text)
			}
		})
	}
}

func TestPhaseNotes(t *testing.T) {
	r := &Report{
		Phases: []PhaseSummary{{Name: "a", Anomalies: 1}, {Name: "b", Anomalies: 2, Overflows: 1}},
		SLIs:   []PhaseSummary{{Name: "c", Overflows: 3}},
	}
	want := []string{
		"phase a: 1 pod stamped its end before its start (a clock or milestone bug); left out of the phase.",
		"phase b: 2 pods stamped their end before their start (a clock or milestone bug); left out of the phase.",
		"phase b: 1 pod took longer than 1h; counted as 1h.",
		"SLI c: 3 pods took longer than 1h; counted as 1h.",
	}
	if got := phaseNotes(r); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("phaseNotes =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRunOfUnmeasured: a cost that was not measured says so, the same way
// in the terminal's header and in the Fleet section.
func TestRunOfUnmeasured(t *testing.T) {
	run := runOf(&Report{})
	if run.PeakRSS != "unknown" || run.CPU != "" || run.Goroutines != "" || run.Started != "" {
		t.Errorf("runOf(empty) = %+v", run)
	}
	for _, kv := range fleetFacts(&Report{}) {
		if kv.Value != "unknown" {
			t.Errorf("fleet fact %s = %q, want unknown", kv.Key, kv.Value)
		}
	}
}

// TestHeartbeatFactsSendLateness: the fleet's own part of the lateness is a
// line of its own when measured, and no line when not (older reports).
func TestHeartbeatFactsSendLateness(t *testing.T) {
	has := func(r *Report) bool {
		for _, kv := range heartbeatFacts(r) {
			if strings.HasPrefix(kv.Key, "Lease renewal send lateness") {
				return true
			}
		}
		return false
	}
	r := &Report{Heartbeat: &HeartbeatStats{Nodes: 1}}
	if has(r) {
		t.Error("a report without send lateness shows it")
	}
	r.Heartbeat.SendLateness = PhaseSummary{Count: 3, P50Ms: 1, P99Ms: 2, MaxMs: 3}
	if !has(r) {
		t.Error("a report with send lateness does not show it")
	}
}
