// Package status turns what the runtime knows of a pod into the API's
// PodStatus (Generate, a pure function) and sends it to the API server (the
// status manager: only what changed, one pod at a time, the kubelet's way).
package status

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
)

// Probes is what Generate needs from the prober.
type Probes interface {
	// Ready reports the container's readiness (true when it has no
	// readiness probe and runs).
	Ready(containerID string) bool
	// Started reports whether it passed its startup probe (true without one).
	Started(containerID string) bool
}

// Input is everything Generate reads.
type Input struct {
	Pod *corev1.Pod
	// Runtime is the pod's runtime status; nil before the first sync.
	Runtime *kuberuntime.PodStatus
	// Waiting holds why containers wait (back-offs, pull and create errors),
	// by container name, from the runtime manager's reason cache.
	Waiting map[string]kuberuntime.Waiting
	Probes  Probes
	// Previous is the status last generated for the pod (or the API's), whose
	// transition times and startTime are kept when nothing changed.
	Previous corev1.PodStatus
	NodeIP   net.IP
	// RuntimeName prefixes container IDs, as "containerd://<id>".
	RuntimeName string
	Now         time.Time
	// RecursiveReadOnlyMounts says whether the runtime handler of the
	// pod's RuntimeClass can mount recursively read-only, as its CRI
	// Status says: a read-only mount that asks for it IfPossible then
	// reports Enabled.
	RecursiveReadOnlyMounts bool
	// ResizeConditions are the pod's PodResizePending and
	// PodResizeInProgress conditions, as the allocation manager holds
	// them; they come before the kubelet's other conditions, with their
	// own times.
	ResizeConditions []corev1.PodCondition
	// Terminal is set once the kubelet stopped the pod for good (it is being
	// deleted): the phase is then terminal, as kubelets report since 1.27:
	// Succeeded when every container exited 0, Failed otherwise, unless the
	// pod already had a terminal phase, which it keeps.
	Terminal bool
}

