package metrics

import (
	"bufio"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// acceptedFormats are what client_golang's promhttp offers without
// OpenMetrics, as the kubelet's component-base handlers serve: protobuf
// first, then the text format.
var acceptedFormats = []expfmt.Format{expfmt.FmtProtoDelim, expfmt.FmtText}

// Format is the exposition format to answer r with. Negotiation parses the
// Accept header, which for Prometheus 3 lists five media types: a quarter
// of a scrape's handler time. A scraper sends the same header every time,
// so the answer is remembered per header, for the first negotiatedMax
// headers seen.
func Format(r *http.Request) expfmt.Format {
	accept := r.Header.Get("Accept")
	if f, ok := negotiated.Load(accept); ok {
		return f.(expfmt.Format)
	}
	f := expfmt.NegotiateAccept(r.Header, acceptedFormats...)
	if negotiatedCount.Add(1) <= negotiatedMax {
		negotiated.Store(accept, f)
	}
	return f
}

// negotiatedMax bounds the Accept headers remembered: a few scrapers, each
// with its one header, and never a map that a stranger can grow.
const negotiatedMax = 64

var (
	negotiated      sync.Map // Accept header → expfmt.Format
	negotiatedCount atomic.Int64
)

// writers buffer responses; shared by every node of the process, so that
// an idle node holds no buffer.
var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 16<<10) }}

// Write encodes fs in format to w and sets its Content-Type. The text
// format, what Prometheus asks for unless told otherwise, is written by
// WriteText; protobuf goes through client_golang's types and expfmt's
// encoder. The response is not compressed: scrapes of emulated nodes stay
// on loopback, where gzip only costs CPU.
func Write(w http.ResponseWriter, format expfmt.Format, fs Families) error {
	w.Header().Set("Content-Type", string(format))
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(w)
	defer func() { bw.Reset(nil); writers.Put(bw) }()
	if format.FormatType() == expfmt.TypeTextPlain {
		for _, f := range fs {
			f.WriteText(bw)
		}
		return bw.Flush()
	}
	enc := expfmt.NewEncoder(bw, format)
	for _, f := range fs {
		if err := enc.Encode(f.MetricFamily()); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// textHeader is a family's "# HELP" and "# TYPE" lines.
func textHeader(d *Desc) string {
	if !model.LegacyValidation.IsValidMetricName(d.name) {
		panic("metrics: " + d.name + " is not a legacy Prometheus name")
	}
	for _, l := range d.labels {
		if !model.LegacyValidation.IsValidLabelName(l) {
			panic("metrics: label " + l + " of " + d.name + " is not a legacy Prometheus name")
		}
	}
	typ := map[dto.MetricType]string{
		dto.MetricType_COUNTER: "counter", dto.MetricType_GAUGE: "gauge", dto.MetricType_HISTOGRAM: "histogram",
	}[d.typ]
	if typ == "" {
		panic("metrics: " + d.name + " has a type the agent does not serve")
	}
	help := strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(d.help)
	return "# HELP " + d.name + " " + help + "\n# TYPE " + d.name + " " + typ + "\n"
}

// WriteText writes f in the Prometheus text format 0.0.4, byte for byte
// as expfmt.MetricFamilyToText writes the same family (the tests hold it
// to that), without building client_golang's types: a scrape of a busy
// node writes thousands of lines, and those types cost allocations per
// label. A histogram's labels are rendered once for all its lines, and
// its bounds were formatted once for the process.
func (f *Family) WriteText(w *bufio.Writer) {
	d := f.desc
	_, _ = w.WriteString(d.header)
	k := len(d.labels)
	for i := range f.n {
		f.scratch = appendLabels(f.scratch[:0], d, f.labels[i*k:(i+1)*k])
		var stamp int64
		if i < len(f.stamps) {
			stamp = f.stamps[i]
		}
		if d.typ != dto.MetricType_HISTOGRAM {
			writeLine(w, d.name, "", f.scratch, "", f.values[i], stamp)
			continue
		}
		nb := len(d.buckets.bounds)
		counts := f.counts[i*(nb+1) : (i+1)*(nb+1)]
		// The labels, open for le.
		open := f.scratch
		if len(open) == 0 {
			open = append(open, '{')
		} else {
			open[len(open)-1] = ','
		}
		for b, le := range d.buckets.le {
			writeLine(w, d.name, "_bucket", open, le, float64(counts[b]), stamp)
		}
		writeLine(w, d.name, "_bucket", open, "+Inf", float64(counts[nb]), stamp)
		labels := f.scratch
		if len(labels) > 0 {
			labels[len(labels)-1] = '}'
		}
		if len(labels) == 1 {
			labels = labels[:0]
		}
		writeLine(w, d.name, "_sum", labels, "", f.values[i], stamp)
		writeLine(w, d.name, "_count", labels, "", float64(counts[nb]), stamp)
	}
}

// appendLabels renders a sample's label pairs as expfmt does,
// `{a="x",b="y"}`, escaped; nothing for no labels.
func appendLabels(dst []byte, d *Desc, values []string) []byte {
	for j, i := range d.sorted {
		if j == 0 {
			dst = append(dst, '{')
		} else {
			dst = append(dst, ',')
		}
		dst = append(dst, d.labels[i]...)
		dst = append(dst, '=', '"')
		dst = appendEscaped(dst, values[j])
		dst = append(dst, '"')
	}
	if len(d.sorted) > 0 {
		dst = append(dst, '}')
	}
	return dst
}

// writeLine writes one sample line: name and suffix, the rendered labels
// (for a bucket, open for le, which closes them), the value and the
// timestamp if any.
func writeLine(w *bufio.Writer, name, suffix string, labels []byte, le string, v float64, stamp int64) {
	_, _ = w.WriteString(name)
	_, _ = w.WriteString(suffix)
	_, _ = w.Write(labels)
	if le != "" {
		_, _ = w.WriteString(`le="`)
		_, _ = w.WriteString(le)
		_, _ = w.WriteString(`"}`)
	}
	_ = w.WriteByte(' ')
	_, _ = w.Write(appendFloat(w.AvailableBuffer(), v))
	if stamp != 0 {
		_ = w.WriteByte(' ')
		_, _ = w.Write(strconv.AppendInt(w.AvailableBuffer(), stamp, 10))
	}
	_ = w.WriteByte('\n')
}

// appendEscaped appends a label value with \, " and newlines escaped.
func appendEscaped(dst []byte, s string) []byte {
	i := 0
	for i < len(s) && s[i] != '\\' && s[i] != '"' && s[i] != '\n' {
		i++
	}
	dst = append(dst, s[:i]...)
	for ; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			dst = append(dst, '\\', '\\')
		case '"':
			dst = append(dst, '\\', '"')
		case '\n':
			dst = append(dst, '\\', 'n')
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// appendFloat formats f as expfmt's writeFloat does (strconv's shortest
// 'g'), with integers below a million, which 'g' writes as such, formatted
// as integers: bucket counts and counters, most of a scrape's values.
func appendFloat(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, +1):
		return append(dst, "+Inf"...)
	case math.IsInf(f, -1):
		return append(dst, "-Inf"...)
	case f > -1e6 && f < 1e6 && f == math.Trunc(f):
		return strconv.AppendInt(dst, int64(f), 10)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}
