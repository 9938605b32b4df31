package reports

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// reportView is a report formatted for people: every number already a
// string, in the units and precision the renderers show. RenderMarkdown and
// RenderHTML both read it, so the two files say the same thing.
type reportView struct {
	Title   string
	Profile string
	// Verdict is "pass", "fail" or "unchecked"; VerdictText says it in words.
	Verdict     string
	VerdictText string
	// Diagnosis says why pod startup failed, when it did; see Diagnosis.
	Diagnosis string
	Facts     []fact

	SLOSummary []sloSummaryRow
	SLOs       []sloRow
	SLIs       []phaseRow
	SLINotes   []string
	Phases     []phaseRow
	Notes      []string // anomalies and overflows

	API       []apiRow
	APIServer []apiServerRow
	// APIServerMissing is set when the report has no server-side table.
	APIServerMissing bool

	Scheduling []keyValue
	Heartbeat  []keyValue
	Fleet      []keyValue
	Settings   []keyValue
	Errors     []string
	Schema     string
}

type keyValue struct{ Key, Value string }

// fact is one headline number: Value large, Sub under it in small print.
type fact struct{ Key, Value, Sub string }

type sloSummaryRow struct {
	Icon, Status, Name, Title, Checked, Worst, Observed, Limit string
	Failing                                                    []string
	Note                                                       string
}

type sloRow struct {
	Icon, Status, Name, Subject, Observed, Limit, Count, Detail string
}

type phaseRow struct {
	Name, Span, Count, Min, P50, P90, P99, Max, Excluded string
	Empty                                                bool
}

type apiRow struct {
	Verb, Resource, Requests, Rate, Sent, Received, P50, P99, Errors string
}

type apiServerRow struct {
	Verb, Resource, Scope, Count, P50, P90, P99 string
	// Over is set when the p99 is above the SLO threshold that applies.
	Over bool
}

// sloIcons mark verdicts in Markdown and HTML. Read-only.
var sloIcons = map[string]string{"pass": "✅", "fail": "❌", "skip": "➖"}

