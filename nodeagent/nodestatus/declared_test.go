package nodestatus

import (
	"slices"
	"testing"

	"k8s.io/component-helpers/nodedeclaredfeatures"
)

// TestDeclaredFeaturesAreTheKubelets: a 1.37.2 kubelet with its default
// gates (kubemark --morph=kubelet on the pinned module) declares these.
func TestDeclaredFeaturesAreTheKubelets(t *testing.T) {
	got := DeclaredFeatures("v1.37.2", nodedeclaredfeatures.RuntimeFeatures{UserNamespacesHostNetwork: true, MountOptions: true})
	want := []string{"ExtendWebSocketsToKubelet", "InPlacePodLevelResourcesVerticalScaling", "InPlacePodVerticalScalingInitContainers", "RestartAllContainersOnContainerExits"}
	if !slices.Equal(got, want) {
		t.Fatalf("declaredFeatures = %v, want %v", got, want)
	}
	node := InitialNode(Identity{Name: "n", DeclaredFeatures: got}, t0)
	if !slices.Equal(node.Status.DeclaredFeatures, want) {
		t.Fatalf("the Node declares %v, want %v", node.Status.DeclaredFeatures, want)
	}
}
