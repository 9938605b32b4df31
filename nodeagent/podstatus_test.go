package nodeagent

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/fakeruntime"
)

// podRequests are the agent's requests about one pod, in order: "get",
// "patch <body>", "delete".
func (h *harness) podRequests(name string) []string {
	var out []string
	for _, a := range h.client.Actions() {
		if a.GetResource().Resource != "pods" || a.GetSubresource() == "binding" {
			continue
		}
		named, ok := a.(interface{ GetName() string })
		if !ok || named.GetName() != name {
			continue
		}
		switch a.GetVerb() {
		case "get", "delete":
			out = append(out, a.GetVerb())
		case "patch":
			out = append(out, "patch "+string(a.(k8stesting.PatchAction).GetPatch()))
		}
	}
	return out
}

// stepUntil steps the fake clock a second at a time, and after each step
// waits in real time (up to a few seconds) for cond, so that what a step
// sets off settles before the next: one step moves the pod one stage on.
func (h *harness) stepUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 30 {
		if cond() {
			return
		}
		h.clock.Step(time.Second)
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if cond() {
				return
			}
		}
	}
	t.Fatalf("timed out waiting until %s", what)
}

func patchedStatus(t *testing.T, req string) map[string]any {
	t.Helper()
	var p struct {
		Status map[string]any `json:"status"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(req, "patch ")), &p); err != nil {
		t.Fatal(err)
	}
	return p.Status
}

// TestAgentSendsTheKubeletsStatusUpdates follows a pod's status updates
// through the agent as the audit log shows a 1.37 kubelet's: at start the
// status without a sandbox, PodReadyToStartContainers (OnPodSandboxReady),
// then Running; at deletion the terminating status (the new generation
// observed) and the terminal phase, then, after the worker has waited for
// a newer PLEG relist, a GET without a PATCH before the delete. The fake
// runtime's latencies hold each stage on the fake clock, so that no two
// updates can reach the status manager together.
func TestAgentSendsTheKubeletsStatusUpdates(t *testing.T) {
	h := startAgent(t, func(c *Config) {
		rt := fakeruntime.New(fakeruntime.Config{Clock: c.Clock.(*clocktesting.FakeClock), Behaviour: fakeruntime.Behaviour{
			SandboxStartLatency: time.Second, ContainerStartLatency: time.Second, StopLatency: time.Second,
		}})
		c.Runtime, c.Images = rt, rt
	})
	ctx := context.Background()
	h.allocatePodCIDR(t)
	h.eventually(t, "the node is Ready", func() bool {
		node := h.node(t)
		return node != nil && nodeCondition(node, corev1.NodeReady) == corev1.ConditionTrue
	})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web", Generation: 1},
		Spec: corev1.PodSpec{
			NodeName: "n1", RestartPolicy: corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
			Volumes:    []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}},
	}
	if _, err := h.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The test reads the tracker, so that the client's actions are the
	// agent's alone.
	get := func() *corev1.Pod {
		obj, err := h.client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "default", "web")
		if err != nil {
			return nil
		}
		return obj.(*corev1.Pod)
	}
	patches := func() []string {
		var out []string
		for _, r := range h.podRequests("web") {
			if strings.HasPrefix(r, "patch ") {
				out = append(out, r)
			}
		}
		return out
	}

	h.stepUntil(t, "the first status", func() bool { return len(patches()) == 1 })
	first := patchedStatus(t, patches()[0])
	if first["phase"] != nil || !strings.Contains(patches()[0], `"message":"no pod sandbox exists"`) {
		t.Errorf("first status %s, want Pending (no phase change) without a sandbox", patches()[0])
	}
	h.stepUntil(t, "PodReadyToStartContainers", func() bool { return len(patches()) == 2 })
	second := patchedStatus(t, patches()[1])
	if second["phase"] != nil || second["podIP"] != nil || second["containerStatuses"] != nil ||
		!strings.Contains(patches()[1], `"status":"True","type":"PodReadyToStartContainers"`) {
		t.Errorf("second status %s, want PodReadyToStartContainers True alone", patches()[1])
	}
	h.stepUntil(t, "Running", func() bool { return len(patches()) == 3 })
	if third := patchedStatus(t, patches()[2]); third["phase"] != string(corev1.PodRunning) || third["podIP"] == nil {
		t.Errorf("third status %s, want Running with the pod IP", patches()[2])
	}

	// A graceful deletion, as the API server makes it: the deletion
	// timestamp, and the generation moved on.
	p := get()
	p.DeletionTimestamp = &metav1.Time{Time: h.clock.Now()}
	p.DeletionGracePeriodSeconds = new(int64)
	*p.DeletionGracePeriodSeconds = 30
	p.Generation = 2
	if _, err := h.client.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The worker waits for a relist newer than its last sync, then reports
	// the terminating status; the kill waits on the fake clock, so that
	// status comes alone.
	h.stepUntil(t, "the terminating status", func() bool { return len(patches()) == 4 })
	if st := get().Status; st.ObservedGeneration != 2 || st.Phase != corev1.PodRunning {
		t.Errorf("terminating status: observedGeneration %d phase %s, want 2 Running", st.ObservedGeneration, st.Phase)
	}
	// Once the kill completes, the stopped containers' status, with the
	// terminal phase (held back, as mergePodStatus does, if the status
	// manager merged it before the worker marked the containers stopped:
	// it then goes out with SyncTerminatedPod's status).
	h.stepUntil(t, "the stopped containers' status", func() bool { return len(patches()) == 5 })
	if st := get().Status; st.ContainerStatuses[0].State.Terminated == nil || st.PodIP == "" {
		t.Errorf("stopped status: %+v, want the container terminated and the pod IP kept", st)
	}
	// The worker waits for a relist newer than the kill's end before it
	// cleans up: nothing more happens until the clock moves.
	if get() == nil || strings.Contains(strings.Join(h.podRequests("web"), " "), "delete") {
		t.Fatal("deleted before the clean-up waited for the PLEG")
	}
	h.stepUntil(t, "the pod is deleted", func() bool { return get() == nil })
	reqs := h.podRequests("web")
	if reqs[len(reqs)-1] != "delete" || reqs[len(reqs)-2] == "delete" {
		t.Fatalf("requests %v, want them to end with one delete", reqs)
	}
	// The delete is TerminatePod's: after a GET of its own, or after the
	// held phase's patch, once the API holds the terminal phase.
	last := patches()[len(patches())-1]
	if !strings.Contains(last, `"phase":"Succeeded"`) {
		t.Errorf("last patch %s, want the terminal phase before the delete", last)
	}
	if n := len(patches()); n != 5 && n != 6 {
		t.Errorf("%d status patches, want the kubelet's 5 (6 with the phase held back): %v", n, patches())
	}
}
