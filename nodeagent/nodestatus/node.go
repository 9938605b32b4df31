// Package nodestatus registers a node agent's Node and keeps its status: it
// computes the status every nodeStatusUpdateFrequency and posts it when it
// changed or when nodeStatusReportFrequency (plus, once after each change, a
// random shift) has passed, as the kubelet does.
package nodestatus

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// KubeletPort is where a node's kubelet API listens by default, advertised
// in status.daemonEndpoints; every emulated node has its own IP, so all
// share it.
const KubeletPort = 10250

// Identity is what a node says about itself and does not change while it runs.
type Identity struct {
	Name     string
	IP       net.IP
	Labels   map[string]string
	Taints   []corev1.Taint
	Capacity corev1.ResourceList
	// KubeletPort is the port advertised in status.daemonEndpoints; 0 means
	// KubeletPort.
	KubeletPort int32
	// Reserved is what the kubelet keeps from pods (Reservation: its
	// systemReserved, kubeReserved and hard eviction thresholds);
	// status.allocatable is Capacity less it (Allocatable).
	Reserved corev1.ResourceList
	// KubeletVersion and RuntimeVersion fill status.nodeInfo; RuntimeVersion
	// reads like the kubelet's "<runtime name>://<version>".
	KubeletVersion string
	RuntimeVersion string
	// DeclaredFeatures is status.declaredFeatures (DeclaredFeatures),
	// which the kubelet computes once at its start.
	DeclaredFeatures []string
}

// RuntimeState is what the runtime's Status calls said about it
// (RuntimeSync.State), what the eviction manager says about the node's
// resources, and the runtime's images as the image cache last listed them.
type RuntimeState struct {
	Ready   bool
	Message string
	// MemoryPressure, DiskPressure and PIDPressure are the eviction
	// manager's node conditions.
	MemoryPressure, DiskPressure, PIDPressure bool
	// Runtime is what the runtime said of itself the last time it was
	// ready, as the kubelet keeps the handlers and features of its last
	// successful runtime sync; nil (never ready) keeps what the node
	// reports.
	Runtime *RuntimeInfo
	// Images is status.images (ContainerImages). SetStatus stores the
	// slice itself, so it must not be modified afterwards.
	Images []corev1.ContainerImage
}

// InitialNode is the object the agent creates to register, as the kubelet's
// initialNode: well-known labels, registration taints, and a first status.
func InitialNode(id Identity, now time.Time) *corev1.Node {
	labels := map[string]string{
		corev1.LabelHostname:   id.Name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
	}
	for k, v := range id.Labels {
		labels[k] = v
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   id.Name,
			Labels: labels,
			Annotations: map[string]string{
				// The attach-detach controller manages volumes, as on every kubelet
				// since 1.x; without it kube-controller-manager logs about the node.
				controllerManagedAttach: "true",
			},
		},
		Spec: corev1.NodeSpec{Taints: id.Taints},
	}
	SetStatus(node, id, RuntimeState{Ready: false, Message: errRuntimeNotSynced.Error()}, now)
	return node
}

// controllerManagedAttach is the annotation by which a node leaves attaching
// and detaching its volumes to the attach-detach controller.
const controllerManagedAttach = "volumes.kubernetes.io/controller-managed-attach-detach"

// ReconcileExisting changes existing, a Node found when registering, as the
// kubelet's tryRegisterWithAPIServer does before it adopts it: the
// attach-detach annotation and the default labels take initial's values
// (a default label initial sets empty is removed). It reports whether
// existing changed.
func ReconcileExisting(initial, existing *corev1.Node) bool {
	changed := false
	if want, set := initial.Annotations[controllerManagedAttach]; existing.Annotations[controllerManagedAttach] != want {
		changed = true
		if !set {
			delete(existing.Annotations, controllerManagedAttach)
		} else {
			if existing.Annotations == nil {
				existing.Annotations = map[string]string{}
			}
			existing.Annotations[controllerManagedAttach] = want
		}
	}
	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	// The kubelet's default labels (its updateDefaultLabels).
	defaultLabels := []string{
		corev1.LabelHostname,
		corev1.LabelTopologyZone,
		corev1.LabelTopologyRegion,
		corev1.LabelFailureDomainBetaZone,
		corev1.LabelFailureDomainBetaRegion,
		corev1.LabelInstanceTypeStable,
		corev1.LabelInstanceType,
		corev1.LabelOSStable,
		corev1.LabelArchStable,
		corev1.LabelWindowsBuild,
		"beta.kubernetes.io/os",
		"beta.kubernetes.io/arch",
	}
	for _, l := range defaultLabels {
		want, ok := initial.Labels[l]
		if !ok {
			continue
		}
		if existing.Labels[l] != want {
			existing.Labels[l] = want
			changed = true
		}
		if existing.Labels[l] == "" {
			delete(existing.Labels, l)
		}
	}
	return changed
}

