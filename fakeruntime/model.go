package fakeruntime

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The pure core of the behaviour model. Nothing here reads a clock, takes a
// lock or keeps state: a container's state is a function of its behaviour,
// its start time and the time asked about. The Runtime (the edge) calls these
// whenever it is asked about a container, so thousands of idle containers
// cost nothing between calls: no timer and no goroutine per container.

// model is a container's behaviour resolved against the node's defaults:
// plain values, nothing unset. It is never changed once built, so every
// container of a pod without its own annotation shares the node's.
type model struct {
	runFor                                   time.Duration // 0: until stopped
	exitCode                                 int32
	createLatency, startLatency, stopLatency time.Duration
	jitter                                   float64
	readiness, liveness, startup             []ProbeStep
	exec                                     []ExecBehaviour
	// Usage curves; nil where the behaviour models none.
	memory, cpu, pids, writableLayer *curve
	logs                             *LogBehaviour
}

// resolveModel resolves cb, already merged over the node's default
// container behaviour, against the node's latencies. Out-of-range values
// are clamped and unsorted steps sorted, as New corrects what Validate
// reports.
func resolveModel(cb ContainerBehaviour, node Behaviour) *model {
	m := &model{
		createLatency: node.ContainerCreateLatency,
		startLatency:  node.ContainerStartLatency,
		stopLatency:   node.StopLatency,
		readiness:     sortedSteps(cb.Readiness),
		liveness:      sortedSteps(cb.Liveness),
		startup:       sortedSteps(cb.Startup),
		exec:          cb.Exec,
		memory:        resolveCurve(cb.Memory),
		cpu:           resolveCurve(cb.CPU),
		pids:          resolveCurve(cb.Pids),
		writableLayer: resolveCurve(cb.WritableLayer),
	}
	if cb.Logs != nil && cb.Logs.Every > 0 {
		m.logs = cb.Logs
	}
	if cb.RunFor != nil {
		m.runFor = max(time.Duration(*cb.RunFor), 0)
	}
	if cb.ExitCode != nil {
		m.exitCode = *cb.ExitCode
	}
	for _, o := range []struct {
		v   *Duration
		dst *time.Duration
	}{{cb.CreateLatency, &m.createLatency}, {cb.StartLatency, &m.startLatency}, {cb.StopLatency, &m.stopLatency}} {
		if o.v != nil {
			*o.dst = max(time.Duration(*o.v), 0)
		}
	}
	if cb.Jitter != nil && *cb.Jitter > 0 { // NaN stays 0
		m.jitter = min(*cb.Jitter, 1)
	}
	if slices.ContainsFunc(m.exec, func(e ExecBehaviour) bool { return !slices.IsSortedFunc(e.Steps, compareSteps) }) {
		m.exec = slices.Clone(m.exec)
		for i := range m.exec {
			m.exec[i].Steps = sortedSteps(m.exec[i].Steps)
		}
	}
	return m
}

func compareSteps(a, b ProbeStep) int { return cmp.Compare(a.After, b.After) }

// sortedSteps returns steps sorted by After, copying only if it must; the
// sort is stable so that equal times keep their written order.
func sortedSteps(steps []ProbeStep) []ProbeStep {
	if slices.IsSortedFunc(steps, compareSteps) {
		return steps
	}
	steps = slices.Clone(steps)
	slices.SortStableFunc(steps, compareSteps)
	return steps
}

// steps returns the schedule of a probe kind, and false for an unknown kind.
func (m *model) steps(kind ProbeKind) ([]ProbeStep, bool) {
	switch kind {
	case Readiness:
		return m.readiness, true
	case Liveness:
		return m.liveness, true
	case Startup:
		return m.startup, true
	}
	return nil, false
}

// runState is the part of a container's record that changes over its life.
type runState struct {
	// state and exitCode side by side: padding would take the container
	// record into the next allocation size class.
	state                 runtimeapi.ContainerState
	exitCode              int32
	startedAt, finishedAt int64 // Unix nanoseconds, as CRI has them
	reason                string
}

// lifecycle is when and how a started container exits by itself: its
// model's RunFor (jittered for this container) and exit code, and when its
// memory reaches its limit, if it does.
type lifecycle struct {
	runFor   time.Duration // 0: until stopped
	oomAfter time.Duration // with oom: run time at which it is OOM-killed
	exitCode int32
	oom      bool
}

// exits reports whether the container exits by itself at some point.
func (l lifecycle) exits() bool { return l.runFor > 0 || l.oom }

