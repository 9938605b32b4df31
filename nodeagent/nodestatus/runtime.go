package nodestatus

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RuntimeInfo is what a ready runtime's CRI Status says about itself:
// status.runtimeHandlers and status.features.
type RuntimeInfo struct {
	Handlers []corev1.NodeRuntimeHandler
	// Features is nil when the runtime reports none; the node then keeps
	// the features it reported before, as the kubelet's NodeFeatures setter.
	Features *corev1.NodeFeatures
}

// FromCRIStatus reads a CRI Status answer (or its error) as the kubelet's
// updateRuntimeUp does: the node is ready only if the runtime and its
// network are, and the handlers and features are taken whenever the runtime
// is ready, even if its network is not. The pressure conditions and the
// PLEG's health are for the caller to add.
func FromCRIStatus(resp *runtimeapi.StatusResponse, err error) RuntimeState {
	if err != nil {
		return RuntimeState{Message: fmt.Sprintf("container runtime is down: %v", err)}
	}
	var runtimeReady, networkReady *runtimeapi.RuntimeCondition
	for _, c := range resp.GetStatus().GetConditions() {
		switch c.Type {
		case runtimeapi.RuntimeReady:
			runtimeReady = c
		case runtimeapi.NetworkReady:
			networkReady = c
		}
	}
	var st RuntimeState
	switch {
	case runtimeReady != nil && !runtimeReady.Status:
		return RuntimeState{Message: fmt.Sprintf("container runtime status check failed: %s: %s", runtimeReady.Reason, runtimeReady.Message)}
	case networkReady != nil && !networkReady.Status:
		st.Message = fmt.Sprintf("container runtime network not ready: NetworkReady=false reason:%s message:%s", networkReady.Reason, networkReady.Message)
	default:
		st.Ready = true
	}
	st.Runtime = runtimeInfo(resp)
	return st
}

// runtimeInfo is the kubelet's toKubeRuntimeStatus followed by its
// RuntimeHandlers and NodeFeatures setters: every handler's two features
// are set, false when the runtime does not say.
func runtimeInfo(resp *runtimeapi.StatusResponse) *RuntimeInfo {
	info := &RuntimeInfo{Handlers: make([]corev1.NodeRuntimeHandler, len(resp.GetRuntimeHandlers()))}
	for i, h := range resp.GetRuntimeHandlers() {
		rro, userns := h.GetFeatures().GetRecursiveReadOnlyMounts(), h.GetFeatures().GetUserNamespaces()
		info.Handlers[i] = corev1.NodeRuntimeHandler{
			Name:     h.GetName(),
			Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: &rro, UserNamespaces: &userns},
		}
	}
	if f := resp.GetFeatures(); f != nil {
		sgp := f.GetSupplementalGroupsPolicy()
		info.Features = &corev1.NodeFeatures{SupplementalGroupsPolicy: &sgp}
	}
	return info
}
