package reports

import (
	"sync/atomic"
	"time"
)

// Series are the report's time series, one value per second, for the charts
// of report.html and for throughput.
type Series struct {
	// Pods is what happened to pods, from the Collector's milestones.
	Pods PodSeries `json:"pods,omitzero"`
	// API is the client-side request rate by verb, from the APICounter.
	API APISeries `json:"api,omitzero"`
}

// PodSeries counts pods per 1-second bucket. Bucket i covers the second
// [Start+i s, Start+i+1 s). All slices have the same length, which reaches
// the last stamp of any of these milestones.
//
// Buckets are whole seconds of the wall clock, so that the series of several
// processes line up bucket for bucket and Merge adds them exactly.
type PodSeries struct {
	// Start is the wall-clock second of bucket 0: the one holding the first
	// Created stamp, or an earlier Scheduled or RunningObserved stamp (pods
	// the driver did not create, such as a Deployment's, are stamped without
	// Created).
	Start time.Time `json:"start"`
	// Created is the number of pods whose Created stamp is in each second.
	Created []int `json:"created"`
	// Scheduled is the number of pods whose Scheduled stamp is in each
	// second: the scheduling throughput the load driver and agents saw.
	Scheduled []int `json:"scheduled"`
	// Running is the number of pods Running at the end of each second: seen
	// Running by the driver (RunningObserved) and not yet Gone.
	Running []int `json:"running"`
}

// maxSeriesSeconds bounds a series: a stamp that is more than a day after the
// first is a clock bug, and is counted in the last bucket rather than allowed
// to allocate without bound.
const maxSeriesSeconds = 24 * 60 * 60

// PodSeries returns the per-second pod counts. Like Phases, it reads each
// shard at a slightly different moment if Marks continue meanwhile.
func (c *Collector) PodSeries() PodSeries {
	const tracked = 1<<Created | 1<<Scheduled | 1<<RunningObserved
	// Two passes rather than copying every stamp out: the first finds the
	// span, the second counts.
	first, last, found := time.Duration(0), time.Duration(0), false
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for _, p := range s.pods {
			for _, m := range [...]Milestone{Created, Scheduled, RunningObserved, Gone} {
				if p.set&(1<<m) == 0 || (m == Gone && p.set&(1<<RunningObserved) == 0) {
					continue
				}
				at := p.at[m]
				if !found || at < first {
					first = at
				}
				if !found || at > last {
					last = at
				}
				found = true
			}
		}
		s.mu.Unlock()
	}
	if !found {
		return PodSeries{}
	}
	// origin is the offset of the wall-clock second that holds the first
	// stamp.
	firstWall := c.base.Add(first)
	start := firstWall.Truncate(time.Second)
	origin := first - firstWall.Sub(start)
	n := int((last-origin)/time.Second) + 1
	n = min(n, maxSeriesSeconds)
	// Clamped both ways: Marks that land between the two passes may fall
	// outside the span the first pass found.
	bucket := func(at time.Duration) int {
		return max(min(int((at-origin)/time.Second), n-1), 0)
	}
	ps := PodSeries{
		Start:     wallTime(start),
		Created:   make([]int, n),
		Scheduled: make([]int, n),
		Running:   make([]int, n),
	}
	// Running is a running sum of pods that became Running minus pods that
	// went away after being Running.
	gone := make([]int, n)
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for _, p := range s.pods {
			if p.set&tracked == 0 {
				continue
			}
			if p.set&(1<<Created) != 0 {
				ps.Created[bucket(p.at[Created])]++
			}
			if p.set&(1<<Scheduled) != 0 {
				ps.Scheduled[bucket(p.at[Scheduled])]++
			}
			if p.set&(1<<RunningObserved) != 0 {
				ps.Running[bucket(p.at[RunningObserved])]++
				// A Gone stamped before Running (a clock bug) would make
				// the count dip; such a pod is counted as never gone.
				if p.set&(1<<Gone) != 0 && p.at[Gone] >= p.at[RunningObserved] {
					gone[bucket(p.at[Gone])]++
				}
			}
		}
		s.mu.Unlock()
	}
	running := 0
	for i := range ps.Running {
		running += ps.Running[i] - gone[i]
		ps.Running[i] = running
	}
	return ps
}

// wallTime strips t of its monotonic reading and location, so that it
// encodes, compares and renders the same everywhere.
func wallTime(t time.Time) time.Time {
	return t.Round(0).UTC()
}

