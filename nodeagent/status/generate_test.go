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
		ID: "id-" + name, Name: name, State: state, ExitCode: exit, ImageRef: "sha256:" + name, Image: "docker.io/library/img-" + name + ":latest",
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
	// The image as the runtime names it, not as the spec spells it.
	if cs.ContainerID != "containerd://id-a" || cs.ImageID != "sha256:a" || cs.Image != "docker.io/library/img-a:latest" {
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

// TestGenerateKubeletConditions pins what generateAPIPodStatus writes in its
// conditions beyond their status: the generation observed, the kubelet's
// order, PodReadyToStartContainers' reasons, and the reasons of a terminal
// phase.
func TestGenerateKubeletConditions(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, false, "a")
	pod.Generation = 3
	scheduledAt := metav1.NewTime(t0.Add(-time.Minute))
	pod.Status.Conditions[0].LastTransitionTime = scheduledAt
	st := Generate(Input{Pod: pod, NodeIP: nodeIP, Now: t0, Previous: pod.Status})
	var order []corev1.PodConditionType
	for _, c := range st.Conditions {
		order = append(order, c.Type)
		if c.ObservedGeneration != 3 {
			t.Errorf("%s observedGeneration = %d, want the pod's generation 3", c.Type, c.ObservedGeneration)
		}
	}
	want := []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled}
	if len(order) != len(want) {
		t.Fatalf("conditions %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("conditions %v, want the kubelet's order %v", order, want)
		}
	}
	if c := findCondition(st.Conditions, corev1.PodScheduled); !c.LastTransitionTime.Equal(&scheduledAt) {
		t.Errorf("PodScheduled transition %v, want the scheduler's %v", c.LastTransitionTime, scheduledAt)
	}

	for _, tc := range []struct {
		name    string
		rt      *kuberuntime.PodStatus
		status  corev1.ConditionStatus
		message string
	}{
		{"no sandbox", nil, corev1.ConditionFalse, "no pod sandbox exists"},
		{"sandbox stopped", &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(false)}}, corev1.ConditionFalse, "pod sandbox is not ready"},
		{"two ready sandboxes", &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(true), sandbox(true)}}, corev1.ConditionFalse, "multiple pod sandboxes are ready and need to be reconciled"},
		{"sandbox without IP", &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{{Id: "sb", State: runtimeapi.PodSandboxState_SANDBOX_READY, Network: &runtimeapi.PodSandboxNetworkStatus{}}}}, corev1.ConditionFalse, "pod sandbox has no IP address"},
		{"ready", &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(true)}}, corev1.ConditionTrue, ""},
	} {
		st := Generate(Input{Pod: pod, Runtime: tc.rt, NodeIP: nodeIP, Now: t0, Previous: pod.Status})
		c := findCondition(st.Conditions, corev1.PodReadyToStartContainers)
		wantReason := "PodSandboxNotReady"
		if tc.status == corev1.ConditionTrue {
			wantReason = ""
		}
		if c.Status != tc.status || c.Reason != wantReason || c.Message != tc.message {
			t.Errorf("%s: PodReadyToStartContainers = %s %q %q, want %s %q %q", tc.name, c.Status, c.Reason, c.Message, tc.status, wantReason, tc.message)
		}
	}

	exited := runtimeapi.ContainerState_CONTAINER_EXITED
	for _, tc := range []struct {
		exit   int32
		reason string
	}{{0, "PodCompleted"}, {137, "PodFailed"}} {
		rt := &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(false)}, Containers: []*kuberuntime.ContainerStatus{ctr("a", exited, tc.exit)}}
		st := Generate(Input{Pod: pod, Runtime: rt, NodeIP: nodeIP, Now: t0, Previous: pod.Status, Terminal: true})
		for _, ct := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
			if c := findCondition(st.Conditions, ct); c.Status != corev1.ConditionFalse || c.Reason != tc.reason {
				t.Errorf("exit %d: %s = %s %q, want False %q", tc.exit, ct, c.Status, c.Reason, tc.reason)
			}
		}
		wantInit := ""
		if tc.exit == 0 {
			wantInit = "PodCompleted"
		}
		if c := findCondition(st.Conditions, corev1.PodInitialized); c.Status != corev1.ConditionTrue || c.Reason != wantInit {
			t.Errorf("exit %d: Initialized = %s %q, want True %q", tc.exit, c.Status, c.Reason, wantInit)
		}
	}
}

// TestGenerateKeepsThePodIPOfAStoppedPod: once its sandbox stops, a pod
// reports the IP it had, as the kubelet's PLEG keeps it.
func TestGenerateKeepsThePodIPOfAStoppedPod(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, false, "a")
	running := &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(true)}, Containers: []*kuberuntime.ContainerStatus{ctr("a", runtimeapi.ContainerState_CONTAINER_RUNNING, 0)}}
	first := Generate(Input{Pod: pod, Runtime: running, NodeIP: nodeIP, Now: t0, Previous: pod.Status})
	stopped := &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{{Id: "sb", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}},
		Containers: []*kuberuntime.ContainerStatus{ctr("a", runtimeapi.ContainerState_CONTAINER_EXITED, 0)}}
	st := Generate(Input{Pod: pod, Runtime: stopped, NodeIP: nodeIP, Now: t0.Add(time.Minute), Previous: first, Terminal: true})
	if st.PodIP != "10.64.0.5" || len(st.PodIPs) != 1 {
		t.Errorf("podIP %q %v after the sandbox stopped, want the one it had", st.PodIP, st.PodIPs)
	}
}

