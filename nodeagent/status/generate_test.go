package status

import (
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
)

var (
	t0     = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	nodeIP = net.ParseIP("127.1.0.1")
)

func testPod(restart corev1.RestartPolicy, hostNetwork bool, names ...string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec:       corev1.PodSpec{RestartPolicy: restart, HostNetwork: hostNetwork},
		Status: corev1.PodStatus{
			QOSClass:   corev1.PodQOSBestEffort,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}},
		},
	}
	for _, n := range names {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: n, Image: "img-" + n})
	}
	return pod
}

func sandbox(ready bool) *runtimeapi.PodSandboxStatus {
	st := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	if ready {
		st = runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return &runtimeapi.PodSandboxStatus{Id: "sb", State: st, Network: &runtimeapi.PodSandboxNetworkStatus{Ip: "10.64.0.5"}}
}

func ctr(name string, state runtimeapi.ContainerState, exit int32) *kuberuntime.ContainerStatus {
	return &kuberuntime.ContainerStatus{
		ID: "id-" + name, Name: name, State: state, ExitCode: exit, ImageRef: "sha256:" + name,
		CreatedAt: t0, StartedAt: t0.Add(time.Second), FinishedAt: t0.Add(2 * time.Second),
	}
}

func cond(st corev1.PodStatus, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range st.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return "missing"
}

func TestGenerate(t *testing.T) {
	running, exited, created := runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_EXITED, runtimeapi.ContainerState_CONTAINER_CREATED
	cases := []struct {
		name        string
		pod         *corev1.Pod
		rt          *kuberuntime.PodStatus
		terminal    bool
		phase       corev1.PodPhase
		sandboxCond corev1.ConditionStatus
		ready       corev1.ConditionStatus
		podIP       string
	}{
		{
			name:  "first sync, nothing in the runtime yet",
			pod:   testPod(corev1.RestartPolicyAlways, false, "a"),
			phase: corev1.PodPending, sandboxCond: corev1.ConditionFalse, ready: corev1.ConditionFalse,
		},
		{
			name:  "sandbox ready, containers still being created",
			pod:   testPod(corev1.RestartPolicyAlways, false, "a", "b"),
			rt:    &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(true)}, Containers: []*kuberuntime.ContainerStatus{ctr("a", running, 0)}},
			phase: corev1.PodPending, sandboxCond: corev1.ConditionTrue, ready: corev1.ConditionFalse, podIP: "10.64.0.5",
		},
		{
			name:  "a created container is not ready",
			pod:   testPod(corev1.RestartPolicyAlways, false, "a"),
			rt:    &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(true)}, Containers: []*kuberuntime.ContainerStatus{ctr("a", created, 0)}},
			phase: corev1.PodPending, sandboxCond: corev1.ConditionTrue, ready: corev1.ConditionFalse, podIP: "10.64.0.5",
		},
		{
			name:  "all running",
			pod:   testPod(corev1.RestartPolicyAlways, false, "a", "b"),
			rt:    &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(true)}, Containers: []*kuberuntime.ContainerStatus{ctr("a", running, 0), ctr("b", running, 0)}},
			phase: corev1.PodRunning, sandboxCond: corev1.ConditionTrue, ready: corev1.ConditionTrue, podIP: "10.64.0.5",
		},
		{
			name:  "host network reports the node IP",
			pod:   testPod(corev1.RestartPolicyAlways, true, "a"),
			rt:    &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(true)}, Containers: []*kuberuntime.ContainerStatus{ctr("a", running, 0)}},
			phase: corev1.PodRunning, sandboxCond: corev1.ConditionTrue, ready: corev1.ConditionTrue, podIP: nodeIP.String(),
		},
		{
			name:  "completed with restartPolicy Never",
			pod:   testPod(corev1.RestartPolicyNever, false, "a"),
			rt:    &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(true)}, Containers: []*kuberuntime.ContainerStatus{ctr("a", exited, 0)}},
			phase: corev1.PodSucceeded, sandboxCond: corev1.ConditionTrue, ready: corev1.ConditionFalse, podIP: "10.64.0.5",
		},
		{
			name:  "failed with restartPolicy Never",
			pod:   testPod(corev1.RestartPolicyNever, false, "a"),
			rt:    &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(true)}, Containers: []*kuberuntime.ContainerStatus{ctr("a", exited, 1)}},
			phase: corev1.PodFailed, sandboxCond: corev1.ConditionTrue, ready: corev1.ConditionFalse, podIP: "10.64.0.5",
		},
		{
			name:     "stopped for deletion after a clean exit",
			pod:      testPod(corev1.RestartPolicyAlways, false, "a"),
			rt:       &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(false)}, Containers: []*kuberuntime.ContainerStatus{ctr("a", exited, 0)}},
			terminal: true,
			phase:    corev1.PodSucceeded, sandboxCond: corev1.ConditionFalse, ready: corev1.ConditionFalse,
		},
		{
			name:     "stopped for deletion after a failure",
			pod:      testPod(corev1.RestartPolicyAlways, false, "a"),
			rt:       &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(false)}, Containers: []*kuberuntime.ContainerStatus{ctr("a", exited, 137)}},
			terminal: true,
			phase:    corev1.PodFailed, sandboxCond: corev1.ConditionFalse, ready: corev1.ConditionFalse,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := Generate(Input{Pod: tc.pod, Runtime: tc.rt, NodeIP: nodeIP, RuntimeName: "fake", Now: t0, Terminal: tc.terminal, Previous: tc.pod.Status})
			if st.Phase != tc.phase {
				t.Errorf("phase = %s, want %s", st.Phase, tc.phase)
			}
			if got := cond(st, corev1.PodReadyToStartContainers); got != tc.sandboxCond {
				t.Errorf("PodReadyToStartContainers = %s, want %s", got, tc.sandboxCond)
			}
			if got := cond(st, corev1.PodReady); got != tc.ready {
				t.Errorf("Ready = %s, want %s", got, tc.ready)
			}
			if got := cond(st, corev1.ContainersReady); got != tc.ready {
				t.Errorf("ContainersReady = %s, want %s", got, tc.ready)
			}
			if got := cond(st, corev1.PodScheduled); got != corev1.ConditionTrue {
				t.Errorf("PodScheduled = %s, want it kept from the API", got)
			}
			if got := cond(st, corev1.PodInitialized); got != corev1.ConditionTrue {
				t.Errorf("Initialized = %s, want True without init containers", got)
			}
			if st.PodIP != tc.podIP {
				t.Errorf("podIP = %q, want %q", st.PodIP, tc.podIP)
			}
			if st.HostIP != nodeIP.String() || len(st.HostIPs) != 1 {
				t.Errorf("hostIP = %q (%v), want %s", st.HostIP, st.HostIPs, nodeIP)
			}
			if st.StartTime == nil || !st.StartTime.Time.Equal(t0) {
				t.Errorf("startTime = %v, want %v", st.StartTime, t0)
			}
			if len(st.ContainerStatuses) != len(tc.pod.Spec.Containers) {
				t.Fatalf("%d container statuses for %d containers", len(st.ContainerStatuses), len(tc.pod.Spec.Containers))
			}
		})
	}
}