// Generate computes the pod's API status the way the 1.37 kubelet's
// generateAPIPodStatus does, with its default feature gates: phase by
// getPhase's rules, the conditions PodReadyToStartContainers, Initialized,
// ContainersReady, Ready and PodScheduled, one status per init, app and
// ephemeral container (convertContainerStatuses: state, last state, image
// and image ID as the runtime names them, volume mounts, resources and
// allocated resources, user), and the pod's resources and allocated
// resources. Ready is never True before every container runs and passes
// its readiness probe.
func Generate(in Input) corev1.PodStatus {
	pod := in.Pod
	prev := in.Previous
	now := metav1.NewTime(in.Now)
	st := corev1.PodStatus{
		QOSClass:          kuberuntime.PodQOS(pod),
		StartTime:         prev.StartTime,
		HostIP:            in.NodeIP.String(),
		HostIPs:           []corev1.HostIP{{IP: in.NodeIP.String()}},
		NominatedNodeName: prev.NominatedNodeName,
	}
	if st.StartTime == nil {
		st.StartTime = &now
	}
	rt := in.Runtime
	if rt == nil {
		rt = &kuberuntime.PodStatus{UID: pod.UID}
	}
	sandbox := rt.ReadySandbox()
	switch {
	case pod.Spec.HostNetwork:
		st.PodIP = in.NodeIP.String()
	case sandbox != nil:
		st.PodIP = sandbox.GetNetwork().GetIp()
	default:
		// No ready sandbox (the pod stopped, or its sandbox died): the
		// kubelet's PLEG keeps the IP it saw last (getPodIPs), so a
		// stopped pod still reports the IP it had.
		st.PodIP = prev.PodIP
	}
	if st.PodIP != "" {
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	}

	st.ContainerStatuses = convertContainerStatuses(in, rt, pod.Spec.Containers, prev.ContainerStatuses, appContainers)
	st.InitContainerStatuses = convertContainerStatuses(in, rt, pod.Spec.InitContainers, prev.InitContainerStatuses, initContainers)
	if n := len(pod.Spec.EphemeralContainers); n > 0 {
		specs := make([]corev1.Container, n)
		for i := range pod.Spec.EphemeralContainers {
			specs[i] = corev1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		}
		st.EphemeralContainerStatuses = convertContainerStatuses(in, rt, specs, prev.EphemeralContainerStatuses, ephemeralContainers)
	}
	// InPlacePodLevelResourcesVerticalScaling (beta, on): the pod's
	// resources and what its containers were allocated, for every pod.
	st.AllocatedResources = resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	st.Resources = podResources(pod, prev, st.AllocatedResources)

	initialized, notInitialized := initialization(pod, st.InitContainerStatuses)
	st.Phase = getPhase(pod, st.InitContainerStatuses, st.ContainerStatuses)
	if in.Terminal {
		st.Phase = terminalPhase(st.ContainerStatuses)
	}
	// generateAPIPodStatus's three-way merge, before the conditions follow
	// the phase: a phase once terminal, in the last status or the API's,
	// stays so with its reason and message; a phase that did not change
	// keeps them too.
	kept := prev
	if !isTerminal(kept.Phase) && isTerminal(pod.Status.Phase) {
		kept = pod.Status
	}
	switch {
	case isTerminal(kept.Phase):
		st.Phase, st.Reason, st.Message = kept.Phase, kept.Reason, kept.Message
	case st.Phase == prev.Phase:
		st.Reason, st.Message = cmp.Or(prev.Reason, pod.Status.Reason), cmp.Or(prev.Message, pod.Status.Message)
	}

	notReady := unready(pod, st.InitContainerStatuses, st.ContainerStatuses)
	containersReady := len(notReady) == 0
	sandboxReady, sandboxMessage := sandboxState(pod, rt)
	var conds []corev1.PodCondition
	// The kubelet keeps a DisruptionTarget condition once set, by its own
	// eviction manager or by the API server's eviction; like every condition
	// it does not own, it comes before the kubelet's own.
	if dt := findCondition(prev.Conditions, corev1.DisruptionTarget); dt != nil {
		conds = append(conds, *dt)
	}
	// The kubelet's conditions in generateAPIPodStatus's order, each with
	// the pod's generation observed (PodObservedGenerationTracking, GA).
	readyToStart := corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: boolStatus(sandboxReady)}
	if !sandboxReady {
		readyToStart.Reason, readyToStart.Message = reasonSandboxNotReady, sandboxMessage
	}
	initCond := corev1.PodCondition{Type: corev1.PodInitialized, Status: boolStatus(initialized)}
	switch {
	case st.Phase == corev1.PodSucceeded:
		initCond.Status, initCond.Reason = corev1.ConditionTrue, reasonPodCompleted
	case !initialized:
		initCond.Reason, initCond.Message = "ContainersNotInitialized", "containers with incomplete status: ["+strings.Join(notInitialized, " ")+"]"
	}
	readyCond := corev1.PodCondition{Type: corev1.ContainersReady, Status: boolStatus(containersReady)}
	switch {
	case st.Phase == corev1.PodSucceeded:
		readyCond.Status, readyCond.Reason = corev1.ConditionFalse, reasonPodCompleted
	case st.Phase == corev1.PodFailed:
		readyCond.Status, readyCond.Reason = corev1.ConditionFalse, reasonPodFailed
	case !containersReady:
		readyCond.Reason, readyCond.Message = "ContainersNotReady", "containers with unready status: ["+strings.Join(notReady, " ")+"]"
	}
	podReady := readyCond
	podReady.Type = corev1.PodReady
	if podReady.Status == corev1.ConditionTrue {
		if msgs := unmetReadinessGates(pod); len(msgs) > 0 {
			podReady.Status, podReady.Reason, podReady.Message = corev1.ConditionFalse, "ReadinessGatesNotReady", strings.Join(msgs, ", ")
		}
	}
	conds = append(conds, readyToStart, initCond, podReady, readyCond,
		corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
	for i := range conds {
		c := &conds[i]
		if !kubeletOwned(c.Type) {
			continue
		}
		c.ObservedGeneration = pod.Generation
		c.LastTransitionTime = now
		old := findCondition(prev.Conditions, c.Type)
		if old == nil {
			// The first status: PodScheduled's time is the scheduler's.
			old = findCondition(pod.Status.Conditions, c.Type)
		}
		if old != nil && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
	// generateAPIPodStatus appends the resize conditions right after those
	// it does not own, before its own.
	if len(in.ResizeConditions) > 0 {
		n := 0
		for n < len(conds) && !kubeletOwned(conds[n].Type) {
			n++
		}
		conds = slices.Insert(conds, n, in.ResizeConditions...)
	}
	st.Conditions = conds
	return st
}

// getPhase follows the kubelet's getPhase: init containers first (a regular
// one that failed and may not restart fails the pod), then sidecars and app
// containers.
func getPhase(pod *corev1.Pod, initStatuses, statuses []corev1.ContainerStatus) corev1.PodPhase {
	pendingInit, failedInitNotRestartable := 0, 0
	unknown, running, waiting, stopped, succeeded := 0, 0, 0, 0, 0
	for i := range pod.Spec.InitContainers {
		spec := &pod.Spec.InitContainers[i]
		cs := initStatuses[i]
		if kuberuntime.IsSidecar(spec) {
			switch {
			case cs.State.Running != nil:
				running++
				if !*cs.Started {
					pendingInit++
				}
			case cs.State.Waiting != nil && cs.LastTerminationState.Terminated == nil:
				pendingInit++
				waiting++
			}
			continue
		}
		exit := int32(0)
		switch {
		case cs.State.Terminated != nil:
			exit = cs.State.Terminated.ExitCode
		case cs.State.Waiting != nil && cs.LastTerminationState.Terminated != nil:
			exit = cs.LastTerminationState.Terminated.ExitCode
		default:
			pendingInit++
			continue
		}
		if exit != 0 && !kuberuntime.ShouldRestart(pod.Spec.RestartPolicy, exit) {
			failedInitNotRestartable++
		} else if exit != 0 || cs.State.Waiting != nil {
			pendingInit++
		}
	}
	if failedInitNotRestartable > 0 {
		return corev1.PodFailed
	}
	if pendingInit > 0 {
		return corev1.PodPending
	}
	for _, cs := range statuses {
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil:
			stopped++
			if cs.State.Terminated.ExitCode == 0 {
				succeeded++
			}
		case cs.State.Waiting != nil && cs.LastTerminationState.Terminated != nil:
			// Restarting: it ran, so it counts as stopped, not pending.
			stopped++
		case cs.State.Waiting != nil:
			waiting++
		default:
			unknown++
		}
	}
	switch {
	case waiting > 0:
		return corev1.PodPending
	case running > 0 && unknown == 0:
		return corev1.PodRunning
	case running == 0 && stopped > 0 && unknown == 0:
		switch {
		case pod.Spec.RestartPolicy == corev1.RestartPolicyAlways:
			return corev1.PodRunning
		case stopped == succeeded:
			return corev1.PodSucceeded
		case pod.Spec.RestartPolicy == corev1.RestartPolicyNever:
			return corev1.PodFailed
		default:
			return corev1.PodRunning
		}
	default:
		return corev1.PodPending
	}
}

