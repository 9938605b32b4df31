package kuberuntime

import (
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podActions is what SyncPod must do for a pod to converge, decided from its
// spec and runtime status alone, as the kubelet's computePodActions does.
type podActions struct {
	// CreateSandbox starts the pod over in a new sandbox: there is no ready
	// one. KillPod stops what still runs of the old one first.
	CreateSandbox bool
	KillPod       bool
	Attempt       uint32
	// InitContainersToStart are indices into spec.initContainers, started in
	// order: sidecars, and at most one regular init container.
	InitContainersToStart []int
	// ContainersToStart are indices into spec.containers.
	ContainersToStart []int
	// EphemeralContainersToStart are indices into spec.ephemeralContainers:
	// those the runtime has never seen. They start even before the pod has
	// initialized, and never again once they exit.
	EphemeralContainersToStart []int
	// ContainersToKill are running containers to stop before they restart:
	// their liveness or startup probe failed.
	ContainersToKill []*ContainerStatus
	// InitFailed: a regular init container failed and the pod's restart
	// policy forbids running it again; the pod will fail.
	InitFailed bool
}

// ProbeState tells computePodActions what the prober knows of a container.
type ProbeState interface {
	// Started reports whether the container passed its startup probe (true
	// when it has none).
	Started(containerID string) bool
	// Unhealthy reports whether its liveness or startup probe failed, so it
	// must be killed and restarted.
	Unhealthy(containerID string) bool
}

// IsSidecar reports whether an init container is restartable: it starts in
// init order and then keeps running beside the app containers.
func IsSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// ShouldRestart applies the pod's restart policy to a container that exited.
func ShouldRestart(policy corev1.RestartPolicy, exitCode int32) bool {
	switch policy {
	case corev1.RestartPolicyAlways:
		return true
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return false
	}
}

func computePodActions(pod *corev1.Pod, status *PodStatus, probes ProbeState) podActions {
	var a podActions
	if status.ReadySandbox() == nil {
		a.CreateSandbox = true
		a.Attempt = uint32(len(status.Sandboxes))
		for _, c := range status.Containers {
			if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING || c.State == runtimeapi.ContainerState_CONTAINER_CREATED {
				a.KillPod = true
			}
		}
		// A new sandbox begins from the first init container; the restart
		// policy decides whether the app containers run again.
		if len(pod.Spec.InitContainers) > 0 {
			a.InitContainersToStart = []int{0}
			return a
		}
		for i := range pod.Spec.Containers {
			if c := status.Container(pod.Spec.Containers[i].Name); c == nil || ShouldRestart(pod.Spec.RestartPolicy, c.ExitCode) {
				a.ContainersToStart = append(a.ContainersToStart, i)
			}
		}
		return a
	}

	// Ephemeral containers join a sandbox that runs, as the kubelet's
	// computePodActions has them: a sync that creates one leaves them to
	// the next, and one that ran in an older sandbox is not started again.
	for i := range pod.Spec.EphemeralContainers {
		if status.Container(pod.Spec.EphemeralContainers[i].Name) == nil {
			a.EphemeralContainersToStart = append(a.EphemeralContainersToStart, i)
		}
	}

	initDone := true
	a.InitContainersToStart, initDone = nextInitContainers(pod, status, probes)
	for _, i := range a.InitContainersToStart {
		c := status.Container(pod.Spec.InitContainers[i].Name)
		if c != nil && !IsSidecar(&pod.Spec.InitContainers[i]) && c.State == runtimeapi.ContainerState_CONTAINER_EXITED && !ShouldRestart(pod.Spec.RestartPolicy, c.ExitCode) {
			a.InitFailed = true
			a.InitContainersToStart = nil
			return a
		}
	}
	for i := range pod.Spec.InitContainers {
		if !IsSidecar(&pod.Spec.InitContainers[i]) {
			continue
		}
		if c := status.Container(pod.Spec.InitContainers[i].Name); c != nil && c.State == runtimeapi.ContainerState_CONTAINER_RUNNING && probes.Unhealthy(c.ID) {
			a.ContainersToKill = append(a.ContainersToKill, c)
		}
	}
	if !initDone {
		return a
	}
	for i := range pod.Spec.Containers {
		c := status.Container(pod.Spec.Containers[i].Name)
		switch {
		case c == nil:
			a.ContainersToStart = append(a.ContainersToStart, i)
		case c.State == runtimeapi.ContainerState_CONTAINER_RUNNING:
			if probes.Unhealthy(c.ID) {
				a.ContainersToKill = append(a.ContainersToKill, c)
				if ShouldRestart(pod.Spec.RestartPolicy, 137) {
					a.ContainersToStart = append(a.ContainersToStart, i)
				}
			}
		case c.State == runtimeapi.ContainerState_CONTAINER_EXITED:
			if ShouldRestart(pod.Spec.RestartPolicy, c.ExitCode) {
				a.ContainersToStart = append(a.ContainersToStart, i)
			}
		}
	}
	return a
}

// nextInitContainers walks the init containers in order and returns which to
// start now, and whether initialization is done (every regular init
// container succeeded and every sidecar has started).
func nextInitContainers(pod *corev1.Pod, status *PodStatus, probes ProbeState) (start []int, done bool) {
	for i := range pod.Spec.InitContainers {
		spec := &pod.Spec.InitContainers[i]
		c := status.Container(spec.Name)
		if IsSidecar(spec) {
			switch {
			case c == nil, c.State == runtimeapi.ContainerState_CONTAINER_EXITED:
				// Later init containers wait until this sidecar has started.
				return append(start, i), false
			case c.State == runtimeapi.ContainerState_CONTAINER_RUNNING && probes.Started(c.ID):
				continue
			default:
				return start, false
			}
		}
		switch {
		case c == nil:
			return append(start, i), false
		case c.State == runtimeapi.ContainerState_CONTAINER_EXITED && c.ExitCode == 0:
			continue
		case c.State == runtimeapi.ContainerState_CONTAINER_EXITED:
			return append(start, i), false
		default:
			return start, false
		}
	}
	return start, true
}
