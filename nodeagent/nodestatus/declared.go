package nodestatus

import (
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-helpers/nodedeclaredfeatures"
)

// kubeletDefaultGates are the feature gates that upstream's node declared
// features framework asks about and that the 1.37 kubelet enables by
// default (pkg/features/kube_features.go at v1.37.2). The gates the
// framework asks about and 1.37 leaves off are
// InPlacePodVerticalScalingMemoryBackedVolumes,
// UserNamespacesHostNetworkSupport, DRANodeAllocatableResources,
// VolumeBindMountOptions and DRAOptionalNodeOperations. An agent takes no
// gate of these from its configuration, so the list is fixed, and
// TestDeclaredFeaturesAreTheKubelets checks the outcome against what a
// real 1.37 kubelet declares.
//
// ExtendWebSocketsToKubelet is on, as in the 1.37 kubelet: the API server
// then passes exec and attach on as v5 WebSockets and port-forward as
// WebSockets tunneling SPDY, and the agent's kubelet API serves them (see
// nodeagent/server/websocket.go).
var kubeletDefaultGates = map[string]bool{
	"ExtendWebSocketsToKubelet":               true,
	"InPlacePodLevelResourcesVerticalScaling": true,
	"InPlacePodVerticalScalingInitContainers": true,
	"RestartAllContainersOnContainerExits":    true,
}

type gates map[string]bool

func (g gates) Enabled(key string) bool { return g[key] }

// DeclaredFeatures is status.declaredFeatures as the kubelet's
// discoverNodeDeclaredFeatures computes it once at its start: upstream's
// framework (k8s.io/component-helpers/nodedeclaredfeatures, the code the
// kubelet runs) over the kubelet's feature gates, its version and the
// runtime's features from CRI Status. The API server admits in-place
// resizes, among other pod updates, by these.
func DeclaredFeatures(kubeletVersion string, runtime nodedeclaredfeatures.RuntimeFeatures) []string {
	v, err := version.Parse(kubeletVersion)
	if err != nil {
		v = nil
	}
	return nodedeclaredfeatures.DefaultFramework.DiscoverNodeFeatures(&nodedeclaredfeatures.NodeConfiguration{
		FeatureGates: gates(kubeletDefaultGates), Version: v, RuntimeFeatures: runtime,
	})
}
