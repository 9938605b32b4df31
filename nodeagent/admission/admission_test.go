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