// The kubelet's condition reasons and PodSandboxChanged's messages.
const (
	reasonPodCompleted           = "PodCompleted"
	reasonPodFailed              = "PodFailed"
	reasonSandboxNotReady        = "PodSandboxNotReady"
	messageNoSandbox             = "no pod sandbox exists"
	messageMultipleSandboxes     = "multiple pod sandboxes are ready and need to be reconciled"
	messageSandboxNotReady       = "pod sandbox is not ready"
	messageSandboxHasNoIPAddress = "pod sandbox has no IP address"
)

// sandboxState is the kubelet's PodSandboxChanged read as the
// PodReadyToStartContainers condition: whether the pod has the one ready
// sandbox, with an IP, it can start containers in, and if not, why.
func sandboxState(pod *corev1.Pod, rt *kuberuntime.PodStatus) (bool, string) {
	if len(rt.Sandboxes) == 0 {
		return false, messageNoSandbox
	}
	ready := 0
	for _, sb := range rt.Sandboxes {
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			ready++
		}
	}
	newest := rt.Sandboxes[0]
	switch {
	case ready > 1:
		return false, messageMultipleSandboxes
	case newest.State != runtimeapi.PodSandboxState_SANDBOX_READY:
		return false, messageSandboxNotReady
	case !pod.Spec.HostNetwork && newest.Network != nil && newest.Network.Ip == "":
		return false, messageSandboxHasNoIPAddress
	}
	return true, ""
}