func TestGenerateContainerStatus(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, false, "a")
	rt := &kuberuntime.PodStatus{
		Sandboxes:  []*runtimeapi.PodSandboxStatus{sandbox(true)},
		Containers: []*kuberuntime.ContainerStatus{ctr("a", runtimeapi.ContainerState_CONTAINER_RUNNING, 0)},
	}
	st := Generate(Input{Pod: pod, Runtime: rt, NodeIP: nodeIP, RuntimeName: "containerd", Now: t0})
	cs := st.ContainerStatuses[0]
	if cs.ContainerID != "containerd://id-a" || cs.ImageID != "sha256:a" || cs.Image != "img-a" {
		t.Errorf("ids: containerID %q imageID %q image %q", cs.ContainerID, cs.ImageID, cs.Image)
	}
	if cs.State.Running == nil || !cs.State.Running.StartedAt.Time.Equal(t0.Add(time.Second)) {
		t.Errorf("state = %+v, want running since %v", cs.State, t0.Add(time.Second))
	}
	if !cs.Ready || cs.Started == nil || !*cs.Started {
		t.Errorf("ready %v started %v, want both true", cs.Ready, cs.Started)
	}
}

func TestGenerateKeepsTransitionTimes(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, false, "a")
	first := Generate(Input{Pod: pod, NodeIP: nodeIP, Now: t0})
	second := Generate(Input{Pod: pod, NodeIP: nodeIP, Now: t0.Add(time.Minute), Previous: first})
	for _, c := range second.Conditions {
		if c.Type != corev1.PodScheduled && !c.LastTransitionTime.Time.Equal(t0) {
			t.Errorf("%s moved its transition time to %v though its status did not change", c.Type, c.LastTransitionTime)
		}
	}
	if !second.StartTime.Time.Equal(t0) {
		t.Errorf("startTime moved to %v", second.StartTime)
	}
}
