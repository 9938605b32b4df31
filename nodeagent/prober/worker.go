package prober

import (
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The API server's defaults for a probe's fields (pkg/apis/core/v1
// defaults.go). A pod read from the API server has them already; a pod built
// in code (a test, a load profile) may not.
const (
	defaultPeriod           = 10 * time.Second
	defaultTimeout          = time.Second
	defaultSuccessThreshold = 1
	defaultFailureThreshold = 3
)

// params are a probe's numbers, defaulted.
type params struct {
	initialDelay, period, timeout time.Duration
	success, failure              int
}

func paramsOf(p *corev1.Probe) params {
	ps := params{
		initialDelay: time.Duration(p.InitialDelaySeconds) * time.Second,
		period:       time.Duration(p.PeriodSeconds) * time.Second,
		timeout:      time.Duration(p.TimeoutSeconds) * time.Second,
		success:      int(p.SuccessThreshold),
		failure:      int(p.FailureThreshold),
	}
	if ps.initialDelay < 0 {
		ps.initialDelay = 0
	}
	if ps.period <= 0 {
		ps.period = defaultPeriod
	}
	if ps.timeout <= 0 {
		ps.timeout = defaultTimeout
	}
	if ps.success <= 0 {
		ps.success = defaultSuccessThreshold
	}
	if ps.failure <= 0 {
		ps.failure = defaultFailureThreshold
	}
	return ps
}

// initialResult is what a new container's cache holds for a kind before its
// first probe passes a threshold, as the kubelet's workers start: not ready
// (readiness must be earned), alive (liveness must be lost), and not yet
// known for startup (Started is false until the probe passes).
func initialResult(k Kind) Result {
	switch k {
	case Readiness:
		return Failure
	case Liveness:
		return Success
	default:
		return Unknown
	}
}

// counter is a worker's run of equal results: a result changes the cache only
// when it has been seen threshold times in a row.
type counter struct {
	last Result
	run  int
}

// add counts r and reports whether the run reached r's threshold (success
// for a Success, failure for a Failure).
func (c *counter) add(r Result, p params) bool {
	if r == c.last {
		c.run++
	} else {
		c.last, c.run = r, 1
	}
	if r == Success {
		return c.run >= p.success
	}
	return c.run >= p.failure
}

// holdsAfter reports whether a worker stops probing once a result reached its
// threshold, until the container is replaced: a failed liveness probe (the
// container is about to be killed; probing a dying container only races the
// kill) and a startup probe either way (it has said what it had to say).
func holdsAfter(k Kind, r Result) bool {
	return k == Startup || (k == Liveness && r == Failure)
}

// firstRun is when a new worker first probes. A container is first probed
// when its initial delay has passed since it started. A container that was
// already running when the manager started (the agent restarted) is probed,
// in addition, after a random part of the period, jitter in [0, 1), so that
// a whole node's probes do not fire together, as the kubelet's workers wait
// after a restart.
func firstRun(now, startedAt, managerStart time.Time, p params, jitter float64) time.Time {
	if startedAt.IsZero() {
		startedAt = now
	}
	// Times are kept relative to now, so that they carry now's monotonic
	// reading whatever startedAt (a CRI wall-clock stamp) carries.
	at := now
	if d := startedAt.Add(p.initialDelay).Sub(now); d > 0 {
		at = now.Add(d)
	}
	if startedAt.Before(managerStart) {
		if j := now.Add(time.Duration(jitter * float64(p.period))); j.After(at) {
			at = j
		}
	}
	return at
}

// nextTick is the run after one scheduled at scheduled: one period later, on
// the grid of the first run. A probe that overran whole periods skips the
// ticks it missed, as a ticker drops them, so a worker never runs twice at
// once or catches up in a burst.
func nextTick(scheduled, now time.Time, period time.Duration) time.Time {
	next := scheduled.Add(period)
	if next.After(now) {
		return next
	}
	return next.Add((now.Sub(next)/period + 1) * period)
}

// state is where a worker is in its schedule.
type state int

const (
	// idle: not scheduled; on hold until its container is replaced, or its
	// container stopped.
	idle state = iota
	// scheduled: waits in the queue (or, before Start, the backlog) for
	// next.
	scheduled
	// running: a queue worker is probing.
	running
	// retired: replaced or removed; never runs again, and a result still in
	// flight is dropped.
	retired
)

// worker probes one container (one container ID) with one kind of probe. A
// container replaced by a new one (new ID) gets new workers, so counters
// never carry over. Fields above the line are set at creation and never
// change, so a queue worker reads them without the manager's lock.
type worker struct {
	m           *Manager
	kind        Kind
	pod         *corev1.Pod
	container   *corev1.Container
	containerID string
	probe       *corev1.Probe
	params      params
	// command is the exec probe's command with the container's static
	// environment expanded, computed once.
	command []string
	// slot is the worker's item in the Queue.
	slot *slot

	// Guarded by Manager.mu.
	state   state
	next    time.Time
	trigger bool // run again as soon as the current run ends
	count   counter
	// metrics are the worker's series of prober_probe_total and
	// prober_probe_duration_seconds.
	metrics probeMetrics
}

// A slot is what a Queue holds for a worker: the client-go queue it runs on
// cannot take an item out, so a worker that will not run again (retired, or
// its Manager stopped) empties its slot, and the queue keeps only the empty
// slot until its time comes, not the worker, its pod and its Manager (with
// a shared Queue, a stopped node's whole agent).
type slot struct{ w atomic.Pointer[worker] }

func newSlot(w *worker) *slot {
	s := &slot{}
	s.w.Store(w)
	return s
}

func probeOf(c *corev1.Container, k Kind) *corev1.Probe {
	switch k {
	case Liveness:
		return c.LivenessProbe
	case Readiness:
		return c.ReadinessProbe
	case Startup:
		return c.StartupProbe
	}
	return nil
}
