package nodeagent

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/reports"
)

// marks records every milestone, to check that the agent stamps its steps.
type marks struct {
	mu sync.Mutex
	m  map[types.UID]map[reports.Milestone]time.Time
}

func (r *marks) Mark(uid types.UID, m reports.Milestone, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[types.UID]map[reports.Milestone]time.Time{}
	}
	if r.m[uid] == nil {
		r.m[uid] = map[reports.Milestone]time.Time{}
	}
	if _, ok := r.m[uid][m]; !ok {
		r.m[uid][m] = at
	}
}

func (r *marks) has(uid types.UID, m reports.Milestone) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.m[uid][m]
	return ok
}

func (r *marks) at(uid types.UID, m reports.Milestone) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[uid][m]
}

type harness struct {
	client  *fake.Clientset
	runtime *fakeruntime.Runtime
	clock   *clocktesting.FakeClock
	marks   *marks
	// cfg is the Config the agent was built from, agent the agent.
	cfg    Config
	agent  *Agent
	cancel context.CancelFunc
	done   chan error
}

func startAgent(t *testing.T, opts ...func(*Config)) *harness {
	t.Helper()
	h := newHarness(t)
	h.run(t, h.config(opts...))
	return h
}

// newHarness makes the API server, clock and runtime of a node, and stops
// its agent, if one runs, when the test ends.
func newHarness(t *testing.T) *harness {
	h := &harness{
		client: fake.NewClientset(),
		clock:  clocktesting.NewFakeClock(time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)),
		marks:  &marks{},
	}
	h.runtime = fakeruntime.New(fakeruntime.Config{Clock: h.clock})
	t.Cleanup(func() { h.stop(t) })
	return h
}

// config is the node's Config, changed by opts.
func (h *harness) config(opts ...func(*Config)) Config {
	cfg := Config{
		NodeName: "n1",
		NodeIP:   net.ParseIP("127.1.0.1"),
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi")},
		Client:   h.client, Runtime: h.runtime, Images: h.runtime,
		Recorder: h.marks, Clock: h.clock,
	}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// run builds an agent from cfg and runs it until stop.
func (h *harness) run(t *testing.T, cfg Config) {
	t.Helper()
	agent, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.cfg, h.agent = cfg, agent
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	h.cancel, h.done = cancel, done
	go func() { done <- agent.Run(ctx) }()
}

// stop ends the running agent's context and waits for its Run to return.
func (h *harness) stop(t *testing.T) {
	t.Helper()
	if h.cancel == nil {
		return
	}
	h.cancel()
	select {
	case err := <-h.done:
		if err != nil {
			t.Errorf("agent.Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("agent did not stop within 30s of its context ending")
	}
	h.cancel, h.done = nil, nil
}

// eventually steps the fake clock by a second at a time (driving the PLEG,
// node status and status manager loops) until cond holds or a real-time
// deadline passes.
func (h *harness) eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		if cond() {
			return true, nil
		}
		h.clock.Step(time.Second)
		return false, nil
	})
	if err != nil {
		t.Fatalf("timed out waiting until %s", what)
	}
}

// allocatePodCIDR plays the controller-manager's node IPAM once the node is
// registered; the agent hands the CIDR to its runtime.
func (h *harness) allocatePodCIDR(t *testing.T) {
	t.Helper()
	h.eventually(t, "the node is registered", func() bool { return h.node(t) != nil })
	node := h.node(t)
	node.Spec.PodCIDR = "10.64.3.0/24"
	if _, err := h.client.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) node(t *testing.T) *corev1.Node {
	node, err := h.client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return node
}

func TestAgentRegistersNodeAndHeartbeats(t *testing.T) {
	h := startAgent(t)
	ctx := context.Background()
	h.eventually(t, "the node is Ready", func() bool {
		node := h.node(t)
		return node != nil && nodeCondition(node, corev1.NodeReady) == corev1.ConditionTrue
	})
	// The controller-manager allocates a pod CIDR; the agent hands it to the runtime.
	node := h.node(t)
	node.Spec.PodCIDR = "10.64.3.0/24"
	if _, err := h.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	node = h.node(t)
	if node.Labels[corev1.LabelHostname] != "n1" || node.Labels[corev1.LabelOSStable] != "linux" {
		t.Errorf("labels = %v", node.Labels)
	}
	if got := node.Status.Addresses; len(got) != 2 || got[0].Address != "127.1.0.1" || got[0].Type != corev1.NodeInternalIP {
		t.Errorf("addresses = %v", got)
	}
	if node.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("kubelet endpoint = %v", node.Status.DaemonEndpoints)
	}
	if q := node.Status.Allocatable[corev1.ResourcePods]; q.Value() != 110 {
		t.Errorf("allocatable pods = %v, want the kubelet's maxPods 110", q.String())
	}
	if node.Status.NodeInfo.ContainerRuntimeVersion != fakeruntime.RuntimeName+"://"+fakeruntime.RuntimeVersion {
		t.Errorf("runtime version = %q", node.Status.NodeInfo.ContainerRuntimeVersion)
	}
	var lease *coordinationv1.Lease
	h.eventually(t, "the lease exists", func() bool {
		var err error
		lease, err = h.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, "n1", metav1.GetOptions{})
		return err == nil
	})
	if *lease.Spec.LeaseDurationSeconds != 40 || *lease.Spec.HolderIdentity != "n1" {
		t.Errorf("lease = %+v, want 40 s held by n1", lease.Spec)
	}
	if len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].Kind != "Node" {
		t.Errorf("lease owners = %v, want the node", lease.OwnerReferences)
	}
}

