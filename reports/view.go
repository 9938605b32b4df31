package reports

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// reportView is a report formatted for people: every number already a
// string, in the units and precision the renderers show, every sentence
// already worded. RenderSummary, RenderMarkdown and RenderHTML all read it
// and compute nothing of their own, so the terminal, report.md and
// report.html say the same thing in the same words.
//
// Each section is built by one pure function of the report (runOf,
// factsOf, sloSummaryRows, ...), which buildView only calls.
type reportView struct {
	Title   string
	Profile string
	// Verdict is "pass", "fail" or "unchecked"; VerdictLabel says it in two
	// words ("SLOs fail.") and VerdictText in a sentence.
	Verdict      string
	VerdictLabel string
	VerdictText  string
	// Diagnosis says why pod startup failed, when it did; see Diagnosis.
	Diagnosis string
	// Run is the run's size and the fleet's cost: the terminal's header
	// line. Facts are the headline numbers of report.md and report.html.
	Run   runView
	Facts []fact

	SLOSummary []sloSummaryRow
	SLOs       []sloRow
	SLIs       []phaseRow
	SLINotes   []string // pods an SLI leaves out
	Phases     []phaseRow
	Workloads  []phaseRow
	// PodGroups is the pod_startup SLI per group of pods (phase and owning
	// kind), then per kind over its groups.
	PodGroups []phaseRow
	Notes     []string // anomalies and overflows, of phases and SLIs

	API       []apiRow
	APIServer []apiServerRow
	// APIServerMissing is set when the report has no server-side table.
	APIServerMissing bool

	Scheduling []keyValue
	Heartbeat  []keyValue
	Outages    []keyValue
	Faults     []faultView // the profile's fault phases, one block each
	// Shards are the processes whose agents ran the run's pods, with their
	// clock offsets; ShardsText says what the offsets did, ShardsLine says
	// them in one line for the terminal. All empty without shards.
	Shards     []shardRow
	ShardsText string
	ShardsLine string
	Fleet      []keyValue
	Settings   []keyValue
	Errors     []string
	Schema     string
}

type keyValue struct{ Key, Value string }

// faultView is one fault: Heading says what was injected where and when,
// Facts what the nodes and the control plane did (NotReady, Taints, Pods,
// Ready again), Notes the rest in words.
type faultView struct {
	Heading string
	Facts   []keyValue
	Notes   []string
}

// fact is one headline number: Value large, Sub under it in small print.
type fact struct{ Key, Value, Sub string }

// runView is the run's size and the fleet's cost. CPU, Goroutines and GCPercent are ""
// when not measured (zero), PeakRSS is "unknown"; Started is "" when the
// report has no start time.
type runView struct {
	Nodes, Created, Running, Deleted, Gone string
	Wall, Started                          string
	PeakRSS, CPU, Goroutines, GCPercent    string
}

// sloSummaryRow is one SLO over all its subjects. Failing are its failing
// subjects, each worded as "subject: p99 ..., above the ... limit (how)";
// Note says why it was skipped.
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
	// Client is "kubelet" or "kube-proxy"; PerNodeMin is the requests per
	// node per minute, to hold against one real node's; Open the watches
	// open at the end ("-" on rows that are not watches).
	Client, Verb, Resource, Requests, Rate, PerNodeMin, Open, Sent, Received, P50, P99, Errors string
	// PerPod is the requests per pod created ("-" when none was): under
	// load, the per-pod request mix to hold against a kubelet's.
	PerPod string
	// EventsPerNode is, on a watch row, the watch events received per node
	// (bookmarks and a streaming list's initial events included);
	// ReceivedPerNode the response bytes per node. Both are what one real
	// kubelet's would be, and "-" when the report has no nodes (and
	// EventsPerNode on rows that are not watches).
	EventsPerNode, ReceivedPerNode string
}

// shardRow is one shard: its offsets in ms, "±" their uncertainty, and its
// drift in ppm; End and Drift are "-" when not measured.
type shardRow struct {
	Shard, Nodes, Pods, Start, End, Drift string
}

