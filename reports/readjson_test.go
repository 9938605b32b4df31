package reports

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// writeDoc writes doc to a file of its own and returns the path.
func writeDoc(t *testing.T, name string, doc []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".json")
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkOneLine fails unless err is one line that speaks of JSON, not of
// this package's Go types.
func checkOneLine(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("error is more than one line: %q", msg)
	}
	for _, goTalk := range []string{"Go value", "Go struct", "reports.", "[]reports", "unmarshal"} {
		if strings.Contains(msg, goTalk) {
			t.Errorf("error speaks of Go types (%q): %s", goTalk, msg)
		}
	}
}

func TestReadJSONRefusesNonReports(t *testing.T) {
	good := filepath.Join(t.TempDir(), "report.json")
	if err := WriteJSON(good, sampleReport()); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	truncated := whole[:len(whole)/2]

	const damaged = ", so the file is damaged or not a report"
	for _, tc := range []struct {
		name, doc string
		want      string // the message after "reading report PATH: "
	}{
		{"empty", "", "the file is empty, so it is damaged or not a report"},
		{"white space", " \n\t\n", "the file holds only white space, so it is damaged or not a report"},
		{"array", "[1,2]", "not a fleetlet report (the file holds a JSON array; a report is an object with a schemaVersion)"},
		{"array of reports", `[{"schemaVersion":"fleetlet.io/v1alpha1"}]`, "not a fleetlet report (the file holds a JSON array; a report is an object with a schemaVersion)"},
		{"string", ` "report"`, "not a fleetlet report (the file holds a JSON string; a report is an object with a schemaVersion)"},
		{"number", "42\n", "not a fleetlet report (the file holds a JSON number; a report is an object with a schemaVersion)"},
		{"negative number", "-1", "not a fleetlet report (the file holds a JSON number; a report is an object with a schemaVersion)"},
		{"boolean", "true", "not a fleetlet report (the file holds a JSON boolean; a report is an object with a schemaVersion)"},
		{"null", "null", "not a fleetlet report (the file holds JSON null; a report is an object with a schemaVersion)"},
		{"truncated", string(truncated), fmt.Sprintf("not valid JSON (unexpected end of JSON input at byte %d of %d)", len(truncated), len(truncated)) + damaged},
		{"yaml", "profile: x", "not valid JSON (invalid character 'p' looking for beginning of value at byte 1 of 10)" + damaged},
		{"trailing garbage", `{"schemaVersion":"fleetlet.io/v1alpha1"} x`, "not valid JSON (invalid character 'x' after top-level value at byte 42 of 42)" + damaged},
		{"schemaVersion a number", `{"schemaVersion":1}`, "not a fleetlet report (its schemaVersion is a JSON number, not a string)"},
		{"schemaVersion null", `{"schemaVersion":null}`, "no schemaVersion, so it is not a fleetlet report"},
		{"nodes a string", `{"schemaVersion":"fleetlet.io/v1alpha1","nodes":"12"}`, "nodes holds a JSON string where a report has a whole number" + damaged},
		{"phase count a string", `{"schemaVersion":"fleetlet.io/v1alpha1","phases":[{"name":"x","count":"3"}]}`, "phases.count holds a JSON string where a report has a whole number" + damaged},
		{"phases an object", `{"schemaVersion":"fleetlet.io/v1alpha1","phases":{}}`, "phases holds a JSON object where a report has an array" + damaged},
		{"pods an array", `{"schemaVersion":"fleetlet.io/v1alpha1","pods":[]}`, "pods holds a JSON array where a report has an object" + damaged},
		{"fleet cpu a boolean", `{"schemaVersion":"fleetlet.io/v1alpha1","fleet":{"cpuSeconds":true}}`, "fleet.cpuSeconds holds a JSON bool where a report has a number" + damaged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeDoc(t, "report", []byte(tc.doc))
			_, err := ReadJSON(path)
			if err == nil {
				t.Fatalf("ReadJSON accepted %q", tc.doc)
			}
			if want := "reading report " + path + ": " + tc.want; err.Error() != want {
				t.Errorf("ReadJSON =\n  %s\nwant\n  %s", err, want)
			}
			checkOneLine(t, err)
		})
	}

	// A time in the wrong form is named by its own parser, which knows no
	// field; the message still says what to think of the file.
	path := writeDoc(t, "report", []byte(`{"schemaVersion":"fleetlet.io/v1alpha1","startedAt":"yesterday"}`))
	_, err = ReadJSON(path)
	if err == nil || !strings.HasPrefix(err.Error(), "reading report "+path+": ") || !strings.HasSuffix(err.Error(), damaged) {
		t.Errorf("ReadJSON of a bad time = %v, want it to name %s and end %q", err, path, damaged)
	} else {
		checkOneLine(t, err)
	}
}

