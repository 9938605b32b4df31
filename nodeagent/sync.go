package nodeagent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
	"github.com/fleetlet/fleetlet/nodeagent/prober"
	"github.com/fleetlet/fleetlet/nodeagent/status"
)

// SyncPod is the kubelet's syncPod for a pod that should run: it reports the
// status the runtime shows now, then asks the runtime manager to converge.
// The status that follows (Running, Ready) is reported on the sync the PLEG
// triggers when it sees the containers start, as on a real kubelet.
func (a *Agent) SyncPod(ctx context.Context, pod *corev1.Pod) (terminal bool, err error) {
	rs, err := a.runtime.GetPodStatus(ctx, pod.UID)
	if err != nil {
		return false, err
	}
	a.updateProbes(pod, rs)
	if phase := a.setStatus(pod, rs, false); phase == corev1.PodSucceeded || phase == corev1.PodFailed {
		return true, nil
	}
	if a.pastActiveDeadline(pod) {
		return true, nil
	}
	return false, a.runtime.SyncPod(ctx, pod, rs, a.probes)
}

// The kubelet's active deadline handler's reason and message.
const (
	reasonDeadlineExceeded  = "DeadlineExceeded"
	messageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// pastActiveDeadline fails the pod once it has been active longer than its
// activeDeadlineSeconds, counted from its startTime, as the kubelet's
// activeDeadlineHandler does; before that, it asks for a sync at the deadline.
func (a *Agent) pastActiveDeadline(pod *corev1.Pod) bool {
	prev, _ := a.statuses.Status(pod.UID)
	if pod.Spec.ActiveDeadlineSeconds == nil || prev.StartTime == nil {
		return false
	}
	deadline := prev.StartTime.Add(time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second)
	if a.cfg.Clock.Now().Before(deadline) {
		a.workers.SyncAt(pod.UID, deadline)
		return false
	}
	a.events.Event(pod, corev1.EventTypeWarning, reasonDeadlineExceeded, messageDeadlineExceeded)
	st := *prev.DeepCopy()
	st.Phase, st.Reason, st.Message = corev1.PodFailed, reasonDeadlineExceeded, messageDeadlineExceeded
	a.statuses.SetPodStatus(pod, st)
	return true
}

// SyncTerminatingPod stops the pod's containers within the grace period and
// reports their final states.
func (a *Agent) SyncTerminatingPod(ctx context.Context, pod *corev1.Pod, gracePeriod int64) error {
	// Readiness keeps being probed while the pod stops, as on the kubelet.
	a.probes.StopLivenessAndStartup(pod.UID)
	rs, err := a.runtime.GetPodStatus(ctx, pod.UID)
	if err != nil {
		return err
	}
	if err := a.runtime.KillPod(ctx, pod, rs, gracePeriod); err != nil {
		return err
	}
	if rs, err = a.runtime.GetPodStatus(ctx, pod.UID); err != nil {
		return err
	}
	a.setStatus(pod, rs, true)
	return nil
}

// SyncTerminatedPod removes the pod's containers and sandbox and lets the
// status manager finish the deletion in the API server.
func (a *Agent) SyncTerminatedPod(ctx context.Context, pod *corev1.Pod) error {
	rs, err := a.runtime.GetPodStatus(ctx, pod.UID)
	if err != nil {
		return err
	}
	if err := a.runtime.RemovePod(ctx, rs); err != nil {
		return err
	}
	a.runtime.Forget(pod)
	a.probes.RemovePod(pod.UID)
	a.statuses.TerminatePod(pod.UID)
	return nil
}

// setStatus generates the pod's status, hands it to the status manager and
// returns its phase.
func (a *Agent) setStatus(pod *corev1.Pod, rs *kuberuntime.PodStatus, terminal bool) corev1.PodPhase {
	prev, ok := a.statuses.Status(pod.UID)
	if !ok {
		prev = pod.Status
	}
	st := status.Generate(status.Input{
		Pod: pod, Runtime: rs, Waiting: a.runtime.Waiting(pod.UID), Probes: a.probes, Previous: prev,
		NodeIP: a.cfg.NodeIP, RuntimeName: a.runtimeName, Now: a.cfg.Clock.Now(),
		// A pod already terminal keeps its phase through its teardown.
		Terminal: terminal && prev.Phase != corev1.PodSucceeded && prev.Phase != corev1.PodFailed,
	})
	if terminal && (prev.Phase == corev1.PodSucceeded || prev.Phase == corev1.PodFailed) {
		st.Phase, st.Reason, st.Message = prev.Phase, prev.Reason, prev.Message
	}
	a.statuses.SetPodStatus(pod, st)
	return st.Phase
}

// networkHook runs httpGet and tcpSocket lifecycle handlers with a probe
// runner: the kubelet sends them the same way, and treats any answer it
// would count as a probe's success as the hook's.
func networkHook(runner prober.NetworkRunner) func(context.Context, *corev1.Pod, *corev1.Container, *corev1.LifecycleHandler, time.Duration) error {
	return func(ctx context.Context, pod *corev1.Pod, c *corev1.Container, h *corev1.LifecycleHandler, timeout time.Duration) error {
		probe := &corev1.Probe{
			ProbeHandler:   corev1.ProbeHandler{HTTPGet: h.HTTPGet, TCPSocket: h.TCPSocket},
			TimeoutSeconds: int32(max(timeout/time.Second, 1)),
		}
		result, output, err := runner.Network(ctx, prober.Liveness, pod, c, "", probe)
		switch {
		case err != nil:
			return err
		case result == prober.Failure:
			return fmt.Errorf("%s", output)
		}
		return nil
	}
}

// updateProbes tells the prober which containers run: it starts workers for
// new container IDs and lets readiness of exited ones fail.
func (a *Agent) updateProbes(pod *corev1.Pod, rs *kuberuntime.PodStatus) {
	for _, c := range rs.Containers {
		switch c.State {
		case runtimeapi.ContainerState_CONTAINER_RUNNING:
			a.probes.ContainerStarted(pod, c.Name, c.ID, c.StartedAt)
		case runtimeapi.ContainerState_CONTAINER_EXITED:
			a.probes.ContainerStopped(c.ID)
		}
	}
}

func resourceQuantity(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.DecimalSI) }
