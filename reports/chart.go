package reports

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// The charts of report.html are inline SVG drawn here, so the file needs no
// script and no network: it opens the same from a CI artifact, an e-mail or
// a laptop on a plane. Every string that reaches the SVG (phase names, verbs)
// is escaped with template.HTMLEscapeString before it is written; numbers are
// formatted with a fixed precision so that the output is byte-for-byte
// reproducible (the golden test depends on it).

// chartPalette is a categorical palette (D3's category10): ten hues that
// stay apart on white, so ten phases on one chart can be told apart.
// Read-only.
var chartPalette = [...]string{
	"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
	"#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
}

func paletteColor(i int) string { return chartPalette[i%len(chartPalette)] }

// chart is one rendered chart: the SVG, and its legend, which is HTML under
// the SVG so that it wraps with the page.
type chart struct {
	Title  string
	SVG    template.HTML
	Legend []legendItem
	// Note says how to read the chart (scale, windows).
	Note string
}

type legendItem struct {
	Color template.CSS
	Label string
	// Dashed marks a reference line rather than data.
	Dashed bool
}

// The geometry of every chart, in SVG user units; the SVG scales to the
// page's width and keeps its aspect ratio.
const (
	chartW, chartH                     = 960.0, 300.0
	plotLeft, plotRight                = 64.0, 16.0
	plotTop, plotBottom                = 24.0, 44.0
	plotW                              = chartW - plotLeft - plotRight
	plotH                              = chartH - plotTop - plotBottom
	maxChartPoints                     = 600 // per line, for a time chart
	gridColor, axisColor, labelColor   = "#e3e6ea", "#9aa1a9", "#4a5159"
	chartFont                          = "font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif"
	chartFontSize, chartAxisLabelSize  = 12, 12
	markerColor                        = "#6c737b"
	referenceDash, markerDash          = "5 4", "3 3"
	lineWidth                          = "2"
	referenceLabelOffset, tickLabelGap = 4.0, 6.0
)

// svgBuilder accumulates one SVG document.
type svgBuilder struct {
	b strings.Builder
}

func newSVG(title string) *svgBuilder {
	s := &svgBuilder{}
	fmt.Fprintf(&s.b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %s %s" role="img" aria-label="%s" style="%s;font-size:%dpx">`,
		num(chartW), num(chartH), esc(title), chartFont, chartFontSize)
	fmt.Fprintf(&s.b, "<title>%s</title>", esc(title))
	return s
}

func (s *svgBuilder) done() template.HTML {
	s.b.WriteString("</svg>")
	// The SVG is built from escaped text and formatted numbers only.
	return template.HTML(s.b.String())
}

func (s *svgBuilder) line(x1, y1, x2, y2 float64, stroke, dash string) {
	fmt.Fprintf(&s.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s"`, num(x1), num(y1), num(x2), num(y2), stroke)
	if dash != "" {
		fmt.Fprintf(&s.b, ` stroke-dasharray="%s"`, dash)
	}
	s.b.WriteString("/>")
}

func (s *svgBuilder) text(x, y float64, anchor, fill, content string) {
	fmt.Fprintf(&s.b, `<text x="%s" y="%s" text-anchor="%s" fill="%s">%s</text>`, num(x), num(y), anchor, fill, esc(content))
}

// polyline draws pts (already in SVG coordinates) with a tooltip.
func (s *svgBuilder) polyline(pts [][2]float64, color, tooltip string) {
	if len(pts) == 0 {
		return
	}
	fmt.Fprintf(&s.b, `<polyline fill="none" stroke="%s" stroke-width="%s" stroke-linejoin="round" stroke-linecap="round" points="`, color, lineWidth)
	for i, p := range pts {
		if i > 0 {
			s.b.WriteByte(' ')
		}
		s.b.WriteString(num(p[0]))
		s.b.WriteByte(',')
		s.b.WriteString(num(p[1]))
	}
	fmt.Fprintf(&s.b, `"><title>%s</title></polyline>`, esc(tooltip))
}

// frame draws the plot's axes and the axis titles.
func (s *svgBuilder) frame(xTitle, yTitle string) {
	s.line(plotLeft, plotTop+plotH, plotLeft+plotW, plotTop+plotH, axisColor, "")
	s.line(plotLeft, plotTop, plotLeft, plotTop+plotH, axisColor, "")
	s.text(plotLeft+plotW/2, chartH-6, "middle", labelColor, xTitle)
	fmt.Fprintf(&s.b, `<text transform="translate(14 %s) rotate(-90)" text-anchor="middle" fill="%s">%s</text>`,
		num(plotTop+plotH/2), labelColor, esc(yTitle))
}

func (s *svgBuilder) xTick(x float64, label string, major bool) {
	color := gridColor
	if !major {
		color = "#f1f3f5"
	}
	s.line(x, plotTop, x, plotTop+plotH, color, "")
	if label != "" {
		s.text(x, plotTop+plotH+tickLabelGap+chartAxisLabelSize, "middle", labelColor, label)
	}
}

func (s *svgBuilder) yTick(y float64, label string) {
	s.line(plotLeft, y, plotLeft+plotW, y, gridColor, "")
	s.text(plotLeft-tickLabelGap, y+4, "end", labelColor, label)
}

// num formats an SVG coordinate: one decimal is a tenth of a user unit,
// finer than any screen shows.
func num(f float64) string {
	return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64)
}

