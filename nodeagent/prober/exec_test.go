package prober

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
	utilexec "k8s.io/utils/exec"
)

// execSyncer answers ExecSync as a CRI runtime service would; embedding the
// interface makes it a whole RuntimeService whose other methods are unused.
type execSyncer struct {
	internalapi.RuntimeService
	stdout, stderr string
	err            error
	// cancelled: the call saw its context end before the runtime answered.
	cancelled bool
	got       []string
}

func (e *execSyncer) ExecSync(ctx context.Context, _ string, cmd []string, _ time.Duration) ([]byte, []byte, error) {
	e.got = cmd
	if e.cancelled {
		<-ctx.Done()
		return nil, nil, status.Error(codes.Canceled, "context canceled")
	}
	return []byte(e.stdout), []byte(e.stderr), e.err
}

// exitError is what k8s.io/cri-client's ExecSync returns for a non-zero exit.
func exitError(cmd string, code int, stderr string) error {
	return utilexec.CodeExitError{Err: fmt.Errorf("command '%s' exited with %d: %s", cmd, code, stderr), Code: code}
}

func TestExecViaCRI(t *testing.T) {
	cmd := []string{"cat", "/tmp/healthy"}
	cases := []struct {
		name    string
		rt      *execSyncer
		want    Result
		wantOut string
		wantErr bool
	}{
		{name: "exit 0", rt: &execSyncer{stdout: "ok\n"}, want: Success, wantOut: "ok\n"},
		{name: "a non-zero exit is a failure with stdout and stderr",
			rt:   &execSyncer{stdout: "out ", stderr: "cat: /tmp/healthy: No such file", err: exitError("cat /tmp/healthy", 1, "cat: /tmp/healthy: No such file")},
			want: Failure, wantOut: "out cat: /tmp/healthy: No such file"},
		{name: "a wrapped exit error with status 0 is a success",
			rt: &execSyncer{stdout: "fine", err: fmt.Errorf("wrapped: %w", utilexec.CodeExitError{Err: errors.New("x"), Code: 0})}, want: Success, wantOut: "fine"},
		{name: "cri-client's timeout is a failure with its message",
			rt:   &execSyncer{err: fmt.Errorf("%w: %q timed out after %s", remote.ErrCommandTimedOut, "cat /tmp/healthy", time.Second)},
			want: Failure, wantOut: `command timed out: "cat /tmp/healthy" timed out after 1s`},
		{name: "a runtime's DeadlineExceeded is a timeout",
			rt:   &execSyncer{err: status.Error(codes.DeadlineExceeded, "deadline")},
			want: Failure, wantOut: `command timed out: "cat /tmp/healthy" timed out after 1s`},
		{name: "the context ending first is a timeout", rt: &execSyncer{cancelled: true},
			want: Failure, wantOut: `command timed out: "cat /tmp/healthy" timed out after 1s`},
		{name: "any other error: the probe could not run",
			rt: &execSyncer{err: status.Error(codes.NotFound, "container not found")}, want: Unknown, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.rt.cancelled {
				cancel()
			}
			res, out, err := ExecViaCRI(tc.rt).Exec(ctx, "cid", cmd, time.Second)
			if res != tc.want || out != tc.wantOut || (err != nil) != tc.wantErr {
				t.Errorf("Exec = (%v, %q, %v), want (%v, %q, error %v)", res, out, err, tc.want, tc.wantOut, tc.wantErr)
			}
			if !slices.Equal(tc.rt.got, cmd) {
				t.Errorf("ran %q, want %q", tc.rt.got, cmd)
			}
		})
	}
}

func TestExecOutputIsCut(t *testing.T) {
	rt := &execSyncer{stdout: strings.Repeat("o", 8<<10), stderr: strings.Repeat("e", 8<<10)}
	_, out, _ := ExecViaCRI(rt).Exec(context.Background(), "cid", []string{"x"}, time.Second)
	if len(out) != maxOutput || !strings.HasPrefix(out, strings.Repeat("o", 8<<10)+"e") {
		t.Errorf("output is %d bytes, want stdout then stderr cut at %d", len(out), maxOutput)
	}
}

func TestExecThroughTheManager(t *testing.T) {
	// The manager expands the command and passes the timeout; the result of
	// a failed command is a failed probe.
	h := newHarness(t, 1)
	rt := &execSyncer{stdout: "nope", err: exitError("check", 3, "")}
	h.m.runner = Join(ExecViaCRI(rt), h.runner)
	p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"check", "$(PORT)", "$(SECRET)", "$(UNSET)"}}}, FailureThreshold: 1}
	pod := newPod("u1", corev1.Container{LivenessProbe: p, Env: []corev1.EnvVar{{Name: "PORT", Value: "8080"}, {Name: "SECRET", ValueFrom: &corev1.EnvVarSource{}}}})
	h.m.ContainerStarted(pod, "c0", "cid", t0)
	h.settle()
	if want := []string{"check", "8080", "", "$(UNSET)"}; !slices.Equal(rt.got, want) {
		t.Errorf("ran %q, want %q", rt.got, want)
	}
	if r, _ := h.m.Get(Liveness, "cid"); r != Failure {
		t.Errorf("liveness = %v after exit 3 with failureThreshold 1", r)
	}
	if ev := h.drainEvents(); len(ev) != 1 || ev[0] != "Warning Unhealthy Liveness probe failed: nope" {
		t.Errorf("events = %q", ev)
	}
}

func TestExpandCommand(t *testing.T) {
	env := []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "two"}, {Name: "FROM", ValueFrom: &corev1.EnvVarSource{}}}
	cases := map[string]string{
		"plain":          "plain",
		"$(A)":           "1",
		"x$(A)y$(B)z":    "x1ytwoz",
		"$(FROM)":        "",
		"$(NOPE)":        "$(NOPE)",
		"$$(A)":          "$(A)",
		"$$":             "$",
		"$":              "$",
		"a$":             "a$",
		"$x":             "$x",
		"$(A":            "$(A",
		"$()":            "$()",
		"cost: $5 $(A)!": "cost: $5 1!",
	}
	for in, want := range cases {
		if got := expandCommand([]string{in}, env); len(got) != 1 || got[0] != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
	if expandCommand(nil, env) != nil {
		t.Errorf("an empty command expanded to something")
	}
}
