package reports

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A soak runs a fleet under a steady churn for a long time and samples the
// fleet process every interval, to find what grows: memory the process
// never gives back, goroutines or file descriptors that leak with every pod,
// leases that come later and later. Its verdict compares the end of the run
// with the start of its tail (the run less its first quarter, which holds
// the fleet's registration and the first pods' caches filling), and checks
// that no lease was ever late by the limit and no node was ever NotReady.

// SoakSample is the fleet process at one moment of a soak.
type SoakSample struct {
	// AtSeconds is the time since the soak's load started.
	AtSeconds float64 `json:"atSeconds"`
	// RSSBytes is the process's resident set (VmRSS).
	RSSBytes int64 `json:"rssBytes"`
	// HeapLiveBytes is the heap the last garbage collection kept
	// (/gc/heap/live:bytes): the live heap, without the garbage a sample
	// taken just before a collection would count.
	HeapLiveBytes int64 `json:"heapLiveBytes"`
	Goroutines    int   `json:"goroutines"`
	// OpenFDs counts the process's open file descriptors: connections,
	// sockets, files.
	OpenFDs int `json:"openFDs"`
	// LeaseLatenessMaxMs is the latest lease renewal since the previous
	// sample: how long after the renew interval it came.
	LeaseLatenessMaxMs float64 `json:"leaseLatenessMaxMs"`
	// NodesNotReady counts the fleet's nodes whose Ready condition was not
	// True when the sample was taken.
	NodesNotReady int `json:"nodesNotReady"`
	// NodeNotReadyEvents counts the node lifecycle controller's
	// NodeNotReady events for the fleet's nodes seen so far in the run.
	NodeNotReadyEvents int `json:"nodeNotReadyEvents"`
	// PodsCreated and PodsGone are the driver's counts so far.
	PodsCreated int `json:"podsCreated"`
	PodsGone    int `json:"podsGone"`
}

// SoakLimits are what a soak must stay within.
type SoakLimits struct {
	// MaxGrowth is the largest growth of RSS, live heap, goroutines and
	// open file descriptors over the tail, as a fraction (0.05: 5 %).
	MaxGrowth float64 `json:"maxGrowth"`
	// MaxLeaseLatenessMs bounds every lease renewal's lateness.
	MaxLeaseLatenessMs float64 `json:"maxLeaseLatenessMs"`
}

// DefaultSoakLimits are #20's: under 5 % growth, no lease later than 10 s.
var DefaultSoakLimits = SoakLimits{MaxGrowth: 0.05, MaxLeaseLatenessMs: 10_000}

// SoakCheck is one line of a soak's verdict.
type SoakCheck struct {
	Name string `json:"name"`
	// Value and Limit are formatted for people: "2.1 %", "≤ 5 %".
	Value string `json:"value"`
	Limit string `json:"limit"`
	Pass  bool   `json:"pass"`
	// Detail says what the value is made of: the samples compared.
	Detail string `json:"detail,omitempty"`
}

// Soak is a soak's result: its samples and its verdict.
type Soak struct {
	Profile         string       `json:"profile"`
	Nodes           int          `json:"nodes"`
	StartedAt       time.Time    `json:"startedAt"`
	DurationSeconds float64      `json:"durationSeconds"`
	IntervalSeconds float64      `json:"intervalSeconds"`
	ChurnQPS        float64      `json:"churnQPS"`
	Limits          SoakLimits   `json:"limits"`
	Samples         []SoakSample `json:"samples"`
	// TailFromSeconds is where the tail the growth is measured over
	// starts.
	TailFromSeconds float64     `json:"tailFromSeconds"`
	Checks          []SoakCheck `json:"checks"`
	Pass            bool        `json:"pass"`
	// Errors are what went wrong in the run itself (the load's failures);
	// a soak with errors does not pass.
	Errors []string `json:"errors,omitempty"`
}

// soakEdgeSamples is how many samples the start and the end of the tail are
// each the median of: one sample can catch a burst of goroutines or a
// collection in flight; the median of five cannot be moved by one.
const soakEdgeSamples = 5

