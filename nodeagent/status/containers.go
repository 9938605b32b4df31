package status

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
)

// containerList says which of the pod's container lists statuses are for.
type containerList int

const (
	appContainers containerList = iota
	initContainers
	ephemeralContainers
)

// The kubelet's reasons and messages for containers it cannot account for.
const (
	reasonContainerCreating = "ContainerCreating"
	reasonPodInitializing   = "PodInitializing"
	// messageContainerGone is convertToAPIContainerStatuses' last state of
	// a container that ran and is gone from the runtime (note the two
	// spaces, the kubelet's).
	messageContainerGone       = "The container could not be located when the pod was deleted.  The container used to be Running"
	messageInitStatusLost      = "Unable to get init container status from container runtime and pod has been initialized, treat it as exited normally"
	minSharesMilliCPU          = 2  // the kubelet's cm.MinShares, compared with milli-CPU as it does
	minMilliCPULimit           = 10 // the kubelet's cm.MinMilliCPULimit
	exitCodeContainerGone      = 137
	reasonContainerGone        = reasonContainerStatusUnknown
	reasonInitContainerUnknown = "Completed"
)

// convertContainerStatuses is the kubelet's convertToAPIContainerStatuses
// followed by its prober's UpdatePodStatus, for one of the pod's container
// lists: each container starts waiting (ContainerCreating, or
// PodInitializing in a pod with init containers) with its volume mounts, or
// from its previous status when that was terminated; a container that ran
// and is gone from the runtime gets a last state that says so; the newest
// runtime container of the name gives the state and the one before it the
// last state; a container to be started again shows why it waits. Init
// container statuses keep the spec's order, the others are sorted by name.
// App and init containers are then marked started and ready by their
// probes; ephemeral containers have no probes, and neither field.
func convertContainerStatuses(in Input, rt *kuberuntime.PodStatus, specs []corev1.Container, previous []corev1.ContainerStatus, list containerList) []corev1.ContainerStatus {
	if len(specs) == 0 {
		return nil
	}
	pod := in.Pod
	old := make(map[string]*corev1.ContainerStatus, len(previous))
	for i := range previous {
		old[previous[i].Name] = &previous[i]
	}
	defaultWaiting := reasonContainerCreating
	if len(pod.Spec.InitContainers) > 0 {
		defaultWaiting = reasonPodInitializing
	}

	statuses := make([]corev1.ContainerStatus, len(specs))
	for i := range specs {
		spec := &specs[i]
		st := corev1.ContainerStatus{
			Name: spec.Name, Image: spec.Image,
			State:        corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: defaultWaiting}},
			VolumeMounts: volumeMountStatuses(spec, in.RecursiveReadOnlyMounts),
		}
		if o := old[spec.Name]; o != nil {
			if o.State.Terminated != nil {
				st = *o.DeepCopy()
			} else {
				st.RestartCount = o.RestartCount
				st.LastTerminationState = *o.LastTerminationState.DeepCopy()
			}
		}
		statuses[i] = st
	}

	for i := range specs {
		st, c := &statuses[i], rt.Container(specs[i].Name)
		o := old[specs[i].Name]
		switch {
		case c != nil:
			// Reported from the runtime below.
			continue
		case o == nil, o.State.Terminated != nil, o.State.Running == nil:
			continue
		case st.State.Waiting == nil || st.State.Waiting.Reason != defaultWaiting, st.LastTerminationState.Terminated != nil:
			continue
		}
		// It ran and the runtime lost it: show it stopped, not pending.
		st.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
			Reason: reasonContainerGone, Message: messageContainerGone, ExitCode: exitCodeContainerGone,
		}
		if pod.DeletionTimestamp == nil {
			st.RestartCount++
		}
	}

	for i := range specs {
		spec := &specs[i]
		c := rt.Container(spec.Name)
		if c == nil {
			continue
		}
		o := old[spec.Name]
		st := convertContainerStatus(c, o, in.RuntimeName)
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING && o != nil && o.Started != nil {
			started := *o.Started
			st.Started = &started
		}
		// InPlacePodVerticalScaling (GA): what the container's cgroups
		// hold, and what was allocated to it.
		st.Resources = statusResources(spec, &st, c, o)
		if spec.Resources.Requests != nil {
			st.AllocatedResources = spec.Resources.Requests.DeepCopy()
		}
		// SupplementalGroupsPolicy (GA): whom it runs as.
		if u := c.User; u != nil {
			st.User = &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{
				UID: u.UID, GID: u.GID, SupplementalGroups: slices.Clone(u.SupplementalGroups),
			}}
		}
		if p := rt.Previous(spec.Name); p != nil {
			st.LastTerminationState = convertContainerStatus(p, o, in.RuntimeName).State
		}
		statuses[i] = st
	}

	for i := range specs {
		spec, st := &specs[i], &statuses[i]
		c := rt.Container(spec.Name)
		if list == initContainers {
			if c != nil && c.State == runtimeapi.ContainerState_CONTAINER_EXITED && c.ExitCode == 0 {
				continue
			}
			// An init container the runtime no longer has, in a pod whose
			// app containers were created: it must have succeeded.
			if c == nil && !kuberuntime.IsSidecar(spec) && anyAppContainerCreated(pod, rt) && st.State.Waiting != nil {
				st.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					Reason: reasonInitContainerUnknown, Message: messageInitStatusLost,
				}}
				continue
			}
		}
		if !shouldBeRestarted(spec, pod, c) {
			continue
		}
		w, ok := in.Waiting[spec.Name]
		if !ok {
			continue
		}
		if st.State.Terminated != nil {
			st.LastTerminationState = st.State
		}
		st.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: w.Reason, Message: w.Message}}
	}

	switch list {
	case appContainers:
		for i := range statuses {
			updateProbed(&statuses[i], in.Probes)
		}
	case initContainers:
		for i := range statuses {
			st := &statuses[i]
			if !kuberuntime.IsSidecar(&specs[i]) {
				st.Started = new(bool)
				*st.Started = isStarted(st, in.Probes)
				if st.State.Terminated != nil && st.State.Terminated.ExitCode == 0 {
					st.Ready = true
				}
				continue
			}
			updateProbed(st, in.Probes)
		}
		return statuses
	}
	slices.SortStableFunc(statuses, func(a, b corev1.ContainerStatus) int { return strings.Compare(a.Name, b.Name) })
	return statuses
}

