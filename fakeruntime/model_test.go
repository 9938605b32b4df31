package fakeruntime

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	running = runtimeapi.ContainerState_CONTAINER_RUNNING
	exited  = runtimeapi.ContainerState_CONTAINER_EXITED
	created = runtimeapi.ContainerState_CONTAINER_CREATED
)

func TestStateAt(t *testing.T) {
	const start = int64(1_000_000_000_000)
	sec := int64(time.Second)
	runningRec := runState{state: running, startedAt: start}
	stopped := runState{state: exited, startedAt: start, finishedAt: start + 5*sec, exitCode: 0, reason: "Completed"}
	tests := []struct {
		name string
		s    runState
		l    lifecycle
		now  int64
		want runState
	}{
		{"runs forever", runningRec, lifecycle{}, start + 1000*sec, runningRec},
		{"runs forever despite an exit code", runningRec, lifecycle{exitCode: 3}, start + 1000*sec, runningRec},
		{"before runFor", runningRec, lifecycle{runFor: 30 * time.Second}, start + 29*sec, runningRec},
		{"one nanosecond before the boundary", runningRec, lifecycle{runFor: 30 * time.Second}, start + 30*sec - 1, runningRec},
		{"exactly at the boundary: exited", runningRec, lifecycle{runFor: 30 * time.Second}, start + 30*sec,
			runState{state: exited, startedAt: start, finishedAt: start + 30*sec, reason: "Completed"}},
		{"long after, exit 0: finished at start+runFor, not now", runningRec, lifecycle{runFor: 30 * time.Second}, start + 3600*sec,
			runState{state: exited, startedAt: start, finishedAt: start + 30*sec, reason: "Completed"}},
		{"exit 1: Error", runningRec, lifecycle{runFor: time.Second, exitCode: 1}, start + 2*sec,
			runState{state: exited, startedAt: start, finishedAt: start + sec, exitCode: 1, reason: "Error"}},
		{"a created container does not run out", runState{state: created}, lifecycle{runFor: time.Nanosecond}, start, runState{state: created}},
		{"an exited container keeps its exit", stopped, lifecycle{runFor: 10 * time.Second, exitCode: 2}, start + 60*sec, stopped},
		{"a very long runFor does not overflow", runningRec, lifecycle{runFor: time.Duration(1<<63 - 1)}, start + 3600*sec, runningRec},
		{"a clock before the start", runningRec, lifecycle{runFor: time.Second}, start - sec, runningRec},
		{"OOM-killed before runFor", runningRec, lifecycle{runFor: time.Minute, exitCode: 1, oom: true, oomAfter: 20 * time.Second}, start + 30*sec,
			runState{state: exited, startedAt: start, finishedAt: start + 20*sec, exitCode: 137, reason: "OOMKilled"}},
		{"OOM-killed with no runFor", runningRec, lifecycle{oom: true, oomAfter: 20 * time.Second}, start + 20*sec,
			runState{state: exited, startedAt: start, finishedAt: start + 20*sec, exitCode: 137, reason: "OOMKilled"}},
		{"OOM-killed at the start", runningRec, lifecycle{oom: true}, start,
			runState{state: exited, startedAt: start, finishedAt: start, exitCode: 137, reason: "OOMKilled"}},
		{"runFor before the OOM", runningRec, lifecycle{runFor: 10 * time.Second, oom: true, oomAfter: 20 * time.Second}, start + 30*sec,
			runState{state: exited, startedAt: start, finishedAt: start + 10*sec, reason: "Completed"}},
		{"a tie goes to runFor", runningRec, lifecycle{runFor: 10 * time.Second, exitCode: 2, oom: true, oomAfter: 10 * time.Second}, start + 30*sec,
			runState{state: exited, startedAt: start, finishedAt: start + 10*sec, exitCode: 2, reason: "Error"}},
		{"before the OOM", runningRec, lifecycle{oom: true, oomAfter: 20 * time.Second}, start + 20*sec - 1, runningRec},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := stateAt(tc.s, tc.l, tc.now)
			if got != tc.want {
				t.Errorf("stateAt(%+v, %+v, start%+ds) = %+v, want %+v", tc.s, tc.l, (tc.now-start)/sec, got, tc.want)
			}
			// Idempotent: asking again, later, changes nothing more.
			if again := stateAt(got, tc.l, tc.now+sec); tc.want.state == exited && again != got {
				t.Errorf("stateAt is not idempotent: %+v then %+v", got, again)
			}
		})
	}
}

