package reports

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// RenderSummary writes the terminal summary of r: a header line, the phase
// and SLI tables, the SLO verdicts, the scheduling throughput, the API table,
// then whatever needs attention (anomalies, settings that differ from the
// kubelet's defaults, errors). Write errors are ignored: the summary is a
// courtesy, the report file is the record.
func RenderSummary(w io.Writer, r *Report) {
	fmt.Fprintln(w, headerLine(r))

	if len(r.Phases) > 0 {
		fmt.Fprintln(w)
		writePhaseTable(w, "PHASE", r.Phases)
	}
	if len(r.SLIs) > 0 {
		fmt.Fprintln(w)
		writePhaseTable(w, "SLI", r.SLIs)
		for _, p := range r.SLIs {
			if p.Excluded > 0 {
				fmt.Fprintf(w, "(%s: %s that pulled an image left out, as the upstream SLO does)\n", p.Name, plural(p.Excluded, "pod"))
			}
		}
	}
	if len(r.SLOs) > 0 {
		fmt.Fprintln(w)
		writeSLOTable(w, r.SLOs)
		if d := Diagnosis(r); d != "" {
			fmt.Fprintln(w, "why:", d)
		}
	}
	if line := schedulingLine(r.Scheduling); line != "" {
		fmt.Fprintln(w)
		fmt.Fprintln(w, line)
	}
	if h := r.Heartbeat; h != nil {
		fmt.Fprintf(w, "heartbeats: %s lease updates/s, %s node status patches/s, renewal lateness p99 %s ms (max %s ms; lease PUT p99 %s ms), %d open watches\n",
			strconv.FormatFloat(h.LeaseUpdatesPerSecond, 'f', 1, 64), strconv.FormatFloat(h.NodeStatusPatchesPerSecond, 'f', 2, 64),
			fmtMs(h.Lateness.P99Ms), fmtMs(h.Lateness.MaxMs), fmtMs(h.LeaseWriteLatency.P99Ms), h.OpenWatches)
	}

	if len(r.API) > 0 {
		fmt.Fprintln(w)
		rows := make([][]string, 0, len(r.API))
		for _, a := range r.API {
			rate := "-"
			if r.WallSeconds > 0 {
				rate = strconv.FormatFloat(float64(a.Count)/r.WallSeconds, 'f', 1, 64)
			}
			rows = append(rows, []string{
				a.Verb, a.Label(), strconv.FormatInt(a.Count, 10), rate,
				fmtBytes(a.BytesSent), fmtBytes(a.BytesReceived), fmtMs(a.P99Ms),
				strconv.FormatInt(a.Errors, 10),
			})
		}
		writeTable(w, 2, []string{"VERB", "RESOURCE", "REQUESTS", "REQ/s", "SENT", "RECEIVED", "P99 ms", "ERRORS"}, rows)
	}

	var notes []string
	for _, p := range slices.Concat(r.Phases, r.SLIs) {
		if p.Anomalies > 0 {
			notes = append(notes, fmt.Sprintf("phase %s: %s stamped its end before its start (a clock or milestone bug); left out of the phase",
				p.Name, plural(p.Anomalies, "pod")))
		}
		if p.Overflows > 0 {
			notes = append(notes, fmt.Sprintf("phase %s: %s took longer than 1h; counted as 1h", p.Name, plural(p.Overflows, "pod")))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, "warning:", n)
		}
	}

	if len(r.Settings) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "settings that differ from the kubelet's defaults:")
		keys := make([]string, 0, len(r.Settings))
		for k := range r.Settings {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %s: %s\n", k, r.Settings[k])
		}
	}

	if len(r.Errors) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "%s during the run:\n", plural(len(r.Errors), "error"))
		for _, e := range r.Errors {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}

// writePhaseTable writes phases (or SLIs) with their percentiles.
func writePhaseTable(w io.Writer, title string, phases []PhaseSummary) {
	rows := make([][]string, 0, len(phases))
	for _, p := range phases {
		if p.Count == 0 {
			rows = append(rows, []string{p.Name, "0", "-", "-", "-", "-"})
			continue
		}
		rows = append(rows, []string{
			p.Name, strconv.Itoa(p.Count),
			fmtMs(p.P50Ms), fmtMs(p.P90Ms), fmtMs(p.P99Ms), fmtMs(p.MaxMs),
		})
	}
	writeTable(w, 1, []string{title, "PODS", "P50 ms", "P90 ms", "P99 ms", "MAX ms"}, rows)
}