// convertContainerStatus is the kubelet's status of one runtime container,
// with what it keeps of the previous status (the volume mounts, which are
// immutable, and, as RestartAllContainersOnContainerExits (beta, on) has
// it, the higher restart count and the last termination).
func convertContainerStatus(c *kuberuntime.ContainerStatus, old *corev1.ContainerStatus, runtimeName string) corev1.ContainerStatus {
	st := corev1.ContainerStatus{
		Name: c.Name, RestartCount: c.RestartCount, Image: c.Image, ImageID: c.ImageRef,
		ContainerID: runtimeName + "://" + c.ID,
	}
	if old != nil {
		st.VolumeMounts = old.VolumeMounts
		st.RestartCount = max(st.RestartCount, old.RestartCount)
		switch {
		case old.ContainerID != st.ContainerID && old.State.Terminated != nil:
			st.LastTerminationState.Terminated = old.State.Terminated.DeepCopy()
		case old.LastTerminationState.Terminated != nil:
			st.LastTerminationState.Terminated = old.LastTerminationState.Terminated.DeepCopy()
		}
	}
	switch c.State {
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		st.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.StartedAt)}
		if old != nil && old.State.Terminated != nil && old.RestartCount >= c.RestartCount {
			st.RestartCount = old.RestartCount + 1
		}
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		// Created, not running: waiting to run, with no reason of its own.
		st.State.Waiting = &corev1.ContainerStateWaiting{}
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		st.State.Terminated = terminated(c, runtimeName)
	default:
		if old != nil && old.State.Running != nil {
			st.State.Terminated = &corev1.ContainerStateTerminated{
				Reason: reasonContainerStatusUnknown, Message: messageContainerStatusUnknown, ExitCode: exitCodeContainerUnknown,
			}
			st.RestartCount = old.RestartCount + 1
		} else {
			st.State.Waiting = &corev1.ContainerStateWaiting{}
		}
	}
	return st
}

func terminated(c *kuberuntime.ContainerStatus, runtimeName string) *corev1.ContainerStateTerminated {
	reason := c.Reason
	if reason == "" {
		// containerd's reasons, for a runtime that gives none.
		reason = "Completed"
		if c.ExitCode != 0 {
			reason = "Error"
		}
	}
	return &corev1.ContainerStateTerminated{
		ExitCode: c.ExitCode, Reason: reason, Message: c.Message, ContainerID: runtimeName + "://" + c.ID,
		StartedAt: metav1.NewTime(c.StartedAt), FinishedAt: metav1.NewTime(c.FinishedAt),
	}
}

