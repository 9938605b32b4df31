package nodeagent

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/fleetlet/fleetlet/nodeagent/allocation"
)

func resources(cpuReq, memReq, cpuLim, memLim string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuReq), corev1.ResourceMemory: resource.MustParse(memReq)},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuLim), corev1.ResourceMemory: resource.MustParse(memLim)},
	}
}

func condition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	if p == nil {
		return nil
	}
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func containerStatus(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// TestAgentResizesInPlace follows a pod through the kubelet's in-place
// resize: one container updated through UpdateContainerResources, one
// restarted by its resize policy, the conditions and events on the way;
// then a resize that does not fit is deferred, and withdrawn.
func TestAgentResizesInPlace(t *testing.T) {
	h := startAgent(t)
	ctx := context.Background()
	h.allocatePodCIDR(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web", Generation: 1},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{Name: "app", Image: "nginx:1.27", Resources: resources("500m", "128Mi", "1", "256Mi")},
				{Name: "db", Image: "redis:7", Resources: resources("250m", "128Mi", "500m", "128Mi"),
					ResizePolicy: []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}}},
			},
		},
	}
	h.createPod(t, pod)
	h.eventually(t, "the pod runs", func() bool { return h.pod(t, "web").Status.Phase == corev1.PodRunning })

	// What kubectl patch --subresource resize does: the API server moves
	// the generation on.
	resize := func(gen int64, app, db corev1.ResourceRequirements) {
		t.Helper()
		p := h.pod(t, "web")
		p.Generation = gen
		p.Spec.Containers[0].Resources, p.Spec.Containers[1].Resources = app, db
		if _, err := h.client.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	resize(2, resources("1", "128Mi", "2", "256Mi"), resources("250m", "256Mi", "500m", "256Mi"))
	h.eventually(t, "the resize is done and reported", func() bool {
		p := h.pod(t, "web")
		app, db := containerStatus(p, "app"), containerStatus(p, "db")
		return p.Status.ObservedGeneration == 2 && condition(p, corev1.PodResizeInProgress) == nil &&
			app != nil && app.Resources != nil && app.Resources.Requests.Cpu().Cmp(resource.MustParse("1")) == 0 &&
			app.Resources.Limits.Cpu().Cmp(resource.MustParse("2")) == 0 &&
			db != nil && db.RestartCount == 1 && db.State.Running != nil &&
			db.Resources != nil && db.Resources.Limits.Memory().Cmp(resource.MustParse("256Mi")) == 0 &&
			h.hasEventPrefix(allocation.ResizeCompleted, "Pod resize completed: ")
	})
	p := h.pod(t, "web")
	if app := containerStatus(p, "app"); app.RestartCount != 0 || app.AllocatedResources.Cpu().Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("app: restarts %d, allocated %v; want it resized in place to 1 cpu", app.RestartCount, app.AllocatedResources)
	}
	if got := p.Status.AllocatedResources.Cpu(); got.Cmp(resource.MustParse("1250m")) != 0 {
		t.Errorf("pod allocatedResources cpu = %v, want 1250m", got)
	}
	if !h.hasEventPrefix(allocation.ResizeStarted, `Pod resize started: {"containers":[{"name":"app","resources":{"limits":{"cpu":"2","memory":"256Mi"},"requests":{"cpu":"1","memory":"128Mi"}}}`) {
		t.Error("no ResizeStarted event with the resources asked for")
	}
	if !h.hasContainerEvent("spec.containers{db}", "Killing", "Container db resize requires restart") {
		t.Error("no Killing event for the container its policy restarts")
	}
	// The runtime was told: the app container's cgroup settings changed.
	containers, err := h.runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range containers {
		if c.Metadata.Name != "app" {
			continue
		}
		st, err := h.runtime.ContainerStatus(ctx, c.Id, false)
		if err != nil {
			t.Fatal(err)
		}
		if l := st.Status.Resources.GetLinux(); l.CpuShares != 1024 || l.CpuQuota != 200000 {
			t.Errorf("app's cgroup: shares %d quota %d, want 1024 and 200000", l.CpuShares, l.CpuQuota)
		}
	}

	// Larger than the node: deferred with the admission's message.
	resize(3, resources("20", "128Mi", "20", "256Mi"), resources("250m", "256Mi", "500m", "256Mi"))
	h.eventually(t, "the resize is deferred", func() bool {
		c := condition(h.pod(t, "web"), corev1.PodResizePending)
		return c != nil && c.Reason == corev1.PodReasonDeferred && c.ObservedGeneration == 3
	})
	c := condition(h.pod(t, "web"), corev1.PodResizePending)
	if !strings.HasPrefix(c.Message, "Node didn't have enough resource: cpu, requested: 20250, used: 0, capacity: ") {
		t.Errorf("PodResizePending message %q, want the admission's", c.Message)
	}
	if !h.hasEventPrefix(allocation.ResizeDeferred, "Pod resize Deferred: ") {
		t.Error("no ResizeDeferred event")
	}
	if got := containerStatus(h.pod(t, "web"), "app").AllocatedResources.Cpu(); got.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("allocated cpu = %v while deferred, want 1", got)
	}
	// Withdrawn: back to what is allocated, nothing is pending.
	resize(4, resources("1", "128Mi", "2", "256Mi"), resources("250m", "256Mi", "500m", "256Mi"))
	h.eventually(t, "the withdrawn resize is no longer pending", func() bool {
		p := h.pod(t, "web")
		return p.Status.ObservedGeneration == 4 && condition(p, corev1.PodResizePending) == nil
	})
}

