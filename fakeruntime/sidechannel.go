package fakeruntime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A node agent in the same process reaches the fake's network probes and
// computed logs by direct calls (ProbeNetwork, ContainerLogs). An agent in
// another process, served by `fleetlet fakeruntime serve`, has only CRI:
// it asks through ExecSync with one of two reserved commands, which no
// container image has, answered from the same model:
//
//	fleetlet.io/probe KIND          exit 0 if the probe succeeds now, 1 if not
//	fleetlet.io/logs SINCE TAIL     stdout: the lines as JSON, one per line;
//	                                SINCE is RFC 3339 (or "" for all), TAIL
//	                                the last lines (-1 for all)
//
// Both are served on the gRPC socket only: the in-process runtime's ExecSync
// runs the container's exec behaviour for any command, as before.
const (
	ProbeCommand = "fleetlet.io/probe"
	LogsCommand  = "fleetlet.io/logs"
)

// sideChannel answers a reserved command; ok is false for any other.
func (r *Runtime) sideChannel(containerID string, cmd []string) (stdout []byte, exitCode int32, ok bool, err error) {
	if len(cmd) == 0 || (cmd[0] != ProbeCommand && cmd[0] != LogsCommand) {
		return nil, 0, false, nil
	}
	switch cmd[0] {
	case ProbeCommand:
		if len(cmd) != 2 {
			return nil, 0, true, status.Errorf(codes.InvalidArgument, "%s: want one argument, the probe kind", ProbeCommand)
		}
		success, err := r.ProbeNetwork(containerID, ProbeKind(cmd[1]))
		if err != nil {
			return nil, 0, true, err
		}
		if !success {
			return nil, 1, true, nil
		}
		return nil, 0, true, nil
	default:
		if len(cmd) != 3 {
			return nil, 0, true, status.Errorf(codes.InvalidArgument, "%s: want two arguments, since and tail", LogsCommand)
		}
		var since time.Time
		if cmd[1] != "" {
			if since, err = time.Parse(time.RFC3339Nano, cmd[1]); err != nil {
				return nil, 0, true, status.Errorf(codes.InvalidArgument, "%s: since %q: %v", LogsCommand, cmd[1], err)
			}
		}
		tail, err := strconv.Atoi(cmd[2])
		if err != nil {
			return nil, 0, true, status.Errorf(codes.InvalidArgument, "%s: tail %q: %v", LogsCommand, cmd[2], err)
		}
		lines, err := r.ContainerLogs(containerID, since, tail)
		if err != nil {
			return nil, 0, true, err
		}
		var b strings.Builder
		enc := json.NewEncoder(&b)
		for _, l := range lines {
			if err := enc.Encode(l); err != nil {
				return nil, 0, true, err
			}
		}
		return []byte(b.String()), 0, true, nil
	}
}

// ExecProber asks a fake runtime in another process for a network probe's
// outcome, through ExecSync.
type ExecProber func(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout, stderr []byte, err error)

// ProbeNetworkOver is ProbeNetwork of a fake served on a socket, through
// exec (the CRI client's ExecSync): a non-zero exit is a failed probe.
func ProbeNetworkOver(ctx context.Context, exec ExecProber, containerID string, kind ProbeKind) (bool, error) {
	_, _, err := exec(ctx, containerID, []string{ProbeCommand, string(kind)}, 10*time.Second)
	var exit interface{ ExitStatus() int }
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &exit) && exit.ExitStatus() == 1:
		return false, nil
	}
	return false, err
}

// ContainerLogsOver is ContainerLogs of a fake served on a socket, through
// exec.
func ContainerLogsOver(ctx context.Context, exec ExecProber, containerID string, since time.Time, tail int) ([]LogLine, error) {
	s := ""
	if !since.IsZero() {
		s = since.UTC().Format(time.RFC3339Nano)
	}
	stdout, _, err := exec(ctx, containerID, []string{LogsCommand, s, strconv.Itoa(tail)}, 30*time.Second)
	if err != nil {
		return nil, err
	}
	var lines []LogLine
	dec := json.NewDecoder(strings.NewReader(string(stdout)))
	for dec.More() {
		var l LogLine
		if err := dec.Decode(&l); err != nil {
			return nil, fmt.Errorf("reading the logs of container %s from the fake runtime: %w", containerID, err)
		}
		lines = append(lines, l)
	}
	return lines, nil
}
