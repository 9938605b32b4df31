package reports

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
)

// RenderMarkdown writes r as report.md: a header with the SLO verdict and
// the run's facts, then the SLOs, the pod startup SLIs, the phases, the API
// tables (client and server side), scheduling throughput, heartbeats, API
// server outages, faults, the shards and their clock offsets, the fleet's cost, settings and errors. It renders on GitHub and in any Markdown viewer; the
// charts are in report.html. It returns the first write error.
func RenderMarkdown(w io.Writer, r *Report) error {
	v := buildView(r)
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }

	p("# %s\n\n", mdText(v.Title))
	icon := map[string]string{"pass": "✅", "fail": "❌", "unchecked": "➖"}[v.Verdict]
	if len(v.SLOSummary) == 0 {
		// No SLO results at all: the label says everything.
		p("%s **%s**\n\n", icon, v.VerdictLabel)
	} else {
		p("%s **%s** %s\n\n", icon, v.VerdictLabel, mdText(v.VerdictText))
	}
	if v.Diagnosis != "" {
		p("> %s\n\n", mdText(v.Diagnosis))
	}
	facts := make([]keyValue, 0, len(v.Facts))
	for _, f := range v.Facts {
		value := f.Value
		if f.Sub != "" {
			value += " (" + f.Sub + ")"
		}
		facts = append(facts, keyValue{f.Key, value})
	}
	mdTable(bw, []string{"", ""}, "--", kvRows(facts))

	if len(v.SLOSummary) > 0 {
		p("\n## SLOs\n\n")
		rows := make([][]string, 0, len(v.SLOSummary))
		for _, s := range v.SLOSummary {
			rows = append(rows, []string{s.Icon, s.Title + " (`" + s.Name + "`)", s.Checked, s.Worst, s.Observed, s.Limit})
		}
		mdTable(bw, []string{"", "SLO", "checked", "worst", "p99 ms", "limit ms"}, "--r-rr", rows)
		if v.Verdict == "fail" || slices.ContainsFunc(v.SLOSummary, func(s sloSummaryRow) bool { return s.Note != "" }) {
			p("\n")
		}
		for _, s := range v.SLOSummary {
			for _, f := range s.Failing {
				p("- ❌ %s: %s\n", s.Name, mdText(f))
			}
			if s.Note != "" {
				p("- ➖ %s skipped: %s\n", s.Name, mdText(s.Note))
			}
		}
		p("\nEvery check:\n\n")
		rows = rows[:0]
		for _, s := range v.SLOs {
			rows = append(rows, []string{s.Icon, s.Name, s.Subject, s.Observed, s.Limit, s.Count, s.Detail})
		}
		mdTable(bw, []string{"", "SLO", "subject", "p99 ms", "limit ms", "count", "how"}, "---rrr-", rows)
	}

	if len(v.SLIs) > 0 {
		p("\n## Pod startup SLIs\n\n")
		p("The pod startup latency SLIs under clusterloader2's names, measured from in-process monotonic milestones.\n\n")
		mdPhaseTable(bw, "SLI", v.SLIs, "pods")
		for _, n := range v.SLINotes {
			p("\n%s\n", mdText(n))
		}
	}
	if len(v.PodGroups) > 0 {
		p("\n## Pod startup by group\n\n")
		p("The `pod_startup` SLI split by the profile phase that created the pods, or their owning object, and the owning kind (*Pod*: the driver's own pods); a controller's pod counts from its own creation. Per kind over its groups where a kind has several. The other SLIs and phases of each group are in report.json (podGroups).\n\n")
		mdPhaseTable(bw, "phase/kind", v.PodGroups, "pods")
	}
	if len(v.Phases) > 0 {
		p("\n## Phases\n\n")
		mdPhaseTable(bw, "phase", v.Phases, "pods")
	}
	if len(v.Workloads) > 0 {
		p("\n## Workloads\n\n")
		p("Per waitRunning phase and kind, the time from each object's create, scale or update call to all its desired pods Running and its rollout done, as clusterloader2's WaitForControlledPodsRunning; one value per object.\n\n")
		mdPhaseTable(bw, "phase/kind", v.Workloads, "objects")
	}
	if len(v.Notes) > 0 {
		p("\n")
		for _, n := range v.Notes {
			p("- ⚠️ %s\n", mdText(n))
		}
	}

	if len(v.API) > 0 {
		p("\n## API requests, client side\n\n")
		p("The fleet's own requests, counted at each agent's HTTP transport, by the client that sent them (the kubelet or the node's kube-proxy). Latency is to the response headers; *per pod* is the requests per pod created; *events/node* the watch events (bookmarks and initial lists included) and *received/node* the bytes received per node, to hold against one real kubelet's; *open* is the watches held at the end.\n\n")
		rows := make([][]string, 0, len(v.API))
		for _, a := range v.API {
			rows = append(rows, []string{a.Client, a.Verb, a.Resource, a.Requests, a.Rate, a.PerNodeMin, a.PerPod, a.EventsPerNode, a.ReceivedPerNode, a.Open, a.Sent, a.Received, a.P50, a.P99, a.Errors})
		}
		mdTable(bw, []string{"client", "verb", "resource", "requests", "req/s", "per node/min", "per pod", "events/node", "received/node", "open", "sent", "received", "p50 ms", "p99 ms", "errors"}, "---rrrrrrrrrrrr", rows)
	}
	p("\n## API server latency, server side\n\n")
	if v.APIServerMissing {
		p("No apiserver metrics in this report: its /metrics was not scraped, or the scrape failed.\n")
	} else {
		p("The apiserver's own `apiserver_request_duration_seconds` between the run's two scrapes, for every client. ")
		p("Quantiles are interpolated linearly within the histogram's buckets, as PromQL's `histogram_quantile` does. ")
		p("WATCH and CONNECT are left out: their duration is how long the stream stayed open.\n\n")
		rows := make([][]string, 0, len(v.APIServer))
		for _, a := range v.APIServer {
			p99 := a.P99
			if a.Over {
				p99 = "❌ " + p99
			}
			rows = append(rows, []string{a.Verb, a.Resource, a.Scope, a.Count, a.P50, a.P90, p99})
		}
		mdTable(bw, []string{"verb", "resource", "scope", "calls", "p50 ms", "p90 ms", "p99 ms"}, "---rrrr", rows)
	}

	if len(v.Scheduling) > 0 {
		p("\n## Scheduling throughput\n\n")
		mdTable(bw, []string{"", ""}, "--", kvRows(v.Scheduling))
	}
	if len(v.Heartbeat) > 0 {
		p("\n## Heartbeats\n\n")
		mdTable(bw, []string{"", ""}, "--", kvRows(v.Heartbeat))
	}
	if len(v.Outages) > 0 {
		p("\n## API server outages\n\n")
		p("Stretches of at least 5 s in which the API server answered none of the fleet's requests.\n\n")
		mdTable(bw, []string{"", ""}, "--", kvRows(v.Outages))
	}
	if len(v.Faults) > 0 {
		p("\n## Faults\n\n")
		p("Each fault phase of the profile, and what the control plane did about it, as the run's watches of Nodes and pods saw it: times from the fault's start (from its end, for *Ready again*), of the watch events rather than the objects' 1-second timestamps; p50 and max over the nodes (or pods) that got there.\n")
		for _, f := range v.Faults {
			p("\n### %s\n\n", mdText(f.Heading))
			mdTable(bw, []string{"", ""}, "--", kvRows(f.Facts))
			if len(f.Notes) > 0 {
				p("\n")
			}
			for _, n := range f.Notes {
				p("- %s\n", mdText(n))
			}
		}
	}
	if len(v.Shards) > 0 {
		p("\n## Shards\n\n")
		p("%s\n\n", mdText(v.ShardsText))
		rows := make([][]string, 0, len(v.Shards))
		for _, s := range v.Shards {
			rows = append(rows, []string{mdText(s.Shard), s.Nodes, s.Pods, s.Start, s.End, s.Drift})
		}
		mdTable(bw, []string{"shard", "nodes", "pods", "offset at start ms", "offset at end ms", "drift ppm"}, "-rrrrr", rows)
	}
	p("\n## Fleet\n\n")
	mdTable(bw, []string{"", ""}, "--", kvRows(v.Fleet))
	if len(v.Settings) > 0 {
		p("\n## Settings that differ from the kubelet's defaults\n\n")
		mdTable(bw, []string{"setting", "value"}, "--", kvRows(v.Settings))
	}
	if len(v.Errors) > 0 {
		p("\n## Errors\n\n")
		for _, e := range v.Errors {
			p("- %s\n", mdText(e))
		}
	}
	p("\n---\nReport schema `%s`. Times in milliseconds; latencies from HdrHistograms, within 0.1%%.\n", mdText(v.Schema))
	return bw.Flush()
}