type apiServerRow struct {
	Verb, Resource, Scope, Count, P50, P90, P99 string
	// Over is set when the p99 is above the SLO threshold that applies.
	Over bool
}

// sloIcons mark verdicts in Markdown and HTML. Read-only.
var sloIcons = map[string]string{"pass": "✅", "fail": "❌", "skip": "➖"}

// verdictLabels say a report's verdict in two words. Read-only.
var verdictLabels = map[string]string{"pass": "SLOs pass.", "fail": "SLOs fail.", "unchecked": "SLOs not checked."}

// buildView is the whole report, formatted: one builder per section.
func buildView(r *Report) reportView {
	v := reportView{Profile: profileName(r), Schema: cmp.Or(r.SchemaVersion, SchemaVersion)}
	v.Title = "fleetlet report: " + v.Profile
	v.Verdict, v.VerdictText = verdictOf(r)
	v.VerdictLabel = verdictLabels[v.Verdict]
	v.Diagnosis = Diagnosis(r)
	v.Run = runOf(r)
	v.Facts = factsOf(r)

	v.SLOSummary = sloSummaryRows(r)
	v.SLOs = sloRows(r)
	v.SLIs = sliRows(r)
	v.SLINotes = excludedNotes(r)
	v.Phases = phaseTableRows(r)
	v.Workloads = phaseRows(r.Workloads, nil)
	v.PodGroups = podGroupRows(r)
	v.Notes = phaseNotes(r)

	v.API = apiRows(r)
	v.APIServer = apiServerRows(r)
	v.APIServerMissing = len(r.APIServerLatency) == 0

	v.Scheduling = schedulingFacts(r)
	v.Heartbeat = heartbeatFacts(r)
	v.Outages = outageFacts(r)
	v.Faults = faultViews(r)
	v.Shards, v.ShardsText, v.ShardsLine = shardViews(r)
	v.Fleet = fleetFacts(r)
	v.Settings = settingRows(r)
	v.Errors = r.Errors
	return v
}

func profileName(r *Report) string {
	return cmp.Or(r.Profile, "(none)")
}

// verdictOf is the report's one-line verdict. Skipped SLOs count neither as
// checked nor as failed.
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
	switch {
	case len(failed) > 0:
		status = "fail"
		fmt.Fprintf(&b, "%d of %s failed: %s", len(failed), plural(checked, "SLO"), strings.Join(failed, ", "))
	case checked == 0:
		return "unchecked", fmt.Sprintf("%d skipped: %s", len(skipped), strings.Join(skipped, ", "))
	case checked == 1:
		status = "pass"
		b.WriteString("The 1 SLO checked passes")
	default:
		status = "pass"
		fmt.Fprintf(&b, "All %d SLOs checked pass", checked)
	}
	if len(skipped) > 0 {
		fmt.Fprintf(&b, " (%d skipped: %s)", len(skipped), strings.Join(skipped, ", "))
	}
	return status, b.String()
}

// runOf is the run's size and the fleet's cost.
func runOf(r *Report) runView {
	run := runView{
		Nodes:   strconv.Itoa(r.Nodes),
		Created: strconv.Itoa(r.Pods.Created), Running: strconv.Itoa(r.Pods.Running),
		Deleted: strconv.Itoa(r.Pods.Deleted), Gone: strconv.Itoa(r.Pods.Gone),
		Wall:    fmtWall(r.WallSeconds),
		PeakRSS: "unknown",
	}
	if !r.StartedAt.IsZero() {
		run.Started = r.StartedAt.UTC().Format("2006-01-02 15:04 UTC")
	}
	if r.Fleet.PeakRSSBytes > 0 {
		run.PeakRSS = fmtBytes(r.Fleet.PeakRSSBytes)
	}
	if r.Fleet.CPUSeconds > 0 {
		run.CPU = fmtWall(r.Fleet.CPUSeconds)
	}
	if r.Fleet.Goroutines > 0 {
		run.Goroutines = strconv.Itoa(r.Fleet.Goroutines)
	}
	if r.Fleet.GCPercent > 0 {
		run.GCPercent = strconv.Itoa(r.Fleet.GCPercent) + " %"
	}
	return run
}

