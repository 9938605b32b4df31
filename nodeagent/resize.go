package nodeagent

import (
	"errors"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/nodeagent/admission"
	"github.com/fleetlet/fleetlet/nodeagent/allocation"
	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
	"github.com/fleetlet/fleetlet/nodeagent/podworkers"
)

// newAllocation builds the node's allocation manager: a resize is admitted
// as a new pod is, against the node's allocatable and the other pods as
// allocated.
func (a *Agent) newAllocation() *allocation.Manager {
	return allocation.NewManager(allocation.Config{
		Clock: a.cfg.Clock, ActivePods: a.activePods, Events: a.events,
		GetPod: func(uid types.UID) (*corev1.Pod, bool) {
			p := a.pod(uid)
			return p, p != nil
		},
		Admit: func(pod *corev1.Pod, others []*corev1.Pod) (bool, string, string) {
			node, err := a.getNode()
			if err != nil {
				return false, "", "the node is not known yet"
			}
			r := admission.Admit(pod, node, others)
			return r.Admit, r.Reason, r.Message
		},
	})
}

// resizeRequested is the kubelet's recordResizeOperations: the pod-level
// resources or some container's cpu or memory requests or limits changed
// between two versions of the pod.
func resizeRequested(old, pod *corev1.Pod) bool {
	if old == nil {
		return false
	}
	if !apiequality.Semantic.DeepEqual(old.Spec.Resources, pod.Spec.Resources) {
		return true
	}
	resources := func(p *corev1.Pod) map[string]corev1.ResourceRequirements {
		out := map[string]corev1.ResourceRequirements{}
		for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for _, c := range list {
				out[c.Name] = c.Resources
			}
		}
		return out
	}
	before := resources(old)
	for name, r := range resources(pod) {
		b, ok := before[name]
		if !ok {
			continue
		}
		for _, q := range []struct{ x, y corev1.ResourceList }{{b.Requests, r.Requests}, {b.Limits, r.Limits}} {
			if !q.x.Memory().Equal(*q.y.Memory()) || !q.x.Cpu().Equal(*q.y.Cpu()) {
				return true
			}
		}
	}
	return false
}

// onResize is what the kubelet's HandlePodUpdates does with a resize: a pod
// whose spec differs from its allocation is queued and the queue retried
// at once; a spec back to its allocation clears PodResizePending.
func (a *Agent) onResize(old, pod *corev1.Pod) {
	if !resizeRequested(old, pod) || !a.allocation.HasAllocation(pod.UID) {
		return
	}
	if _, differs := a.allocation.UpdatePodFromAllocation(pod); !differs {
		a.allocation.ClearPending(pod.UID)
		return
	}
	a.allocation.PushPendingResize(pod.UID)
	a.retryPendingResizes()
}

// retryPendingResizes retries the queue and syncs every pod whose
// allocation or resize conditions changed (the kubelet's triggerPodSync).
// While resizes wait, the sync loop retries them every
// allocation.RetryDelay.
func (a *Agent) retryPendingResizes() {
	for _, p := range a.allocation.RetryPendingResizes() {
		a.workers.UpdatePodOfType(p, podworkers.SyncPodSync)
	}
	if a.allocation.HasPendingResizes() {
		select {
		case a.resizesPending <- struct{}{}:
		default:
		}
	}
}

// resizeStatus is the kubelet's SyncPod step before the status is made:
// PodResizeInProgress stays while a running container's actuated resources
// are not those allocated, and its clearing is a ResizeCompleted event.
// A terminal pod has no resize conditions.
func (a *Agent) resizeStatus(allocated *corev1.Pod, rs *kuberuntime.PodStatus) {
	if a.podRuntime.IsPodResizeInProgress(allocated, rs) {
		a.allocation.SetInProgress(allocated.UID, "", "", allocated.Generation)
	} else if gen, cleared := a.allocation.ClearInProgress(allocated.UID); cleared {
		a.events.Event(allocated, corev1.EventTypeNormal, allocation.ResizeCompleted,
			allocation.ResizeMessage(allocated, gen, "", "Pod resize completed"))
	}
}

// resizeFailed reports a resize the runtime refused, as the kubelet does
// after its SyncPod: PodResizeInProgress with the reason Error (its
// observed generation kept) and a ResizeError event.
func (a *Agent) resizeFailed(allocated *corev1.Pod, err error) {
	var re *kuberuntime.ResizeError
	if !errors.As(err, &re) {
		return
	}
	if gen, updated := a.allocation.SetInProgress(allocated.UID, corev1.PodReasonError, re.Message, allocated.Generation); updated {
		a.events.Event(allocated, corev1.EventTypeWarning, allocation.ResizeError,
			allocation.ResizeMessage(allocated, gen, re.Message, "Pod resize error"))
	}
}
