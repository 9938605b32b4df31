package reports

import (
	"errors"
	"fmt"
	"math"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// The one histogram geometry of every latency in a report. It is fixed so that
// histograms from several processes (shards of a fleet, repeated runs) merge
// exactly: HdrHistogram merges are only lossless between equal geometries.
const (
	histLowestMicros  = 1
	histHighestMicros = int64(time.Hour / time.Microsecond)
	histSigFigs       = 3
)

// NewHistogram returns an empty latency histogram in the report's geometry:
// values in microseconds from 1 µs to 1 h, 3 significant figures (a recorded
// value is off by at most 0.1%). Use it for any latency that is to be merged
// with a report's histograms.
func NewHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(histLowestMicros, histHighestMicros, histSigFigs)
}

// recordMicros records d, truncated to whole microseconds, and reports whether
// it was above the histogram's range. Such a value is recorded as the range's
// top rather than dropped, so that counts and percentiles below it stay true;
// the caller counts it so the report can say so. d must not be negative.
func recordMicros(h *hdrhistogram.Histogram, d time.Duration) (overflow bool) {
	us := d.Microseconds()
	if us > histHighestMicros {
		us, overflow = histHighestMicros, true
	}
	// Cannot fail: 0 <= us <= the highest trackable value.
	_ = h.RecordValue(us)
	return overflow
}

// microsToMs converts a histogram value to the report's unit, milliseconds,
// keeping microsecond resolution (three decimals) and no float noise below it.
func microsToMs(us float64) float64 {
	return math.Round(us) / 1000
}

// histStats are the summary numbers of one histogram, in milliseconds.
type histStats struct {
	min, mean, p50, p90, p99, max float64
}

func statsOf(h *hdrhistogram.Histogram) histStats {
	if h == nil || h.TotalCount() == 0 {
		return histStats{}
	}
	return histStats{
		min:  microsToMs(float64(h.Min())),
		mean: microsToMs(h.Mean()),
		p50:  microsToMs(float64(h.ValueAtPercentile(50))),
		p90:  microsToMs(float64(h.ValueAtPercentile(90))),
		p99:  microsToMs(float64(h.ValueAtPercentile(99))),
		max:  microsToMs(float64(h.Max())),
	}
}

// encodeHistogram returns h in the HdrHistogram V2 compressed, base64 form,
// readable by every HdrHistogram implementation. Encoding into memory does not
// fail in practice; if it ever does, the report keeps its percentiles and
// loses only its mergeability, which is better than losing the report.
func encodeHistogram(h *hdrhistogram.Histogram) string {
	if h == nil {
		return ""
	}
	b, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		return ""
	}
	return string(b)
}

// DecodeHistogram reads a histogram written into a report (PhaseSummary or
// APIStat Histogram field), for merging or recomputing percentiles.
func DecodeHistogram(encoded string) (*hdrhistogram.Histogram, error) {
	if encoded == "" {
		return nil, errors.New("decoding histogram: the report has none")
	}
	h, err := hdrhistogram.Decode([]byte(encoded))
	if err != nil {
		return nil, fmt.Errorf("decoding histogram: %w", err)
	}
	return h, nil
}

// checkHistogram checks an encoded histogram of a report read from a file:
// that it decodes, is in the report's geometry, and holds as many values as
// the count stored beside it says (exactly, or at most count when exact is
// false). An empty encoding is no histogram, and passes: the report then
// keeps its percentiles and only cannot be merged, which Merge says.
func checkHistogram(encoded string, count int64, exact bool) error {
	if encoded == "" {
		return nil
	}
	h, err := hdrhistogram.Decode([]byte(encoded))
	if err != nil {
		return fmt.Errorf("the histogram does not decode (%v)", err)
	}
	if lo, hi, sf := h.LowestTrackableValue(), h.HighestTrackableValue(), h.SignificantFigures(); lo != histLowestMicros || hi != histHighestMicros || sf != histSigFigs {
		return fmt.Errorf("the histogram tracks %d to %d µs at %d significant figures, not the report's %d to %d µs at %d",
			lo, hi, sf, histLowestMicros, histHighestMicros, histSigFigs)
	}
	switch n := h.TotalCount(); {
	case exact && n != count:
		return fmt.Errorf("the histogram holds %d values but its count is %d", n, count)
	case !exact && n > count:
		return fmt.Errorf("the histogram holds %d values but its count is only %d", n, count)
	}
	return nil
}