// factsOf is the headline: the run's size, the pod startup p99, the
// scheduling throughput and the fleet's peak RSS.
func factsOf(r *Report) []fact {
	run := runOf(r)
	facts := []fact{
		{Key: "Nodes", Value: run.Nodes},
		{Key: "Pods created", Value: run.Created,
			Sub: fmt.Sprintf("%s Running · %s deleted · %s gone", run.Running, run.Deleted, run.Gone)},
		{Key: "Wall time", Value: run.Wall, Sub: run.Started},
	}
	for _, s := range r.SLIs {
		if s.Name == SLIPodStartup && s.Count > 0 {
			f := fact{Key: "Pod startup p99", Value: fmtMs(s.P99Ms) + " ms", Sub: plural(s.Count, "pod")}
			for _, res := range r.SLOs {
				if res.Name == SLOPodStartupLatency && !res.Skipped {
					f.Sub += " · SLO " + fmtTickMs(res.ThresholdMs)
				}
			}
			facts = append(facts, f)
		}
	}
	if s := r.Scheduling; s.Pods > 0 {
		facts = append(facts, fact{Key: "Scheduling", Value: fmtRate(s.AvgPerSecond, 1) + " pods/s",
			Sub: "busiest second: " + plural(s.MaxPerSecond, "pod")})
	}
	if r.Fleet.PeakRSSBytes > 0 {
		f := fact{Key: "Fleet peak RSS", Value: run.PeakRSS}
		if run.CPU != "" {
			f.Sub = "CPU " + run.CPU
		}
		facts = append(facts, f)
	}
	return facts
}

// sloSummaryRows is one row per SLO, with its failing subjects.
func sloSummaryRows(r *Report) []sloSummaryRow {
	var rows []sloSummaryRow
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
			line := fmt.Sprintf("%s: p99 %s ms, above the %s ms limit", f.Subject, fmtMs(f.ObservedMs), fmtMs(f.ThresholdMs))
			if f.Detail != "" {
				line += " (" + f.Detail + ")"
			}
			row.Failing = append(row.Failing, line)
		}
		rows = append(rows, row)
	}
	return rows
}

// sloRows is every check, one row per SLO and subject.
func sloRows(r *Report) []sloRow {
	var rows []sloRow
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
		rows = append(rows, row)
	}
	return rows
}

// sliRows are the SLIs, with the milestones each spans: an SLI's name does
// not say them.
func sliRows(r *Report) []phaseRow { return phaseRows(r.SLIs, SLIPhases) }

// phaseTableRows are the phases; a phase's name says its milestones.
func phaseTableRows(r *Report) []phaseRow { return phaseRows(r.Phases, nil) }

// excludedNotes say which pods each SLI leaves out.
func excludedNotes(r *Report) []string {
	var notes []string
	for _, p := range r.SLIs {
		if p.Excluded > 0 {
			notes = append(notes, fmt.Sprintf("%s leaves out %s that pulled an image, as the upstream SLO does.", p.Name, plural(p.Excluded, "pod")))
		}
	}
	if n := r.NetworkProgrammingNodes; n != nil && n.Nodes > 0 {
		notes = append(notes, fmt.Sprintf("%s counts each node's kube-proxy once per change: over %s, the median node's p99 was %s ms and the worst node's %s ms (%s).",
			SLINetworkProgramming, plural(n.Nodes, "node"), fmtMs(n.P99MedianMs), fmtMs(n.P99MaxMs), n.WorstNode))
	}
	return notes
}