// SandboxReady is the status the kubelet's OnPodSandboxReady sets, from
// the runtime manager, once a new sandbox is up with its network and the
// pod's volumes mounted: the last status with PodReadyToStartContainers
// True, and nothing else changed (the pod IP follows with the next sync).
func SandboxReady(pod *corev1.Pod, prev corev1.PodStatus, now time.Time) corev1.PodStatus {
	st := *prev.DeepCopy()
	c := corev1.PodCondition{
		Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue,
		ObservedGeneration: pod.Generation, LastTransitionTime: metav1.NewTime(now),
	}
	for i := range st.Conditions {
		if st.Conditions[i].Type != c.Type {
			continue
		}
		if st.Conditions[i].Status == c.Status {
			c.LastTransitionTime = st.Conditions[i].LastTransitionTime
		}
		st.Conditions[i] = c
		return st
	}
	st.Conditions = append(st.Conditions, c)
	return st
}

func terminalPhase(statuses []corev1.ContainerStatus) corev1.PodPhase {
	for _, cs := range statuses {
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			return corev1.PodFailed
		}
	}
	return corev1.PodSucceeded
}

// initialization reports whether every regular init container succeeded
// and every sidecar started, and names those that did not.
func initialization(pod *corev1.Pod, statuses []corev1.ContainerStatus) (bool, []string) {
	var incomplete []string
	for i := range pod.Spec.InitContainers {
		cs := statuses[i]
		done := cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0
		if kuberuntime.IsSidecar(&pod.Spec.InitContainers[i]) {
			done = cs.Started != nil && *cs.Started
		}
		if !done {
			incomplete = append(incomplete, cs.Name)
		}
	}
	return len(incomplete) == 0, incomplete
}

// unready names the app containers and sidecars that are not ready.
func unready(pod *corev1.Pod, initStatuses, statuses []corev1.ContainerStatus) []string {
	var names []string
	for i := range pod.Spec.InitContainers {
		if kuberuntime.IsSidecar(&pod.Spec.InitContainers[i]) && !initStatuses[i].Ready {
			names = append(names, initStatuses[i].Name)
		}
	}
	for _, cs := range statuses {
		if !cs.Ready {
			names = append(names, cs.Name)
		}
	}
	return names
}

// unmetReadinessGates says, as the kubelet's GeneratePodReadyCondition
// does, which of the pod's readiness gates hold the pod not Ready: their
// conditions are set by others, so they are read from the API's status.
func unmetReadinessGates(pod *corev1.Pod) []string {
	var msgs []string
	for _, rg := range pod.Spec.ReadinessGates {
		c := findCondition(pod.Status.Conditions, rg.ConditionType)
		switch {
		case c == nil:
			msgs = append(msgs, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", string(rg.ConditionType)))
		case c.Status != corev1.ConditionTrue:
			msgs = append(msgs, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", string(rg.ConditionType), c.Status))
		}
	}
	return msgs
}

func boolStatus(ok bool) corev1.ConditionStatus {
	if ok {
		return corev1.ConditionTrue
	}
	return corev1.ConditionFalse
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

// NeedToReconcilePodReadiness is the kubelet's: a pod with readiness gates
// whose Ready condition in the API is not what its gates' conditions (set
// by someone else, a status update the kubelet would otherwise ignore) now
// make it. The kubelet's pod config hands such an update on as a reconcile,
// and the pod is synced. Only a pod whose containers are ready can change
// this way.
func NeedToReconcilePodReadiness(pod *corev1.Pod) bool {
	if len(pod.Spec.ReadinessGates) == 0 {
		return false
	}
	ready := findCondition(pod.Status.Conditions, corev1.PodReady)
	containers := findCondition(pod.Status.Conditions, corev1.ContainersReady)
	if ready == nil || containers == nil || containers.Status != corev1.ConditionTrue || isTerminal(pod.Status.Phase) {
		return false
	}
	status, message := corev1.ConditionTrue, ""
	if msgs := unmetReadinessGates(pod); len(msgs) > 0 {
		status, message = corev1.ConditionFalse, strings.Join(msgs, ", ")
	}
	return ready.Status != status || ready.Message != message
}
