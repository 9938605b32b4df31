package prober

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	remote "k8s.io/cri-client/pkg"
	utilexec "k8s.io/utils/exec"

	"github.com/fleetlet/fleetlet/nodeagent/envvars"
)

// maxOutput is how much of a probe's output the kubelet keeps (10 KiB), for
// exec output and HTTP bodies alike.
const maxOutput = 10 << 10

// ExecSyncer is the part of a CRI runtime service exec probes use.
// internalapi.RuntimeService (k8s.io/cri-api/pkg/apis) has it, whether it is
// k8s.io/cri-client's remote service or the in-process fake runtime.
type ExecSyncer interface {
	ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout, stderr []byte, err error)
}

// CRIExec runs exec probes with CRI ExecSync, as the kubelet's exec prober
// does through its runtime manager.
type CRIExec struct {
	rt ExecSyncer
}

// ExecViaCRI returns an ExecRunner over a CRI runtime service.
func ExecViaCRI(rt ExecSyncer) *CRIExec { return &CRIExec{rt: rt} }

// Exec runs cmd in the container. Its output is stdout then stderr, cut at
// 10 KiB. A non-zero exit (a utilexec.ExitError such as the CodeExitError
// k8s.io/cri-client returns) is a Failure; so is a timeout, with cri-client's
// message (`command timed out: "cmd args" timed out after 1s`), whether the
// runtime reported it or the context ended first. Any other error means the
// probe could not run.
func (e *CRIExec) Exec(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (Result, string, error) {
	stdout, stderr, err := e.rt.ExecSync(ctx, containerID, cmd, timeout)
	out := make([]byte, 0, min(len(stdout)+len(stderr), maxOutput))
	out = append(out, stdout[:min(len(stdout), maxOutput)]...)
	out = append(out, stderr[:min(len(stderr), maxOutput-len(out))]...)
	if err == nil {
		return Success, string(out), nil
	}
	var exit utilexec.ExitError
	if errors.As(err, &exit) {
		if exit.ExitStatus() == 0 {
			return Success, string(out), nil
		}
		return Failure, string(out), nil
	}
	if errors.Is(err, remote.ErrCommandTimedOut) {
		return Failure, err.Error(), nil
	}
	if ctx.Err() != nil || status.Code(err) == codes.DeadlineExceeded {
		return Failure, fmt.Errorf("%w: %q timed out after %s", remote.ErrCommandTimedOut, strings.Join(cmd, " "), timeout).Error(), nil
	}
	return Unknown, "", fmt.Errorf("exec probe in container %s: %w", containerID, err)
}

// expandCommand substitutes $(NAME) in an exec probe's command with the
// container's static environment, as the kubelet's
// ExpandContainerCommandOnlyStatic does: a variable set with valueFrom
// expands to "", an unknown one stays as written, and $$ is a literal $.
func expandCommand(cmd []string, env []corev1.EnvVar) []string {
	if len(cmd) == 0 {
		return nil
	}
	vars := make(map[string]string, len(env))
	for _, e := range env {
		vars[e.Name] = e.Value
	}
	out := make([]string, len(cmd))
	for i, arg := range cmd {
		out[i] = envvars.Expand(arg, vars)
	}
	return out
}