// Evaluate fills the soak's tail, checks and verdict from its samples and
// errors.
func (s *Soak) Evaluate() {
	s.Checks = nil
	s.TailFromSeconds = 0
	if len(s.Samples) == 0 {
		s.Checks = append(s.Checks, SoakCheck{Name: "samples", Value: "0", Limit: "≥ 1", Detail: "the soak ended before its first sample"})
		s.Pass = false
		return
	}
	last := s.Samples[len(s.Samples)-1].AtSeconds
	s.TailFromSeconds = last / 4
	tail := slices.IndexFunc(s.Samples, func(x SoakSample) bool { return x.AtSeconds >= s.TailFromSeconds })
	samples := s.Samples[tail:]
	// The start and the end of the tail must not overlap: with few samples
	// each edge is a third of them.
	k := max(1, min(soakEdgeSamples, len(samples)/3))
	start, end := samples[:k], samples[len(samples)-k:]
	growth := func(name string, get func(SoakSample) float64, format func(float64) string) {
		from, to := medianOf(start, get), medianOf(end, get)
		g := 0.0
		if from > 0 {
			g = to/from - 1
		}
		s.Checks = append(s.Checks, SoakCheck{
			Name: name + " growth",
			// + 0 turns a rounded -0 into 0.
			Value: strconv.FormatFloat(roundTo(100*g, 1)+0, 'f', -1, 64) + " %",
			Limit: "≤ " + strconv.FormatFloat(100*s.Limits.MaxGrowth, 'f', -1, 64) + " %",
			Pass:  g <= s.Limits.MaxGrowth,
			Detail: fmt.Sprintf("%s (median of %d samples from %s) → %s (median of the last %d, to %s)",
				format(from), k, fmtMinutes(start[0].AtSeconds), format(to), k, fmtMinutes(last)),
		})
	}
	growth("RSS", func(x SoakSample) float64 { return float64(x.RSSBytes) }, fmtMiB)
	growth("live heap", func(x SoakSample) float64 { return float64(x.HeapLiveBytes) }, fmtMiB)
	growth("goroutines", func(x SoakSample) float64 { return float64(x.Goroutines) }, fmtCount)
	growth("open file descriptors", func(x SoakSample) float64 { return float64(x.OpenFDs) }, fmtCount)

	worst := slices.MaxFunc(s.Samples, func(a, b SoakSample) int {
		return cmpFloat(a.LeaseLatenessMaxMs, b.LeaseLatenessMaxMs)
	})
	s.Checks = append(s.Checks, SoakCheck{
		Name:   "lease renewal lateness, max",
		Value:  fmtTickMs(roundTo(worst.LeaseLatenessMaxMs, 1)),
		Limit:  "≤ " + fmtTickMs(s.Limits.MaxLeaseLatenessMs),
		Pass:   worst.LeaseLatenessMaxMs <= s.Limits.MaxLeaseLatenessMs,
		Detail: "over the whole run; the worst came in the interval ending at " + fmtMinutes(worst.AtSeconds),
	})
	notReady, events := 0, 0
	for _, x := range s.Samples {
		notReady = max(notReady, x.NodesNotReady)
		events = max(events, x.NodeNotReadyEvents)
	}
	s.Checks = append(s.Checks, SoakCheck{
		Name:   "nodes NotReady",
		Value:  fmt.Sprintf("%d seen, %d NodeNotReady events", notReady, events),
		Limit:  "0",
		Pass:   notReady == 0 && events == 0,
		Detail: "nodes not Ready at any sample, and the node lifecycle controller's events over the whole run",
	})
	s.Pass = len(s.Errors) == 0
	for _, c := range s.Checks {
		s.Pass = s.Pass && c.Pass
	}
}

func medianOf(samples []SoakSample, get func(SoakSample) float64) float64 {
	vals := make([]float64, len(samples))
	for i, x := range samples {
		vals[i] = get(x)
	}
	slices.Sort(vals)
	if n := len(vals); n%2 == 0 {
		return (vals[n/2-1] + vals[n/2]) / 2
	}
	return vals[len(vals)/2]
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func fmtMiB(b float64) string {
	return strconv.FormatFloat(roundTo(b/(1<<20), 1), 'f', -1, 64) + " MiB"
}
func fmtCount(n float64) string {
	return strconv.FormatFloat(roundTo(n, 0), 'f', -1, 64)
}
func fmtMinutes(sec float64) string {
	return (time.Duration(sec) * time.Second).Round(time.Second).String()
}

// WriteSoak writes the soak as JSON to path.
func WriteSoak(path string, s *Soak) error {
	raw, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(raw, '\n'), 0o644)
}

// RenderSoakMarkdown writes the soak's verdict and its samples as Markdown.
func RenderSoakMarkdown(w io.Writer, s *Soak) error {
	var b strings.Builder
	verdict := "PASS"
	if !s.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "# Soak: %s, %d nodes, %s at %s pods/s: %s\n\n", s.Profile, s.Nodes,
		fmtMinutes(s.DurationSeconds), strconv.FormatFloat(s.ChurnQPS, 'f', -1, 64), verdict)
	fmt.Fprintf(&b, "Started %s; a sample every %s; growth measured from %s to the end.\n\n",
		s.StartedAt.UTC().Format(time.RFC3339), fmtMinutes(s.IntervalSeconds), fmtMinutes(s.TailFromSeconds))
	b.WriteString("| check | value | limit | | how |\n|---|---|---|---|---|\n")
	for _, c := range s.Checks {
		mark := "pass"
		if !c.Pass {
			mark = "**FAIL**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", c.Name, c.Value, c.Limit, mark, c.Detail)
	}
	for _, e := range s.Errors {
		fmt.Fprintf(&b, "\nError: %s\n", e)
	}
	b.WriteString("\n## Samples\n\n| at | RSS | live heap | goroutines | open fds | lease late max | not Ready | NodeNotReady events | pods created | pods gone |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range s.Samples {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %s | %d | %d | %d | %d |\n", fmtMinutes(x.AtSeconds),
			fmtMiB(float64(x.RSSBytes)), fmtMiB(float64(x.HeapLiveBytes)), x.Goroutines, x.OpenFDs,
			fmtTickMs(roundTo(x.LeaseLatenessMaxMs, 1)), x.NodesNotReady, x.NodeNotReadyEvents, x.PodsCreated, x.PodsGone)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// RenderSoakHTML writes the soak as a page: the verdict, a chart of each