// TestGenerateReadinessGates: Ready waits for the pod's readiness gates,
// whose conditions others set.
func TestGenerateReadinessGates(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, false, "a")
	pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/lb"}}
	rt := &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(true)}, Containers: []*kuberuntime.ContainerStatus{ctr("a", runtimeapi.ContainerState_CONTAINER_RUNNING, 0)}}
	st := Generate(Input{Pod: pod, Runtime: rt, NodeIP: nodeIP, Now: t0, Previous: pod.Status})
	c := findCondition(st.Conditions, corev1.PodReady)
	if c.Status != corev1.ConditionFalse || c.Reason != "ReadinessGatesNotReady" || c.Message != `corresponding condition of pod readiness gate "example.com/lb" does not exist.` {
		t.Errorf("Ready = %+v, want False for the missing gate", c)
	}
	if cond(st, corev1.ContainersReady) != corev1.ConditionTrue {
		t.Errorf("ContainersReady = %s, want True: the gate holds Ready only", cond(st, corev1.ContainersReady))
	}
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: "example.com/lb", Status: corev1.ConditionTrue})
	st = Generate(Input{Pod: pod, Runtime: rt, NodeIP: nodeIP, Now: t0, Previous: pod.Status})
	if cond(st, corev1.PodReady) != corev1.ConditionTrue {
		t.Errorf("Ready = %s with the gate True, want True", cond(st, corev1.PodReady))
	}
}

// TestSandboxReady is OnPodSandboxReady's status: the last one with
// PodReadyToStartContainers True, its transition now, nothing else changed.
func TestSandboxReady(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, false, "a")
	pod.Generation = 2
	prev := Generate(Input{Pod: pod, NodeIP: nodeIP, Now: t0, Previous: pod.Status})
	st := SandboxReady(pod, prev, t0.Add(time.Second))
	c := findCondition(st.Conditions, corev1.PodReadyToStartContainers)
	if c.Status != corev1.ConditionTrue || c.Reason != "" || c.Message != "" || c.ObservedGeneration != 2 || !c.LastTransitionTime.Time.Equal(t0.Add(time.Second)) {
		t.Errorf("PodReadyToStartContainers = %+v, want True since %v", c, t0.Add(time.Second))
	}
	if st.Phase != prev.Phase || st.PodIP != prev.PodIP || len(st.Conditions) != len(prev.Conditions) {
		t.Errorf("SandboxReady changed more than the condition: %+v", st)
	}
	if again := SandboxReady(pod, st, t0.Add(time.Minute)); !findCondition(again.Conditions, corev1.PodReadyToStartContainers).LastTransitionTime.Time.Equal(t0.Add(time.Second)) {
		t.Error("a second call moved the transition time")
	}
}

// TestGenerateKeepsATerminalPhase: a phase once terminal stays, with its
// reason, and the conditions follow it (a later sync must not send
// ContainersNotReady for a completed pod).
func TestGenerateKeepsATerminalPhase(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, false, "a")
	stopped := &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(false)}, Containers: []*kuberuntime.ContainerStatus{ctr("a", runtimeapi.ContainerState_CONTAINER_EXITED, 0)}}
	prev := Generate(Input{Pod: pod, Runtime: stopped, NodeIP: nodeIP, Now: t0, Previous: pod.Status, Terminal: true})
	prev.Reason = "Because"
	for _, terminal := range []bool{false, true} {
		st := Generate(Input{Pod: pod, Runtime: stopped, NodeIP: nodeIP, Now: t0.Add(time.Second), Previous: prev, Terminal: terminal})
		if st.Phase != corev1.PodSucceeded || st.Reason != "Because" {
			t.Errorf("terminal=%v: phase %s reason %q, want Succeeded kept with its reason", terminal, st.Phase, st.Reason)
		}
		for _, c := range st.Conditions {
			old := findCondition(prev.Conditions, c.Type)
			if old == nil || old.Status != c.Status || old.Reason != c.Reason || old.Message != c.Message {
				t.Errorf("terminal=%v: %s = %s %q, was %+v", terminal, c.Type, c.Status, c.Reason, old)
			}
		}
	}
	// A terminal phase in the API stands too.
	api := pod.DeepCopy()
	api.Status.Phase, api.Status.Reason = corev1.PodFailed, "Evicted"
	running := &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(true)}, Containers: []*kuberuntime.ContainerStatus{ctr("a", runtimeapi.ContainerState_CONTAINER_RUNNING, 0)}}
	if st := Generate(Input{Pod: api, Runtime: running, NodeIP: nodeIP, Now: t0, Previous: corev1.PodStatus{Phase: corev1.PodRunning}}); st.Phase != corev1.PodFailed || st.Reason != "Evicted" {
		t.Errorf("phase %s reason %q with the API's Failed Evicted, want them kept", st.Phase, st.Reason)
	}
}
