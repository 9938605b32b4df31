package reports

import "math"

// SchedulingStats is the scheduling throughput of a run, pods bound per
// second, seen two ways: from our milestones (when a watch first saw each
// pod's nodeName), and from the scheduler's own counter.
type SchedulingStats struct {
	// Pods is the number of Scheduled stamps in the report's pod series.
	Pods int `json:"pods"`
	// MaxPerSecond is the most Scheduled stamps in one 1-second window of
	// the pod series.
	MaxPerSecond int `json:"maxPerSecond"`
	// AvgPerSecond is the mean over the 1-second windows from the first to
	// the last window with a Scheduled stamp, both included.
	AvgPerSecond float64 `json:"avgPerSecond"`

	// SchedulerScheduled is the increase of
	// scheduler_schedule_attempts_total{result="scheduled"} between the
	// run's two scrapes: pods the scheduler bound, whoever created them.
	// SchedulerUnschedulable and SchedulerErrors are the same counter for
	// results "unschedulable" and "error". All three are absent when the
	// scheduler was not scraped.
	SchedulerScheduled     int64 `json:"schedulerScheduled,omitempty"`
	SchedulerUnschedulable int64 `json:"schedulerUnschedulable,omitempty"`
	SchedulerErrors        int64 `json:"schedulerErrors,omitempty"`
	// SchedulerSeconds is the time between the two scrapes, and
	// SchedulerPerSecond is SchedulerScheduled divided by it: the average
	// over the whole run, idle time included.
	SchedulerSeconds   float64 `json:"schedulerSeconds,omitempty"`
	SchedulerPerSecond float64 `json:"schedulerPerSecond,omitempty"`
	// SchedulingSLI is the scheduler's own pod scheduling latency between
	// the scrapes (scheduler_pod_scheduling_sli_duration_seconds: from the
	// pod entering its queue to binding, over every attempt); nil when the
	// scheduler was not scraped or did not have it.
	SchedulingSLI *BucketLatency `json:"schedulingSLI,omitempty"`
}

// SchedulingFrom computes the scheduling throughput from the report's pod
// series and the Diff of the scheduler's metrics over the run (nil if it was
// not scraped).
func SchedulingFrom(pods PodSeries, sched *Metrics) SchedulingStats {
	st := milestoneThroughput(pods.Scheduled)
	if n, ok := sched.ScheduleAttempts("scheduled"); ok {
		st.SchedulerScheduled = int64(math.Round(n))
		u, _ := sched.ScheduleAttempts("unschedulable")
		e, _ := sched.ScheduleAttempts("error")
		st.SchedulerUnschedulable = int64(math.Round(u))
		st.SchedulerErrors = int64(math.Round(e))
		st.SchedulerSeconds = roundTo(sched.Seconds(), 3)
		if st.SchedulerSeconds > 0 {
			st.SchedulerPerSecond = roundTo(float64(st.SchedulerScheduled)/st.SchedulerSeconds, 2)
		}
	}
	if l, ok := sched.SchedulingSLI(); ok {
		st.SchedulingSLI = &l
	}
	return st
}

// milestoneThroughput fills the milestone half of SchedulingStats.
func milestoneThroughput(scheduled []int) SchedulingStats {
	var st SchedulingStats
	first, last := -1, -1
	for i, n := range scheduled {
		if n == 0 {
			continue
		}
		if first < 0 {
			first = i
		}
		last = i
		st.Pods += n
		st.MaxPerSecond = max(st.MaxPerSecond, n)
	}
	if first >= 0 {
		st.AvgPerSecond = roundTo(float64(st.Pods)/float64(last-first+1), 2)
	}
	return st
}

// roundTo rounds x to the given number of decimals, so that derived numbers
// in report.json carry no float noise.
func roundTo(x float64, decimals int) float64 {
	p := math.Pow10(decimals)
	return math.Round(x*p) / p
}
