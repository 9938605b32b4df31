package reports

import (
	"fmt"
	"io"
	"strconv"
	"time"
)

// Comparison sets two reports side by side, A the baseline and B the
// candidate: how every phase and SLI moved, and every SLO's verdict in each.
type Comparison struct {
	A, B ComparedRun
	// Phases and SLIs are in A's order, then those only B has.
	Phases []LatencyDelta
	SLIs   []LatencyDelta
	// SLOs are per SLO and subject, in A's order, then those only B has.
	SLOs []SLODelta
}

// ComparedRun identifies one side of a Comparison.
type ComparedRun struct {
	Profile     string
	StartedAt   time.Time
	WallSeconds float64
	Nodes       int
	Pods        PodCounts
	// AvgScheduledPerSecond is the run's scheduling throughput, from its
	// milestones (SchedulingStats.AvgPerSecond).
	AvgScheduledPerSecond float64
	// Failed is Report.Failed: some SLO failed.
	Failed bool
}

// LatencyDelta is one phase or SLI in both reports. A side that lacks it has
// a zero count; its deltas are then 0 and Missing says which.
type LatencyDelta struct {
	Name           string
	CountA, CountB int
	P50A, P50B     float64 // ms
	P99A, P99B     float64 // ms
	// P50DeltaMs and P99DeltaMs are B minus A; the Pct fields are that
	// relative to A, 0 when A is 0 (no relative change from nothing).
	P50DeltaMs, P50DeltaPct float64
	P99DeltaMs, P99DeltaPct float64
	// Missing is "A" or "B" when one report lacks the phase, or has no pod
	// in it; "" otherwise.
	Missing string
}

// SLODelta is one SLO check in both reports; A or B is nil when that report
// did not check it.
type SLODelta struct {
	Name, Subject string
	A, B          *SLOResult
}

// Compare compares a (baseline) with b. It compares what it can: reports of
// different profiles or sizes compare too, and the header shows what they
// were.
func Compare(a, b *Report) Comparison {
	c := Comparison{A: comparedRun(a), B: comparedRun(b)}
	c.Phases = latencyDeltas(a.Phases, b.Phases)
	c.SLIs = latencyDeltas(a.SLIs, b.SLIs)

	type key struct{ name, subject string }
	idx := map[key]int{}
	add := func(s SLOResult, side int) {
		k := key{s.Name, s.Subject}
		i, ok := idx[k]
		if !ok {
			i = len(c.SLOs)
			idx[k] = i
			c.SLOs = append(c.SLOs, SLODelta{Name: s.Name, Subject: s.Subject})
		}
		if side == 0 {
			c.SLOs[i].A = &s
		} else {
			c.SLOs[i].B = &s
		}
	}
	for _, s := range a.SLOs {
		add(s, 0)
	}
	for _, s := range b.SLOs {
		add(s, 1)
	}
	return c
}

func comparedRun(r *Report) ComparedRun {
	return ComparedRun{
		Profile: r.Profile, StartedAt: r.StartedAt, WallSeconds: r.WallSeconds,
		Nodes: r.Nodes, Pods: r.Pods,
		AvgScheduledPerSecond: r.Scheduling.AvgPerSecond,
		Failed:                r.Failed(),
	}
}

func latencyDeltas(a, b []PhaseSummary) []LatencyDelta {
	var out []LatencyDelta
	idx := map[string]int{}
	for _, p := range a {
		idx[p.Name] = len(out)
		out = append(out, LatencyDelta{Name: p.Name, CountA: p.Count, P50A: p.P50Ms, P99A: p.P99Ms})
	}
	for _, p := range b {
		i, ok := idx[p.Name]
		if !ok {
			i = len(out)
			idx[p.Name] = i
			out = append(out, LatencyDelta{Name: p.Name})
		}
		d := &out[i]
		d.CountB, d.P50B, d.P99B = p.Count, p.P50Ms, p.P99Ms
	}
	for i := range out {
		d := &out[i]
		switch {
		case d.CountA == 0 && d.CountB == 0:
			d.Missing = "A and B"
			continue
		case d.CountA == 0:
			d.Missing = "A"
			continue
		case d.CountB == 0:
			d.Missing = "B"
			continue
		}
		d.P50DeltaMs, d.P50DeltaPct = delta(d.P50A, d.P50B)
		d.P99DeltaMs, d.P99DeltaPct = delta(d.P99A, d.P99B)
	}
	return out
}