func esc(s string) string { return template.HTMLEscapeString(s) }

// cdfLine is one distribution: points of (latency ms, cumulative fraction),
// in increasing latency.
type cdfLine struct {
	name   string
	points [][2]float64
	count  int64
}

// cdfFromHistogram decodes a report's histogram (values in µs) into its
// cumulative distribution. ok is false if there is nothing to draw.
func cdfFromHistogram(name, encoded string) (cdfLine, bool) {
	if encoded == "" {
		return cdfLine{}, false
	}
	h, err := DecodeHistogram(encoded)
	if err != nil || h.TotalCount() == 0 {
		return cdfLine{}, false
	}
	total := float64(h.TotalCount())
	l := cdfLine{name: name, count: h.TotalCount()}
	var cum int64
	for _, bar := range h.Distribution() {
		if bar.Count == 0 {
			continue
		}
		if len(l.points) == 0 {
			l.points = append(l.points, [2]float64{float64(bar.From) / 1000, 0})
		}
		cum += bar.Count
		l.points = append(l.points, [2]float64{float64(bar.To) / 1000, float64(cum) / total})
	}
	return l, true
}

// cdfChart draws distributions on a log-scale latency axis: a latency
// spread over orders of magnitude (1 ms of sandbox start, 20 s of a
// saturated apiserver) stays readable. A dashed line marks the 99th
// percentile, where the SLOs are.
func cdfChart(title string, lines []cdfLine) (chart, bool) {
	lo, hi := math.Inf(+1), 0.0
	for _, l := range lines {
		for _, p := range l.points {
			v := max(p[0], 0.001) // 0 µs (below the clock's resolution) is drawn at 1 µs
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if len(lines) == 0 || hi == 0 {
		return chart{}, false
	}
	loExp := math.Floor(math.Log10(lo))
	hiExp := math.Ceil(math.Log10(hi))
	if hiExp <= loExp {
		hiExp = loExp + 1
	}
	xOf := func(ms float64) float64 {
		v := math.Log10(max(ms, 0.001))
		return plotLeft + (v-loExp)/(hiExp-loExp)*plotW
	}
	yOf := func(frac float64) float64 { return plotTop + (1-frac)*plotH }

	s := newSVG(title)
	decades := int(hiExp - loExp)
	for e := loExp; e <= hiExp; e++ {
		base := math.Pow(10, e)
		s.xTick(xOf(base), fmtTickMs(base), true)
		if e == hiExp {
			break
		}
		for _, m := range []float64{2, 5} {
			label := ""
			if decades <= 2 {
				label = fmtTickMs(m * base)
			}
			s.xTick(xOf(m*base), label, false)
		}
	}
	for _, f := range []float64{0, 0.25, 0.5, 0.75, 1} {
		s.yTick(yOf(f), strconv.Itoa(int(f*100))+"%")
	}
	s.line(plotLeft, yOf(0.99), plotLeft+plotW, yOf(0.99), markerColor, referenceDash)
	// On the left, where a latency distribution rarely reaches the top.
	s.text(plotLeft+referenceLabelOffset, yOf(0.99)+13, "start", markerColor, "p99")
	s.frame("latency (log scale)", "pods at or below")

	var legend []legendItem
	for i, l := range lines {
		color := paletteColor(i)
		var pts [][2]float64
		column := 0 // index in pts of the first point at the current x
		for _, p := range l.points {
			x, y := xOf(p[0]), yOf(p[1])
			// Keep at most two points per tenth of a unit of x, the first
			// and the last: the curve loses nothing visible (a vertical
			// rise stays a rise), and a phase of a million pods stays a few
			// hundred points.
			if len(pts) > 0 && math.Abs(x-pts[column][0]) < 0.1 {
				if len(pts)-column == 2 {
					pts[len(pts)-1][1] = y
				} else {
					pts = append(pts, [2]float64{pts[column][0], y})
				}
				continue
			}
			column = len(pts)
			pts = append(pts, [2]float64{x, y})
		}
		s.polyline(pts, color, fmt.Sprintf("%s: %d pods", l.name, l.count))
		legend = append(legend, legendItem{Color: template.CSS(color), Label: l.name})
	}
	return chart{Title: title, SVG: s.done(), Legend: legend, Note: "Cumulative distribution: the share of pods whose phase took at most the time on the x axis (log scale). Read the median at 50% and the tail at the dashed p99 line."}, true
}

// fmtTickMs labels a latency tick: "500 µs", "20 ms", "5 s".
func fmtTickMs(ms float64) string {
	switch {
	case ms < 1:
		return strconv.FormatFloat(roundTo(ms*1000, 3), 'f', -1, 64) + " µs"
	case ms < 1000:
		return strconv.FormatFloat(roundTo(ms, 3), 'f', -1, 64) + " ms"
	case ms < 60_000:
		return strconv.FormatFloat(roundTo(ms/1000, 3), 'f', -1, 64) + " s"
	}
	return strconv.FormatFloat(roundTo(ms/60_000, 3), 'f', -1, 64) + " min"
}

// timeLine is one per-second series.
type timeLine struct {
	name   string
	values []float64
	// level is true for a count of things present (pods running), false
	// for a rate (pods per second): they downsample differently.
	level bool
}

// timeMarker is a vertical dashed line at a second, with a label.
type timeMarker struct {
	at    float64
	label string
}

// timeChart draws per-second series over the run. A run longer than
// maxChartPoints seconds is drawn in windows of several seconds: rates are
// averaged over the window, levels take the window's last value.
func timeChart(title, yTitle string, lines []timeLine, markers []timeMarker) (chart, bool) {
	n := 0
	for _, l := range lines {
		n = max(n, len(l.values))
	}
	if n == 0 {
		return chart{}, false
	}
	window := (n + maxChartPoints - 1) / maxChartPoints
	yMax := 0.0
	down := make([][]float64, len(lines))
	for i, l := range lines {
		down[i] = downsample(l.values, window, l.level)
		for _, v := range down[i] {
			yMax = max(yMax, v)
		}
	}
	seconds := float64(n)
	xStep := niceTimeStep(seconds, 8)
	yStep := niceStep(max(yMax, 1), 5)
	// Some headroom, so that a peak is not drawn on the frame.
	yTop := math.Ceil(max(yMax, 1)*1.05/yStep) * yStep
	xOf := func(sec float64) float64 { return plotLeft + sec/seconds*plotW }
	yOf := func(v float64) float64 { return plotTop + (1-v/yTop)*plotH }

	s := newSVG(title)
	for x := 0.0; x <= seconds+1e-9; x += xStep {
		s.xTick(xOf(x), fmtTickSeconds(x), true)
	}
	for y := 0.0; y <= yTop+1e-9; y += yStep {
		s.yTick(yOf(y), strconv.FormatFloat(y, 'f', -1, 64))
	}
	for _, m := range markers {
		if m.at < 0 || m.at > seconds {
			continue
		}
		s.line(xOf(m.at), plotTop, xOf(m.at), plotTop+plotH, markerColor, markerDash)
		// Above the plot, where no data is.
		s.text(xOf(m.at), plotTop-8, "middle", markerColor, m.label)
	}
	s.frame("seconds", yTitle)

	var legend []legendItem
	for i, l := range lines {
		color := paletteColor(i)
		pts := make([][2]float64, 0, len(down[i])+1)
		if l.level {
			// A level is 0 before the series starts, and its value for a
			// window is the one at the window's end.
			pts = append(pts, [2]float64{xOf(0), yOf(0)})
			for j, v := range down[i] {
				pts = append(pts, [2]float64{xOf(float64(min((j+1)*window, n))), yOf(v)})
			}
		} else {
			// A rate holds over its window: drawn at the window's middle.
			for j, v := range down[i] {
				mid := (float64(j*window) + float64(min((j+1)*window, n))) / 2
				pts = append(pts, [2]float64{xOf(mid), yOf(v)})
			}
		}
		peak := 0.0
		for _, v := range l.values {
			peak = max(peak, v)
		}
		s.polyline(pts, color, fmt.Sprintf("%s: peak %s", l.name, strconv.FormatFloat(peak, 'f', -1, 64)))
		legend = append(legend, legendItem{Color: template.CSS(color), Label: l.name})
	}
	note := ""
	if window > 1 {
		note = fmt.Sprintf("Drawn in %d-second windows: rates averaged over each window, counts at its end.", window)
	}
	return chart{Title: title, SVG: s.done(), Legend: legend, Note: note}, true
}

func downsample(values []float64, window int, level bool) []float64 {
	if window <= 1 {
		return values
	}
	out := make([]float64, 0, (len(values)+window-1)/window)
	for i := 0; i < len(values); i += window {
		end := min(i+window, len(values))
		if level {
			out = append(out, values[end-1])
			continue
		}
		sum := 0.0
		for _, v := range values[i:end] {
			sum += v
		}
		out = append(out, roundTo(sum/float64(end-i), 2))
	}
	return out
}

// niceStep is a step of 1, 2 or 5 times a power of ten that cuts span into
// at most about target intervals.
func niceStep(span float64, target int) float64 {
	raw := span / float64(target)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// niceTimeStep is a step of seconds that people count in (5 s, 30 s, 5 min,
// 1 h) cutting span into at most about target intervals.
func niceTimeStep(span float64, target int) float64 {
	raw := span / float64(target)
	for _, step := range []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600} {
		if step >= raw {
			return step
		}
	}
	return math.Ceil(raw/21600) * 21600
}

// fmtTickSeconds labels a time tick: "45s", "2m", "1m30s", "1h".
func fmtTickSeconds(sec float64) string {
	s := int(math.Round(sec))
	switch {
	case s < 120:
		return strconv.Itoa(s) + "s"
	case s%3600 == 0:
		return strconv.Itoa(s/3600) + "h"
	case s%60 == 0:
		return strconv.Itoa(s/60) + "m"
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm", s/3600, (s%3600)/60)
}