func buildView(r *Report) reportView {
	v := reportView{Profile: r.Profile, Schema: cmp.Or(r.SchemaVersion, SchemaVersion)}
	if v.Profile == "" {
		v.Profile = "(none)"
	}
	v.Title = "fleetlet report: " + v.Profile

	v.Verdict, v.VerdictText = verdictOf(r)
	v.Diagnosis = Diagnosis(r)
	wall := fact{Key: "Wall time", Value: fmtWall(r.WallSeconds)}
	if !r.StartedAt.IsZero() {
		wall.Sub = r.StartedAt.UTC().Format("2006-01-02 15:04 UTC")
	}
	v.Facts = []fact{
		{Key: "Nodes", Value: strconv.Itoa(r.Nodes)},
		{Key: "Pods created", Value: strconv.Itoa(r.Pods.Created),
			Sub: fmt.Sprintf("%d Running · %d gone", r.Pods.Running, r.Pods.Gone)},
		wall,
	}
	for _, s := range r.SLIs {
		if s.Name == SLIPodStartup && s.Count > 0 {
			f := fact{Key: "Pod startup p99", Value: fmtMs(s.P99Ms) + " ms", Sub: plural(s.Count, "pod")}
			for _, res := range r.SLOs {
				if res.Name == SLOPodStartupLatency && !res.Skipped {
					f.Sub += " · SLO " + fmtTickMs(res.ThresholdMs)
				}
			}
			v.Facts = append(v.Facts, f)
		}
	}
	if r.Scheduling.Pods > 0 {
		v.Facts = append(v.Facts, fact{Key: "Scheduling", Value: strconv.FormatFloat(r.Scheduling.AvgPerSecond, 'f', 1, 64) + " pods/s",
			Sub: fmt.Sprintf("busiest second: %d", r.Scheduling.MaxPerSecond)})
	}
	if r.Fleet.PeakRSSBytes > 0 {
		v.Facts = append(v.Facts, fact{Key: "Fleet peak RSS", Value: fmtBytes(r.Fleet.PeakRSSBytes),
			Sub: "CPU " + fmtWall(r.Fleet.CPUSeconds)})
	}

	for _, sv := range sloVerdicts(r.SLOs) {
		row := sloSummaryRow{Name: sv.name, Title: sloTitle(sv.name), Checked: strconv.Itoa(sv.checked), Worst: "-", Observed: "-", Limit: "-"}
		switch {
		case sv.fail > 0:
			row.Status = "fail"
		case sv.skipped:
			row.Status = "skip"
			row.Note = sv.worst.Detail
		default:
			row.Status = "pass"
		}
		row.Icon = sloIcons[row.Status]
		if !sv.skipped {
			row.Worst, row.Observed = sv.worst.Subject, fmtMs(sv.worst.ObservedMs)
		}
		if sv.worst.ThresholdMs > 0 {
			row.Limit = fmtMs(sv.worst.ThresholdMs)
		}
		for _, f := range sv.failing {
			row.Failing = append(row.Failing, fmt.Sprintf("%s: p99 %s ms over %s ms", f.Subject, fmtMs(f.ObservedMs), fmtMs(f.ThresholdMs)))
		}
		v.SLOSummary = append(v.SLOSummary, row)
	}
	for _, s := range r.SLOs {
		row := sloRow{Name: s.Name, Subject: cmp.Or(s.Subject, "-"), Observed: "-", Limit: "-", Count: "-", Detail: s.Detail}
		switch {
		case s.Skipped:
			row.Status = "skip"
		case s.Pass:
			row.Status = "pass"
		default:
			row.Status = "fail"
		}
		row.Icon = sloIcons[row.Status]
		if !s.Skipped {
			row.Observed, row.Count = fmtMs(s.ObservedMs), strconv.FormatInt(s.Count, 10)
		}
		if s.ThresholdMs > 0 {
			row.Limit = fmtMs(s.ThresholdMs)
		}
		v.SLOs = append(v.SLOs, row)
	}

	v.SLIs = phaseRows(r.SLIs, SLIPhases)
	for _, p := range r.SLIs {
		if p.Excluded > 0 {
			v.SLINotes = append(v.SLINotes, fmt.Sprintf("%s leaves out %s that pulled an image, as the upstream SLO does.", p.Name, plural(p.Excluded, "pod")))
		}
	}
	// A phase's name says its milestones; an SLI's does not.
	v.Phases = phaseRows(r.Phases, nil)
	for _, p := range slices.Concat(r.Phases, r.SLIs) {
		if p.Anomalies > 0 {
			v.Notes = append(v.Notes, fmt.Sprintf("%s: %s stamped its end before its start (a clock or milestone bug); left out.", p.Name, plural(p.Anomalies, "pod")))
		}
		if p.Overflows > 0 {
			v.Notes = append(v.Notes, fmt.Sprintf("%s: %s took longer than 1h; counted as 1h.", p.Name, plural(p.Overflows, "pod")))
		}
	}

	for _, a := range r.API {
		rate := "-"
		if r.WallSeconds > 0 {
			rate = strconv.FormatFloat(float64(a.Count)/r.WallSeconds, 'f', 1, 64)
		}
		v.API = append(v.API, apiRow{
			Verb: a.Verb, Resource: a.Label(), Requests: strconv.FormatInt(a.Count, 10), Rate: rate,
			Sent: fmtBytes(a.BytesSent), Received: fmtBytes(a.BytesReceived),
			P50: fmtMs(a.P50Ms), P99: fmtMs(a.P99Ms), Errors: strconv.FormatInt(a.Errors, 10),
		})
	}
	limits := thresholdsOf(r)
	for _, c := range r.APIServerLatency {
		row := apiServerRow{
			Verb: c.Verb, Resource: c.Label(), Scope: cmp.Or(c.Scope, "-"), Count: strconv.FormatInt(c.Count, 10),
			P50: fmtMs(c.P50Ms), P90: fmtMs(c.P90Ms), P99: fmtMs(c.P99Ms),
		}
		if limit, ok := limits.apiLimitMs(c); ok && c.P99Ms > limit {
			row.Over = true
		}
		v.APIServer = append(v.APIServer, row)
	}
	v.APIServerMissing = len(r.APIServerLatency) == 0

	v.Scheduling = schedulingFacts(r.Scheduling)
	v.Heartbeat = heartbeatFacts(r.Heartbeat)
	v.Fleet = fleetFacts(r.Fleet)
	keys := make([]string, 0, len(r.Settings))
	for k := range r.Settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v.Settings = append(v.Settings, keyValue{k, r.Settings[k]})
	}
	v.Errors = r.Errors
	return v
}

// verdictOf is the report's one-line verdict.
func verdictOf(r *Report) (status, text string) {
	verdicts := sloVerdicts(r.SLOs)
	if len(verdicts) == 0 {
		return "unchecked", "SLOs not checked"
	}
	var failed, skipped []string
	for _, v := range verdicts {
		switch {
		case v.fail > 0:
			failed = append(failed, sloTitle(v.name))
		case v.skipped:
			skipped = append(skipped, sloTitle(v.name))
		}
	}
	checked := len(verdicts) - len(skipped)
	var b strings.Builder
	if len(failed) > 0 {
		status = "fail"
		fmt.Fprintf(&b, "%d of %d SLOs failed: %s", len(failed), checked, strings.Join(failed, ", "))
	} else {
		status = "pass"
		fmt.Fprintf(&b, "All %d SLOs checked pass", checked)
	}
	if len(skipped) > 0 {
		fmt.Fprintf(&b, " (%d skipped: %s)", len(skipped), strings.Join(skipped, ", "))
	}
	return status, b.String()
}

