package fakeruntime

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Container logs are computed, never stored: a container's lines are a pure
// function of its behaviour and its start and exit, like its state, so a
// container that has printed for a week costs no memory.

// The streams a log line is on, as CRI log files name them.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// LogLine is one line a container printed.
type LogLine struct {
	Time   time.Time // in UTC, so that output does not depend on the host
	Stream string    // StreamStdout or StreamStderr
	Text   string    // without the newline
}

// ContainerLogs returns the lines the container has printed so far, oldest
// first: those at or after since (the zero time: all), then only the last
// tail of them (negative: all). It is a pure read: nothing is stored per
// line. An unknown container is NotFound; one that never started has
// printed nothing.
//
// The lines, where NAME is the container's name and N its attempt:
//
//	at the start, on stdout:  fleetlet-fake: container "NAME" started (attempt N)
//	every logs.every while    logs.line, or fleetlet-fake: container "NAME" is running
//	it runs, on stdout:
//	when RunFor ends:         fleetlet-fake: container "NAME" exited with code C
//	                          (on stdout for 0, on stderr otherwise)
//
// A container stopped by the API or OOM-killed prints no exit line: it was
// killed, not done. A periodic line due at the very instant of the exit is
// not printed.
func (r *Runtime) ContainerLogs(containerID string, since time.Time, tail int) ([]LogLine, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := lookupLocked(r.containers, "container", containerID)
	if err != nil {
		return nil, err
	}
	now := r.now()
	c.settle(now)
	var sinceNanos int64
	if !since.IsZero() {
		sinceNanos = since.UnixNano()
	}
	return logLines(c.metaName, c.attempt, c.model.logs, c.life, c.runState, now, sinceNanos, tail), nil
}

// logLines is the pure model of a container's log: with record s and
// lifecycle l at now, the lines at or after since, the last tail of them.
// Line i is the start line for i = 0, the periodic line k = i for
// 1 ≤ i ≤ n, and the exit line for i = n+1 when there is one; each is
// computed from i, so the cost is that of the lines returned.
func logLines(name string, attempt uint32, logs *LogBehaviour, l lifecycle, s runState, now, since int64, tail int) []LogLine {
	if s.state != runtimeapi.ContainerState_CONTAINER_RUNNING && s.state != runtimeapi.ContainerState_CONTAINER_EXITED {
		return nil
	}
	exited := s.state == runtimeapi.ContainerState_CONTAINER_EXITED
	// end bounds the periodic lines: up to now while running, before the
	// exit once exited.
	end, inclusive := now, true
	if exited {
		end, inclusive = s.finishedAt, false
	}
	var every int64
	var n int64
	if logs != nil && logs.Every > 0 {
		every = int64(logs.Every)
		if ran := end - s.startedAt; ran > 0 {
			n = ran / every
			if !inclusive && ran%every == 0 {
				n--
			}
		}
	}
	exitLine := exited && l.runFor > 0 && s.finishedAt-s.startedAt == int64(l.runFor) && s.reason != reasonOOMKilled
	total := n + 1
	if exitLine {
		total++
	}
	timeOf := func(i int64) int64 {
		switch {
		case i == 0:
			return s.startedAt
		case i <= n:
			return s.startedAt + i*every
		}
		return s.finishedAt
	}
	first := int64(0)
	if since > s.startedAt && n > 0 {
		first = min((since-s.startedAt+every-1)/every, n+1) // the first periodic line at or after since
	}
	for first < total && timeOf(first) < since {
		first++
	}
	if tail >= 0 {
		first = max(first, total-int64(tail))
	}
	if first >= total {
		return nil
	}
	quoted := strconv.Quote(name)
	out := make([]LogLine, 0, total-first)
	for i := first; i < total; i++ {
		line := LogLine{Time: time.Unix(0, timeOf(i)).UTC(), Stream: StreamStdout}
		switch {
		case i == 0:
			line.Text = fmt.Sprintf("fleetlet-fake: container %s started (attempt %d)", quoted, attempt)
		case i <= n:
			line.Text = logs.Line
			if line.Text == "" {
				line.Text = "fleetlet-fake: container " + quoted + " is running"
			}
		default:
			line.Text = fmt.Sprintf("fleetlet-fake: container %s exited with code %d", quoted, s.exitCode)
			if s.exitCode != 0 {
				line.Stream = StreamStderr
			}
		}
		out = append(out, line)
	}
	return out
}

// ReopenContainerLog succeeds for a running container and does nothing: the
// runtime writes no log file (ContainerLogs computes the lines), so there is
// none to reopen after the kubelet rotates it. Like containerd it refuses a
// container that is not running, and an unknown one is NotFound.
func (r *Runtime) ReopenContainerLog(ctx context.Context, containerID string) error {
	if _, err := r.enter(ctx, "ReopenContainerLog"); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := lookupLocked(r.containers, "container", containerID)
	if err != nil {
		return err
	}
	c.settle(r.now())
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return status.Errorf(codes.FailedPrecondition, "ReopenContainerLog %s: container is in %s state; only a running container has a log to reopen", c.id, c.state)
	}
	return nil
}
