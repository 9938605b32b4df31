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
// table, the API table, then whatever needs attention (anomalies, settings
// that differ from the kubelet's defaults, errors). Write errors are ignored:
// the summary is a courtesy, the report file is the record.
func RenderSummary(w io.Writer, r *Report) {
	fmt.Fprintln(w, headerLine(r))

	if len(r.Phases) > 0 {
		fmt.Fprintln(w)
		rows := make([][]string, 0, len(r.Phases))
		for _, p := range r.Phases {
			if p.Count == 0 {
				rows = append(rows, []string{p.Name, "0", "-", "-", "-", "-"})
				continue
			}
			rows = append(rows, []string{
				p.Name, strconv.Itoa(p.Count),
				fmtMs(p.P50Ms), fmtMs(p.P90Ms), fmtMs(p.P99Ms), fmtMs(p.MaxMs),
			})
		}
		writeTable(w, 1, []string{"PHASE", "PODS", "P50 ms", "P90 ms", "P99 ms", "MAX ms"}, rows)
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
	for _, p := range r.Phases {
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
