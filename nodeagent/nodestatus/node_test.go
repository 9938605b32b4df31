package nodestatus

import (
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

func identity() Identity {
	return Identity{
		Name:           "n1",
		IP:             net.ParseIP("127.1.0.7"),
		Labels:         map[string]string{"fleetlet.io/pool": "default"},
		Taints:         []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}},
		Capacity:       corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110")},
		Reserved:       corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		KubeletVersion: "v1.37.2", RuntimeVersion: "fake://1",
	}
}

func condition(node *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

func TestInitialNode(t *testing.T) {
	node := InitialNode(identity(), t0)
	for k, v := range map[string]string{corev1.LabelHostname: "n1", corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64", "fleetlet.io/pool": "default"} {
		if node.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, node.Labels[k], v)
		}
	}
	if len(node.Spec.Taints) != 1 {
		t.Errorf("taints = %v", node.Spec.Taints)
	}
	if c := condition(node, corev1.NodeReady); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "KubeletNotReady" {
		t.Errorf("a node registers NotReady until the runtime answers; got %+v", c)
	}
	cpu, mem := node.Status.Allocatable[corev1.ResourceCPU], node.Status.Allocatable[corev1.ResourceMemory]
	if cpu.String() != "7500m" || mem.String() != "31Gi" {
		t.Errorf("allocatable cpu %s memory %s, want capacity less reserved: 7500m 31Gi", cpu.String(), mem.String())
	}
	if node.Status.NodeInfo.SystemUUID != InitialNode(identity(), t0).Status.NodeInfo.SystemUUID {
		t.Error("machine identifiers are not stable across restarts")
	}
	// What a 1.37 kubelet on a swapless machine, outside a user namespace,
	// writes into nodeInfo.
	info := node.Status.NodeInfo
	if info.RunningInUserNamespace == nil || *info.RunningInUserNamespace {
		t.Errorf("runningInUserNamespace = %v, want false (KubeletInUserNamespace is on by default)", info.RunningInUserNamespace)
	}
	if info.Swap != nil || info.KubeProxyVersion != "" {
		t.Errorf("swap %v kubeProxyVersion %q, want none (no swap; DisableNodeKubeProxyVersion is locked on)", info.Swap, info.KubeProxyVersion)
	}
	if info.MachineID == "" || info.BootID == "" || info.KernelVersion == "" || info.OSImage == "" ||
		info.OperatingSystem != "linux" || info.Architecture != "amd64" || info.KubeletVersion != "v1.37.2" || info.ContainerRuntimeVersion != "fake://1" {
		t.Errorf("nodeInfo = %+v", info)
	}
}

func TestSetStatusTransitions(t *testing.T) {
	node := InitialNode(identity(), t0)
	t1 := t0.Add(10 * time.Second)
	SetStatus(node, identity(), RuntimeState{Ready: true}, t1)
	ready := condition(node, corev1.NodeReady)
	if ready.Status != corev1.ConditionTrue || !ready.LastTransitionTime.Time.Equal(t1) || !ready.LastHeartbeatTime.Time.Equal(t1) {
		t.Errorf("Ready after the runtime is up = %+v, want True since %v", ready, t1)
	}
	mem := condition(node, corev1.NodeMemoryPressure)
	if mem.Status != corev1.ConditionFalse || !mem.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("MemoryPressure = %+v, want False since %v (no flip)", mem, t0)
	}

	before := node.Status.DeepCopy()
	t2 := t1.Add(10 * time.Second)
	SetStatus(node, identity(), RuntimeState{Ready: true}, t2)
	if Changed(before, &node.Status) {
		t.Error("a status that only moved its heartbeats counts as changed; it must wait for the report interval")
	}
	SetStatus(node, identity(), RuntimeState{Message: "runtime down"}, t2)
	if !Changed(before, &node.Status) {
		t.Error("a Ready flip does not count as changed")
	}
	if c := condition(node, corev1.NodeReady); c.Message != "runtime down" || !c.LastTransitionTime.Time.Equal(t2) {
		t.Errorf("NotReady condition = %+v", c)
	}
}

// BenchmarkChanged is the comparison every node makes every 10 s to decide
// whether its status must be posted.
func BenchmarkChanged(b *testing.B) {
	node := InitialNode(identity(), t0)
	SetStatus(node, identity(), RuntimeState{Ready: true}, t0)
	updated := node.DeepCopy()
	SetStatus(updated, identity(), RuntimeState{Ready: true}, t0.Add(10*time.Second))
	b.ReportAllocs()
	for b.Loop() {
		if Changed(&node.Status, &updated.Status) {
			b.Fatal("a heartbeat-only change counted as a change")
		}
	}
}
