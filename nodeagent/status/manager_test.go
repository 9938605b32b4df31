package status

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
	"github.com/fleetlet/fleetlet/reports"
)

// statusHarness is a Manager against a fake API server holding one pod,
// synced by hand (syncBatch) so that each status version is one sync.
type statusHarness struct {
	t        *testing.T
	client   *fake.Clientset
	clock    *clocktesting.FakeClock
	m        *Manager
	couldRun atomic.Bool
	seen     int
}

func newStatusHarness(t *testing.T, pod *corev1.Pod) *statusHarness {
	t.Helper()
	h := &statusHarness{t: t, client: fake.NewClientset(pod), clock: clocktesting.NewFakeClock(t0)}
	h.m = NewManager(Config{
		Client: h.client, Clock: h.clock, Recorder: reports.Discard{},
		CouldHaveRunningContainers: func(types.UID) bool { return h.couldRun.Load() },
	})
	return h
}

// sync runs one batch and returns the pod requests it sent: "get",
// "patch" (with its body) and "delete".
func (h *statusHarness) sync() []string {
	h.t.Helper()
	h.m.syncBatch(context.Background())
	var out []string
	actions := h.client.Actions()
	for _, a := range actions[h.seen:] {
		if a.GetResource().Resource != "pods" {
			continue
		}
		switch a := a.(type) {
		case k8stesting.PatchAction:
			out = append(out, "patch "+string(a.GetPatch()))
		default:
			out = append(out, a.GetVerb())
		}
	}
	h.seen = len(actions)
	return out
}

// apiPod is the pod as the fake API server holds it.
func (h *statusHarness) apiPod() *corev1.Pod {
	h.t.Helper()
	p, err := h.client.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	h.seen = len(h.client.Actions())
	return p
}

// verbs are the requests' verbs, a patch as "patch".
func verbs(reqs []string) string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i], _, _ = strings.Cut(r, " ")
	}
	return strings.Join(out, " ")
}

// patchStatus decodes a patch's status part.
func patchStatus(t *testing.T, req string) map[string]any {
	t.Helper()
	body, ok := strings.CutPrefix(req, "patch ")
	if !ok {
		t.Fatalf("%q is not a patch", req)
	}
	var p struct {
		Status map[string]any `json:"status"`
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatal(err)
	}
	return p.Status
}