// createPod creates pod bound to the harness's node, Pending and
// scheduled, as the scheduler leaves it.
func (h *harness) createPod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	pod.Spec.NodeName, pod.Spec.RestartPolicy = "n1", corev1.RestartPolicyAlways
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}}
	if _, err := h.client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// hasEventPrefix reports an event with that reason whose message starts so.
func (h *harness) hasEventPrefix(reason, prefix string) bool {
	events, err := h.client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, e := range events.Items {
		if e.Reason == reason && strings.HasPrefix(e.Message, prefix) {
			return true
		}
	}
	return false
}

// TestAgentReconcilesReadinessGate: a readiness gate's condition set by its
// controller (a status update, which changes nothing the pod asks for)
// makes the pod Ready without waiting for a resync: the clock does not
// move here.
func TestAgentReconcilesReadinessGate(t *testing.T) {
	h := startAgent(t)
	ctx := context.Background()
	h.allocatePodCIDR(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec: corev1.PodSpec{
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "example.com/lb-ready"}},
			Containers:     []corev1.Container{{Name: "app", Image: "nginx:1.27"}},
		},
	}
	h.createPod(t, pod)
	h.eventually(t, "the pod runs, held unready by its gate", func() bool {
		p := h.pod(t, "web")
		c, r := condition(p, corev1.ContainersReady), condition(p, corev1.PodReady)
		return c != nil && c.Status == corev1.ConditionTrue && r != nil && r.Reason == "ReadinessGatesNotReady"
	})
	p := h.pod(t, "web")
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: "example.com/lb-ready", Status: corev1.ConditionTrue})
	if _, err := h.client.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		r := condition(h.pod(t, "web"), corev1.PodReady)
		return r != nil && r.Status == corev1.ConditionTrue, nil
	})
	if err != nil {
		t.Fatalf("Ready = %+v after the gate turned True, want True without a resync", condition(h.pod(t, "web"), corev1.PodReady))
	}
}

// TestAgentResizesPodLevelResources: a resize of the pod-level resources
// (InPlacePodLevelResourcesVerticalScaling) is allocated and read back from
// the pod's cgroup into status.resources.
func TestAgentResizesPodLevelResources(t *testing.T) {
	h := startAgent(t)
	ctx := context.Background()
	h.allocatePodCIDR(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web", Generation: 1},
		Spec: corev1.PodSpec{
			Resources:  &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("256Mi")}, Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("256Mi")}},
			Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27"}},
		},
	}
	h.createPod(t, pod)
	h.eventually(t, "the pod runs", func() bool { return h.pod(t, "web").Status.Phase == corev1.PodRunning })
	p := h.pod(t, "web")
	p.Generation = 2
	p.Spec.Resources.Requests[corev1.ResourceCPU], p.Spec.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("2"), resource.MustParse("2")
	if _, err := h.client.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "the pod-level resize is allocated and read back", func() bool {
		p := h.pod(t, "web")
		return p.Status.ObservedGeneration == 2 && p.Status.AllocatedResources.Cpu().Cmp(resource.MustParse("2")) == 0 &&
			p.Status.Resources != nil && p.Status.Resources.Limits.Cpu().Cmp(resource.MustParse("2")) == 0 &&
			condition(p, corev1.PodResizeInProgress) == nil && h.hasEventPrefix(allocation.ResizeCompleted, "")
	})
}
