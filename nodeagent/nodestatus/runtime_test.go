package nodestatus

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
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
			{Name: "runc", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true, UserNamespaces: true}},
			{Name: ""},
		},
		Features: &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true},
	}
}

var errUnavailable = grpcstatus.Error(codes.Unavailable, "connection refused")

// TestRuntimeSyncAnswers: one Status answer each, read at once, as the
// kubelet's updateRuntimeUp then ReadyCondition read it.
func TestRuntimeSyncAnswers(t *testing.T) {
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
		// Never found ready: not synced, and the runtime's reason.
		{name: "runtime not ready", resp: criStatus(false, true),
			message: "[container runtime status check may not have completed yet, container runtime not ready: RuntimeReady=false reason:R message:m]"},
		{name: "conditions missing", resp: &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{}},
			message: "[container runtime status check may not have completed yet, container runtime not ready: <nil>, container runtime network not ready: <nil>]"},
		// Never answered: nothing is known of the network either.
		{name: "down from the start", err: errUnavailable,
			message: "[container runtime status check may not have completed yet, network state unknown]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewRuntimeSync()
			_ = s.Update(tc.resp, tc.err, t0)
			st := s.State(t0)
			if st.Ready != tc.ready || st.Message != tc.message || (st.Runtime != nil) != tc.reported {
				t.Fatalf("State = ready %v %q runtime %+v, want ready %v %q reported %v", st.Ready, st.Message, st.Runtime, tc.ready, tc.message, tc.reported)
			}
			if !tc.reported {
				return
			}
			h := st.Runtime.Handlers
			if len(h) != 2 || h[0].Name != "" || *h[0].Features.RecursiveReadOnlyMounts || *h[0].Features.UserNamespaces ||
				h[1].Name != "runc" || !*h[1].Features.RecursiveReadOnlyMounts || !*h[1].Features.UserNamespaces {
				t.Errorf("handlers = %+v, want, sorted by name, the default handler without features and runc with both", h)
			}
			if f := st.Runtime.Features; f == nil || !*f.SupplementalGroupsPolicy {
				t.Errorf("features = %+v, want supplementalGroupsPolicy true", f)
			}
		})
	}
}

// TestRuntimeDownAfterMaxWait: a runtime that stops answering is down only
// once its last good answer is maxWaitForContainerRuntime old, with the
// kubelet's message, then joined by a failing health check's; one good
// answer makes it ready again at once.
func TestRuntimeDownAfterMaxWait(t *testing.T) {
	s := NewRuntimeSync()
	if err := s.Update(criStatus(true, true), nil, t0); err != nil {
		t.Fatal(err)
	}
	plegHealthy := true
	pleg := HealthCheck{Name: "PLEG", Healthy: func() (bool, error) {
		if plegHealthy {
			return true, nil
		}
		return false, errors.New("pleg was last seen active 3m0.1s ago; threshold is 3m0s")
	}}
	for at := t0; at.Before(t0.Add(MaxWaitForContainerRuntime)); at = at.Add(RuntimeUpPeriod) {
		if err := s.Update(nil, errUnavailable, at); err == nil {
			t.Fatal("a failed Status returned no error")
		}
		if st := s.State(at.Add(time.Second), pleg); at.Add(time.Second).Before(t0.Add(MaxWaitForContainerRuntime)) && !st.Ready {
			t.Fatalf("%v after the last good answer: not ready (%q) before maxWaitForContainerRuntime", at.Add(time.Second).Sub(t0), st.Message)
		}
	}
	st := s.State(t0.Add(MaxWaitForContainerRuntime), pleg)
	if st.Ready || st.Message != "container runtime is down" {
		t.Fatalf("at maxWaitForContainerRuntime: ready %v %q, want not ready, %q", st.Ready, st.Message, "container runtime is down")
	}
	if st.Runtime == nil || len(st.Runtime.Handlers) != 2 {
		t.Errorf("runtime info %+v while down, want that of the last ready answer", st.Runtime)
	}
	plegHealthy = false
	want := "[container runtime is down, PLEG is not healthy: pleg was last seen active 3m0.1s ago; threshold is 3m0s]"
	if st := s.State(t0.Add(4*time.Minute), pleg); st.Ready || st.Message != want {
		t.Fatalf("PLEG unhealthy too: ready %v %q, want %q", st.Ready, st.Message, want)
	}
	back := t0.Add(4 * time.Minute)
	if err := s.Update(criStatus(true, true), nil, back); err != nil {
		t.Fatal(err)
	}
	want = "PLEG is not healthy: pleg was last seen active 3m0.1s ago; threshold is 3m0s"
	if st := s.State(back, pleg); st.Ready || st.Message != want {
		t.Fatalf("runtime back, PLEG not yet: ready %v %q, want %q", st.Ready, st.Message, want)
	}
	plegHealthy = true
	if st := s.State(back, pleg); !st.Ready || st.Message != "" {
		t.Fatalf("runtime and PLEG back: ready %v %q", st.Ready, st.Message)
	}
}

// TestRuntimeNotReadyKeepsTheSyncTime: a runtime that answers not ready
// is not synced either, so it is down too once the wait is over, as the
// kubelet's; its network state is taken from every answer.
func TestRuntimeNotReadyKeepsTheSyncTime(t *testing.T) {
	s := NewRuntimeSync()
	_ = s.Update(criStatus(true, true), nil, t0)
	later := t0.Add(MaxWaitForContainerRuntime)
	_ = s.Update(criStatus(false, false), nil, later)
	want := fmt.Sprintf("[container runtime is down, container runtime not ready: RuntimeReady=false reason:R message:m, %s]",
		"container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni config uninitialized")
	if st := s.State(later); st.Ready || st.Message != want {
		t.Fatalf("ready %v %q, want %q", st.Ready, st.Message, want)
	}
}

// TestRuntimeInfoKeptWhileDown: the node keeps the handlers and features of
// the last time the runtime was ready, as the kubelet's runtime state does.
func TestRuntimeInfoKeptWhileDown(t *testing.T) {
	node := InitialNode(identity(), t0)
	s := NewRuntimeSync()
	_ = s.Update(criStatus(true, true), nil, t0)
	SetStatus(node, identity(), s.State(t0), t0)
	if len(node.Status.RuntimeHandlers) != 2 || node.Status.Features == nil {
		t.Fatalf("ready runtime: handlers %v features %v", node.Status.RuntimeHandlers, node.Status.Features)
	}
	down := t0.Add(MaxWaitForContainerRuntime)
	_ = s.Update(nil, errUnavailable, down)
	SetStatus(node, identity(), s.State(down), down)
	if len(node.Status.RuntimeHandlers) != 2 || node.Status.Features == nil || !*node.Status.Features.SupplementalGroupsPolicy {
		t.Errorf("runtime down: handlers %v features %v, want those reported before", node.Status.RuntimeHandlers, node.Status.Features)
	}
	if c := condition(node, corev1.NodeReady); c.Status != corev1.ConditionFalse || c.Reason != "KubeletNotReady" || c.Message != "container runtime is down" {
		t.Errorf("Ready = %v %s %q with the runtime down, want False KubeletNotReady %q", c.Status, c.Reason, c.Message, "container runtime is down")
	}
}