func TestAgentRunsAndDeletesPod(t *testing.T) {
	h := startAgent(t)
	ctx := context.Background()
	h.allocatePodCIDR(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec: corev1.PodSpec{
			NodeName:      "n1",
			RestartPolicy: corev1.RestartPolicyAlways,
			Containers:    []corev1.Container{{Name: "app", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}},
	}
	if _, err := h.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	h.eventually(t, "the pod is reported Running and Ready", func() bool {
		p, err := h.client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false
		}
		got = p
		return p.Status.Phase == corev1.PodRunning && podCondition(p, corev1.PodReady) == corev1.ConditionTrue
	})
	if got.Status.PodIP == "" || got.Status.HostIP != "127.1.0.1" {
		t.Errorf("podIP %q hostIP %q", got.Status.PodIP, got.Status.HostIP)
	}
	if podCondition(got, corev1.PodScheduled) != corev1.ConditionTrue {
		t.Errorf("PodScheduled lost from the API status: %v", got.Status.Conditions)
	}
	cs := got.Status.ContainerStatuses
	if len(cs) != 1 || cs[0].State.Running == nil || cs[0].ContainerID == "" || cs[0].ImageID == "" {
		t.Fatalf("container statuses = %+v", cs)
	}
	// The status manager stamps a report once its patch returns, which the
	// fake client may show the test first.
	h.eventually(t, "every agent milestone is stamped", func() bool {
		for _, m := range []reports.Milestone{reports.AgentObserved, reports.VolumesMounted, reports.SandboxReady, reports.ImagesPulled, reports.ContainersStarted, reports.RunningSet, reports.RunningReported, reports.ReadyReported} {
			if !h.marks.has(pod.UID, m) {
				return false
			}
		}
		return true
	})
	if set, reported := h.marks.at(pod.UID, reports.RunningSet), h.marks.at(pod.UID, reports.RunningReported); set.After(reported) {
		t.Errorf("running_set %v is after running_reported %v", set, reported)
	}

	// A graceful delete: the API server sets the deletion timestamp and
	// waits for the kubelet to stop the containers and delete with grace 0.
	got.DeletionTimestamp = &metav1.Time{Time: h.clock.Now()}
	got.DeletionGracePeriodSeconds = new(int64)
	*got.DeletionGracePeriodSeconds = 30
	if _, err := h.client.CoreV1().Pods("default").Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "the agent deletes the pod", func() bool {
		_, err := h.client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	sandboxes, err := h.runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{})
	if err != nil {
		t.Fatal(err)
	}
	containers, err := h.runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sandboxes) != 0 || len(containers) != 0 {
		t.Errorf("runtime still holds %d sandboxes and %d containers after the pod was deleted", len(sandboxes), len(containers))
	}
}

func nodeCondition(node *corev1.Node, t corev1.NodeConditionType) corev1.ConditionStatus {
	for _, c := range node.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func TestAgentRejectsPodThatDoesNotFit(t *testing.T) {
	h := startAgent(t)
	ctx := context.Background()
	h.eventually(t, "the node is Ready", func() bool {
		node := h.node(t)
		return node != nil && nodeCondition(node, corev1.NodeReady) == corev1.ConditionTrue
	})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "huge", Namespace: "default", UID: "uid-huge"},
		Spec: corev1.PodSpec{
			NodeName: "n1",
			Containers: []corev1.Container{{Name: "app", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")},
			}}},
		},
	}
	if _, err := h.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	h.eventually(t, "the pod is rejected", func() bool {
		p, err := h.client.CoreV1().Pods("default").Get(ctx, "huge", metav1.GetOptions{})
		got = p
		return err == nil && p.Status.Phase == corev1.PodFailed
	})
	want := "Pod was rejected: Node didn't have enough resource: cpu, requested: 16000, used: 0, capacity: 8000"
	if got.Status.Reason != "OutOfcpu" || got.Status.Message != want {
		t.Errorf("status %q %q, want OutOfcpu %q", got.Status.Reason, got.Status.Message, want)
	}
	if sandboxes, _ := h.runtime.ListPodSandbox(ctx, nil); len(sandboxes) != 0 {
		t.Errorf("a rejected pod got %d sandboxes", len(sandboxes))
	}
}

func TestAgentEnforcesActiveDeadline(t *testing.T) {
	h := startAgent(t)
	ctx := context.Background()
	h.allocatePodCIDR(t)
	deadline := int64(30)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "default", UID: "uid-job"},
		Spec: corev1.PodSpec{
			NodeName: "n1", RestartPolicy: corev1.RestartPolicyNever, ActiveDeadlineSeconds: &deadline,
			Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
		},
	}
	if _, err := h.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	h.eventually(t, "the pod fails past its deadline", func() bool {
		p, err := h.client.CoreV1().Pods("default").Get(ctx, "job", metav1.GetOptions{})
		got = p
		return err == nil && p.Status.Phase == corev1.PodFailed
	})
	if got.Status.Reason != "DeadlineExceeded" {
		t.Errorf("reason %q, want DeadlineExceeded", got.Status.Reason)
	}
	if got.Status.StartTime == nil || h.clock.Since(got.Status.StartTime.Time) < 30*time.Second {
		t.Errorf("failed before its deadline: started %v, now %v", got.Status.StartTime, h.clock.Now())
	}
	h.eventually(t, "its containers are stopped", func() bool {
		containers, _ := h.runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
		return len(containers) == 0
	})
}