func TestProbeAt(t *testing.T) {
	flapping := []ProbeStep{{After: 0, Succeed: true}, {After: Duration(30 * time.Second), Succeed: false}, {After: Duration(60 * time.Second), Succeed: true}}
	lateFailure := []ProbeStep{{After: Duration(10 * time.Second), Succeed: false}}
	tests := []struct {
		name    string
		steps   []ProbeStep
		elapsed time.Duration
		want    bool
	}{
		{"no steps", nil, time.Hour, true},
		{"before the first step", lateFailure, 9 * time.Second, true},
		{"at the first step", lateFailure, 10 * time.Second, false},
		{"after the last step", lateFailure, time.Hour, false},
		{"flapping: start", flapping, 0, true},
		{"flapping: down", flapping, 30 * time.Second, false},
		{"flapping: still down", flapping, 59 * time.Second, false},
		{"flapping: up again", flapping, 60 * time.Second, true},
	}
	for _, tc := range tests {
		if got := probeAt(tc.steps, tc.elapsed); got != tc.want {
			t.Errorf("%s: probeAt(%v, %s) = %v, want %v", tc.name, tc.steps, tc.elapsed, got, tc.want)
		}
	}
}

func TestExecAt(t *testing.T) {
	execs := []ExecBehaviour{
		{Command: "*", Stdout: "any"},
		{Command: "cat /tmp/healthy", Steps: []ProbeStep{{After: Duration(time.Minute), Succeed: false}}, Stdout: "ok\n"},
		{Command: "*", Stdout: "second wildcard, never used"},
		{Command: "false", Steps: []ProbeStep{{After: 0, Succeed: false}}, ExitCode: 7},
	}
	tests := []struct {
		name       string
		execs      []ExecBehaviour
		cmd        []string
		elapsed    time.Duration
		wantStdout string
		wantCode   int32
	}{
		{"no behaviours", nil, []string{"true"}, 0, "", 0},
		{"exact match, before its failure", execs, []string{"cat", "/tmp/healthy"}, 59 * time.Second, "ok\n", 0},
		{"exact match, failing: exit 1 by default", execs, []string{"cat", "/tmp/healthy"}, time.Minute, "ok\n", 1},
		{"exact match wins over an earlier wildcard", execs, []string{"false"}, 0, "", 7},
		{"the first wildcard catches the rest", execs, []string{"ls"}, 0, "any", 0},
		{"arguments must match exactly", execs, []string{"cat", "/tmp/healthy", "x"}, time.Minute, "any", 0},
		{"matched as joined: one argument with a space matches too", execs, []string{"cat /tmp/healthy"}, time.Minute, "ok\n", 1},
		{"spaces matter", execs, []string{"cat", " /tmp/healthy"}, time.Minute, "any", 0},
	}
	for _, tc := range tests {
		stdout, code := execAt(tc.execs, tc.cmd, tc.elapsed)
		if stdout != tc.wantStdout || code != tc.wantCode {
			t.Errorf("%s: execAt(%q, %s) = %q, %d; want %q, %d", tc.name, tc.cmd, tc.elapsed, stdout, code, tc.wantStdout, tc.wantCode)
		}
	}
}

func TestCommandIs(t *testing.T) {
	tests := []struct {
		cmd  []string
		s    string
		want bool
	}{
		{[]string{"cat", "/tmp/healthy"}, "cat /tmp/healthy", true},
		{[]string{"sh", "-c", "test -f /x"}, "sh -c test -f /x", true},
		{[]string{"cat"}, "cat /tmp/healthy", false},
		{[]string{"cat", "/tmp/healthy"}, "cat", false},
		{[]string{"ca", "t"}, "cat", false},
		{[]string{"cat", ""}, "cat ", true},
		{nil, "", false},
	}
	for _, tc := range tests {
		if got := commandIs(tc.cmd, tc.s); got != tc.want {
			t.Errorf("commandIs(%q, %q) = %v, want %v", tc.cmd, tc.s, got, tc.want)
		}
	}
}