// phaseNotes warn of the pods a phase or SLI could not count as measured:
// anomalies (left out) and overflows (capped).
func phaseNotes(r *Report) []string {
	var notes []string
	for _, set := range []struct {
		kind   string
		phases []PhaseSummary
	}{{"phase", r.Phases}, {"SLI", r.SLIs}} {
		for _, p := range set.phases {
			if p.Anomalies > 0 {
				its := "its"
				if p.Anomalies != 1 {
					its = "their"
				}
				notes = append(notes, fmt.Sprintf("%s %s: %s stamped %s end before %s start (a clock or milestone bug); left out of the %s.",
					set.kind, p.Name, plural(p.Anomalies, "pod"), its, its, set.kind))
			}
			if p.Overflows > 0 {
				notes = append(notes, fmt.Sprintf("%s %s: %s took longer than 1h; counted as 1h.", set.kind, p.Name, plural(p.Overflows, "pod")))
			}
		}
	}
	return notes
}

// apiRows are the fleet's requests, client side; the rate is over the
// run's wall time, the per-node figures over r.Nodes and PerPod over the
// pods created.
func apiRows(r *Report) []apiRow {
	var rows []apiRow
	for _, a := range r.API {
		rate, perNode := "-", "-"
		if r.WallSeconds > 0 {
			rate = fmtRate(float64(a.Count)/r.WallSeconds, 1)
			if r.Nodes > 0 {
				perNode = fmtRate(float64(a.Count)/float64(r.Nodes)/(r.WallSeconds/60), 2)
			}
		}
		perPod := "-"
		if r.Pods.Created > 0 {
			perPod = fmtRate(float64(a.Count)/float64(r.Pods.Created), 2)
		}
		eventsPerNode, receivedPerNode := "-", "-"
		if r.Nodes > 0 {
			receivedPerNode = fmtBytes(a.BytesReceived / int64(r.Nodes))
			if a.Verb == "watch" {
				eventsPerNode = fmtRate(float64(a.Events)/float64(r.Nodes), 2)
			}
		}
		open := "-"
		if a.Verb == "watch" {
			open = strconv.FormatInt(a.OpenWatches, 10)
		}
		rows = append(rows, apiRow{
			Client: cmp.Or(a.Component, "kubelet"), PerNodeMin: perNode, Open: open,
			PerPod: perPod, EventsPerNode: eventsPerNode, ReceivedPerNode: receivedPerNode,
			Verb: a.Verb, Resource: a.Label(), Requests: strconv.FormatInt(a.Count, 10), Rate: rate,
			Sent: fmtBytes(a.BytesSent), Received: fmtBytes(a.BytesReceived),
			P50: fmtMs(a.P50Ms), P99: fmtMs(a.P99Ms), Errors: strconv.FormatInt(a.Errors, 10),
		})
	}
	return rows
}

// apiServerRows are the apiserver's own latencies, each marked when its
// p99 is above the SLO threshold that applies to it.
func apiServerRows(r *Report) []apiServerRow {
	limits := thresholdsOf(r)
	var rows []apiServerRow
	for _, c := range r.APIServerLatency {
		row := apiServerRow{
			Verb: c.Verb, Resource: c.Label(), Scope: cmp.Or(c.Scope, "-"), Count: strconv.FormatInt(c.Count, 10),
			P50: fmtMs(c.P50Ms), P90: fmtMs(c.P90Ms), P99: fmtMs(c.P99Ms),
		}
		if limit, ok := limits.apiLimitMs(c); ok && c.P99Ms > limit {
			row.Over = true
		}
		rows = append(rows, row)
	}
	return rows
}

// settingRows are the settings that differ from the kubelet's defaults,
// sorted by name.
func settingRows(r *Report) []keyValue {
	keys := slices.Sorted(maps.Keys(r.Settings))
	rows := make([]keyValue, 0, len(keys))
	for _, k := range keys {
		rows = append(rows, keyValue{k, r.Settings[k]})
	}
	return rows
}

