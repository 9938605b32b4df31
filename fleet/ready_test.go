package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func poolNode(name string, ready bool, taints ...corev1.Taint) *corev1.Node {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{PoolLabel: "p"}},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}},
	}
}

// A Ready node still carrying the not-ready taint the control plane set at
// registration is not schedulable; a pool's own taint does not count.
func TestWaitForNodesSchedulable(t *testing.T) {
	ctx := context.Background()
	notReady := corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule}
	own := corev1.Taint{Key: "example.com/gpu", Effect: corev1.TaintEffectNoSchedule}
	client := fake.NewClientset(poolNode("a", true, own), poolNode("b", true, notReady, own))
	names := []string{"a", "b"}

	if err := WaitForNodesReady(ctx, client, names, 5*time.Second); err != nil {
		t.Fatalf("both nodes are Ready: %v", err)
	}
	err := WaitForNodesSchedulable(ctx, client, names, 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "1 of 2 nodes not schedulable") || !strings.Contains(err.Error(), "[b]") {
		t.Fatalf("err = %v, want node b named as not schedulable", err)
	}

	done := make(chan error, 1)
	go func() { done <- WaitForNodesSchedulable(ctx, client, names, time.Minute) }()
	if _, err := client.CoreV1().Nodes().Update(ctx, poolNode("b", true, own), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after the taint is lifted: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("still waiting a minute after the taint was lifted")
	}
}
