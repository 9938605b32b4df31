package nodeagent

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/internal/testutil"
)

// insecureClient talks to an agent's kubelet API, whose certificate is
// self-signed.
func insecureClient() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
}

func runningPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			NodeName: "n1", RestartPolicy: corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{Name: "app", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// sandboxes are the runtime's sandboxes of a pod, of any state.
func (h *harness) sandboxes(t *testing.T, uid types.UID) int {
	t.Helper()
	list, err := h.runtime.ListPodSandbox(context.Background(), &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{kubelettypes.KubernetesPodUIDLabel: string(uid)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

// runningContainersOf are the runtime's running containers of a pod.
func (h *harness) runningContainersOf(t *testing.T, uid types.UID) int {
	t.Helper()
	list, err := h.runtime.ListContainers(context.Background(), &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{kubelettypes.KubernetesPodUIDLabel: string(uid)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

// deleteGracefully does what the API server does on a graceful delete: it
// sets the deletion timestamp and waits for the kubelet.
func (h *harness) deleteGracefully(t *testing.T, name string, grace int64) {
	t.Helper()
	p := h.pod(t, name)
	p.DeletionTimestamp = &metav1.Time{Time: h.clock.Now()}
	p.DeletionGracePeriodSeconds = ptr.To(grace)
	if _, err := h.client.CoreV1().Pods("default").Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) leaseRenewed(t *testing.T) time.Time {
	t.Helper()
	l, err := h.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil || l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

// stepFor steps the fake clock a second at a time for d, giving the agent
// a moment of real time after each step to act on it, and calls check
// after each: for what must not happen, a slow machine can only make the
// test pass wrongly, never fail.
func (h *harness) stepFor(t *testing.T, d time.Duration, check func()) {
	t.Helper()
	for range int(d / time.Second) {
		h.clock.Step(time.Second)
		time.Sleep(5 * time.Millisecond)
		check()
	}
}

// TestStalledPodWorkers: while its pod workers are stalled, a node starts no
// pod bound to it and carries out no deletion, while its lease renews, it
// stays Ready, its kubelet API is healthy and its running containers run;
// freed, it starts the new pod and kills the deleted one.
func TestStalledPodWorkers(t *testing.T) {
	// The lease controller renews on the real clock: a lease of a second
	// renews every 250 ms of the test.
	h := startAgent(t, withKubeletAPI(t), func(c *Config) {
		c.Kubelet = DefaultKubeletConfiguration()
		c.Kubelet.NodeLeaseDurationSeconds = 1
	})
	ctx := context.Background()
	h.allocatePodCIDR(t)
	h.createPod(t, runningPod("old"))
	h.eventually(t, "the first pod runs", func() bool {
		p := h.pod(t, "old")
		return p != nil && p.Status.Phase == corev1.PodRunning
	})

	h.agent.StallPodWorkers(true)
	h.agent.StallPodWorkers(true)
	stalled := h.clock.Now()
	h.createPod(t, runningPod("new"))
	h.deleteGracefully(t, "old", 30)
	h.stepFor(t, time.Minute, func() {
		if n := h.sandboxes(t, "uid-new"); n != 0 {
			t.Fatalf("the pod bound during the stall got %d sandboxes", n)
		}
		if p := h.pod(t, "new"); p == nil || p.Status.Phase != corev1.PodPending || len(p.Status.ContainerStatuses) != 0 {
			t.Fatalf("the pod bound during the stall: %+v, want it Pending as created", p.Status)
		}
		if h.pod(t, "old") == nil || h.runningContainersOf(t, "uid-old") != 1 {
			t.Fatal("the pod deleted during the stall was killed")
		}
	})
	testutil.WaitFor(t, "the lease is renewed during the stall", func() bool { return h.leaseRenewed(t).After(stalled) })
	node := h.node(t)
	if c := nodeCondition(node, corev1.NodeReady); c != corev1.ConditionTrue {
		t.Errorf("node Ready = %v during the stall, want True", c)
	}
	base := "https://" + net.JoinHostPort("127.1.0.1", strconv.Itoa(int(node.Status.DaemonEndpoints.KubeletEndpoint.Port)))
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
	req.Header.Set("Authorization", "Bearer t")
	resp, err := insecureClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz during the stall: %s, want 200", resp.Status)
	}

	h.agent.StallPodWorkers(false)
	h.eventually(t, "the pod bound during the stall runs", func() bool {
		p := h.pod(t, "new")
		return p != nil && p.Status.Phase == corev1.PodRunning && h.runningContainersOf(t, "uid-new") == 1
	})
	h.eventually(t, "the pod deleted during the stall is gone", func() bool {
		_, err := h.client.CoreV1().Pods("default").Get(ctx, "old", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && h.runningContainersOf(t, "uid-old") == 0
	})
}
