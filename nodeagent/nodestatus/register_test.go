package nodestatus

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
)

// TestRegisterAdoptsAnExistingNode: a node that registers again (it
// rebooted) finds its Node in the API server; as the kubelet, it counts that
// as registered, sets back its default labels and attach-detach annotation,
// and leaves everything else (its taints, others' labels, its status) as it
// is. A Node already as the agent would make it is not written.
func TestRegisterAdoptsAnExistingNode(t *testing.T) {
	ctx := context.Background()
	existing := InitialNode(identity(), t0)
	existing.Labels[corev1.LabelHostname] = "renamed"
	delete(existing.Labels, corev1.LabelOSStable)
	existing.Labels["team"] = "a"
	delete(existing.Annotations, controllerManagedAttach)
	existing.Spec.Taints = []corev1.Taint{{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute}}
	existing.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown"}}
	client := fake.NewClientset(existing)
	clk := testingclock.NewFakeClock(t0)
	m := NewManager(Config{Identity: identity(), Client: client, Clock: clk})
	register := func() []string {
		t.Helper()
		client.ClearActions()
		done := make(chan error, 1)
		go func() { done <- m.Register(ctx) }()
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				return actionVerbs(client.Actions())
			case <-time.After(time.Millisecond):
				clk.Step(100 * time.Millisecond)
			}
		}
	}
	verbs := register()
	node, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels[corev1.LabelHostname] != "n1" || node.Labels[corev1.LabelOSStable] != "linux" || node.Labels["team"] != "a" {
		t.Errorf("labels = %v, want the default labels set back and the others kept", node.Labels)
	}
	if node.Annotations[controllerManagedAttach] != "true" {
		t.Errorf("annotations = %v, want the attach-detach annotation back", node.Annotations)
	}
	if len(node.Spec.Taints) != 1 || node.Spec.Taints[0].Key != "node.kubernetes.io/unreachable" {
		t.Errorf("taints = %v, want the Node's own, untouched", node.Spec.Taints)
	}
	if c := condition(node, corev1.NodeReady); c == nil || c.Status != corev1.ConditionUnknown {
		t.Errorf("Ready = %+v, want the status left to the status updates", c)
	}
	if len(verbs) != 3 || verbs[0] != "create" || verbs[1] != "get" || verbs[2] != "patch" {
		t.Errorf("requests = %v, want create (AlreadyExists), get, patch", verbs)
	}

	// Registering again finds nothing to set back: nothing is written.
	if verbs := register(); len(verbs) != 2 || verbs[0] != "create" || verbs[1] != "get" {
		t.Errorf("requests = %v, want create (AlreadyExists), get", verbs)
	}
}

func actionVerbs(actions []k8stesting.Action) []string {
	verbs := make([]string, len(actions))
	for i, a := range actions {
		verbs[i] = a.GetVerb()
	}
	return verbs
}
