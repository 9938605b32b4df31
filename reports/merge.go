package reports

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Merge combines the reports of several processes of one run (the shards of
// a fleet) into one, exactly: latency histograms are decoded and added, so
// the merged percentiles are those of all pods and requests together, not an
// average of percentiles. Counts, bytes and fleet costs are summed, time
// series are added second by second on the wall clock, errors are
// concatenated, and the SLOs are checked again on the merged numbers, with
// the reports' thresholds (the defaults if they recorded none).
//
// It refuses reports of different schema versions or profiles, histograms
// that cannot be decoded, SLO thresholds that differ, and one run's report
// given twice (see sameRun), since any of these would make the merged
// numbers wrong rather than approximate.
//
// Every report's measurements are taken to be of different things: the
// control plane's own metrics (APIServerLatency, the scheduler's counters)
// should be scraped by one process only, normally the one that drives the
// load, or they are counted once per process that scraped them. The same
// holds for faults (see mergeFaults): each process reports the hit nodes it
// watched, and two processes watching the same nodes count them twice.
// The reports' Shards are concatenated, in order.
func Merge(reports ...*Report) (*Report, error) {
	if len(reports) == 0 {
		return nil, fmt.Errorf("merging reports: no reports")
	}
	first := reports[0]
	version := func(r *Report) string {
		if r.SchemaVersion == "" { // built in memory, not read from a file
			return SchemaVersion
		}
		return r.SchemaVersion
	}
	for i, r := range reports {
		if r == nil {
			return nil, fmt.Errorf("merging reports: report %d is missing", i+1)
		}
		if v := version(r); v != SchemaVersion {
			return nil, fmt.Errorf("merging reports: report %d has schemaVersion %q, and this fleetlet merges %q only; use the fleetlet release that wrote it", i+1, v, SchemaVersion)
		}
		if r.Profile != first.Profile {
			return nil, fmt.Errorf("merging reports: report %d is of profile %q, report 1 of %q; only the shards of one run can be merged", i+1, r.Profile, first.Profile)
		}
		if !sameThresholds(r.SLOThresholds, first.SLOThresholds) {
			return nil, fmt.Errorf("merging reports: report %d checked its SLOs against other thresholds than report 1; merged verdicts would mean neither", i+1)
		}
		for j, q := range reports[:i] {
			if sameRun(q, r) {
				return nil, fmt.Errorf("merging reports: reports %d and %d are the same run (%s); each shard's report is merged once, so give it once", j+1, i+1, runIdentity(r))
			}
		}
	}

	out := &Report{SchemaVersion: SchemaVersion, Profile: first.Profile}
	gcMixed := false
	for _, r := range reports {
		if !r.StartedAt.IsZero() && (out.StartedAt.IsZero() || r.StartedAt.Before(out.StartedAt)) {
			out.StartedAt = r.StartedAt
		}
		if r.FinishedAt.After(out.FinishedAt) {
			out.FinishedAt = r.FinishedAt
		}
		out.WallSeconds = max(out.WallSeconds, r.WallSeconds)
		out.Nodes += r.Nodes
		out.Pods.Created += r.Pods.Created
		out.Pods.Running += r.Pods.Running
		out.Pods.Deleted += r.Pods.Deleted
		out.Pods.Gone += r.Pods.Gone
		out.Fleet.PeakRSSBytes += r.Fleet.PeakRSSBytes
		out.Fleet.Goroutines += r.Fleet.Goroutines
		out.Fleet.CPUSeconds += r.Fleet.CPUSeconds
		if r.Fleet.GCPercent != first.Fleet.GCPercent {
			gcMixed = true
		}
		out.Errors = append(out.Errors, r.Errors...)
	}
	// Shards start and stop at different times: the merged run spans them
	// all. (One report keeps its own, monotonic, wall time.)
	if len(reports) > 1 && !out.StartedAt.IsZero() && !out.FinishedAt.IsZero() {
		out.WallSeconds = max(out.WallSeconds, roundTo(out.FinishedAt.Sub(out.StartedAt).Seconds(), 3))
	}
	out.Fleet.CPUSeconds = roundTo(out.Fleet.CPUSeconds, 3)
	if !gcMixed {
		out.Fleet.GCPercent = first.Fleet.GCPercent
	}
	out.Settings = mergeSettings(reports)

	var err error
	if out.Phases, err = mergePhases(reports, func(r *Report) []PhaseSummary { return r.Phases }); err != nil {
		return nil, fmt.Errorf("merging reports: phases: %w", err)
	}
	if out.SLIs, err = mergePhases(reports, func(r *Report) []PhaseSummary { return r.SLIs }); err != nil {
		return nil, fmt.Errorf("merging reports: SLIs: %w", err)
	}
	if len(out.SLIs) == 0 {
		out.SLIs = nil
	}
	if out.PodGroups, err = mergePodGroups(reports); err != nil {
		return nil, fmt.Errorf("merging reports: %w", err)
	}
	if out.API, err = mergeAPI(reports); err != nil {
		return nil, fmt.Errorf("merging reports: api: %w", err)
	}
	out.APIServerLatency = mergeAPIServerLatency(reports)
	out.Series = mergeSeries(reports)

	sched := milestoneThroughput(out.Series.Pods.Scheduled)
	var sli *bucketHistogram
	for _, r := range reports {
		s := r.Scheduling
		sched.SchedulerScheduled += s.SchedulerScheduled
		sched.SchedulerUnschedulable += s.SchedulerUnschedulable
		sched.SchedulerErrors += s.SchedulerErrors
		sched.SchedulerSeconds = max(sched.SchedulerSeconds, s.SchedulerSeconds)
		if s.SchedulingSLI != nil {
			sli = addHistogram(sli, histogramFromLatency(*s.SchedulingSLI))
		}
	}
	if sched.SchedulerSeconds > 0 {
		sched.SchedulerPerSecond = roundTo(float64(sched.SchedulerScheduled)/sched.SchedulerSeconds, 2)
	}
	if sli != nil {
		l := sli.latency()
		sched.SchedulingSLI = &l
	}
	out.Scheduling = sched
	hb, err := mergeHeartbeats(reports)
	if err != nil {
		return nil, err
	}
	out.Heartbeat = hb
	out.Faults = mergeFaults(reports)
	for _, r := range reports {
		out.Shards = append(out.Shards, r.Shards...)
	}

	// The thresholds are the same in every report (checked above); reports
	// whose SLOs were checked without recording them used the defaults.
	checked := first.SLOThresholds != nil
	for _, r := range reports {
		checked = checked || len(r.SLOs) > 0
	}
	if checked {
		var t SLOThresholds
		if first.SLOThresholds != nil {
			t = *first.SLOThresholds
		}
		out.EvaluateSLOs(t)
	}
	return out, nil
}

// mergeHeartbeats adds the heartbeats of shards that ran side by side: their
// rates add up, and their lateness and write latency histograms merge
// exactly.
func mergeHeartbeats(reports []*Report) (*HeartbeatStats, error) {
	var out *HeartbeatStats
	var lateness, writes []PhaseSummary
	for _, r := range reports {
		h := r.Heartbeat
		if h == nil {
			continue
		}
		if out == nil {
			out = &HeartbeatStats{}
		}
		out.Nodes += h.Nodes
		out.Renewals += h.Renewals
		out.LeaseUpdatesPerSecond += h.LeaseUpdatesPerSecond
		out.NodeStatusPatchesPerSecond += h.NodeStatusPatchesPerSecond
		out.OpenWatches += h.OpenWatches
		out.BytesSentPerSecond += h.BytesSentPerSecond
		out.BytesReceivedPerSecond += h.BytesReceivedPerSecond
		lateness = append(lateness, h.Lateness)
		// A report from before write latencies were measured has an
		// unnamed, empty one: named here, it merges as nothing.
		w := h.LeaseWriteLatency
		w.Name = leaseWriteLatency
		writes = append(writes, w)
	}
	if out == nil {
		return nil, nil
	}
	merged, err := mergePhases([]*Report{{Phases: lateness}}, func(r *Report) []PhaseSummary { return r.Phases })
	if err != nil {
		return nil, fmt.Errorf("lease renewal lateness: %w", err)
	}
	out.Lateness = merged[0]
	merged, err = mergePhases([]*Report{{Phases: writes}}, func(r *Report) []PhaseSummary { return r.Phases })
	if err != nil {
		return nil, fmt.Errorf("lease write latency: %w", err)
	}
	out.LeaseWriteLatency = merged[0]
	return out, nil
}

// mergeFaults merges the shards' faults by phase, in the order they
// started: a fault phase hits nodes of several shards at once, and each
// shard says what happened to its own. Counts and nodes add up; the fault
// spans the shards' starts and ends (still going if it is in any shard);
// the spreads merge as mergeSpreads says, their percentiles as upper
// bounds. The taint rates add up, which is exact when the shards' nodes
// were tainted over the same stretch, as a zone's nodes spread over shards
// are (the controller's queue takes them in turn); the controller's
// configured rates are one control plane's, the same in every shard.
func mergeFaults(reports []*Report) []Fault {
	var out []Fault
	idx := map[string]int{}
	for _, r := range reports {
		for _, f := range r.Faults {
			i, ok := idx[f.Phase]
			if !ok {
				idx[f.Phase] = len(out)
				f.Notes = slices.Clone(f.Notes)
				out = append(out, f)
				continue
			}
			m := &out[i]
			if f.Selector != m.Selector && !slices.Contains(strings.Split(m.Selector, " | "), f.Selector) {
				m.Selector += " | " + f.Selector
			}
			m.Nodes += f.Nodes
			ongoing := m.End.IsZero() || f.End.IsZero()
			if f.Start.Before(m.Start) {
				m.Start = f.Start
			}
			if f.End.After(m.End) {
				m.End = f.End
			}
			if ongoing {
				m.End = time.Time{}
			}
			m.Seconds = max(m.Seconds, f.Seconds)
			if !ongoing {
				m.Seconds = max(m.Seconds, roundTo(m.End.Sub(m.Start).Seconds(), 3))
			}
			m.NotReady = mergeSpreads(m.NotReady, f.NotReady)
			m.UnreachableTaint = mergeSpreads(m.UnreachableTaint, f.UnreachableTaint)
			m.NotReadyTaint = mergeSpreads(m.NotReadyTaint, f.NotReadyTaint)
			m.TaintRatePerSecond = roundTo(m.TaintRatePerSecond+f.TaintRatePerSecond, 3)
			m.NodeEvictionRate = max(m.NodeEvictionRate, f.NodeEvictionRate)
			m.SecondaryNodeEvictionRate = max(m.SecondaryNodeEvictionRate, f.SecondaryNodeEvictionRate)
			m.PodsEvicted += f.PodsEvicted
			m.PodsRescheduled += f.PodsRescheduled
			m.RescheduledStartup = mergeSpreads(m.RescheduledStartup, f.RescheduledStartup)
			m.ReadyAgain = mergeSpreads(m.ReadyAgain, f.ReadyAgain)
			m.NotReadyAtReport += f.NotReadyAtReport
			m.ContainerRestarts += f.ContainerRestarts
			m.PodsLost += f.PodsLost
			m.PodsDuplicated += f.PodsDuplicated
			for _, n := range f.Notes {
				if !slices.Contains(m.Notes, n) {
					m.Notes = append(m.Notes, n)
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Fault) int { return a.Start.Compare(b.Start) })
	return out
}

// mergeSpreads combines the spreads of shards over their own nodes or pods.
// Count adds up and Max is the largest, exactly; the percentiles cannot be
// merged from percentiles, so P50 and P99 are the shards' largest: an upper
// bound of the percentile over all of them (at least half of every shard's
// values are at or below its own p50, hence at or below the largest p50;
// the same for p99), and exact when one shard has them all.
func mergeSpreads(a, b Spread) Spread {
	return Spread{
		Count:      a.Count + b.Count,
		P50Seconds: max(a.P50Seconds, b.P50Seconds),
		P99Seconds: max(a.P99Seconds, b.P99Seconds),
		MaxSeconds: max(a.MaxSeconds, b.MaxSeconds),
	}
}

// sameRun reports whether a and b are the report of one process, given
// twice (the same file, or a copy of it). Every process stamps StartedAt
// and FinishedAt from its own wall clock, in nanoseconds, so two shards of
// a run never agree on both, let alone also on their profile and number of
// nodes. Reports without a StartedAt (built in memory, not by a run) are
// the same run only if they are the same report.
func sameRun(a, b *Report) bool {
	if a == b {
		return true
	}
	return !a.StartedAt.IsZero() && a.StartedAt.Equal(b.StartedAt) && a.FinishedAt.Equal(b.FinishedAt) &&
		a.Profile == b.Profile && a.Nodes == b.Nodes
}

// runIdentity says which run sameRun found twice.
func runIdentity(r *Report) string {
	s := fmt.Sprintf("profile %q", r.Profile)
	if !r.StartedAt.IsZero() {
		s += ", started " + r.StartedAt.Format(time.RFC3339Nano)
	}
	return s
}

func sameThresholds(a, b *SLOThresholds) bool {
	if a == nil || b == nil {
		return a == b
	}
	return reflect.DeepEqual(a.Defaulted(), b.Defaulted())
}

// mergeSettings unites the reports' settings; a setting that differs between
// shards keeps every value, sorted and joined, so the report shows it.
func mergeSettings(reports []*Report) map[string]string {
	values := map[string][]string{}
	for _, r := range reports {
		for k, v := range r.Settings {
			if !slices.Contains(values[k], v) {
				values[k] = append(values[k], v)
			}
		}
	}
	if len(values) == 0 {
		return nil
	}
	out := make(map[string]string, len(values))
	for k, vs := range values {
		slices.Sort(vs)
		out[k] = strings.Join(vs, " | ")
	}
	return out
}

// mergePhases merges phases by name, in the order they first appear.
func mergePhases(reports []*Report, get func(*Report) []PhaseSummary) ([]PhaseSummary, error) {
	var order []string
	phases := map[string]*Phase{}
	for i, r := range reports {
		for _, s := range get(r) {
			p := phases[s.Name]
			if p == nil {
				p = &Phase{Name: s.Name, Hist: NewHistogram()}
				phases[s.Name] = p
				order = append(order, s.Name)
			}
			// A phase with nothing recorded has nothing to add, histogram
			// or not.
			if s.Histogram != "" || s.Count != 0 {
				h, err := DecodeHistogram(s.Histogram)
				if err != nil {
					return nil, fmt.Errorf("report %d, phase %s: %w", i+1, s.Name, err)
				}
				if dropped := p.Hist.Merge(h); dropped != 0 {
					return nil, fmt.Errorf("report %d, phase %s: %d values beyond the report's histogram range", i+1, s.Name, dropped)
				}
			}
			p.Count += s.Count
			p.Anomalies += s.Anomalies
			p.Overflows += s.Overflows
			p.Excluded += s.Excluded
		}
	}
	out := make([]PhaseSummary, 0, len(order))
	for _, name := range order {
		out = append(out, phases[name].Summary())
	}
	return out, nil
}

// mergeAPI merges the client-side API rows by component, verb and resource
// (or path).
// A row that more than one report has is merged through its histograms; if
// one of them has none (a report written by hand, or one whose encoding
// failed) its percentiles cannot be merged, and that is an error.
func mergeAPI(reports []*Report) ([]APIStat, error) {
	type key struct{ component, verb, group, resource, subresource, path string }
	type acc struct {
		stat    APIStat
		n       int
		hist    *histogramAcc
		missing int // report number without a histogram
	}
	rows := map[key]*acc{}
	for i, r := range reports {
		for _, s := range r.API {
			k := key{s.Component, s.Verb, s.Group, s.Resource, s.Subresource, s.Path}
			a := rows[k]
			if a == nil {
				a = &acc{stat: APIStat{Component: s.Component, Verb: s.Verb, Group: s.Group, Resource: s.Resource, Subresource: s.Subresource, Path: s.Path}}
				rows[k] = a
			}
			a.n++
			if a.n == 1 {
				a.stat.P50Ms, a.stat.P99Ms = s.P50Ms, s.P99Ms
			}
			a.stat.Count += s.Count
			a.stat.BytesSent += s.BytesSent
			a.stat.BytesReceived += s.BytesReceived
			a.stat.Errors += s.Errors
			a.stat.OpenWatches += s.OpenWatches
			a.stat.Events += s.Events
			for c, n := range s.Codes {
				if a.stat.Codes == nil {
					a.stat.Codes = map[string]int64{}
				}
				a.stat.Codes[c] += n
			}
			if s.Histogram == "" {
				a.missing = i + 1
				continue
			}
			if a.hist == nil {
				a.hist = &histogramAcc{}
			}
			if err := a.hist.add(s.Histogram); err != nil {
				return nil, fmt.Errorf("report %d, %s %s: %w", i+1, s.Verb, s.Label(), err)
			}
		}
	}
	out := make([]APIStat, 0, len(rows))
	for _, a := range rows {
		switch {
		case a.n > 1 && a.missing > 0:
			return nil, fmt.Errorf("%s %s is in %d reports but report %d has no latency histogram for it, so its percentiles cannot be merged",
				a.stat.Verb, a.stat.Label(), a.n, a.missing)
		case a.hist != nil:
			st := statsOf(a.hist.h)
			a.stat.P50Ms, a.stat.P99Ms = st.p50, st.p99
			a.stat.Histogram = encodeHistogram(a.hist.h)
		}
		out = append(out, a.stat)
	}
	slices.SortFunc(out, compareAPIStats)
	return out, nil
}

type histogramAcc struct{ h *hdrhistogram.Histogram }

func (a *histogramAcc) add(encoded string) error {
	h, err := DecodeHistogram(encoded)
	if err != nil {
		return err
	}
	if a.h == nil {
		a.h = NewHistogram()
	}
	if dropped := a.h.Merge(h); dropped != 0 {
		return fmt.Errorf("%d values beyond the report's histogram range", dropped)
	}
	return nil
}

// mergeAPIServerLatency adds the server-side rows' buckets.
func mergeAPIServerLatency(reports []*Report) []APICallLatency {
	type key struct{ verb, group, resource, subresource, scope string }
	rows := map[key]*bucketHistogram{}
	for _, r := range reports {
		for _, c := range r.APIServerLatency {
			k := key{c.Verb, c.Group, c.Resource, c.Subresource, c.Scope}
			rows[k] = addHistogram(rows[k], histogramFromLatency(c.BucketLatency))
		}
	}
	if len(rows) == 0 {
		return nil
	}
	out := make([]APICallLatency, 0, len(rows))
	for k, h := range rows {
		out = append(out, APICallLatency{
			Verb: k.verb, Group: k.group, Resource: k.resource, Subresource: k.subresource, Scope: k.scope,
			BucketLatency: h.latency(),
		})
	}
	slices.SortFunc(out, compareAPICallLatency)
	return out
}

// mergeSeries adds the reports' series second by second, aligned on the
// wall clock: each report's bucket 0 lands at its Start's offset from the
// earliest Start, rounded to the second. Shards on one machine share its
// clock; across machines, their clock skew shifts their counts by as much.
func mergeSeries(reports []*Report) Series {
	var out Series
	var pods []PodSeries
	var apis []APISeries
	for _, r := range reports {
		if len(r.Series.Pods.Created) > 0 || len(r.Series.Pods.Running) > 0 {
			pods = append(pods, r.Series.Pods)
		}
		if len(r.Series.API.Verbs) > 0 || r.Series.API.Late > 0 {
			apis = append(apis, r.Series.API)
		}
	}
	if len(pods) > 0 {
		start := earliest(pods, func(p PodSeries) time.Time { return p.Start })
		out.Pods.Start = start
		for _, p := range pods {
			off := secondsBetween(start, p.Start)
			out.Pods.Created = addAt(out.Pods.Created, p.Created, off)
			out.Pods.Scheduled = addAt(out.Pods.Scheduled, p.Scheduled, off)
			// Running is a level: before a shard's series starts it has 0
			// pods running, after it ends it keeps its last level.
			out.Pods.Running = addLevelAt(out.Pods.Running, p.Running, off)
		}
		n := max(len(out.Pods.Created), len(out.Pods.Scheduled), len(out.Pods.Running))
		out.Pods.Created = padTo(out.Pods.Created, n)
		out.Pods.Scheduled = padTo(out.Pods.Scheduled, n)
		out.Pods.Running = padLevelTo(out.Pods.Running, n)
	}
	if len(apis) > 0 {
		start := earliest(apis, func(a APISeries) time.Time { return a.Start })
		out.API.Start = start
		byVerb := map[string][]int64{}
		n := 0
		for _, a := range apis {
			off := secondsBetween(start, a.Start)
			out.API.Late += a.Late
			for _, v := range a.Verbs {
				byVerb[v.Verb] = addAt(byVerb[v.Verb], v.Counts, off)
				n = max(n, len(byVerb[v.Verb]))
			}
		}
		for _, verb := range apiSeriesVerbs {
			if cs, ok := byVerb[verb]; ok {
				out.API.Verbs = append(out.API.Verbs, VerbSeries{Verb: verb, Counts: padTo(cs, n)})
				delete(byVerb, verb)
			}
		}
		// Verbs this build does not know (a newer writer) go last, sorted.
		for _, verb := range slices.Sorted(maps.Keys(byVerb)) {
			out.API.Verbs = append(out.API.Verbs, VerbSeries{Verb: verb, Counts: padTo(byVerb[verb], n)})
		}
	}
	return out
}

func earliest[T any](xs []T, start func(T) time.Time) time.Time {
	t := start(xs[0])
	for _, x := range xs[1:] {
		if s := start(x); s.Before(t) {
			t = s
		}
	}
	return t
}

func secondsBetween(from, to time.Time) int {
	return int(to.Sub(from).Round(time.Second) / time.Second)
}

// addAt adds src into dst starting at index off, growing dst as needed.
func addAt[T int | int64](dst, src []T, off int) []T {
	dst = padTo(dst, off+len(src))
	for i, v := range src {
		dst[off+i] += v
	}
	return dst
}

// addLevelAt adds a level series: src holds src[len-1] after its end, so
// dst's later seconds (and those padded later) carry it.
func addLevelAt(dst, src []int, off int) []int {
	if len(src) == 0 {
		return dst
	}
	dst = padLevelTo(dst, off+len(src))
	last := src[len(src)-1]
	for i := off; i < len(dst); i++ {
		if j := i - off; j < len(src) {
			dst[i] += src[j]
		} else {
			dst[i] += last
		}
	}
	return dst
}

func padTo[T int | int64](s []T, n int) []T {
	for len(s) < n {
		s = append(s, 0)
	}
	return s
}

// padLevelTo extends a level series with its last value.
func padLevelTo(s []int, n int) []int {
	last := 0
	if len(s) > 0 {
		last = s[len(s)-1]
	}
	for len(s) < n {
		s = append(s, last)
	}
	return s
}
