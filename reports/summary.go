package reports

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// RenderSummary writes the terminal summary of r: a header line, the phase
// and SLI tables, the SLO verdicts and why pod startup failed, the
// scheduling throughput, heartbeats, outages and faults, the shards' clock
// offsets in one line, the API table,
// then whatever needs attention (anomalies, settings that differ from the
// kubelet's defaults, errors). It reads the same view as RenderMarkdown and
// RenderHTML, in the same words. Write errors are ignored: the summary is a
// courtesy, the report file is the record.
func RenderSummary(w io.Writer, r *Report) {
	v := buildView(r)
	fmt.Fprintln(w, summaryHeader(v.Profile, v.Run))

	if len(v.Phases) > 0 {
		fmt.Fprintln(w)
		writePhaseTable(w, "PHASE", v.Phases, "PODS")
	}
	if len(v.Workloads) > 0 {
		fmt.Fprintln(w)
		writePhaseTable(w, "WORKLOAD", v.Workloads, "OBJECTS")
	}
	if len(v.SLIs) > 0 {
		fmt.Fprintln(w)
		writePhaseTable(w, "SLI", v.SLIs, "PODS")
		for _, n := range v.SLINotes {
			fmt.Fprintln(w, n)
		}
	}
	if len(v.PodGroups) > 0 {
		fmt.Fprintln(w)
		writePhaseTable(w, "POD_STARTUP BY GROUP", v.PodGroups, "PODS")
	}
	if len(v.SLOSummary) > 0 {
		fmt.Fprintln(w)
		writeSLOTable(w, v)
		if v.Diagnosis != "" {
			fmt.Fprintln(w, "why:", v.Diagnosis)
		}
	}
	writeKeyValues(w, "scheduling throughput", v.Scheduling)
	writeKeyValues(w, "heartbeats", v.Heartbeat)
	writeKeyValues(w, "API server outages", v.Outages)
	writeFaults(w, v.Faults)
	if v.ShardsLine != "" {
		fmt.Fprintf(w, "\n%s\n", v.ShardsLine)
	}

	if len(v.API) > 0 {
		fmt.Fprintln(w)
		rows := make([][]string, 0, len(v.API))
		for _, a := range v.API {
			rows = append(rows, []string{a.Client, a.Verb, a.Resource, a.Requests, a.Rate, a.Open, a.EventsPerNode, a.Sent, a.Received, a.P99, a.Errors})
		}
		writeTable(w, 3, []string{"CLIENT", "VERB", "RESOURCE", "REQUESTS", "REQ/s", "OPEN", "EVENTS/NODE", "SENT", "RECEIVED", "P99 ms", "ERRORS"}, rows)
	}

	if len(v.Notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range v.Notes {
			fmt.Fprintln(w, "warning:", n)
		}
	}
	writeKeyValues(w, "settings that differ from the kubelet's defaults", v.Settings)
	if len(v.Errors) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "%s during the run:\n", plural(len(v.Errors), "error"))
		for _, e := range v.Errors {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

// summaryHeader is the run in one line; the fleet's CPU and goroutines only
// when measured.
func summaryHeader(profile string, run runView) string {
	var b strings.Builder
	fmt.Fprintf(&b, "profile %s: %s nodes, %s pods created (%s Running, %s deleted, %s gone), wall %s, peak RSS %s",
		profile, run.Nodes, run.Created, run.Running, run.Deleted, run.Gone, run.Wall, run.PeakRSS)
	if run.CPU != "" {
		fmt.Fprintf(&b, ", CPU %s", run.CPU)
	}
	if run.Goroutines != "" {
		fmt.Fprintf(&b, ", %s goroutines", run.Goroutines)
	}
	return b.String()
}

// writePhaseTable writes phases (or SLIs) with their percentiles.
func writePhaseTable(w io.Writer, title string, phases []phaseRow, counted string) {
	rows := make([][]string, 0, len(phases))
	for _, p := range phases {
		rows = append(rows, []string{p.Name, p.Count, p.P50, p.P90, p.P99, p.Max})
	}
	writeTable(w, 1, []string{title, counted, "P50 ms", "P90 ms", "P99 ms", "MAX ms"}, rows)
}

// summaryVerdicts are the SLO table's verdict cells: a failure in capitals,
// to be found at a glance. Read-only.
var summaryVerdicts = map[string]string{"pass": "pass", "fail": "FAIL", "skip": "skipped"}

// writeSLOTable writes the verdict, then one line per SLO: its verdict, the
// subject closest to (or furthest over) its threshold, and how many
// subjects it checked; then every failing subject, since those are what
// someone has to act on, and why any SLO was skipped.
func writeSLOTable(w io.Writer, v reportView) {
	fmt.Fprintln(w, v.VerdictLabel, v.VerdictText)
	rows := make([][]string, 0, len(v.SLOSummary))
	for _, s := range v.SLOSummary {
		rows = append(rows, []string{s.Name, summaryVerdicts[s.Status], s.Worst, s.Checked, s.Observed, s.Limit})
	}
	writeTable(w, 3, []string{"SLO", "VERDICT", "WORST", "CHECKED", "P99 ms", "LIMIT ms"}, rows)
	for _, s := range v.SLOSummary {
		for _, f := range s.Failing {
			fmt.Fprintf(w, "FAIL %s: %s\n", s.Name, f)
		}
		if s.Note != "" {
			fmt.Fprintf(w, "%s skipped: %s\n", s.Name, s.Note)
		}
	}
}

// writeKeyValues writes a titled list of key: value lines, after a blank
// line; nothing for an empty list.
func writeKeyValues(w io.Writer, title string, kvs []keyValue) {
	if len(kvs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s:\n", title)
	for _, kv := range kvs {
		fmt.Fprintf(w, "  %s: %s\n", kv.Key, kv.Value)
	}
}

// writeFaults writes each fault's heading, then its facts and notes
// indented under it, after a blank line; nothing without faults.
func writeFaults(w io.Writer, faults []faultView) {
	if len(faults) == 0 {
		return
	}
	fmt.Fprintf(w, "\nfaults:\n")
	for _, f := range faults {
		fmt.Fprintf(w, "  %s:\n", f.Heading)
		for _, kv := range f.Facts {
			fmt.Fprintf(w, "    %s: %s\n", kv.Key, kv.Value)
		}
		for _, n := range f.Notes {
			fmt.Fprintf(w, "    note: %s\n", n)
		}
	}
}

// writeTable writes a table with its first left columns aligned left (names)
// and the others right (numbers), as people read them. tabwriter aligns every
// cell one way, so the left columns are padded here into one cell, and the
// gap between columns is part of each right-aligned cell (padding 0), which
// keeps the table flush with the left margin.
func writeTable(w io.Writer, left int, header []string, rows [][]string) {
	all := append([][]string{header}, rows...)
	widths := make([]int, left)
	for _, row := range all {
		for i := 0; i < left; i++ {
			widths[i] = max(widths[i], len(row[i]))
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 0, ' ', tabwriter.AlignRight)
	for _, row := range all {
		var b strings.Builder
		for i := 0; i < left; i++ {
			if i > 0 {
				b.WriteString(columnGap)
			}
			fmt.Fprintf(&b, "%-*s", widths[i], row[i])
		}
		b.WriteByte('\t')
		for _, cell := range row[left:] {
			b.WriteString(columnGap)
			b.WriteString(cell)
			b.WriteByte('\t')
		}
		b.WriteByte('\n')
		io.WriteString(tw, b.String())
	}
	tw.Flush()
}

const columnGap = "  "

// plural returns "n word" or "n words".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// fmtRate writes a rate with the given decimals.
func fmtRate(perSecond float64, decimals int) string {
	return strconv.FormatFloat(perSecond, 'f', decimals, 64)
}

func fmtMs(ms float64) string {
	return strconv.FormatFloat(ms, 'f', 1, 64)
}

// fmtSeconds writes a time in seconds with its unit: milliseconds below
// 1 s (a pod's startup), seconds with one decimal above (a node's NotReady).
func fmtSeconds(seconds float64) string {
	if seconds < 1 {
		return fmtMs(seconds*1000) + " ms"
	}
	return fmtRate(seconds, 1) + " s"
}

func fmtWall(seconds float64) string {
	return time.Duration(seconds * float64(time.Second)).Round(100 * time.Millisecond).String()
}

// fmtBytes uses binary units, as RSS and Kubernetes quantities (Mi, Gi) do.
func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + [...]string{"KiB", "MiB", "GiB", "TiB", "PiB"}[i]
}
