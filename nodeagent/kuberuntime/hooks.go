package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// ErrPostStartHook is the reason a container waits after its postStart hook
// failed, the kubelet's error of that name.
var ErrPostStartHook = errors.New("PostStartHookError")

// postStartNetworkTimeout bounds an httpGet or tcpSocket postStart hook.
// The kubelet sends them with no timeout of its own; a bound keeps one
// hung endpoint from holding the pod's worker for ever.
const postStartNetworkTimeout = time.Minute

// runPostStart runs the container's postStart hook, just started. On
// failure, as the kubelet's startContainer does, it reports
// FailedPostStartHook (without the hook's output, which may hold secrets),
// kills the container so that it restarts by the pod's restart policy, and
// returns ErrPostStartHook with the kubelet's message kept for the
// container's waiting state.
func (m *Manager) runPostStart(ctx context.Context, pod *corev1.Pod, c *corev1.Container, containerID string) error {
	hook := c.Lifecycle.PostStart
	msg, err := m.runHandler(ctx, pod, c, containerID, hook)
	if err == nil {
		return nil
	}
	klog.FromContext(ctx).V(1).Info("PostStart hook failed", "pod", klog.KObj(pod), "container", c.Name, "err", err)
	m.cfg.Events.Event(containerRef(pod, c.Name), corev1.EventTypeWarning, "FailedPostStartHook", "PostStartHook failed")
	st := &ContainerStatus{ID: containerID, Name: c.Name, State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	if killErr := m.killContainer(ctx, pod, st, terminationGracePeriod(pod), "FailedPostStartHook"); killErr != nil {
		klog.FromContext(ctx).Error(killErr, "Failed to kill a container whose postStart hook failed", "pod", klog.KObj(pod), "container", c.Name)
	}
	m.setWaiting(pod.UID, c.Name, ErrPostStartHook.Error(), msg)
	return fmt.Errorf("container %s of pod %s/%s: %w: %s", c.Name, pod.Namespace, pod.Name, ErrPostStartHook, msg)
}

// runHandler runs a lifecycle handler and, when it fails, returns the
// kubelet's handlerRunner message with the error.
func (m *Manager) runHandler(ctx context.Context, pod *corev1.Pod, c *corev1.Container, containerID string, h *corev1.LifecycleHandler) (string, error) {
	switch {
	case h.Exec != nil:
		stdout, stderr, err := m.cfg.Runtime.ExecSync(ctx, containerID, h.Exec.Command, 0)
		if err != nil {
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q",
				h.Exec.Command, c.Name, podDesc(pod), err, string(stdout)+string(stderr)), err
		}
	case h.HTTPGet != nil:
		if m.cfg.NetworkHook == nil {
			return "", nil
		}
		if err := m.cfg.NetworkHook(ctx, pod, c, h, postStartNetworkTimeout); err != nil {
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v", h.HTTPGet.Path, c.Name, podDesc(pod), err), err
		}
	case h.Sleep != nil:
		select {
		case <-m.cfg.Clock.After(time.Duration(h.Sleep.Seconds) * time.Second):
		case <-ctx.Done():
			return fmt.Sprintf("Sleep lifecycle hook (%d) for Container %q in Pod %q failed - error: %v", h.Sleep.Seconds, c.Name, podDesc(pod), ctx.Err()), ctx.Err()
		}
	default:
		// tcpSocket among them: the API keeps the field for compatibility,
		// and the kubelet fails such a hook at runtime.
		err := fmt.Errorf("invalid handler: %v", strings.TrimSpace(h.String()))
		return fmt.Sprintf("Cannot run handler: %v", err), err
	}
	return "", nil
}
