package nodeagent

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
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
	if phase := a.setStatus(pod, rs, false); phase == corev1.PodSucceeded || phase == corev1.PodFailed {
		return true, nil
	}
	return false, a.runtime.SyncPod(ctx, pod, rs, a.probes)
}

// SyncTerminatingPod stops the pod's containers within the grace period and
// reports their final states.
func (a *Agent) SyncTerminatingPod(ctx context.Context, pod *corev1.Pod, gracePeriod int64) error {
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
		st.Phase = prev.Phase
	}
	a.statuses.SetPodStatus(pod, st)
	return st.Phase
}

func resourceQuantity(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.DecimalSI) }