// TestStatusUpdatesOfAPodsLife follows the kubelet's status updates of a
// pod with one container from its binding to its deletion, each synced
// alone: three at start (no sandbox; PodReadyToStartContainers; Running),
// then the terminating status (the deletion's generation), the terminal
// phase, SyncTerminatedPod's forced repeat (a GET only) and TerminatePod
// (a GET, then the delete).
func TestStatusUpdatesOfAPodsLife(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, false, "app")
	pod.Generation = 1
	h := newStatusHarness(t, pod)
	running := runtimeapi.ContainerState_CONTAINER_RUNNING
	gen := func(rt *kuberuntime.PodStatus, terminal bool) corev1.PodStatus {
		prev, ok := h.m.Status(pod.UID)
		if !ok {
			prev = pod.Status
		}
		return Generate(Input{Pod: pod, Runtime: rt, NodeIP: nodeIP, RuntimeName: "fake", Now: h.clock.Now(), Previous: prev, Terminal: terminal})
	}

	// SyncPod's first status: no sandbox yet.
	h.m.SetPodStatus(pod, gen(nil, false))
	reqs := h.sync()
	if verbs(reqs) != "get patch" {
		t.Fatalf("first status: requests %v, want a GET and a PATCH", reqs)
	}
	st := h.apiPod().Status
	if st.Phase != corev1.PodPending || st.ObservedGeneration != 1 {
		t.Errorf("first status: phase %s observedGeneration %d, want Pending 1", st.Phase, st.ObservedGeneration)
	}
	c := findCondition(st.Conditions, corev1.PodReadyToStartContainers)
	if c == nil || c.Status != corev1.ConditionFalse || c.Reason != "PodSandboxNotReady" || c.Message != "no pod sandbox exists" || c.ObservedGeneration != 1 {
		t.Errorf("first status: PodReadyToStartContainers = %+v, want the kubelet's False for no sandbox", c)
	}
	if c := findCondition(st.Conditions, corev1.PodScheduled); c == nil || c.Status != corev1.ConditionTrue || c.ObservedGeneration != 1 {
		t.Errorf("first status: PodScheduled = %+v, want True with the generation observed", c)
	}

	// OnPodSandboxReady, a second later: only the condition changes.
	h.clock.Step(time.Second)
	prev, _ := h.m.Status(pod.UID)
	h.m.SetPodStatus(pod, SandboxReady(pod, prev, h.clock.Now()))
	reqs = h.sync()
	if verbs(reqs) != "get patch" {
		t.Fatalf("sandbox ready: requests %v, want a GET and a PATCH", reqs)
	}
	ps := patchStatus(t, reqs[1])
	if _, ok := ps["phase"]; ok {
		t.Errorf("sandbox ready: patch %s changes the phase", reqs[1])
	}
	if _, ok := ps["podIP"]; ok {
		t.Errorf("sandbox ready: patch %s sends the pod IP, which the kubelet's sends with the next sync", reqs[1])
	}
	if c := findCondition(h.apiPod().Status.Conditions, corev1.PodReadyToStartContainers); c == nil || c.Status != corev1.ConditionTrue || c.Reason != "" {
		t.Errorf("sandbox ready: PodReadyToStartContainers = %+v, want True", c)
	}

	// The sync after the PLEG saw the container start.
	rt := &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(true)}, Containers: []*kuberuntime.ContainerStatus{ctr("app", running, 0)}}
	h.m.SetPodStatus(pod, gen(rt, false))
	if reqs = h.sync(); verbs(reqs) != "get patch" {
		t.Fatalf("running: requests %v, want a GET and a PATCH", reqs)
	}
	if st := h.apiPod().Status; st.Phase != corev1.PodRunning || st.PodIP != "10.64.0.5" {
		t.Errorf("running: phase %s podIP %q", st.Phase, st.PodIP)
	}
	// Nothing changed: nothing is sent.
	h.m.SetPodStatus(pod, gen(rt, false))
	if reqs = h.sync(); len(reqs) != 0 {
		t.Errorf("unchanged status: requests %v, want none", reqs)
	}

	// A graceful deletion moves the generation on.
	h.couldRun.Store(true)
	pod = h.apiPod()
	pod.DeletionTimestamp = &metav1.Time{Time: h.clock.Now()}
	pod.Generation = 2
	if _, err := h.client.CoreV1().Pods("ns").Update(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.seen = len(h.client.Actions())
	// SyncTerminatingPod's first status, before the kill.
	h.m.SetPodStatus(pod, gen(rt, false))
	if reqs = h.sync(); verbs(reqs) != "get patch" {
		t.Fatalf("terminating: requests %v, want a GET and a PATCH", reqs)
	}
	if st := h.apiPod().Status; st.ObservedGeneration != 2 || st.Phase != corev1.PodRunning {
		t.Errorf("terminating: observedGeneration %d phase %s, want 2 Running", st.ObservedGeneration, st.Phase)
	}
	// After the kill: the terminal phase, sent once the worker has stopped
	// the containers.
	stopped := &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(false)}, Containers: []*kuberuntime.ContainerStatus{ctr("app", runtimeapi.ContainerState_CONTAINER_EXITED, 0)}}
	h.m.SetPodStatus(pod, gen(stopped, true))
	h.couldRun.Store(false)
	if reqs = h.sync(); verbs(reqs) != "get patch" {
		t.Fatalf("terminal: requests %v, want a GET and a PATCH", reqs)
	}
	st = h.apiPod().Status
	if st.Phase != corev1.PodSucceeded || st.PodIP != "10.64.0.5" {
		t.Errorf("terminal: phase %s podIP %q, want Succeeded with the pod IP kept", st.Phase, st.PodIP)
	}
	for _, ct := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
		if c := findCondition(st.Conditions, ct); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "PodCompleted" {
			t.Errorf("terminal: %s = %+v, want False PodCompleted", ct, c)
		}
	}
	// SyncTerminatedPod's status: the same, forced by the deletion.
	h.m.SetPodStatus(pod, gen(stopped, true))
	if reqs = h.sync(); verbs(reqs) != "get" {
		t.Errorf("terminated: requests %v, want a GET alone (nothing to patch)", reqs)
	}
	// TerminatePod: the final GET, then the delete.
	h.m.TerminatePod(pod)
	if reqs = h.sync(); verbs(reqs) != "get delete" {
		t.Errorf("finished: requests %v, want a GET and the delete", reqs)
	}
	if _, err := h.client.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod is still in the API server: %v", err)
	}
	h.seen = len(h.client.Actions())
	if reqs = h.sync(); len(reqs) != 0 {
		t.Errorf("after the delete: requests %v, want none", reqs)
	}
}

