package reports

import (
	"bytes"
	"strings"
	"testing"
)

func TestDiagnosis(t *testing.T) {
	failed := SLOResult{Name: SLOPodStartupLatency, Subject: SLIPodStartup, ThresholdMs: 5000, ObservedMs: 15900, Count: 1000}
	passed := failed
	passed.ObservedMs, passed.Pass = 2100, true
	own := func(p99 float64) []PhaseSummary {
		return []PhaseSummary{{Name: "volumes_mounted_to_running_set", Count: 1000, P99Ms: p99}}
	}
	server := []APICallLatency{
		{Verb: "PATCH", Resource: "pods", Subresource: "status", Scope: "resource", BucketLatency: BucketLatency{Count: 3000, P99Ms: 820}},
		{Verb: "POST", Resource: "events", Scope: "resource", BucketLatency: BucketLatency{Count: 4000, P99Ms: 430}},
		// Too rare to speak for the API server: one slow call.
		{Verb: "DELETE", Resource: "namespaces", Scope: "resource", BucketLatency: BucketLatency{Count: 1, P99Ms: 9000}},
		{Verb: "GET", Resource: "pods", Scope: "resource", BucketLatency: BucketLatency{Count: 3000, P99Ms: 2000}},
	}
	client := []APIStat{{Verb: "patch", Resource: "pods", Subresource: "status", Count: 3000, P99Ms: 1400}}

	cases := []struct {
		name string
		r    Report
		want []string // substrings, in order; nil: no diagnosis
	}{
		{"passed", Report{SLOs: []SLOResult{passed}, Phases: own(3)}, nil},
		{"no SLOs", Report{Phases: own(3)}, nil},
		{"no agent phase", Report{SLOs: []SLOResult{failed}}, nil},
		{"control plane saturated", Report{SLOs: []SLOResult{failed}, Phases: own(3), APIServerLatency: server, API: client}, []string{
			"pod startup p99 15.9 s failed its 5.0 s SLO because the control plane was saturated",
			"the API server's own p99 for PATCH pods/status was 820 ms",
			"the agents waited 1.4 s at p99 for their status patches",
			"the agents' own work (volumes mounted to Running set) was 3.0 ms at p99, under 1 % of it",
			"lower the load's rate or give the control plane more cores",
		}},
		{"saturated, no server metrics", Report{SLOs: []SLOResult{failed}, Phases: own(800)}, []string{
			"because the control plane was saturated: the agents' own work", "800 ms at p99, 5 % of it",
		}},
		{"agents are the bottleneck", Report{SLOs: []SLOResult{failed}, Phases: own(9000), APIServerLatency: server}, []string{
			"pod startup p99 15.9 s failed its 5.0 s SLO, and the agents' own work", "9.0 s at p99, 57 % of it",
			"the agents, not the control plane, are the bottleneck",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Diagnosis(&tc.r)
			if tc.want == nil {
				if got != "" {
					t.Fatalf("Diagnosis = %q, want none", got)
				}
				return
			}
			if strings.Contains(got, "\n") {
				t.Errorf("Diagnosis is not one line: %q", got)
			}
			rest := got
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("Diagnosis = %q\nwant, in order, %q", got, w)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

// TestDiagnosisInEveryRendering: the terminal, Markdown and HTML say the
// same line.
func TestDiagnosisInEveryRendering(t *testing.T) {
	r := &Report{
		Profile: "p",
		SLOs:    []SLOResult{{Name: SLOPodStartupLatency, Subject: SLIPodStartup, ThresholdMs: 5000, ObservedMs: 15900, Count: 10}},
		Phases:  []PhaseSummary{{Name: "volumes_mounted_to_running_set", Count: 10, P99Ms: 3}},
	}
	want := Diagnosis(r)
	var term, md, html bytes.Buffer
	RenderSummary(&term, r)
	if err := RenderMarkdown(&md, r); err != nil {
		t.Fatal(err)
	}
	if err := RenderHTML(&html, r); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"summary": term.String(), "markdown": md.String(), "html": html.String()} {
		// html/template escapes the apostrophes.
		if !strings.Contains(strings.ReplaceAll(out, "&#39;", "'"), want) {
			t.Errorf("%s does not carry the diagnosis %q", name, want)
		}
	}
}
