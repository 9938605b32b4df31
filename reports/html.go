package reports

import (
	"bufio"
	_ "embed"
	"html/template"
	"io"
)

//go:embed report.html.tmpl
var htmlTemplateText string

// htmlTemplate is parsed once; a parsed template is read-only and safe for
// concurrent Execute.
var htmlTemplate = template.Must(template.New("report.html").Parse(htmlTemplateText))

// htmlView is the report view with the charts that only HTML has.
type htmlView struct {
	reportView
	SLIChart, PhaseChart, PodsChart, APIChart, LatenessChart *chart
}

// RenderHTML writes r as report.html: one self-contained file, with inline
// CSS and inline SVG charts and no script or external asset, so it opens
// anywhere, offline. It holds what report.md holds, plus up to five charts:
// the latency distributions of the SLIs and of the phases (decoded from their
// HdrHistograms), pods created and Running over time, the fleet's API
// request rate by verb, and the distribution of lease renewal lateness. Text from the report is escaped by html/template. It
// returns the first write error.
func RenderHTML(w io.Writer, r *Report) error {
	v := htmlView{reportView: buildView(r)}
	v.SLIChart = phaseCDFChart("Pod startup SLIs: latency distribution", r.SLIs)
	v.PhaseChart = phaseCDFChart("Phases: latency distribution", r.Phases)
	v.PodsChart = podsChart(r.Series.Pods)
	v.APIChart = apiRateChart(r.Series)
	if hb := r.Heartbeat; hb != nil {
		v.LatenessChart = phaseCDFChart("Lease renewal lateness: distribution", []PhaseSummary{hb.Lateness})
	}
	bw := bufio.NewWriter(w)
	if err := htmlTemplate.Execute(bw, v); err != nil {
		return err
	}
	return bw.Flush()
}

func phaseCDFChart(title string, phases []PhaseSummary) *chart {
	var lines []cdfLine
	for _, p := range phases {
		if l, ok := cdfFromHistogram(p.Name, p.Histogram); ok {
			lines = append(lines, l)
		}
	}
	c, ok := cdfChart(title, lines)
	if !ok {
		return nil
	}
	return &c
}

func podsChart(p PodSeries) *chart {
	if len(p.Created) == 0 {
		return nil
	}
	created := make([]float64, len(p.Created))
	scheduled := make([]float64, len(p.Scheduled))
	running := make([]float64, len(p.Running))
	var nc, ns float64
	for i := range p.Created {
		nc += float64(p.Created[i])
		created[i] = nc
	}
	for i := range p.Scheduled {
		ns += float64(p.Scheduled[i])
		scheduled[i] = ns
	}
	for i, n := range p.Running {
		running[i] = float64(n)
	}
	c, ok := timeChart("Pods created, scheduled and Running, from the first pod created", "pods", []timeLine{
		{name: "created (total)", values: created, level: true},
		{name: "scheduled (total)", values: scheduled, level: true},
		{name: "Running now (seen by the driver, not yet gone)", values: running, level: true},
	}, nil)
	if !ok {
		return nil
	}
	return &c
}

func apiRateChart(s Series) *chart {
	a := s.API
	if len(a.Verbs) == 0 {
		return nil
	}
	var lines []timeLine
	for _, v := range a.Verbs {
		values := make([]float64, len(v.Counts))
		for i, n := range v.Counts {
			values[i] = float64(n)
		}
		lines = append(lines, timeLine{name: v.Verb, values: values})
	}
	var markers []timeMarker
	if !s.Pods.Start.IsZero() && !a.Start.IsZero() {
		markers = append(markers, timeMarker{at: s.Pods.Start.Sub(a.Start).Seconds(), label: "first pod created"})
	}
	c, ok := timeChart("The fleet's API requests per second, by verb, from the fleet's start", "requests/s", lines, markers)
	if !ok {
		return nil
	}
	return &c
}