func delta(a, b float64) (ms, pct float64) {
	ms = roundTo(b-a, 3)
	if a != 0 {
		pct = roundTo((b-a)/a*100, 1)
	}
	return ms, pct
}

// RenderComparison writes c as terminal tables: the two runs, then phases,
// SLIs and SLO verdicts. Write errors are ignored, as in RenderSummary.
func RenderComparison(w io.Writer, c Comparison) {
	for _, side := range []struct {
		name string
		r    ComparedRun
	}{{"A (baseline)", c.A}, {"B", c.B}} {
		profile := side.r.Profile
		if profile == "" {
			profile = "(none)"
		}
		started := "-"
		if !side.r.StartedAt.IsZero() {
			started = side.r.StartedAt.UTC().Format(time.RFC3339)
		}
		verdict := "SLOs pass"
		if side.r.Failed {
			verdict = "SLOs FAIL"
		}
		fmt.Fprintf(w, "%s: profile %s started %s: %d nodes, %d pods created, wall %s, %s pods scheduled/s, %s\n",
			side.name, profile, started, side.r.Nodes, side.r.Pods.Created, fmtWall(side.r.WallSeconds),
			strconv.FormatFloat(side.r.AvgScheduledPerSecond, 'f', 1, 64), verdict)
	}
	for _, t := range []struct {
		title string
		rows  []LatencyDelta
	}{{"PHASE", c.Phases}, {"SLI", c.SLIs}} {
		if len(t.rows) == 0 {
			continue
		}
		fmt.Fprintln(w)
		rows := make([][]string, 0, len(t.rows))
		for _, d := range t.rows {
			row := []string{d.Name, strconv.Itoa(d.CountA), strconv.Itoa(d.CountB)}
			if d.Missing != "" {
				row = append(row, dashOr(d.CountA, d.P50A), dashOr(d.CountB, d.P50B), "-", "-",
					dashOr(d.CountA, d.P99A), dashOr(d.CountB, d.P99B), "-", "-")
			} else {
				row = append(row, fmtMs(d.P50A), fmtMs(d.P50B), fmtSignedMs(d.P50DeltaMs), fmtPct(d.P50A, d.P50DeltaPct),
					fmtMs(d.P99A), fmtMs(d.P99B), fmtSignedMs(d.P99DeltaMs), fmtPct(d.P99A, d.P99DeltaPct))
			}
			rows = append(rows, row)
		}
		writeTable(w, 1, []string{t.title, "PODS A", "PODS B", "P50 A", "P50 B", "ΔP50 ms", "ΔP50", "P99 A", "P99 B", "ΔP99 ms", "ΔP99"}, rows)
	}
	if len(c.SLOs) > 0 {
		fmt.Fprintln(w)
		rows := make([][]string, 0, len(c.SLOs))
		for _, d := range c.SLOs {
			subject := d.Subject
			if subject == "" {
				subject = "-"
			}
			rows = append(rows, []string{d.Name, subject, sloCell(d.A), sloCell(d.B), verdictChange(d.A, d.B)})
		}
		writeTable(w, 2, []string{"SLO", "SUBJECT", "A P99 ms", "B P99 ms", "VERDICT"}, rows)
	}
}

func dashOr(count int, ms float64) string {
	if count == 0 {
		return "-"
	}
	return fmtMs(ms)
}

func fmtSignedMs(ms float64) string {
	s := strconv.FormatFloat(ms, 'f', 1, 64)
	if ms > 0 && s != "0.0" {
		s = "+" + s
	}
	return s
}

func fmtPct(base, pct float64) string {
	if base == 0 {
		return "n/a"
	}
	s := strconv.FormatFloat(pct, 'f', 1, 64) + "%"
	if pct > 0 {
		s = "+" + s
	}
	return s
}

// sloCell is one side's observed p99 with its verdict.
func sloCell(s *SLOResult) string {
	switch {
	case s == nil:
		return "-"
	case s.Skipped:
		return "skipped"
	case !s.Pass:
		return fmtMs(s.ObservedMs) + " FAIL"
	}
	return fmtMs(s.ObservedMs) + " ok"
}

// verdictChange says how the verdict went from A to B.
func verdictChange(a, b *SLOResult) string {
	state := func(s *SLOResult) string {
		switch {
		case s == nil:
			return "absent"
		case s.Skipped:
			return "skipped"
		case s.Pass:
			return "pass"
		}
		return "FAIL"
	}
	sa, sb := state(a), state(b)
	if sa == sb {
		return sb
	}
	return sa + " → " + sb
}
