package metrics

import (
	"math"
	"sort"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Buckets are a histogram's upper bounds, as its family declares them; one
// value is shared by every node. Never modified.
type Buckets struct {
	bounds []float64
	// le are the bounds as the text exposition writes them.
	le []string
}

// NewBuckets returns the buckets with upper bounds bounds.
func NewBuckets(bounds []float64) *Buckets {
	b := &Buckets{bounds: bounds}
	for _, v := range bounds {
		b.le = append(b.le, string(appendFloat(nil, v)))
	}
	return b
}

// The kubelet's bucket layouts (pkg/kubelet/metrics/metrics.go).
var (
	// DefBuckets is component-base's (and client_golang's) default, what a
	// kubelet histogram without Buckets gets.
	DefBuckets = NewBuckets(prometheus.DefBuckets)
	// PodStartupBuckets are podStartupDurationBuckets, of the pod start
	// histograms.
	PodStartupBuckets = NewBuckets([]float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600})
	// ContainersPerPodBuckets are ExponentialBuckets(1, 2, 5).
	ContainersPerPodBuckets = NewBuckets(prometheus.ExponentialBuckets(1, 2, 5))
)

// Histogram is a fixed-bucket histogram recorded with atomics. Its counts
// are allocated at the first observation: until then it costs two words,
// and a series the kubelet creates on first use (a labelled one) does not
// exist. Observe does not allocate after the first call.
type Histogram struct {
	buckets *Buckets
	data    atomic.Pointer[histogramData]
}

type histogramData struct {
	// sum holds the float64 bits of the sum of observations.
	sum atomic.Uint64
	// counts[i] counts observations in (bounds[i-1], bounds[i]];
	// the last one those above every bound.
	counts []atomic.Uint64
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	d := h.data.Load()
	if d == nil {
		d = h.init()
	}
	// As client_golang: the first bucket whose upper bound is >= v.
	d.counts[sort.SearchFloat64s(h.buckets.bounds, v)].Add(1)
	for {
		old := d.sum.Load()
		if d.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// ObserveDuration records d in seconds.
func (h *Histogram) ObserveDuration(d time.Duration) { h.Observe(d.Seconds()) }

func (h *Histogram) init() *histogramData {
	d := &histogramData{counts: make([]atomic.Uint64, len(h.buckets.bounds)+1)}
	if h.data.CompareAndSwap(nil, d) {
		return d
	}
	return h.data.Load()
}

// Observed reports whether anything was ever observed: whether the series
// of a labelled kubelet histogram exists.
func (h *Histogram) Observed() bool { return h.data.Load() != nil }

// appendCumulative appends h's cumulative count at each bound, then its
// total count, to dst, and returns its sum; an unobserved histogram reads
// as all zeros.
func (h *Histogram) appendCumulative(dst []uint64) ([]uint64, float64) {
	d := h.data.Load()
	if d == nil {
		for range len(h.buckets.bounds) + 1 {
			dst = append(dst, 0)
		}
		return dst, 0
	}
	var n uint64
	for i := range d.counts {
		n += d.counts[i].Load()
		dst = append(dst, n)
	}
	return dst, math.Float64frombits(d.sum.Load())
}
