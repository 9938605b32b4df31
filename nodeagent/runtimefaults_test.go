package nodeagent

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/fakeruntime"
)

// TestRegistryFault: while the node's registry refuses it (a fault set on
// its runtime, as the registryErrors fault phase sets it), a pod's image
// pull fails as the kubelet reports it, ErrImagePull then
// ImagePullBackOff, with a Failed event; once the registry is back the pod
// runs at its next retry, with no restart counted.
func TestRegistryFault(t *testing.T) {
	h := startAgent(t)
	h.allocatePodCIDR(t)
	h.runtime.SetFault(fakeruntime.Fault{PullError: fakeruntime.PullErrorUnauthorized})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default", UID: types.UID("uid-app")},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/app:1", ImagePullPolicy: corev1.PullIfNotPresent}}},
	}
	h.createPod(t, pod)
	h.stepUntil(t, "the pull fails", func() bool { return waitingReason(h.pod(t, "app")) == "ErrImagePull" })
	h.stepSlowly(t, "the pull backs off", func() bool { return waitingReason(h.pod(t, "app")) == "ImagePullBackOff" })
	if !h.hasEventPrefix("Failed", `Failed to pull image "registry.example.com/app:1"`) {
		t.Error("no Failed event for the refused pull")
	}
	if p := h.pod(t, "app"); p.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s while the registry refuses, want Pending", p.Status.Phase)
	}

	h.runtime.SetFault(fakeruntime.Fault{})
	h.stepSlowly(t, "the pod runs once the registry is back", func() bool { return h.pod(t, "app").Status.Phase == corev1.PodRunning })
	if n := h.pod(t, "app").Status.ContainerStatuses[0].RestartCount; n != 0 {
		t.Errorf("restart count %d after the pulls failed, want 0: the container never ran", n)
	}
}

// TestCNIMissingFault: with the node's CNI plugin missing, a pod's sandbox
// fails with the kubelet's FailedCreatePodSandBox event and the runtime's
// message, and the pod stays Pending while the node stays Ready; once the
// plugin is back the kubelet's next sync creates the sandbox and the pod
// runs.
func TestCNIMissingFault(t *testing.T) {
	h := startAgent(t)
	h.allocatePodCIDR(t)
	h.runtime.SetFault(fakeruntime.Fault{CNIMissing: true})
	h.createPod(t, runningPod("app"))
	h.stepUntil(t, "the sandbox fails", func() bool {
		return h.hasEventPrefix("FailedCreatePodSandBox", "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox")
	})
	if n := h.sandboxes(t, "uid-app"); n != 0 {
		t.Errorf("%d sandboxes left by the failed setup, want none", n)
	}
	if p := h.pod(t, "app"); p.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s without a network, want Pending", p.Status.Phase)
	}
	if c := nodeCondition(h.node(t), corev1.NodeReady); c != corev1.ConditionTrue {
		t.Errorf("node Ready %v with the plugin missing, want True: the runtime's network config is there", c)
	}

	h.runtime.SetFault(fakeruntime.Fault{})
	h.stepSlowly(t, "the pod runs once the plugin is back", func() bool { return h.pod(t, "app").Status.Phase == corev1.PodRunning })
}

// stepSlowly steps the fake clock a second at a time, with a moment of
// real time after each, until cond holds: through back-offs of minutes,
// which stepUntil's 30 steps do not cover. It fails after 10 minutes of
// the fake clock or 2 of real time.
func (h *harness) stepSlowly(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for range 600 {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		h.clock.Step(time.Second)
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting until %s", what)
}
