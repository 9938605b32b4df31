package nodeagent

import (
	"net"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/fleetlet/fleetlet/fakeruntime"
)

// TestAgentNodeStatusFields checks the Node status fields a 1.37 kubelet
// writes beyond the conditions: allocatable with its default reservation
// (memory.available<100Mi, nodefs.available<10%), the runtime's handlers
// and features, and the runtime's images.
func TestAgentNodeStatusFields(t *testing.T) {
	h := startAgent(t, func(c *Config) {
		c.Kubelet = DefaultKubeletConfiguration()
		c.Kubelet.SystemReserved = map[string]string{"cpu": "500m", "memory": "1Gi"}
		rt := fakeruntime.New(fakeruntime.Config{Clock: c.Clock, PreloadedImages: []string{"registry.k8s.io/pause:3.10"}})
		c.Runtime, c.Images = rt, rt
	})
	var node *corev1.Node
	h.eventually(t, "the node is Ready", func() bool {
		node = h.node(t)
		return node != nil && nodeCondition(node, corev1.NodeReady) == corev1.ConditionTrue
	})
	st := node.Status
	for name, want := range map[corev1.ResourceName]string{
		corev1.ResourceCPU: "7500m", corev1.ResourceMemory: "31644Mi", corev1.ResourceEphemeralStorage: "96636764000", corev1.ResourcePods: "110",
	} {
		if q := st.Allocatable[name]; q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("allocatable %s = %s, want %s", name, q.String(), want)
		}
	}
	if q := st.Capacity[corev1.ResourceMemory]; q.String() != "32Gi" {
		t.Errorf("capacity memory = %s, want 32Gi: the reservation comes out of allocatable only", q.String())
	}
	if len(st.RuntimeHandlers) != 1 || st.RuntimeHandlers[0].Name != "" || st.RuntimeHandlers[0].Features == nil {
		t.Errorf("runtime handlers = %+v, want the fake runtime's default handler", st.RuntimeHandlers)
	}
	if st.Features == nil || st.Features.SupplementalGroupsPolicy == nil || *st.Features.SupplementalGroupsPolicy {
		t.Errorf("features = %+v, want supplementalGroupsPolicy false, as the fake runtime says", st.Features)
	}
	if len(st.Images) != 1 || st.Images[0].SizeBytes != 10<<20 || len(st.Images[0].Names) == 0 || st.Images[0].Names[len(st.Images[0].Names)-1] != "registry.k8s.io/pause:3.10" {
		t.Errorf("images = %+v, want the runtime's preloaded pause image", st.Images)
	}
}

// TestAgentRejectsReservationOverCapacity: the kubelet's container manager
// refuses to start when it would reserve more than the node has.
func TestAgentRejectsReservationOverCapacity(t *testing.T) {
	rt := fakeruntime.New(fakeruntime.Config{})
	kc := DefaultKubeletConfiguration()
	kc.KubeReserved = map[string]string{"cpu": "4"}
	_, err := New(Config{
		NodeName: "n1", NodeIP: net.ParseIP("127.1.0.1"), Kubelet: kc,
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")},
		Client:   fake.NewClientset(), Runtime: rt, Images: rt,
	})
	if err == nil || !strings.Contains(err.Error(), `"cpu" has a reservation of 4 but capacity of 2`) {
		t.Errorf("New = %v, want the container manager's invalid Node Allocatable error", err)
	}
}
