package fakeruntime

import (
	"context"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

func TestLogLines(t *testing.T) {
	const start = int64(1_000_000_000_000)
	sec := int64(time.Second)
	at := func(s int64) time.Time { return time.Unix(0, start+s*sec).UTC() }
	started := LogLine{at(0), StreamStdout, `fleetlet-fake: container "app" started (attempt 2)`}
	tick := func(s int64) LogLine { return LogLine{at(s), StreamStdout, "tick"} }
	every10s := &LogBehaviour{Every: Duration(10 * time.Second), Line: "tick"}
	runningRec := runState{state: running, startedAt: start}
	exitedRec := func(after int64, code int32, reason string) runState {
		return runState{state: exited, startedAt: start, finishedAt: start + after*sec, exitCode: code, reason: reason}
	}
	tests := []struct {
		name  string
		logs  *LogBehaviour
		l     lifecycle
		s     runState
		now   int64 // after the start, seconds
		since int64 // after the start, seconds; -1: none
		tail  int
		want  []LogLine
	}{
		{"created: nothing", every10s, lifecycle{}, runState{state: created}, 60, -1, -1, nil},
		{"running, no logs behaviour: the start line", nil, lifecycle{}, runningRec, 60, -1, -1, []LogLine{started}},
		{"running: a line every 10 s, one due now included", every10s, lifecycle{}, runningRec, 30, -1, -1,
			[]LogLine{started, tick(10), tick(20), tick(30)}},
		{"since the middle of a period", every10s, lifecycle{}, runningRec, 35, 15, -1, []LogLine{tick(20), tick(30)}},
		{"since a line's own time includes it", every10s, lifecycle{}, runningRec, 35, 20, -1, []LogLine{tick(20), tick(30)}},
		{"since after now", every10s, lifecycle{}, runningRec, 35, 40, -1, nil},
		{"tail", every10s, lifecycle{}, runningRec, 35, -1, 2, []LogLine{tick(20), tick(30)}},
		{"tail longer than the log", every10s, lifecycle{}, runningRec, 35, -1, 10, []LogLine{started, tick(10), tick(20), tick(30)}},
		{"tail 0", every10s, lifecycle{}, runningRec, 35, -1, 0, nil},
		{"since and tail", every10s, lifecycle{}, runningRec, 55, 15, 2, []LogLine{tick(40), tick(50)}},
		{"a week of lines, tail 1: computed, not stored", every10s, lifecycle{}, runningRec, 7 * 24 * 3600, -1, 1, []LogLine{tick(7 * 24 * 3600)}},
		{"default line", &LogBehaviour{Every: Duration(time.Minute)}, lifecycle{}, runningRec, 60, 1, -1,
			[]LogLine{{at(60), StreamStdout, `fleetlet-fake: container "app" is running`}}},
		{"runFor ends with 1: exit line on stderr, no line at the exit instant", every10s, lifecycle{runFor: 30 * time.Second, exitCode: 1}, exitedRec(30, 1, reasonError), 90, -1, -1,
			[]LogLine{started, tick(10), tick(20), {at(30), StreamStderr, `fleetlet-fake: container "app" exited with code 1`}}},
		{"runFor ends with 0: exit line on stdout", nil, lifecycle{runFor: 5 * time.Second}, exitedRec(5, 0, reasonCompleted), 90, -1, -1,
			[]LogLine{started, {at(5), StreamStdout, `fleetlet-fake: container "app" exited with code 0`}}},
		{"since between the last line and the exit", every10s, lifecycle{runFor: 30 * time.Second, exitCode: 1}, exitedRec(30, 1, reasonError), 90, 25, -1,
			[]LogLine{{at(30), StreamStderr, `fleetlet-fake: container "app" exited with code 1`}}},
		{"since after the exit", every10s, lifecycle{runFor: 30 * time.Second}, exitedRec(30, 0, reasonCompleted), 90, 31, -1, nil},
		{"stopped by the API: no exit line", every10s, lifecycle{runFor: 30 * time.Second}, exitedRec(25, 137, reasonError), 90, -1, -1,
			[]LogLine{started, tick(10), tick(20)}},
		{"OOM-killed: no exit line", every10s, lifecycle{oom: true, oomAfter: 15 * time.Second}, exitedRec(15, 137, reasonOOMKilled), 90, -1, -1,
			[]LogLine{started, tick(10)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			since := int64(0)
			if tc.since >= 0 {
				since = start + tc.since*sec
			}
			got := logLines("app", 2, tc.logs, tc.l, tc.s, start+tc.now*sec, since, tc.tail)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("logLines =\n%v\nwant\n%v", got, tc.want)
			}
		})
	}
}

func TestContainerLogs(t *testing.T) {
	ctx := context.Background()
	rt, clk := newTestRuntime(t, Behaviour{})
	pod := podWithBehaviour("web-0", `app: {runFor: 25s, exitCode: 2, logs: {every: 10s, line: serving}}`)
	id := runContainer(t, rt, runPod(t, rt, pod), pod, "app", pauseImage)
	clk.Step(12 * time.Second)
	lines, err := rt.ContainerLogs(id[:12], time.Time{}, -1)
	if err != nil {
		t.Fatal(err)
	}
	want := []LogLine{
		{testEpoch, StreamStdout, `fleetlet-fake: container "app" started (attempt 0)`},
		{testEpoch.Add(10 * time.Second), StreamStdout, "serving"},
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("after 12 s: %v, want %v", lines, want)
	}
	clk.Step(time.Minute)
	lines, err = rt.ContainerLogs(id, testEpoch.Add(11*time.Second), -1)
	if err != nil {
		t.Fatal(err)
	}
	want = []LogLine{
		{testEpoch.Add(20 * time.Second), StreamStdout, "serving"},
		{testEpoch.Add(25 * time.Second), StreamStderr, `fleetlet-fake: container "app" exited with code 2`},
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("after the exit, since 11 s: %v, want %v", lines, want)
	}
	_, err = rt.ContainerLogs("nope", time.Time{}, -1)
	wantCode(t, "ContainerLogs of an unknown container", err, codes.NotFound)
	if err := rt.RemoveContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, err = rt.ContainerLogs(id, time.Time{}, -1)
	wantCode(t, "ContainerLogs of a removed container", err, codes.NotFound)
}

func TestReopenContainerLog(t *testing.T) {
	ctx := context.Background()
	rt, _ := newTestRuntime(t, Behaviour{})
	pod := podConfig("web-0")
	sbID := runPod(t, rt, pod)
	id := runContainer(t, rt, sbID, pod, "app", pauseImage)
	if err := rt.ReopenContainerLog(ctx, id); err != nil {
		t.Errorf("ReopenContainerLog(running) = %v, want nil", err)
	}
	createdID := createAttempt(t, rt, sbID, pod, "other", pauseImage, 0)
	wantCode(t, "ReopenContainerLog(created)", rt.ReopenContainerLog(ctx, createdID), codes.FailedPrecondition)
	if err := rt.StopContainer(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "ReopenContainerLog(exited)", rt.ReopenContainerLog(ctx, id), codes.FailedPrecondition)
	wantCode(t, "ReopenContainerLog(unknown)", rt.ReopenContainerLog(ctx, "nope"), codes.NotFound)
}