// writeSLOTable writes one line per SLO: its verdict, how many subjects it
// checked, and the subject closest to (or furthest over) its threshold; then
// every failing subject, since those are what someone has to act on.
func writeSLOTable(w io.Writer, results []SLOResult) {
	verdicts := sloVerdicts(results)
	failed := 0
	for _, v := range verdicts {
		if v.fail > 0 {
			failed++
		}
	}
	if failed > 0 {
		fmt.Fprintf(w, "SLOs: FAIL (%d of %d failed)\n", failed, len(verdicts))
	} else {
		fmt.Fprintf(w, "SLOs: pass\n")
	}
	rows := make([][]string, 0, len(verdicts))
	for _, v := range verdicts {
		verdict := "pass"
		switch {
		case v.fail > 0:
			verdict = "FAIL"
		case v.skipped:
			verdict = "skipped"
		}
		worst, observed, limit := "-", "-", "-"
		if !v.skipped {
			worst, observed = v.worst.Subject, fmtMs(v.worst.ObservedMs)
		}
		if v.worst.ThresholdMs > 0 {
			limit = fmtMs(v.worst.ThresholdMs)
		}
		rows = append(rows, []string{v.name, verdict, worst, strconv.Itoa(v.checked), observed, limit})
	}
	writeTable(w, 3, []string{"SLO", "VERDICT", "WORST", "CHECKED", "P99 ms", "LIMIT ms"}, rows)
	for _, v := range verdicts {
		for _, f := range v.failing {
			fmt.Fprintf(w, "FAIL %s: %s p99 %s ms > %s ms (%s)\n", v.name, f.Subject, fmtMs(f.ObservedMs), fmtMs(f.ThresholdMs), f.Detail)
		}
		if v.skipped {
			fmt.Fprintf(w, "skipped %s: %s\n", v.name, v.worst.Detail)
		}
	}
}

// schedulingLine is the throughput in one line, or "" if nothing was
// scheduled and the scheduler was not scraped.
func schedulingLine(s SchedulingStats) string {
	var parts []string
	if s.Pods > 0 {
		parts = append(parts, fmt.Sprintf("%s pods/s average, %d max in one second (%d pods seen scheduled)",
			strconv.FormatFloat(s.AvgPerSecond, 'f', 1, 64), s.MaxPerSecond, s.Pods))
	}
	if s.SchedulerSeconds > 0 {
		parts = append(parts, fmt.Sprintf("scheduler bound %d pods in %s, %s/s",
			s.SchedulerScheduled, fmtWall(s.SchedulerSeconds), strconv.FormatFloat(s.SchedulerPerSecond, 'f', 1, 64)))
	}
	if len(parts) == 0 {
		return ""
	}
	return "scheduling: " + strings.Join(parts, "; ")
}

func headerLine(r *Report) string {
	var b strings.Builder
	profile := r.Profile
	if profile == "" {
		profile = "(none)"
	}
	fmt.Fprintf(&b, "profile %s: %d nodes, %d pods created (%d running, %d deleted, %d gone), wall %s",
		profile, r.Nodes, r.Pods.Created, r.Pods.Running, r.Pods.Deleted, r.Pods.Gone, fmtWall(r.WallSeconds))
	if r.Fleet.PeakRSSBytes > 0 {
		fmt.Fprintf(&b, ", peak RSS %s", fmtBytes(r.Fleet.PeakRSSBytes))
	} else {
		b.WriteString(", peak RSS unknown")
	}
	if r.Fleet.CPUSeconds > 0 {
		fmt.Fprintf(&b, ", cpu %s", fmtWall(r.Fleet.CPUSeconds))
	}
	if r.Fleet.Goroutines > 0 {
		fmt.Fprintf(&b, ", %d goroutines", r.Fleet.Goroutines)
	}
	return b.String()
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

func fmtMs(ms float64) string {
	return strconv.FormatFloat(ms, 'f', 1, 64)
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