// podGroupRows is the pod_startup SLI of each pod group, named after the
// group, then of each kind that has several groups.
func podGroupRows(r *Report) []phaseRow {
	var rows []PhaseSummary
	for _, g := range r.PodGroups {
		if s, ok := g.SLI(SLIPodStartup); ok {
			s.Name = g.Name
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	return phaseRows(append(rows, kindSummaries(r.PodGroups)...), nil)
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
		if p.Name == SLINetworkProgramming {
			row.Span = "EndpointSlice last-change-trigger-time → applied by each node's kube-proxy"
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

// schedulingFacts are the scheduling throughput, from our milestones and
// from the scheduler's own metrics.
func schedulingFacts(r *Report) []keyValue {
	s := r.Scheduling
	var out []keyValue
	if s.Pods > 0 {
		out = append(out,
			keyValue{"Pods seen scheduled", strconv.Itoa(s.Pods)},
			keyValue{"Average, 1-second windows", fmtRate(s.AvgPerSecond, 1) + " pods/s"},
			keyValue{"Busiest second", plural(s.MaxPerSecond, "pod")},
		)
	}
	if s.SchedulerSeconds > 0 {
		out = append(out,
			keyValue{"Pods bound by the scheduler", fmt.Sprintf("%d in %s (%s pods/s)", s.SchedulerScheduled, fmtWall(s.SchedulerSeconds), fmtRate(s.SchedulerPerSecond, 1))},
			keyValue{"Scheduler's failed attempts", fmt.Sprintf("%d unschedulable, %d errors", s.SchedulerUnschedulable, s.SchedulerErrors)},
		)
	}
	if l := s.SchedulingSLI; l != nil && l.Count > 0 {
		out = append(out, keyValue{"Scheduler's pod scheduling SLI", fmt.Sprintf("p50 %s ms, p90 %s ms, p99 %s ms over %d pods", fmtMs(l.P50Ms), fmtMs(l.P90Ms), fmtMs(l.P99Ms), l.Count)})
	}
	return out
}

// heartbeatFacts are the fleet's heartbeat load and how late its lease
// renewals came; nil when the report has none.
func heartbeatFacts(r *Report) []keyValue {
	h := r.Heartbeat
	if h == nil {
		return nil
	}
	l, w := h.Lateness, h.LeaseWriteLatency
	out := []keyValue{
		{"Nodes renewing their lease", strconv.Itoa(h.Nodes)},
		{"Lease updates", fmtRate(h.LeaseUpdatesPerSecond, 1) + "/s"},
		{"Node status patches", fmtRate(h.NodeStatusPatchesPerSecond, 2) + "/s"},
		{"Lease renewal lateness", fmt.Sprintf("p50 %s ms, p99 %s ms, max %s ms over %d renewals", fmtMs(l.P50Ms), fmtMs(l.P99Ms), fmtMs(l.MaxMs), l.Count)},
		{"Lease PUT latency (the API server's part)", fmt.Sprintf("p50 %s ms, p99 %s ms, max %s ms", fmtMs(w.P50Ms), fmtMs(w.P99Ms), fmtMs(w.MaxMs))},
	}
	if sl := h.SendLateness; sl.Count > 0 {
		out = append(out, keyValue{"Lease renewal send lateness (the fleet's part)", fmt.Sprintf("p50 %s ms, p99 %s ms, max %s ms", fmtMs(sl.P50Ms), fmtMs(sl.P99Ms), fmtMs(sl.MaxMs))})
	}
	return append(out,
		keyValue{"Open watches", strconv.Itoa(h.OpenWatches)},
		keyValue{"Agents' traffic", fmt.Sprintf("%s/s sent, %s/s received", fmtBytes(int64(h.BytesSentPerSecond)), fmtBytes(int64(h.BytesReceivedPerSecond)))},
	)
}

// outageFacts are the run's API server outages, one line each: when, how
// long, and what it cost the fleet's nodes.
func outageFacts(r *Report) []keyValue {
	var out []keyValue
	for i, o := range r.Outages {
		when := o.Start.UTC().Format("15:04:05") + " UTC, "
		if o.End.IsZero() {
			when += "still going at the report, " + fmtRate(o.Seconds, 1) + " s so far"
		} else {
			when += "for " + fmtRate(o.Seconds, 1) + " s"
		}
		cost := fmt.Sprintf("%d requests unanswered", o.FailedRequests)
		switch {
		case o.NodesNotReady == 0:
			cost += "; no node NotReady"
		case o.ReadyAgainSeconds < 0:
			cost += fmt.Sprintf("; %d nodes NotReady, some still not Ready at the report", o.NodesNotReady)
		default:
			cost += fmt.Sprintf("; %d nodes NotReady, all Ready again %s s after it ended", o.NodesNotReady, fmtRate(o.ReadyAgainSeconds, 0))
		}
		cost += fmt.Sprintf("; %d NodeNotReady events", o.NodeNotReadyEvents)
		out = append(out, keyValue{fmt.Sprintf("Outage %d: %s", i+1, when), cost})
	}
	return out
}

// faultViews are the run's faults, in the report's order (as they
// started): each its heading, then what the nodes and the control plane did,
// zeros said plainly (a fault that did nothing is a result too).
func faultViews(r *Report) []faultView {
	var out []faultView
	for _, f := range r.Faults {
		heading := fmt.Sprintf("%s (%s) on %s", f.Phase, f.Kind, plural(f.Nodes, "node"))
		if f.Selector != "" {
			heading += " (" + f.Selector + ")"
		}
		heading += ", " + f.Start.UTC().Format("15:04:05") + " UTC, "
		if f.End.IsZero() {
			heading += "still going at the report, " + fmtRate(f.Seconds, 1) + " s so far"
		} else {
			heading += "for " + fmtRate(f.Seconds, 1) + " s"
		}

		notReady := fmt.Sprintf("%d of %s", f.NotReady.Count, plural(f.Nodes, "node"))
		if f.NotReady.Count == 0 {
			notReady += ": no node went NotReady"
		} else {
			notReady += ", " + spreadText(f.NotReady) + " after the start"
		}

		taint := func(name string, s Spread) string {
			t := name + " on " + plural(s.Count, "node")
			if s.Count > 0 {
				t += " (" + spreadText(s) + ")"
			}
			return t
		}
		taints := taint("unreachable", f.UnreachableTaint) + ", " + taint("not-ready", f.NotReadyTaint) + "; "
		switch {
		case f.UnreachableTaint.Count+f.NotReadyTaint.Count == 0:
			taints = "no NoExecute taint added "
		case f.TaintRatePerSecond > 0:
			taints += "added at " + fmtRate(f.TaintRatePerSecond, 2) + " nodes/s "
		default:
			taints += "too few to give a rate "
		}
		if f.NodeEvictionRate > 0 || f.SecondaryNodeEvictionRate > 0 {
			taints += fmt.Sprintf("(controller: --node-eviction-rate %s, secondary %s)",
				strconv.FormatFloat(f.NodeEvictionRate, 'f', -1, 64), strconv.FormatFloat(f.SecondaryNodeEvictionRate, 'f', -1, 64))
		} else {
			taints += "(the controller's configured rates unknown: not fleetlet's control plane)"
		}

		rescheduled := fmt.Sprintf("%d replaced by their controllers", f.PodsRescheduled)
		if s := f.RescheduledStartup; s.Count > 0 {
			rescheduled += fmt.Sprintf(" (startup p50 %s, p99 %s)", fmtSeconds(s.P50Seconds), fmtSeconds(s.P99Seconds))
		}
		pods := fmt.Sprintf("%d evicted by taint, %s, %d lost, %d duplicated, %s",
			f.PodsEvicted, rescheduled, f.PodsLost, f.PodsDuplicated, plural(f.ContainerRestarts, "container restart"))

		var again string
		switch {
		case f.NotReady.Count == 0:
			again = "no node went NotReady"
		case f.End.IsZero():
			again = fmt.Sprintf("the fault was still going at the report; %d still not Ready", f.NotReadyAtReport)
		default:
			again = fmt.Sprintf("%d of %s", f.ReadyAgain.Count, plural(f.NotReady.Count, "node"))
			if f.ReadyAgain.Count > 0 {
				again += ", " + spreadText(f.ReadyAgain) + " after the end"
			}
			again += fmt.Sprintf("; %d still not Ready", f.NotReadyAtReport)
		}

		out = append(out, faultView{
			Heading: heading,
			Facts: []keyValue{
				{"NotReady", notReady},
				{"Taints", taints},
				{"Pods", pods},
				{"Ready again", again},
			},
			Notes: f.Notes,
		})
	}
	return out
}

// spreadText is a spread's median and maximum, for a line that already
// says how many got there.
func spreadText(s Spread) string {
	return "p50 " + fmtSeconds(s.P50Seconds) + ", max " + fmtSeconds(s.MaxSeconds)
}

// fleetFacts are the fleet's own cost, as runOf words it.
func fleetFacts(r *Report) []keyValue {
	run := runOf(r)
	return []keyValue{
		{"Peak RSS", run.PeakRSS},
		{"CPU", cmp.Or(run.CPU, "unknown")},
		{"Goroutines at the end", cmp.Or(run.Goroutines, "unknown")},
		{"Go GC target (GOGC)", cmp.Or(run.GCPercent, "unknown")},
	}
}

// driverMilestones are the milestones the load driver stamps; the agents
// stamp the others, and Scheduled too when their watch delivers the pod
// first.
const driverMilestones = 1<<Created | 1<<Scheduled | 1<<RunningObserved | 1<<DeleteIssued | 1<<Gone

// crossProcessPhases are the names of the phases and SLIs from a milestone
// of the driver to one of an agent, or back.
func crossProcessPhases() []string {
	var out []string
	for _, sp := range append(slices.Clone(DefaultPhases), SLIPhases...) {
		from, to := driverMilestones&(1<<sp.From) != 0, driverMilestones&(1<<sp.To) != 0
		if from != to {
			out = append(out, sp.Name)
		}
	}
	return out
}

// shardViews are the run's shards, one row each, the sentence that says
// which phases their offsets corrected, and the terminal's line.
func shardViews(r *Report) (rows []shardRow, text, line string) {
	if len(r.Shards) == 0 {
		return nil, "", ""
	}
	measured := func(m ClockMeasurement) string {
		if m.At.IsZero() {
			return "-"
		}
		return fmtOffsetMs(m.OffsetSeconds) + " ± " + strconv.FormatFloat(roundTo(m.UncertaintySeconds*1e3, 3), 'f', 3, 64)
	}
	for _, s := range r.Shards {
		drift := "-"
		if s.driftMeasured() {
			drift = fmtSigned(s.DriftPPM(), 2)
		}
		rows = append(rows, shardRow{
			Shard: s.Shard, Nodes: strconv.Itoa(s.Nodes), Pods: strconv.Itoa(s.Pods),
			Start: measured(s.Start), End: measured(s.End), Drift: drift,
		})
	}
	text = "Each shard is a process whose node agents ran some of the run's pods. An offset is the shard's clock minus the driver's, " +
		"± half the round trip it was measured over, at the start and at the end of the load. " +
		"Phases between a milestone the driver stamps and one an agent stamps (" + strings.Join(crossProcessPhases(), ", ") + ") cross processes: " +
		"they are differences of wall clocks, the agents' stamps moved onto the driver's clock by these offsets, interpolated over the run; " +
		"so is a phase from scheduled when an agent saw the pod scheduled first. Every other phase is within one process, on its monotonic clock."
	line = fmt.Sprintf("%s, clock offsets within ±%s ms", plural(len(r.Shards), "shard"),
		strconv.FormatFloat(roundTo(maxAbsOffset(r.Shards).Seconds()*1e3, 3), 'f', 3, 64))
	return rows, text, line
}

// fmtOffsetMs writes a clock offset in seconds as milliseconds, signed, to
// the microsecond.
func fmtOffsetMs(seconds float64) string { return fmtSigned(seconds*1e3, 3) }

// fmtSigned writes v with its sign and the given decimals; what rounds to
// zero is "+0.000", never "-0.000".
func fmtSigned(v float64, decimals int) string {
	v = roundTo(v, decimals)
	if v == 0 {
		v = 0 // drops the sign of -0
	}
	return fmt.Sprintf("%+.*f", decimals, v)
}