// exit is when (run time) and how the container exits by itself, and false
// if it never does: the earlier of its RunFor and its OOM kill, RunFor on a
// tie (the process was already gone when the kernel would have killed it).
func (l lifecycle) exit() (after time.Duration, exitCode int32, reason string, ok bool) {
	switch {
	case l.oom && (l.runFor <= 0 || l.oomAfter < l.runFor):
		return l.oomAfter, exitCodeKilled, reasonOOMKilled, true
	case l.runFor > 0:
		return l.runFor, l.exitCode, exitReason(l.exitCode), true
	}
	return 0, 0, "", false
}

// stateAt is the container with record s and lifecycle l as it is at now: a
// running container whose exit time (see lifecycle.exit) has come has
// exited, at exactly that time (however late the question comes), with its
// exit code. It exits at the boundary itself: a process that runs for 30 s
// is gone 30 s after it started. Any other record is returned unchanged,
// since only a running container changes without an API call.
func stateAt(s runState, l lifecycle, now int64) runState {
	after, exitCode, reason, ok := l.exit()
	// Compare elapsed time rather than compute an end time: startedAt plus a
	// very long RunFor could overflow.
	if s.state != runtimeapi.ContainerState_CONTAINER_RUNNING || !ok || now-s.startedAt < int64(after) {
		return s
	}
	s.state = runtimeapi.ContainerState_CONTAINER_EXITED
	s.finishedAt = s.startedAt + int64(after)
	s.exitCode = exitCode
	s.reason = reason
	return s
}

// exitReason is containerd's reason for an exit code.
func exitReason(code int32) string {
	if code == 0 {
		return reasonCompleted
	}
	return reasonError
}

// probeAt is the outcome, elapsed after the container started, of a probe
// with the schedule steps (sorted by After): that of the last step already
// reached, and success before the first.
func probeAt(steps []ProbeStep, elapsed time.Duration) bool {
	ok := true
	for _, s := range steps {
		if time.Duration(s.After) > elapsed {
			break
		}
		ok = s.Succeed
	}
	return ok
}

// execAt is what the command cmd prints and exits with, elapsed after the
// container started: the first exec behaviour naming it exactly, else the
// first wildcard, follows its steps; with none the command exits 0 silently.
func execAt(execs []ExecBehaviour, cmd []string, elapsed time.Duration) (stdout string, exitCode int32) {
	e := matchExec(execs, cmd)
	if e == nil {
		return "", 0
	}
	if probeAt(e.Steps, elapsed) {
		return e.Stdout, 0
	}
	if e.ExitCode == 0 {
		return e.Stdout, 1
	}
	return e.Stdout, e.ExitCode
}

func matchExec(execs []ExecBehaviour, cmd []string) *ExecBehaviour {
	var wildcard *ExecBehaviour
	for i := range execs {
		switch e := &execs[i]; {
		case e.Command == Wildcard:
			if wildcard == nil {
				wildcard = e
			}
		case commandIs(cmd, e.Command):
			return e
		}
	}
	return wildcard
}

// commandIs reports whether cmd joined with single spaces is s, without
// joining: exec probes run every few seconds on every pod.
func commandIs(cmd []string, s string) bool {
	for i, arg := range cmd {
		if i > 0 {
			if !strings.HasPrefix(s, " ") {
				return false
			}
			s = s[1:]
		}
		if !strings.HasPrefix(s, arg) {
			return false
		}
		s = s[len(arg):]
	}
	return s == "" && len(cmd) > 0
}

// Salts give each jittered quantity of one container its own variation.
const (
	saltRunFor uint64 = iota + 1
	saltCreate
	saltStart
	saltStop
)

// jitterKey hashes the runtime's seed and an identifier (a container ID)
// into the key jittered draws from: the same seed and ID always give the
// same key, with no generator shared between goroutines.
func jitterKey(seed uint64, id string) uint64 {
	// FNV-1a, inline so that hashing a string does not allocate.
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return splitmix64(h ^ splitmix64(seed))
}

// splitmix64 is the finaliser of the SplitMix64 generator: a bijection that
// spreads every input bit over the output.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// jittered varies d by up to ±fraction, as drawn from key and salt: the
// result is in [d×(1-fraction), d×(1+fraction)).
func jittered(d time.Duration, fraction float64, key, salt uint64) time.Duration {
	if d <= 0 || !(fraction > 0) {
		return d
	}
	u := float64(splitmix64(key^splitmix64(salt))>>11) / (1 << 53) // [0, 1)
	v := float64(d) * (1 + min(fraction, 1)*(2*u-1))
	if v >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(v)
}
