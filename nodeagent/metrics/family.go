package metrics

import (
	"fmt"
	"sort"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Desc describes one metric family: name, help (with the stability prefix
// that component-base adds), type and label names. Descs are package-level
// and never modified.
type Desc struct {
	name, help string
	typ        dto.MetricType
	labels     []string
	// sorted are the indices of labels in name order, the order in which
	// client_golang exposes label pairs.
	sorted  []int
	buckets *Buckets // histograms only
	// header is the escaped "# HELP" and "# TYPE" lines, written as is.
	header string
}

// NewDesc returns a family's description. A histogram's buckets are b.
// Label values are given in the order of labels.
func NewDesc(name, help string, typ dto.MetricType, b *Buckets, labels ...string) *Desc {
	sorted := make([]int, len(labels))
	for i := range sorted {
		sorted[i] = i
	}
	sort.Slice(sorted, func(i, j int) bool { return labels[sorted[i]] < labels[sorted[j]] })
	d := &Desc{name: name, help: help, typ: typ, labels: labels, sorted: sorted, buckets: b}
	if typ == dto.MetricType_HISTOGRAM && b == nil {
		panic("metrics: histogram " + name + " has no buckets")
	}
	d.header = textHeader(d)
	return d
}

// Family is one metric family built during a scrape: its samples in a
// compact form (values, label values and histogram counts in a few flat
// slices), which WriteText encodes as client_golang's text exposition
// does and MetricFamily converts for the protobuf one. Families come from
// a pool shared by every node of the process and go back to it once
// written (Release), so that a scrape allocates almost nothing and an idle
// node holds none.
type Family struct {
	desc *Desc
	n    int
	// labels holds each sample's label values, in name order.
	labels []string
	values []float64
	// stamps are milliseconds since the epoch, 0 for none; samples past
	// its end have none.
	stamps []int64
	// Histograms: each sample's cumulative counts (one per bound, then
	// the total) in counts, its sum in values.
	counts []uint64
	// scratch holds a sample's rendered labels while its lines are
	// written.
	scratch []byte
}

var familyPool = sync.Pool{New: func() any { return new(Family) }}

// Family starts a family of d for one scrape, with room for about n metrics.
func (d *Desc) Family(n int) *Family {
	f := familyPool.Get().(*Family)
	f.reset(d, n)
	return f
}

// reset empties f, perhaps used before, for a family of d of about n
// metrics.
func (f *Family) reset(d *Desc, n int) {
	f.desc, f.n = d, 0
	k := len(d.labels)
	f.labels = grow(f.labels[:0], n*k)
	f.values = grow(f.values[:0], n)
	f.stamps = f.stamps[:0]
	f.counts = f.counts[:0]
	if d.buckets != nil {
		f.counts = grow(f.counts, n*(len(d.buckets.bounds)+1))
	}
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, 0, n)
	}
	return s
}

// Release returns families to the pool; they must not be used after.
func Release(fs []*Family) {
	for _, f := range fs {
		// Do not keep pods' names alive in the pool.
		clear(f.labels)
		f.desc = nil
		familyPool.Put(f)
	}
}

func (f *Family) addLabels(labelValues []string) {
	d := f.desc
	if len(labelValues) != len(d.labels) {
		panic(fmt.Sprintf("metrics: %s takes %d label values, got %d", d.name, len(d.labels), len(labelValues)))
	}
	for _, i := range d.sorted {
		f.labels = append(f.labels, labelValues[i])
	}
	f.n++
}

// Add adds a gauge's or counter's sample.
func (f *Family) Add(v float64, labelValues ...string) {
	f.addLabels(labelValues)
	f.values = append(f.values, v)
}

// AddAt adds a sample with the time it was measured, as cAdvisor stamps
// its container metrics.
func (f *Family) AddAt(v float64, at time.Time, labelValues ...string) {
	f.Add(v, labelValues...)
	if len(f.stamps) == 0 {
		f.stamps = grow(f.stamps, cap(f.values))
	}
	for len(f.stamps) < f.n-1 {
		f.stamps = append(f.stamps, 0)
	}
	f.stamps = append(f.stamps, at.UnixMilli())
}

// AddHistogram adds h's series.
func (f *Family) AddHistogram(h *Histogram, labelValues ...string) {
	if h.buckets != f.desc.buckets {
		panic("metrics: a histogram with other buckets than " + f.desc.name + "'s")
	}
	f.addLabels(labelValues)
	var sum float64
	f.counts, sum = h.appendCumulative(f.counts)
	f.values = append(f.values, sum)
}

// AddCounts adds a histogram kept in Counts; f's buckets must be DefBuckets.
func (f *Family) AddCounts(c *Counts, labelValues ...string) {
	if f.desc.buckets != DefBuckets {
		panic("metrics: " + f.desc.name + " does not have DefBuckets")
	}
	f.addLabels(labelValues)
	f.values = append(f.values, c.sum)
	var total uint64
	for _, n := range c.counts[:len(c.counts)-1] {
		total += uint64(n)
		f.counts = append(f.counts, total)
	}
	f.counts = append(f.counts, total+uint64(c.counts[len(c.counts)-1]))
}

// Counts is a histogram of DefBuckets kept under its owner's lock, in 56
// bytes: for a series per container, where atomics and a pointer each
// would cost more than the counts. Counts of uint32 wrap after four
// billion observations in one bucket, 136 years of one per second.
type Counts struct {
	counts [12]uint32
	sum    float64
}

// Observe records v, a DefBuckets value (seconds).
func (c *Counts) Observe(v float64) {
	c.counts[sort.SearchFloat64s(DefBuckets.bounds, v)]++
	c.sum += v
}

// Count is the number of observations.
func (c *Counts) Count() uint64 {
	var n uint64
	for _, v := range c.counts {
		n += uint64(v)
	}
	return n
}

// Families are the families of one scrape, in name order.
type Families []*Family

// Gather collects the families fs built, in name order as client_golang's
// registry gathers them; empty ones go back to the pool.
func Gather(fs ...*Family) Families {
	out := make(Families, 0, len(fs))
	for _, f := range fs {
		if f.n == 0 {
			Release([]*Family{f})
			continue
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].desc.name < out[j].desc.name })
	return out
}

// MetricFamily converts f for client_golang's encoders: the protobuf
// exposition, and tests. Unlike the text path it allocates per metric.
func (f *Family) MetricFamily() *dto.MetricFamily {
	d := f.desc
	mf := &dto.MetricFamily{Name: &d.name, Help: &d.help, Type: &d.typ}
	k := len(d.labels)
	for i := range f.n {
		m := &dto.Metric{}
		for j, li := range d.sorted {
			m.Label = append(m.Label, &dto.LabelPair{Name: &d.labels[li], Value: &f.labels[i*k+j]})
		}
		if i < len(f.stamps) && f.stamps[i] != 0 {
			m.TimestampMs = &f.stamps[i]
		}
		v := f.values[i]
		switch d.typ {
		case dto.MetricType_COUNTER:
			m.Counter = &dto.Counter{Value: &v}
		case dto.MetricType_GAUGE:
			m.Gauge = &dto.Gauge{Value: &v}
		case dto.MetricType_HISTOGRAM:
			nb := len(d.buckets.bounds)
			counts := f.counts[i*(nb+1) : (i+1)*(nb+1)]
			h := &dto.Histogram{SampleSum: &v, SampleCount: &counts[nb]}
			for b := range nb {
				h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: &d.buckets.bounds[b], CumulativeCount: &counts[b]})
			}
			m.Histogram = h
		}
		mf.Metric = append(mf.Metric, m)
	}
	return mf
}