// encodeRaw encodes h without going through encodeHistogram, for a
// histogram in another geometry.
func encodeRaw(t *testing.T, h *hdrhistogram.Histogram) string {
	t.Helper()
	b, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// truncateEncoded cuts an encoded histogram's bytes in half and encodes
// them again: valid base64 whose payload is short.
func truncateEncoded(t *testing.T, encoded string) string {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(raw[:len(raw)/2])
}

// sampleReportWithAPIHistograms is sampleReport with a latency histogram in
// every API row, as a run writes them: it holds a latency for each request
// that got a response.
func sampleReportWithAPIHistograms() *Report {
	r := sampleReport()
	for i := range r.API {
		h := NewHistogram()
		answered := r.API[i].Count - r.API[i].Errors
		for v := range answered {
			recordMicros(h, time.Duration(100+v)*time.Microsecond)
		}
		r.API[i].Histogram = encodeHistogram(h)
	}
	return r
}

func TestReadJSONRefusesDamagedHistograms(t *testing.T) {
	const damaged = ": the file is damaged; use an undamaged copy of the report (or merge the shards again), or run the profile again"
	base := sampleReportWithAPIHistograms()
	phase2 := base.Phases[2]
	sli4 := base.SLIs[4]
	api0 := base.API[0]
	apiPatch := base.API[4] // patch pods/status, 3 of its 400 requests failed
	if apiPatch.Verb != "patch" || apiPatch.Label() != "pods/status" || apiPatch.Errors == 0 {
		t.Fatalf("the fixture's API rows moved: api[4] is %s %s", apiPatch.Verb, apiPatch.Label())
	}
	foreign := hdrhistogram.New(1, 1000, 2)
	for range base.Phases[0].Count {
		_ = foreign.RecordValue(500)
	}

	for _, tc := range []struct {
		name   string
		damage func(r *Report)
		// want is the message after "reading report PATH: " and before
		// damaged, "" for none; a want ending in "(" is only its start, the
		// rest being the HdrHistogram decoder's words.
		want string
	}{
		{"undamaged", func(r *Report) {}, ""},
		{"phase not base64", func(r *Report) { r.Phases[2].Histogram = "not base64!" },
			fmt.Sprintf("phases[2] (%s): the histogram does not decode (illegal base64 data at input byte 3)", phase2.Name)},
		{"phase cut short", func(r *Report) { r.Phases[2].Histogram = truncateEncoded(t, phase2.Histogram) },
			fmt.Sprintf("phases[2] (%s): the histogram does not decode (", phase2.Name)},
		{"phase count edited", func(r *Report) { r.Phases[2].Count++ },
			fmt.Sprintf("phases[2] (%s): the histogram holds %d values but its count is %d", phase2.Name, phase2.Count, phase2.Count+1)},
		{"phase of another geometry", func(r *Report) { r.Phases[0].Histogram = encodeRaw(t, foreign) },
			fmt.Sprintf("phases[0] (%s): the histogram tracks 1 to %d µs at 2 significant figures, not the report's 1 to 3600000000 µs at 3", base.Phases[0].Name, foreign.HighestTrackableValue())},
		{"phase with no histogram", func(r *Report) { r.Phases[1].Histogram = "" }, ""},
		{"sli count edited", func(r *Report) { r.SLIs[4].Count = 0 },
			fmt.Sprintf("slis[4] (%s): the histogram holds %d values but its count is 0", sli4.Name, sli4.Count)},
		{"sli not base64", func(r *Report) { r.SLIs[4].Histogram = "%%%%" },
			fmt.Sprintf("slis[4] (%s): the histogram does not decode (illegal base64 data at input byte 0)", sli4.Name)},
		{"api not a histogram", func(r *Report) { r.API[0].Histogram = base64.StdEncoding.EncodeToString([]byte("hello, world")) },
			fmt.Sprintf("api[0] (%s %s): the histogram does not decode (", api0.Verb, api0.Label())},
		{"api count below its latencies", func(r *Report) { r.API[4].Count = 100 },
			fmt.Sprintf("api[4] (patch pods/status): the histogram holds %d values but its count is only 100", apiPatch.Count-apiPatch.Errors)},
		// Requests that failed, or were still in flight, have no latency.
		{"api count above its latencies", func(r *Report) { r.API[4].Count += 5 }, ""},
		{"api with no histogram", func(r *Report) { r.API[5].Histogram = "" }, ""},
		{"heartbeat lateness damaged", func(r *Report) { r.Heartbeat.Lateness.Histogram = truncateEncoded(t, r.Heartbeat.Lateness.Histogram) },
			"heartbeat.lateness: the histogram does not decode ("},
		{"heartbeat write count edited", func(r *Report) { r.Heartbeat.LeaseWriteLatency.Count = 81 },
			"heartbeat.leaseWriteLatency: the histogram holds 80 values but its count is 81"},
		// A report from before write latencies were measured.
		{"heartbeat without write latency", func(r *Report) { r.Heartbeat.LeaseWriteLatency = PhaseSummary{} }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sampleReportWithAPIHistograms()
			tc.damage(r)
			path := filepath.Join(t.TempDir(), "report.json")
			if err := WriteJSON(path, r); err != nil {
				t.Fatal(err)
			}
			got, err := ReadJSON(path)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ReadJSON refused a sound report: %v", err)
				}
				if got == nil {
					t.Fatal("ReadJSON returned no report")
				}
				return
			}
			if err == nil {
				t.Fatal("ReadJSON accepted the damaged report")
			}
			msg := err.Error()
			prefix := "reading report " + path + ": " + tc.want
			if !strings.HasPrefix(msg, prefix) || !strings.HasSuffix(msg, damaged) {
				t.Errorf("ReadJSON =\n  %s\nwant it to begin\n  %s\nand end\n  %s", msg, prefix, damaged)
			}
			if !strings.HasSuffix(tc.want, "(") && msg != prefix+damaged {
				t.Errorf("ReadJSON =\n  %s\nwant\n  %s", msg, prefix+damaged)
			}
			checkOneLine(t, err)
		})
	}
}