func phaseRows(phases []PhaseSummary, specs []PhaseSpec) []phaseRow {
	rows := make([]phaseRow, 0, len(phases))
	for _, p := range phases {
		row := phaseRow{Name: p.Name, Count: strconv.Itoa(p.Count), Excluded: "-"}
		for _, sp := range specs {
			if sp.Name == p.Name {
				row.Span = sp.From.String() + " → " + sp.To.String()
			}
		}
		if p.Excluded > 0 {
			row.Excluded = strconv.Itoa(p.Excluded)
		}
		if p.Count == 0 {
			row.Empty = true
			row.Min, row.P50, row.P90, row.P99, row.Max = "-", "-", "-", "-", "-"
		} else {
			row.Min, row.P50, row.P90, row.P99, row.Max = fmtMs(p.MinMs), fmtMs(p.P50Ms), fmtMs(p.P90Ms), fmtMs(p.P99Ms), fmtMs(p.MaxMs)
		}
		rows = append(rows, row)
	}
	return rows
}

// thresholdsOf returns the thresholds r was checked against, or the
// defaults.
func thresholdsOf(r *Report) SLOThresholds {
	if r.SLOThresholds != nil {
		return r.SLOThresholds.Defaulted()
	}
	return SLOThresholds{}.Defaulted()
}

// apiLimitMs is the SLO threshold that applies to a server-side row, if
// any.
func (t SLOThresholds) apiLimitMs(c APICallLatency) (float64, bool) {
	var d time.Duration
	switch {
	case c.Resource == "":
		return 0, false
	case mutatingVerbs[c.Verb]:
		d = t.MutatingAPICallP99.Duration
	case readOnlyVerbs[c.Verb]:
		switch c.Scope {
		case "resource":
			d = t.ReadOnlyResourceAPICallP99.Duration
		case "namespace":
			d = t.ReadOnlyNamespaceAPICallP99.Duration
		case "cluster":
			d = t.ReadOnlyClusterAPICallP99.Duration
		default:
			return 0, false
		}
	default:
		return 0, false
	}
	if d < 0 {
		return 0, false
	}
	return durationMs(d), true
}

func schedulingFacts(s SchedulingStats) []keyValue {
	var out []keyValue
	if s.Pods > 0 {
		out = append(out,
			keyValue{"Pods seen scheduled", strconv.Itoa(s.Pods)},
			keyValue{"Average, 1-second windows", strconv.FormatFloat(s.AvgPerSecond, 'f', 1, 64) + " pods/s"},
			keyValue{"Busiest second", strconv.Itoa(s.MaxPerSecond) + " pods"},
		)
	}
	if s.SchedulerSeconds > 0 {
		out = append(out,
			keyValue{"Scheduler: pods bound", fmt.Sprintf("%d in %s (%s pods/s)", s.SchedulerScheduled, fmtWall(s.SchedulerSeconds), strconv.FormatFloat(s.SchedulerPerSecond, 'f', 1, 64))},
			keyValue{"Scheduler: unschedulable, errors", fmt.Sprintf("%d, %d", s.SchedulerUnschedulable, s.SchedulerErrors)},
		)
	}
	if l := s.SchedulingSLI; l != nil && l.Count > 0 {
		out = append(out, keyValue{"Scheduler's pod scheduling SLI", fmt.Sprintf("p50 %s ms, p90 %s ms, p99 %s ms over %d pods", fmtMs(l.P50Ms), fmtMs(l.P90Ms), fmtMs(l.P99Ms), l.Count)})
	}
	return out
}

func heartbeatFacts(h *HeartbeatStats) []keyValue {
	if h == nil {
		return nil
	}
	l, w := h.Lateness, h.LeaseWriteLatency
	return []keyValue{
		{"Nodes renewing their lease", strconv.Itoa(h.Nodes)},
		{"Lease updates", strconv.FormatFloat(h.LeaseUpdatesPerSecond, 'f', 1, 64) + "/s"},
		{"Node status patches", strconv.FormatFloat(h.NodeStatusPatchesPerSecond, 'f', 2, 64) + "/s"},
		{"Lease renewal lateness", fmt.Sprintf("p50 %s ms, p99 %s ms, max %s ms over %d renewals", fmtMs(l.P50Ms), fmtMs(l.P99Ms), fmtMs(l.MaxMs), l.Count)},
		{"Lease PUT latency (its API share)", fmt.Sprintf("p50 %s ms, p99 %s ms, max %s ms", fmtMs(w.P50Ms), fmtMs(w.P99Ms), fmtMs(w.MaxMs))},
		{"Open watches", strconv.Itoa(h.OpenWatches)},
		{"Agents' traffic", fmt.Sprintf("%s/s sent, %s/s received", fmtBytes(int64(h.BytesSentPerSecond)), fmtBytes(int64(h.BytesReceivedPerSecond)))},
	}
}

func fleetFacts(f FleetStats) []keyValue {
	rss := "unknown"
	if f.PeakRSSBytes > 0 {
		rss = fmtBytes(f.PeakRSSBytes)
	}
	return []keyValue{
		{"Peak RSS", rss},
		{"CPU", fmtWall(f.CPUSeconds)},
		{"Goroutines at the end", strconv.Itoa(f.Goroutines)},
	}
}
