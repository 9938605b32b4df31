package nodestatus

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func criStatus(runtimeReady, networkReady bool) *runtimeapi.StatusResponse {
	return &runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Status: runtimeReady, Reason: "R", Message: "m"},
			{Type: runtimeapi.NetworkReady, Status: networkReady, Reason: "NetworkPluginNotReady", Message: "cni config uninitialized"},
		}},
		RuntimeHandlers: []*runtimeapi.RuntimeHandler{
			{Name: ""},
			{Name: "runc", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true, UserNamespaces: true}},
		},
		Features: &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true},
	}
}

func TestFromCRIStatus(t *testing.T) {
	for _, tc := range []struct {
		name     string
		resp     *runtimeapi.StatusResponse
		err      error
		ready    bool
		message  string
		reported bool // handlers and features taken
	}{
		{name: "ready", resp: criStatus(true, true), ready: true, reported: true},
		{name: "network not ready", resp: criStatus(true, false), reported: true,
			message: "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni config uninitialized"},
		{name: "runtime not ready", resp: criStatus(false, true), message: "container runtime status check failed: R: m"},
		{name: "down", err: errors.New("connection refused"), message: "container runtime is down: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := FromCRIStatus(tc.resp, tc.err)
			if st.Ready != tc.ready || st.Message != tc.message || (st.Runtime != nil) != tc.reported {
				t.Fatalf("FromCRIStatus = ready %v %q runtime %+v, want ready %v %q reported %v", st.Ready, st.Message, st.Runtime, tc.ready, tc.message, tc.reported)
			}
			if !tc.reported {
				return
			}
			h := st.Runtime.Handlers
			if len(h) != 2 || h[0].Name != "" || *h[0].Features.RecursiveReadOnlyMounts || *h[0].Features.UserNamespaces ||
				h[1].Name != "runc" || !*h[1].Features.RecursiveReadOnlyMounts || !*h[1].Features.UserNamespaces {
				t.Errorf("handlers = %+v, want the default handler without features and runc with both", h)
			}
			if f := st.Runtime.Features; f == nil || !*f.SupplementalGroupsPolicy {
				t.Errorf("features = %+v, want supplementalGroupsPolicy true", f)
			}
		})
	}
}

// TestRuntimeInfoKeptWhileDown: the node keeps the handlers and features of
// the last time the runtime was ready, as the kubelet's runtime state does.
func TestRuntimeInfoKeptWhileDown(t *testing.T) {
	node := InitialNode(identity(), t0)
	SetStatus(node, identity(), FromCRIStatus(criStatus(true, true), nil), t0)
	if len(node.Status.RuntimeHandlers) != 2 || node.Status.Features == nil {
		t.Fatalf("ready runtime: handlers %v features %v", node.Status.RuntimeHandlers, node.Status.Features)
	}
	SetStatus(node, identity(), FromCRIStatus(nil, errors.New("down")), t0)
	if len(node.Status.RuntimeHandlers) != 2 || node.Status.Features == nil || !*node.Status.Features.SupplementalGroupsPolicy {
		t.Errorf("runtime down: handlers %v features %v, want those reported before", node.Status.RuntimeHandlers, node.Status.Features)
	}
	if c := condition(node, corev1.NodeReady); c.Status != corev1.ConditionFalse {
		t.Errorf("Ready = %v with the runtime down", c.Status)
	}
}
