package admission

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "drain", Effect: corev1.TaintEffectNoExecute}, {Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"),
			corev1.ResourcePods: resource.MustParse("3"), corev1.ResourceEphemeralStorage: resource.MustParse("10Gi"),
		}},
	}
}

func pod(cpu, mem string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	req := corev1.ResourceList{}
	if cpu != "" {
		req[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		req[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	p := &corev1.Pod{Spec: corev1.PodSpec{
		NodeName:    "n1",
		Tolerations: []corev1.Toleration{{Key: "drain", Operator: corev1.TolerationOpExists}},
		Containers:  []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: req}}},
	}}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func TestAdmit(t *testing.T) {
	full := []*corev1.Pod{pod("500m", "1Gi"), pod("1", "1Gi")}
	cases := []struct {
		name     string
		pod      *corev1.Pod
		admitted []*corev1.Pod
		reason   string
		message  string
	}{
		{name: "fits", pod: pod("500m", "2Gi"), admitted: full},
		{name: "out of cpu", pod: pod("600m", ""), admitted: full, reason: "OutOfcpu",
			message: "Node didn't have enough resource: cpu, requested: 600, used: 1500, capacity: 2000"},
		{name: "out of memory", pod: pod("", "3Gi"), admitted: full, reason: "OutOfmemory"},
		{name: "out of pods", pod: pod("", ""), admitted: append(full, pod("", "")), reason: "OutOfpods",
			message: "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"},
		{name: "init containers count by their largest", pod: pod("100m", "", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}
		}), admitted: full, reason: "OutOfcpu"},
		{name: "node selector mismatch", pod: pod("", "", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "b"} }),
			reason: "NodeAffinity", message: "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"},
		{name: "node selector match", pod: pod("", "", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "a"} })},
		{name: "untolerated NoExecute", pod: pod("", "", func(p *corev1.Pod) { p.Spec.Tolerations = nil }),
			reason: "TaintToleration", message: "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"},
		{name: "host port taken", pod: pod("", "", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{HostPort: 80, ContainerPort: 80, Protocol: corev1.ProtocolTCP}}
		}), admitted: []*corev1.Pod{pod("", "", func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{HostPort: 80, ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
		})}, reason: "NodePorts"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := Admit(tc.pod, node(), tc.admitted)
			if r.Admit != (tc.reason == "") || r.Reason != tc.reason {
				t.Fatalf("Admit = %+v, want reason %q", r, tc.reason)
			}
			if tc.message != "" && !strings.EqualFold(r.Message, tc.message) {
				t.Errorf("message = %q, want %q", r.Message, tc.message)
			}
		})
	}
}

// TestAdmitAgainstAllocatable: the kubelet admits against status.allocatable
// (capacity less its reservation), so a pod that fits the capacity but not
// the allocatable is rejected, with the allocatable as the message's
// "capacity".
func TestAdmitAgainstAllocatable(t *testing.T) {
	n := node()
	n.Status.Capacity = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110"),
	}
	// A default kubelet's allocatable for that capacity: memory less the
	// memory.available<100Mi hard eviction threshold.
	n.Status.Allocatable = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32668Mi"), corev1.ResourcePods: resource.MustParse("110"),
	}
	if r := Admit(pod("", "32668Mi"), n, nil); !r.Admit {
		t.Errorf("a pod requesting exactly the allocatable memory was rejected: %+v", r)
	}
	r := Admit(pod("", "32Gi"), n, nil)
	want := "Node didn't have enough resource: memory, requested: 34359738368, used: 0, capacity: 34254880768"
	if r.Admit || r.Reason != "OutOfmemory" || r.Message != want {
		t.Errorf("a pod requesting the capacity = %+v, want OutOfmemory %q", r, want)
	}
}

// TestAdmitScalarResources: hugepages and extended resources are checked
// against allocatable as the scheduler's Fits does; an extended resource the
// node does not know is left to the cluster.
func TestAdmitScalarResources(t *testing.T) {
	n := node()
	n.Status.Allocatable["example.com/gpu"] = resource.MustParse("2")
	n.Status.Allocatable["hugepages-2Mi"] = resource.MustParse("4Mi")
	withRequest := func(name corev1.ResourceName, q string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Requests[name] = resource.MustParse(q) }
	}
	admitted := []*corev1.Pod{pod("", "", withRequest("example.com/gpu", "1"))}
	for _, tc := range []struct {
		name, reason string
		pod          *corev1.Pod
	}{
		{"gpu fits", "", pod("", "", withRequest("example.com/gpu", "1"))},
		{"out of gpus", "OutOfexample.com/gpu", pod("", "", withRequest("example.com/gpu", "2"))},
		{"unknown extended resource", "", pod("", "", withRequest("example.org/fpga", "1"))},
		{"out of hugepages", "OutOfhugepages-2Mi", pod("", "", withRequest("hugepages-2Mi", "6Mi"))},
		{"hugepages the node lacks", "OutOfhugepages-1Gi", pod("", "", withRequest("hugepages-1Gi", "1Gi"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := Admit(tc.pod, n, admitted); r.Admit != (tc.reason == "") || r.Reason != tc.reason {
				t.Errorf("Admit = %+v, want reason %q", r, tc.reason)
			}
		})
	}
}