// SetStatus computes node.Status in place from the node's identity and its
// runtime's state, keeping each condition's lastTransitionTime unless its
// status flips. It is a pure function of its arguments so it can be tested
// with a table and no clock.
func SetStatus(node *corev1.Node, id Identity, rt RuntimeState, now time.Time) {
	st := &node.Status
	st.Capacity = id.Capacity.DeepCopy()
	st.Allocatable = Allocatable(id.Capacity, id.Reserved)
	st.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: id.IP.String()},
		{Type: corev1.NodeHostName, Address: id.Name},
	}
	st.DaemonEndpoints = corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: cmp.Or(id.KubeletPort, KubeletPort)}}
	st.NodeInfo = nodeInfo(id)
	st.Images = rt.Images
	st.DeclaredFeatures = id.DeclaredFeatures
	if rt.Runtime != nil {
		st.RuntimeHandlers = rt.Runtime.Handlers
		if rt.Runtime.Features != nil {
			st.Features = rt.Runtime.Features
		}
	}

	ready := corev1.NodeCondition{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		Reason: "KubeletReady", Message: "kubelet is posting ready status",
	}
	if !rt.Ready {
		ready.Status, ready.Reason, ready.Message = corev1.ConditionFalse, "KubeletNotReady", rt.Message
	}
	// The reasons and messages are the kubelet's.
	conds := []corev1.NodeCondition{
		pressure(corev1.NodeMemoryPressure, rt.MemoryPressure,
			"KubeletHasInsufficientMemory", "kubelet has insufficient memory available",
			"KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
		pressure(corev1.NodeDiskPressure, rt.DiskPressure,
			"KubeletHasDiskPressure", "kubelet has disk pressure",
			"KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
		pressure(corev1.NodePIDPressure, rt.PIDPressure,
			"KubeletHasInsufficientPID", "kubelet has insufficient PID available",
			"KubeletHasSufficientPID", "kubelet has sufficient PID available"),
		ready,
	}
	for _, c := range conds {
		setCondition(st, c, now)
	}
}

func pressure(t corev1.NodeConditionType, on bool, onReason, onMessage, offReason, offMessage string) corev1.NodeCondition {
	if on {
		return corev1.NodeCondition{Type: t, Status: corev1.ConditionTrue, Reason: onReason, Message: onMessage}
	}
	return corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse, Reason: offReason, Message: offMessage}
}

// setCondition replaces or appends c, stamping the heartbeat with now and
// keeping the previous transition time when the status did not change.
func setCondition(st *corev1.NodeStatus, c corev1.NodeCondition, now time.Time) {
	t := metav1.NewTime(now)
	c.LastHeartbeatTime = t
	c.LastTransitionTime = t
	for i := range st.Conditions {
		if st.Conditions[i].Type != c.Type {
			continue
		}
		if st.Conditions[i].Status == c.Status {
			c.LastTransitionTime = st.Conditions[i].LastTransitionTime
		}
		st.Conditions[i] = c
		return
	}
	st.Conditions = append(st.Conditions, c)
}

// nodeInfo is status.nodeInfo as the kubelet's MachineInfo, VersionInfo
// and GoRuntime setters write it. The machine identifiers derive from the
// node name, so that a node keeps them across restarts of the fleet, as a
// machine does. kubeProxyVersion stays empty (DisableNodeKubeProxyVersion
// is locked on), swap is absent (an emulated machine has no swap, and the
// kubelet reports swap only when there is some), and
// runningInUserNamespace is false (KubeletInUserNamespace is on by default
// since 1.37; an emulated kubelet runs in no user namespace).
func nodeInfo(id Identity) corev1.NodeSystemInfo {
	sum := sha256.Sum256([]byte(id.Name))
	uuid := fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
	return corev1.NodeSystemInfo{
		MachineID:               fmt.Sprintf("%x", sum[:16]),
		SystemUUID:              uuid,
		BootID:                  uuid,
		KernelVersion:           "fleetlet",
		OSImage:                 "fleetlet emulated node",
		OperatingSystem:         "linux",
		Architecture:            "amd64",
		ContainerRuntimeVersion: id.RuntimeVersion,
		KubeletVersion:          id.KubeletVersion,
		RunningInUserNamespace:  ptr.To(false),
	}
}

// Changed reports whether two statuses differ in anything but heartbeat
// times: the kubelet posts a status that only moves heartbeats no more often
// than nodeStatusReportFrequency. Every node runs it every 10 s, so it
// compares shallow copies instead of deep-copying both statuses.
func Changed(old, updated *corev1.NodeStatus) bool {
	if len(old.Conditions) != len(updated.Conditions) {
		return true
	}
	for i := range old.Conditions {
		a, b := old.Conditions[i], updated.Conditions[i]
		a.LastHeartbeatTime, b.LastHeartbeatTime = metav1.Time{}, metav1.Time{}
		if !equalCondition(&a, &b) {
			return true
		}
	}
	a, b := *old, *updated
	a.Conditions, b.Conditions = nil, nil
	return !equalStatus(&a, &b)
}

func equalCondition(a, b *corev1.NodeCondition) bool {
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message &&
		a.LastTransitionTime.Equal(&b.LastTransitionTime) && a.LastHeartbeatTime.Equal(&b.LastHeartbeatTime)
}
