// Package status turns what the runtime knows of a pod into the API's
// PodStatus (Generate, a pure function) and sends it to the API server (the
// status manager: only what changed, one pod at a time, the kubelet's way).
package status

import (
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
)

// Input is everything Generate reads.
type Input struct {
	Pod *corev1.Pod
	// Runtime is the pod's runtime status; nil before the first sync.
	Runtime *kuberuntime.PodStatus
	// Previous is the status last generated for the pod (or the API's), whose
	// transition times and startTime are kept when nothing changed.
	Previous corev1.PodStatus
	NodeIP   net.IP
	// RuntimeName prefixes container IDs, as "containerd://<id>".
	RuntimeName string
	Now         time.Time
	// Terminal is set once the kubelet stopped the pod for good (it is being
	// deleted): the phase is then terminal, as kubelets report since 1.27:
	// Succeeded when every container exited 0, Failed otherwise.
	Terminal bool
}

// Generate computes the pod's API status the way the kubelet's
// generateAPIPodStatus does: phase from the containers' states, the
// conditions PodReadyToStartContainers, Initialized, ContainersReady, Ready
// and PodScheduled, and one status per app container. Ready is never True
// before every container runs.
func Generate(in Input) corev1.PodStatus {
	pod := in.Pod
	prev := in.Previous
	now := metav1.NewTime(in.Now)
	st := corev1.PodStatus{
		QOSClass:          prev.QOSClass,
		StartTime:         prev.StartTime,
		HostIP:            in.NodeIP.String(),
		HostIPs:           []corev1.HostIP{{IP: in.NodeIP.String()}},
		NominatedNodeName: prev.NominatedNodeName,
	}
	if st.StartTime == nil {
		st.StartTime = &now
	}
	if st.QOSClass == "" {
		st.QOSClass = pod.Status.QOSClass
	}

	rt := in.Runtime
	if rt == nil {
		rt = &kuberuntime.PodStatus{UID: pod.UID}
	}
	sandbox := rt.ReadySandbox()
	if pod.Spec.HostNetwork {
		st.PodIP = in.NodeIP.String()
	} else if sandbox != nil && sandbox.GetNetwork().GetIp() != "" {
		st.PodIP = sandbox.Network.Ip
	}
	if st.PodIP != "" {
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	}

	allRunning, allTerminated, anyFailed := true, true, false
	st.ContainerStatuses = make([]corev1.ContainerStatus, 0, len(pod.Spec.Containers))
	for i := range pod.Spec.Containers {
		spec := &pod.Spec.Containers[i]
		cs := containerStatus(spec, rt.Container(spec.Name), in.RuntimeName)
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
		allRunning = allRunning && cs.State.Running != nil
		terminated := cs.State.Terminated != nil
		allTerminated = allTerminated && terminated
		anyFailed = anyFailed || (terminated && cs.State.Terminated.ExitCode != 0)
	}
	st.Phase = phase(pod, st.ContainerStatuses, allTerminated, anyFailed)
	if in.Terminal {
		st.Phase = corev1.PodSucceeded
		if anyFailed || !allTerminated {
			st.Phase = corev1.PodFailed
		}
	}

	containersReady := allRunning && len(pod.Spec.Containers) > 0
	conds := []corev1.PodCondition{
		condition(corev1.PodReadyToStartContainers, sandbox != nil, ""),
		condition(corev1.PodInitialized, true, ""),
		condition(corev1.ContainersReady, containersReady, "ContainersNotReady"),
		condition(corev1.PodReady, containersReady, "ContainersNotReady"),
	}
	if sc := findCondition(pod.Status.Conditions, corev1.PodScheduled); sc != nil {
		conds = append(conds, *sc)
	}
	for i := range conds {
		c := &conds[i]
		if c.Type == corev1.PodScheduled {
			continue
		}
		if c.Status == corev1.ConditionFalse && c.Reason != "" {
			c.Message = "containers with unready status: " + unready(st.ContainerStatuses)
		}
		c.LastTransitionTime = now
		if old := findCondition(prev.Conditions, c.Type); old != nil && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
	st.Conditions = conds
	return st
}

// phase follows the kubelet's getPhase for pods without init containers.
func phase(pod *corev1.Pod, statuses []corev1.ContainerStatus, allTerminated, anyFailed bool) corev1.PodPhase {
	if len(statuses) == 0 {
		return corev1.PodPending
	}
	if allTerminated {
		switch {
		case pod.Spec.RestartPolicy == corev1.RestartPolicyAlways:
			// The kubelet will restart them: still Running.
			return corev1.PodRunning
		case anyFailed && pod.Spec.RestartPolicy == corev1.RestartPolicyNever:
			return corev1.PodFailed
		case anyFailed:
			return corev1.PodRunning
		default:
			return corev1.PodSucceeded
		}
	}
	for _, cs := range statuses {
		if cs.State.Waiting != nil && cs.LastTerminationState.Terminated == nil {
			return corev1.PodPending
		}
	}
	return corev1.PodRunning
}

func containerStatus(spec *corev1.Container, c *kuberuntime.ContainerStatus, runtimeName string) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{Name: spec.Name, Image: spec.Image, Started: new(bool)}
	if c == nil {
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		return cs
	}
	cs.ContainerID = runtimeName + "://" + c.ID
	cs.ImageID = c.ImageRef
	cs.RestartCount = c.RestartCount
	switch c.State {
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.StartedAt)}
		cs.Ready = true
		*cs.Started = true
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		reason := c.Reason
		if reason == "" {
			reason = "Completed"
			if c.ExitCode != 0 {
				reason = "Error"
			}
		}
		cs.State.Terminated = &corev1.ContainerStateTerminated{
			ExitCode: c.ExitCode, Reason: reason, Message: c.Message, ContainerID: cs.ContainerID,
			StartedAt: metav1.NewTime(c.StartedAt), FinishedAt: metav1.NewTime(c.FinishedAt),
		}
	default:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	}
	return cs
}

func condition(t corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
	if ok {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue}
	}
	return corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: reason}
}

func findCondition(conds []corev1.PodCondition, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range conds {
		if conds[i].Type == t {
			c := conds[i]
			return &c
		}
	}
	return nil
}

func unready(statuses []corev1.ContainerStatus) string {
	var names []string
	for _, cs := range statuses {
		if !cs.Ready {
			names = append(names, cs.Name)
		}
	}
	return "[" + strings.Join(names, " ") + "]"
}