// TestTerminalPhaseWaitsForContainersToStop is mergePodStatus's guard: a
// pod whose containers may still run is not reported terminal (nor its
// DisruptionTarget), the API's phase stands; the phase goes out once the
// worker has stopped them.
func TestTerminalPhaseWaitsForContainersToStop(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, false, "app")
	pod.Status.Phase = corev1.PodRunning
	h := newStatusHarness(t, pod)
	h.couldRun.Store(true)
	evicted := corev1.PodStatus{
		Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory.",
		Conditions: []corev1.PodCondition{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet"},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		},
	}
	h.m.SetPodStatus(pod, evicted)
	h.sync()
	st := h.apiPod().Status
	if st.Phase != corev1.PodRunning || st.Reason != "" {
		t.Errorf("while containers may run: phase %s reason %q, want the API's Running", st.Phase, st.Reason)
	}
	if c := findCondition(st.Conditions, corev1.DisruptionTarget); c != nil {
		t.Errorf("while containers may run: DisruptionTarget %+v sent before the terminal phase", c)
	}
	h.couldRun.Store(false)
	h.m.TerminatePod(pod)
	h.sync()
	st = h.apiPod().Status
	if st.Phase != corev1.PodFailed || st.Reason != "Evicted" {
		t.Errorf("stopped: phase %s reason %q, want Failed Evicted", st.Phase, st.Reason)
	}
	if c := findCondition(st.Conditions, corev1.DisruptionTarget); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("stopped: DisruptionTarget = %+v, want it with the terminal phase", c)
	}
	if c := findCondition(st.Conditions, corev1.PodReady); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "PodFailed" {
		t.Errorf("stopped: Ready = %+v, want False PodFailed with a terminal phase", c)
	}
}

// TestTerminatePodReportsUnknownContainers: a container the pod may have
// started but has no final state for is reported as the kubelet does, and
// the phase is terminal.
func TestTerminatePodReportsUnknownContainers(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, false, "app")
	h := newStatusHarness(t, pod)
	h.m.SetPodStatus(pod, Generate(Input{Pod: pod, NodeIP: nodeIP, Now: t0, Previous: pod.Status}))
	h.m.TerminatePod(pod)
	st, _ := h.m.Status(pod.UID)
	if st.Phase != corev1.PodFailed {
		t.Errorf("phase %s, want Failed", st.Phase)
	}
	term := st.ContainerStatuses[0].State.Terminated
	if term == nil || term.Reason != "ContainerStatusUnknown" || term.ExitCode != 137 {
		t.Errorf("container state %+v, want terminated ContainerStatusUnknown 137", st.ContainerStatuses[0].State)
	}
}

// TestDeleteWaitsForTheAPIsTerminalPhase is canBeDeleted: a finished pod is
// deleted only once the API server holds its terminal phase.
func TestDeleteWaitsForTheAPIsTerminalPhase(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, false, "app")
	pod.Status.Phase = corev1.PodRunning
	pod.DeletionTimestamp = &metav1.Time{Time: t0}
	h := newStatusHarness(t, pod)
	h.couldRun.Store(true) // a worker that never reported the containers stopped
	h.m.TerminatePod(pod)
	if reqs := h.sync(); strings.Contains(verbs(reqs), "delete") {
		t.Fatalf("requests %v: deleted a pod whose API phase is not terminal", reqs)
	}
	h.couldRun.Store(false)
	if reqs := h.sync(); verbs(reqs) != "get patch delete" {
		t.Errorf("requests %v, want the held terminal phase sent, then the delete", reqs)
	}
}