// APISeries is the client-side request rate: requests sent per second, by
// verb, as the APICounter counted them at the transport.
type APISeries struct {
	// Start is the wall-clock second of bucket 0, the one in which the
	// APICounter was made: normally as the fleet started, before the first
	// pod was created. Buckets are whole seconds of the wall clock, like
	// PodSeries'.
	Start time.Time `json:"start"`
	// Verbs are in the order of apiSeriesVerbs (get, list, watch, create,
	// update, patch, delete, deletecollection, other), only those with any
	// request; every Counts has the same length, up to the last second with a
	// request.
	Verbs []VerbSeries `json:"verbs,omitempty"`
	// Late counts requests sent after the series' span (18 h), which are in
	// no bucket.
	Late int64 `json:"late,omitempty"`
}

// VerbSeries is the number of requests of one verb sent in each second.
type VerbSeries struct {
	Verb   string  `json:"verb"`
	Counts []int64 `json:"counts"`
}

// apiSeriesVerbs are the verbs the request rate is kept by: the apiserver's
// names for resource requests; everything else (non-resource requests, proxy,
// unknown methods) is "other". A fixed set, so a request finds its counter
// by index without a map or a lock. GET on a non-resource path is "get".
var apiSeriesVerbs = [...]string{
	verbGet, verbList, verbWatch, verbCreate, verbUpdate, verbPatch, verbDelete, verbDeleteCollection, "other",
}

const numSeriesVerbs = len(apiSeriesVerbs)

func seriesVerbIndex(verb string) int {
	switch verb {
	case verbGet:
		return 0
	case verbList:
		return 1
	case verbWatch:
		return 2
	case verbCreate:
		return 3
	case verbUpdate:
		return 4
	case verbPatch:
		return 5
	case verbDelete:
		return 6
	case verbDeleteCollection:
		return 7
	}
	return numSeriesVerbs - 1
}

// The rate table is chunked rather than a ring: a ring of the last N seconds
// would lose the start of a long run, and the report charts the whole run.
// Chunks of a minute are allocated as the run reaches them, so memory follows
// the run's length (about 4.6 KB a minute) up to the span's bound, and a
// request finds its counter with two atomic loads and no lock.
const (
	rateChunkSeconds = 64
	maxRateChunks    = 1024 // 65,536 s, about 18 h
)

type rateChunk [rateChunkSeconds][numSeriesVerbs]atomic.Int64

// rateTable counts requests per second, by verb, from the wall-clock second
// that holds base.
type rateTable struct {
	// base is when the table was made, with its monotonic reading so that
	// requests are placed by the monotonic clock; skew is how far into its
	// wall-clock second base is.
	base   time.Time
	skew   time.Duration
	chunks [maxRateChunks]atomic.Pointer[rateChunk]
	late   atomic.Int64
}

func newRateTable(base time.Time) *rateTable {
	t := &rateTable{}
	t.init(base)
	return t
}

func (t *rateTable) init(base time.Time) {
	t.base = base
	t.skew = base.Sub(base.Truncate(time.Second))
}

// add counts one request of verb (an index of apiSeriesVerbs) sent at at.
func (t *rateTable) add(at time.Time, verb int) {
	sec := max(int64((at.Sub(t.base)+t.skew)/time.Second), 0)
	ci := sec / rateChunkSeconds
	if ci >= maxRateChunks {
		t.late.Add(1)
		return
	}
	c := t.chunks[ci].Load()
	if c == nil {
		// Two requests may both find the chunk missing; one allocation
		// wins, the other is dropped and its request counted in the winner.
		c = new(rateChunk)
		if !t.chunks[ci].CompareAndSwap(nil, c) {
			c = t.chunks[ci].Load()
		}
	}
	c[sec%rateChunkSeconds][verb].Add(1)
}

// series reads the table. Counts still being added meanwhile may or may not
// be in it.
func (t *rateTable) series() APISeries {
	var counts [numSeriesVerbs][]int64
	n := 0 // seconds up to the last with a request
	for ci := range t.chunks {
		c := t.chunks[ci].Load()
		if c == nil {
			continue
		}
		for s := range c {
			sec := ci*rateChunkSeconds + s
			for v := range c[s] {
				k := c[s][v].Load()
				if k == 0 {
					continue
				}
				if counts[v] == nil {
					counts[v] = make([]int64, 0, 64)
				}
				for len(counts[v]) <= sec {
					counts[v] = append(counts[v], 0)
				}
				counts[v][sec] = k
				n = max(n, sec+1)
			}
		}
	}
	out := APISeries{Start: wallTime(t.base.Truncate(time.Second)), Late: t.late.Load()}
	for v, cs := range counts {
		if cs == nil {
			continue
		}
		for len(cs) < n {
			cs = append(cs, 0)
		}
		out.Verbs = append(out.Verbs, VerbSeries{Verb: apiSeriesVerbs[v], Counts: cs})
	}
	return out
}

// RequestSeries returns the requests sent per second since the counter was
// made, by verb, for Report.Series.API.
func (a *APICounter) RequestSeries() APISeries {
	return a.rates.series()
}