func kvRows(kvs []keyValue) [][]string {
	rows := make([][]string, 0, len(kvs))
	for _, kv := range kvs {
		rows = append(rows, []string{"**" + mdText(kv.Key) + "**", mdText(kv.Value)})
	}
	return rows
}

// mdPhaseTable writes phases or SLIs, with their milestones if the rows
// have them.
func mdPhaseTable(w io.Writer, title string, rows []phaseRow, counted string) {
	span := len(rows) > 0 && rows[0].Span != ""
	cells := make([][]string, 0, len(rows))
	for _, r := range rows {
		row := []string{"`" + r.Name + "`"}
		if span {
			row = append(row, r.Span)
		}
		cells = append(cells, append(row, r.Count, r.Min, r.P50, r.P90, r.P99, r.Max, r.Excluded))
	}
	header, align := []string{title}, "-"
	if span {
		header, align = append(header, "from → to"), align+"-"
	}
	header = append(header, counted, "min ms", "p50 ms", "p90 ms", "p99 ms", "max ms", "excluded")
	mdTable(w, header, align+"rrrrrrr", cells)
}

// mdTable writes a GitHub table. align has one letter per column: r for
// right (numbers), anything else left. Cells are escaped here except those
// that already carry Markdown (bold keys, code names).
func mdTable(w io.Writer, header []string, align string, rows [][]string) {
	var b strings.Builder
	row := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" ")
			b.WriteString(mdCell(c))
			b.WriteString(" |")
		}
		b.WriteString("\n")
	}
	row(header)
	b.WriteString("|")
	for i := range header {
		if i < len(align) && align[i] == 'r' {
			b.WriteString("---:|")
		} else {
			b.WriteString("---|")
		}
	}
	b.WriteString("\n")
	for _, r := range rows {
		row(r)
	}
	io.WriteString(w, b.String())
}

// mdCell keeps a cell on one line and its pipes from ending it.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// mdText escapes text from the run (profile names, errors) so that it shows
// as written rather than as Markdown or HTML.
func mdText(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '\\', '`', '*', '_', '[', ']', '<', '>', '#', '|':
			b.WriteByte('\\')
		case '\n':
			b.WriteByte(' ')
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