// growing quantity relative to its value where the tail starts (so that one
// axis shows them all against the limit), and one of lease lateness.
func RenderSoakHTML(w io.Writer, s *Soak) error {
	charts := []chart{}
	if c, ok := soakGrowthChart(s); ok {
		charts = append(charts, c)
	}
	if c, ok := soakLatenessChart(s); ok {
		charts = append(charts, c)
	}
	return soakPage.Execute(w, struct {
		Title  string
		Pass   bool
		Soak   *Soak
		Charts []chart
	}{Title: fmt.Sprintf("Soak: %s, %d nodes", s.Profile, s.Nodes), Pass: s.Pass, Soak: s, Charts: charts})
}

var soakPage = template.Must(template.New("soak").Funcs(template.FuncMap{
	"mib": func(b int64) string { return strconv.FormatFloat(roundTo(float64(b)/(1<<20), 1), 'f', -1, 64) },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;max-width:1000px;margin:2em auto;color:#1f2328}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #d0d7de;padding:4px 8px;text-align:left}
.pass{color:#1a7f37}.fail{color:#cf222e;font-weight:bold}.legend span{margin-right:1.5em}.swatch{display:inline-block;width:14px;height:3px;vertical-align:middle;margin-right:4px}</style></head>
<body><h1>{{.Title}}: {{if .Pass}}<span class="pass">PASS</span>{{else}}<span class="fail">FAIL</span>{{end}}</h1>
<p>{{.Soak.DurationSeconds | printf "%.0f"}} s under a churn of {{.Soak.ChurnQPS}} pods/s, started {{.Soak.StartedAt.UTC.Format "2006-01-02 15:04:05 UTC"}}.</p>
<table><tr><th>check</th><th>value</th><th>limit</th><th></th><th>how</th></tr>
{{range .Soak.Checks}}<tr><td>{{.Name}}</td><td>{{.Value}}</td><td>{{.Limit}}</td><td>{{if .Pass}}<span class="pass">pass</span>{{else}}<span class="fail">FAIL</span>{{end}}</td><td>{{.Detail}}</td></tr>
{{end}}</table>
{{range .Soak.Errors}}<p class="fail">Error: {{.}}</p>{{end}}
{{range .Charts}}<h2>{{.Title}}</h2>{{.SVG}}<div class="legend">{{range .Legend}}<span><span class="swatch" style="background:{{.Color}}"></span>{{.Label}}</span>{{end}}</div>{{if .Note}}<p>{{.Note}}</p>{{end}}{{end}}
<h2>Samples</h2><table><tr><th>at</th><th>RSS MiB</th><th>live heap MiB</th><th>goroutines</th><th>open fds</th><th>lease late max ms</th><th>not Ready</th><th>NodeNotReady events</th><th>pods created</th><th>pods gone</th></tr>
{{range .Soak.Samples}}<tr><td>{{printf "%.0f" .AtSeconds}} s</td><td>{{mib .RSSBytes}}</td><td>{{mib .HeapLiveBytes}}</td><td>{{.Goroutines}}</td><td>{{.OpenFDs}}</td><td>{{printf "%.0f" .LeaseLatenessMaxMs}}</td><td>{{.NodesNotReady}}</td><td>{{.NodeNotReadyEvents}}</td><td>{{.PodsCreated}}</td><td>{{.PodsGone}}</td></tr>
{{end}}</table></body></html>
`))

// soakSeries are the quantities whose growth a soak checks.
var soakSeries = []struct {
	name string
	get  func(SoakSample) float64
}{
	{"RSS", func(x SoakSample) float64 { return float64(x.RSSBytes) }},
	{"live heap", func(x SoakSample) float64 { return float64(x.HeapLiveBytes) }},
	{"goroutines", func(x SoakSample) float64 { return float64(x.Goroutines) }},
	{"open file descriptors", func(x SoakSample) float64 { return float64(x.OpenFDs) }},
}

// soakGrowthChart draws each growing quantity as a percentage of its value
// at the tail's start, with the limit as a dashed line.
func soakGrowthChart(s *Soak) (chart, bool) {
	if len(s.Samples) < 2 {
		return chart{}, false
	}
	tail := max(0, slices.IndexFunc(s.Samples, func(x SoakSample) bool { return x.AtSeconds >= s.TailFromSeconds }))
	lines := make([][]float64, len(soakSeries))
	yMin, yMax := 100.0, 100*(1+s.Limits.MaxGrowth)
	for i, ser := range soakSeries {
		base := ser.get(s.Samples[tail])
		if base <= 0 {
			continue
		}
		for _, x := range s.Samples {
			v := 100 * ser.get(x) / base
			lines[i] = append(lines[i], v)
			yMin, yMax = min(yMin, v), max(yMax, v)
		}
	}
	yMin = math.Floor(yMin/10) * 10
	yMax = math.Ceil(yMax*1.02/10) * 10
	total := s.Samples[len(s.Samples)-1].AtSeconds
	xOf := func(sec float64) float64 { return plotLeft + sec/math.Max(total, 1)*plotW }
	yOf := func(v float64) float64 { return plotTop + (1-(v-yMin)/(yMax-yMin))*plotH }
	c := newSVG("Growth relative to the tail's start")
	for x := 0.0; x <= total+1e-9; x += niceTimeStep(total, 8) {
		c.xTick(xOf(x), fmtTickSeconds(x), true)
	}
	for y := yMin; y <= yMax+1e-9; y += niceStep(yMax-yMin, 5) {
		c.yTick(yOf(y), strconv.FormatFloat(y, 'f', -1, 64)+" %")
	}
	limit := 100 * (1 + s.Limits.MaxGrowth)
	c.line(plotLeft, yOf(limit), plotLeft+plotW, yOf(limit), markerColor, referenceDash)
	c.line(xOf(s.TailFromSeconds), plotTop, xOf(s.TailFromSeconds), plotTop+plotH, markerColor, markerDash)
	c.text(xOf(s.TailFromSeconds), plotTop-8, "middle", markerColor, "tail starts")
	c.frame("time since the load started", "% of the value where the tail starts")
	var legend []legendItem
	for i, ser := range soakSeries {
		if len(lines[i]) == 0 {
			continue
		}
		pts := make([][2]float64, len(lines[i]))
		for j, v := range lines[i] {
			pts[j] = [2]float64{xOf(s.Samples[j].AtSeconds), yOf(v)}
		}
		color := paletteColor(i)
		c.polyline(pts, color, ser.name)
		legend = append(legend, legendItem{Color: template.CSS(color), Label: ser.name})
	}
	legend = append(legend, legendItem{Color: markerColor, Label: "limit", Dashed: true})
	return chart{Title: "Growth", SVG: c.done(), Legend: legend, Note: "Each line is its quantity divided by its value at the first sample of the tail."}, true
}

// soakLatenessChart draws the latest lease renewal of every interval, with
// the limit.
func soakLatenessChart(s *Soak) (chart, bool) {
	if len(s.Samples) < 2 {
		return chart{}, false
	}
	total := s.Samples[len(s.Samples)-1].AtSeconds
	yMax := s.Limits.MaxLeaseLatenessMs
	for _, x := range s.Samples {
		yMax = max(yMax, x.LeaseLatenessMaxMs)
	}
	yMax *= 1.05
	xOf := func(sec float64) float64 { return plotLeft + sec/math.Max(total, 1)*plotW }
	yOf := func(v float64) float64 { return plotTop + (1-v/yMax)*plotH }
	c := newSVG("Latest lease renewal per interval")
	for x := 0.0; x <= total+1e-9; x += niceTimeStep(total, 8) {
		c.xTick(xOf(x), fmtTickSeconds(x), true)
	}
	for y := 0.0; y <= yMax+1e-9; y += niceStep(yMax, 5) {
		c.yTick(yOf(y), fmtTickMs(y))
	}
	c.line(plotLeft, yOf(s.Limits.MaxLeaseLatenessMs), plotLeft+plotW, yOf(s.Limits.MaxLeaseLatenessMs), markerColor, referenceDash)
	c.frame("time since the load started", "lateness")
	pts := make([][2]float64, len(s.Samples))
	for j, x := range s.Samples {
		pts[j] = [2]float64{xOf(x.AtSeconds), yOf(x.LeaseLatenessMaxMs)}
	}
	c.polyline(pts, paletteColor(0), "lease renewal lateness, max per interval")
	return chart{Title: "Lease renewal lateness", SVG: c.done(), Legend: []legendItem{
		{Color: template.CSS(paletteColor(0)), Label: "latest renewal in the interval"},
		{Color: markerColor, Label: "limit", Dashed: true},
	}}, true
}
