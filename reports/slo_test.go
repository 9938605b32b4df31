package reports

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func apiCallRow(verb, resource, subresource, scope string, count int64, p99Ms float64) APICallLatency {
	return APICallLatency{Verb: verb, Resource: resource, Subresource: subresource, Scope: scope,
		BucketLatency: BucketLatency{Count: count, P99Ms: p99Ms}}
}

func sloReport() *Report {
	return &Report{
		SLIs: []PhaseSummary{{Name: SLIPodStartup, Count: 100, P99Ms: 4200, Excluded: 3}},
		APIServerLatency: []APICallLatency{
			apiCallRow("POST", "pods", "", "resource", 100, 300),
			apiCallRow("PATCH", "pods", "status", "resource", 100, 1000),     // at the limit: passes
			apiCallRow("DELETECOLLECTION", "pods", "", "namespace", 2, 1200), // mutating, over
			apiCallRow("GET", "pods", "", "resource", 100, 1001),             // over 1 s
			apiCallRow("LIST", "pods", "", "namespace", 10, 25000),           // under 30 s
			apiCallRow("LIST", "pods", "", "cluster", 10, 31000),             // over 30 s
			apiCallRow("WATCH", "pods", "", "cluster", 10, 60000),            // a stream: not checked
			apiCallRow("CONNECT", "pods", "exec", "resource", 1, 60000),      // a stream: not checked
			apiCallRow("GET", "", "", "", 10, 5000),                          // /healthz: not an API call
		},
	}
}

func TestCheckSLOsDefaults(t *testing.T) {
	r := sloReport()
	got := CheckSLOs(r, SLOThresholds{})
	type verdict struct {
		name, subject string
		pass          bool
		limit         float64
	}
	want := []verdict{
		{SLOPodStartupLatency, "pod_startup", true, 5000},
		{SLOMutatingAPICallLatency, "POST pods", true, 1000},
		{SLOMutatingAPICallLatency, "PATCH pods/status", true, 1000},
		{SLOMutatingAPICallLatency, "DELETECOLLECTION pods", false, 1000},
		{SLOReadOnlyAPICallLatency, "GET pods (resource)", false, 1000},
		{SLOReadOnlyAPICallLatency, "LIST pods (namespace)", true, 30000},
		{SLOReadOnlyAPICallLatency, "LIST pods (cluster)", false, 30000},
	}
	var have []verdict
	for _, s := range got {
		have = append(have, verdict{s.Name, s.Subject, s.Pass, s.ThresholdMs})
		if s.Skipped {
			t.Errorf("%s %s skipped", s.Name, s.Subject)
		}
	}
	if len(have) != len(want) {
		t.Fatalf("got %d results %+v, want %d", len(have), have, len(want))
	}
	for i := range want {
		if have[i] != want[i] {
			t.Errorf("result %d = %+v, want %+v", i, have[i], want[i])
		}
	}
	if !strings.Contains(got[0].Detail, "3 pods that pulled an image left out") {
		t.Errorf("pod startup detail = %q", got[0].Detail)
	}

	r.EvaluateSLOs(SLOThresholds{})
	if !r.Failed() {
		t.Errorf("Failed() = false with three failing checks")
	}
	if r.SLOThresholds == nil || r.SLOThresholds.PodStartupP99.Duration != 5*time.Second {
		t.Errorf("EvaluateSLOs stored thresholds %+v, want the defaults", r.SLOThresholds)
	}
}

func TestCheckSLOsConfigured(t *testing.T) {
	r := sloReport()
	// Looser API limits, a tighter pod startup one, mutating calls off.
	th := SLOThresholds{
		MutatingAPICallP99:          metav1.Duration{Duration: -1},
		ReadOnlyResourceAPICallP99:  metav1.Duration{Duration: 2 * time.Second},
		ReadOnlyNamespaceAPICallP99: metav1.Duration{Duration: 20 * time.Second},
		ReadOnlyClusterAPICallP99:   metav1.Duration{Duration: time.Minute},
		PodStartupP99:               metav1.Duration{Duration: 4 * time.Second},
	}
	r.EvaluateSLOs(th)
	fails := map[string]bool{}
	for _, s := range r.SLOs {
		if s.Name == SLOMutatingAPICallLatency && (!s.Skipped || !strings.Contains(s.Detail, "turned off")) {
			t.Errorf("mutating check with a negative threshold = %+v, want one skipped result saying it is off", s)
		}
		if !s.Pass {
			fails[s.Subject] = true
		}
	}
	want := map[string]bool{"pod_startup": true, "LIST pods (namespace)": true}
	if !mapsEqualBool(fails, want) {
		t.Errorf("failing = %v, want %v", fails, want)
	}
	if !r.Failed() {
		t.Errorf("Failed() = false")
	}

	// Everything within limits passes.
	r.EvaluateSLOs(SLOThresholds{
		MutatingAPICallP99:          metav1.Duration{Duration: 2 * time.Second},
		ReadOnlyResourceAPICallP99:  metav1.Duration{Duration: 2 * time.Second},
		ReadOnlyNamespaceAPICallP99: metav1.Duration{Duration: 40 * time.Second},
		ReadOnlyClusterAPICallP99:   metav1.Duration{Duration: 40 * time.Second},
	})
	if r.Failed() {
		t.Errorf("Failed() = true within every limit: %+v", r.SLOs)
	}
}

func mapsEqualBool(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestCheckSLOsWithoutData(t *testing.T) {
	r := &Report{}
	r.EvaluateSLOs(SLOThresholds{})
	if len(r.SLOs) != 3 {
		t.Fatalf("got %d results, want one skipped result per SLO: %+v", len(r.SLOs), r.SLOs)
	}
	for _, s := range r.SLOs {
		if !s.Skipped || !s.Pass || s.Detail == "" {
			t.Errorf("%s without data = %+v, want skipped with a reason", s.Name, s)
		}
	}
	if r.Failed() {
		t.Errorf("a report without data failed its SLOs")
	}
	// No pod without a pull: skipped, not failed.
	r = &Report{SLIs: []PhaseSummary{{Name: SLIPodStartup, Excluded: 10}}}
	if res := CheckSLOs(r, SLOThresholds{}); !res[0].Skipped || !strings.Contains(res[0].Detail, "no pods") {
		t.Errorf("pod startup with no pods = %+v", res[0])
	}
}

func TestSLOThresholdsInAProfile(t *testing.T) {
	// The profile's owner embeds SLOThresholds; this is how it reads from YAML.
	var th SLOThresholds
	if err := yaml.UnmarshalStrict([]byte("podStartupP99: 10s\nmutatingAPICallP99: 500ms\n"), &th); err != nil {
		t.Fatal(err)
	}
	d := th.Defaulted()
	if d.PodStartupP99.Duration != 10*time.Second || d.MutatingAPICallP99.Duration != 500*time.Millisecond ||
		d.ReadOnlyClusterAPICallP99.Duration != 30*time.Second || d.ReadOnlyResourceAPICallP99.Duration != time.Second {
		t.Errorf("defaulted = %+v", d)
	}
	if err := yaml.UnmarshalStrict([]byte("podStartup: 10s\n"), &th); err == nil {
		t.Errorf("an unknown key was accepted")
	}
	// Zero values stay out of the JSON.
	data, _ := json.Marshal(SLOThresholds{PodStartupP99: metav1.Duration{Duration: time.Second}})
	if string(data) != `{"podStartupP99":"1s"}` {
		t.Errorf("JSON = %s", data)
	}
}