func TestJittered(t *testing.T) {
	const d = 30 * time.Second
	if got := jittered(d, 0, 123, saltRunFor); got != d {
		t.Errorf("no jitter changed %s to %s", d, got)
	}
	if got := jittered(0, 0.5, 123, saltRunFor); got != 0 {
		t.Errorf("jitter made 0 into %s", got)
	}
	for _, fraction := range []float64{0.1, 0.5, 1} {
		lo, hi := time.Duration(float64(d)*(1-fraction)), time.Duration(float64(d)*(1+fraction))
		var below, above int
		for i := range 1000 {
			key := jitterKey(42, fmt.Sprintf("container-%d", i))
			got := jittered(d, fraction, key, saltRunFor)
			if got < lo || got >= hi {
				t.Fatalf("jittered(%s, %v) = %s, outside [%s, %s)", d, fraction, got, lo, hi)
			}
			if got != jittered(d, fraction, jitterKey(42, fmt.Sprintf("container-%d", i)), saltRunFor) {
				t.Fatal("the same seed and ID gave different durations")
			}
			if got < d {
				below++
			} else {
				above++
			}
		}
		// Spread both ways, not stuck at one end.
		if below < 400 || above < 400 {
			t.Errorf("jitter %v: %d below and %d above %s, want them balanced", fraction, below, above, d)
		}
	}
	// Another seed, ID or salt draws differently.
	base := jittered(d, 0.5, jitterKey(1, "abc"), saltRunFor)
	for name, other := range map[string]time.Duration{
		"seed": jittered(d, 0.5, jitterKey(2, "abc"), saltRunFor),
		"id":   jittered(d, 0.5, jitterKey(1, "abd"), saltRunFor),
		"salt": jittered(d, 0.5, jitterKey(1, "abc"), saltStart),
	} {
		if other == base {
			t.Errorf("another %s drew the same duration %s", name, base)
		}
	}
	if got := jittered(time.Duration(1<<63-1), 1, 7, saltRunFor); got <= 0 {
		t.Errorf("a huge duration overflowed to %s", got)
	}
}

func TestResolveModel(t *testing.T) {
	node := Behaviour{ContainerCreateLatency: time.Second, ContainerStartLatency: 2 * time.Second, StopLatency: 3 * time.Second}
	unsorted := []ProbeStep{{After: Duration(time.Minute)}, {After: 0, Succeed: true}}
	tests := []struct {
		name string
		cb   ContainerBehaviour
		want model
	}{
		{"nothing set: the node's latencies, runs forever", ContainerBehaviour{},
			model{createLatency: time.Second, startLatency: 2 * time.Second, stopLatency: 3 * time.Second}},
		{"overrides, zero included", ContainerBehaviour{
			RunFor: new(Duration(time.Minute)), ExitCode: new(int32(2)),
			CreateLatency: new(Duration(0)), StartLatency: new(Duration(time.Millisecond)), StopLatency: new(Duration(time.Hour)),
			Jitter: new(0.25),
		}, model{runFor: time.Minute, exitCode: 2, startLatency: time.Millisecond, stopLatency: time.Hour, jitter: 0.25}},
		{"out of range values clamped", ContainerBehaviour{RunFor: new(Duration(-time.Second)), StopLatency: new(Duration(-1)), Jitter: new(7.0)},
			model{createLatency: time.Second, startLatency: 2 * time.Second, jitter: 1}},
		{"unsorted steps sorted", ContainerBehaviour{Liveness: unsorted, Exec: []ExecBehaviour{{Command: "x", Steps: unsorted}}},
			model{createLatency: time.Second, startLatency: 2 * time.Second, stopLatency: 3 * time.Second,
				liveness: []ProbeStep{unsorted[1], unsorted[0]},
				exec:     []ExecBehaviour{{Command: "x", Steps: []ProbeStep{unsorted[1], unsorted[0]}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := resolveModel(tc.cb, node); !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("resolveModel = %+v, want %+v", *got, tc.want)
			}
		})
	}
	if unsorted[0].After != Duration(time.Minute) {
		t.Error("resolveModel sorted the caller's steps in place")
	}
}