// updateProbed is the prober's UpdatePodStatus for an app container or a
// sidecar: started once running and past its startup probe, and only then
// ready, if running and past its readiness probe.
func updateProbed(st *corev1.ContainerStatus, probes Probes) {
	started := isStarted(st, probes)
	st.Started = &started
	if !started {
		return
	}
	st.Ready = st.State.Running != nil && (probes == nil || probes.Ready(containerID(st)))
}

func isStarted(st *corev1.ContainerStatus, probes Probes) bool {
	return st.State.Running != nil && (probes == nil || probes.Started(containerID(st)))
}

// containerID is the runtime's ID in a status' "runtime://id".
func containerID(st *corev1.ContainerStatus) string {
	_, id, _ := strings.Cut(st.ContainerID, "://")
	return id
}

// shouldBeRestarted is the kubelet's ShouldContainerBeRestarted, with
// ContainerRestartRules (beta, on) as far as the agent runs them: never
// in a pod being deleted; yes for a container never run, created and not
// started, or in an unknown state; no for a running one; for one that
// exited, as the restart policy (a sidecar's Always, else the pod's) says.
func shouldBeRestarted(spec *corev1.Container, pod *corev1.Pod, c *kuberuntime.ContainerStatus) bool {
	switch {
	case pod.DeletionTimestamp != nil:
		return false
	case c == nil:
		return true
	case c.State == runtimeapi.ContainerState_CONTAINER_RUNNING:
		return false
	case c.State != runtimeapi.ContainerState_CONTAINER_EXITED:
		return true
	case kuberuntime.IsSidecar(spec):
		return true
	}
	return kuberuntime.ShouldRestart(pod.Spec.RestartPolicy, c.ExitCode)
}

// anyAppContainerCreated is the kubelet's HasAnyRegularContainerCreated.
func anyAppContainerCreated(pod *corev1.Pod, rt *kuberuntime.PodStatus) bool {
	for i := range pod.Spec.Containers {
		if c := rt.Container(pod.Spec.Containers[i].Name); c != nil && c.State != runtimeapi.ContainerState_CONTAINER_UNKNOWN {
			return true
		}
	}
	return false
}

// volumeMountStatuses are the container's mounts as the kubelet reports
// them (RecursiveReadOnlyMounts, GA): each read-only one says whether it is
// recursively read-only, which it is when it asks to be and the runtime
// can, and Disabled otherwise (the kubelet refuses to start a container
// whose request cannot be met, so its status never says Enabled then).
func volumeMountStatuses(spec *corev1.Container, runtimeSupportsRRO bool) []corev1.VolumeMountStatus {
	if len(spec.VolumeMounts) == 0 {
		return nil
	}
	out := make([]corev1.VolumeMountStatus, 0, len(spec.VolumeMounts))
	for _, m := range spec.VolumeMounts {
		vs := corev1.VolumeMountStatus{Name: m.Name, MountPath: m.MountPath, ReadOnly: m.ReadOnly}
		if m.ReadOnly {
			mode := corev1.RecursiveReadOnlyDisabled
			if rro, err := resolveRecursiveReadOnly(m, runtimeSupportsRRO); err == nil && rro {
				mode = corev1.RecursiveReadOnlyEnabled
			}
			vs.RecursiveReadOnly = &mode
		}
		out = append(out, vs)
	}
	return out
}

// resolveRecursiveReadOnly is the kubelet's: whether a mount is to be
// recursively read-only, or why it cannot be.
func resolveRecursiveReadOnly(m corev1.VolumeMount, runtimeSupportsRRO bool) (bool, error) {
	if m.RecursiveReadOnly == nil || *m.RecursiveReadOnly == corev1.RecursiveReadOnlyDisabled {
		return false, nil
	}
	if !m.ReadOnly {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not read-only", m.Name)
	}
	if m.MountPropagation != nil && *m.MountPropagation != corev1.MountPropagationNone {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not compatible with propagation %q", m.Name, *m.MountPropagation)
	}
	switch *m.RecursiveReadOnly {
	case corev1.RecursiveReadOnlyIfPossible:
		return runtimeSupportsRRO, nil
	case corev1.RecursiveReadOnlyEnabled:
		if !runtimeSupportsRRO {
			return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not supported by the runtime", m.Name)
		}
		return true, nil
	default:
		return false, fmt.Errorf("unknown recursive read-only mode %q", *m.RecursiveReadOnly)
	}
}
