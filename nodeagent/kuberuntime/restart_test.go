package kuberuntime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/reports"
)

// healthy is a prober that has nothing to say: every container counts as
// started and healthy.
type healthy struct{}

func (healthy) Started(string) bool   { return true }
func (healthy) Unhealthy(string) bool { return false }

// probes answers from sets of container IDs.
type probes struct{ notStarted, unhealthy map[string]bool }

func (p probes) Started(id string) bool   { return !p.notStarted[id] }
func (p probes) Unhealthy(id string) bool { return p.unhealthy[id] }

func cs(name string, state runtimeapi.ContainerState, exit int32) *ContainerStatus {
	return &ContainerStatus{ID: "id-" + name, Name: name, State: state, ExitCode: exit}
}

func TestComputePodActions(t *testing.T) {
	const (
		running = runtimeapi.ContainerState_CONTAINER_RUNNING
		exited  = runtimeapi.ContainerState_CONTAINER_EXITED
	)
	ready := []*runtimeapi.PodSandboxStatus{{Id: "sb", State: runtimeapi.PodSandboxState_SANDBOX_READY}}
	withInit := func(policy corev1.RestartPolicy) *corev1.Pod {
		p := newPod("u", false, corev1.PullIfNotPresent, "app")
		p.Spec.RestartPolicy = policy
		p.Spec.InitContainers = []corev1.Container{
			{Name: "sidecar", Image: "busybox", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
			{Name: "init", Image: "busybox"},
		}
		return p
	}
	plain := func(policy corev1.RestartPolicy) *corev1.Pod {
		p := newPod("u", false, corev1.PullIfNotPresent, "a", "b")
		p.Spec.RestartPolicy = policy
		return p
	}
	cases := []struct {
		name      string
		pod       *corev1.Pod
		status    *PodStatus
		probes    ProbeState
		want      podActions
		killNames []string
	}{
		{name: "new pod", pod: plain(corev1.RestartPolicyAlways), status: &PodStatus{},
			want: podActions{CreateSandbox: true, ContainersToStart: []int{0, 1}}},
		{name: "new pod with init containers starts only the first", pod: withInit(corev1.RestartPolicyAlways), status: &PodStatus{},
			want: podActions{CreateSandbox: true, InitContainersToStart: []int{0}}},
		{name: "sidecar running but not started by its probe holds the next init", pod: withInit(corev1.RestartPolicyAlways),
			status: &PodStatus{Sandboxes: ready, Containers: []*ContainerStatus{cs("sidecar", running, 0)}},
			probes: probes{notStarted: map[string]bool{"id-sidecar": true}},
			want:   podActions{}},
		{name: "sidecar started: the regular init container runs next", pod: withInit(corev1.RestartPolicyAlways),
			status: &PodStatus{Sandboxes: ready, Containers: []*ContainerStatus{cs("sidecar", running, 0)}},
			want:   podActions{InitContainersToStart: []int{1}}},
		{name: "init running: wait", pod: withInit(corev1.RestartPolicyAlways),
			status: &PodStatus{Sandboxes: ready, Containers: []*ContainerStatus{cs("sidecar", running, 0), cs("init", running, 0)}},
			want:   podActions{}},
		{name: "init succeeded: app containers start", pod: withInit(corev1.RestartPolicyAlways),
			status: &PodStatus{Sandboxes: ready, Containers: []*ContainerStatus{cs("sidecar", running, 0), cs("init", exited, 0)}},
			want:   podActions{ContainersToStart: []int{0}}},
		{name: "init failed, OnFailure: run it again", pod: withInit(corev1.RestartPolicyOnFailure),
			status: &PodStatus{Sandboxes: ready, Containers: []*ContainerStatus{cs("sidecar", running, 0), cs("init", exited, 1)}},
			want:   podActions{InitContainersToStart: []int{1}}},
		{name: "init failed, Never: the pod fails", pod: withInit(corev1.RestartPolicyNever),
			status: &PodStatus{Sandboxes: ready, Containers: []*ContainerStatus{cs("sidecar", running, 0), cs("init", exited, 1)}},
			want:   podActions{InitFailed: true}},
		{name: "sidecar crashed after init: restarted", pod: withInit(corev1.RestartPolicyNever),
			status: &PodStatus{Sandboxes: ready, Containers: []*ContainerStatus{cs("sidecar", exited, 1), cs("init", exited, 0), cs("app", running, 0)}},
			want:   podActions{InitContainersToStart: []int{0}}},
		{name: "Always restarts a clean exit", pod: plain(corev1.RestartPolicyAlways),
			status: &PodStatus{Sandboxes: ready, Containers: []*ContainerStatus{cs("a", exited, 0), cs("b", running, 0)}},
			want:   podActions{ContainersToStart: []int{0}}},
		{name: "OnFailure restarts only failures", pod: plain(corev1.RestartPolicyOnFailure),
			status: &PodStatus{Sandboxes: ready, Containers: []*ContainerStatus{cs("a", exited, 0), cs("b", exited, 2)}},
			want:   podActions{ContainersToStart: []int{1}}},
		{name: "Never restarts nothing", pod: plain(corev1.RestartPolicyNever),
			status: &PodStatus{Sandboxes: ready, Containers: []*ContainerStatus{cs("a", exited, 0), cs("b", exited, 2)}},
			want:   podActions{}},
		{name: "failed liveness kills and restarts", pod: plain(corev1.RestartPolicyAlways),
			status:    &PodStatus{Sandboxes: ready, Containers: []*ContainerStatus{cs("a", running, 0), cs("b", running, 0)}},
			probes:    probes{unhealthy: map[string]bool{"id-b": true}},
			want:      podActions{ContainersToStart: []int{1}},
			killNames: []string{"b"}},
		{name: "sandbox gone: kill what runs and start over", pod: plain(corev1.RestartPolicyAlways),
			status: &PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{{Id: "old", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}},
				Containers: []*ContainerStatus{cs("a", running, 0)}},
			want: podActions{CreateSandbox: true, KillPod: true, Attempt: 1, ContainersToStart: []int{0, 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.probes
			if p == nil {
				p = healthy{}
			}
			got := computePodActions(tc.pod, tc.status, p)
			var killed []string
			for _, c := range got.ContainersToKill {
				killed = append(killed, c.Name)
			}
			got.ContainersToKill = nil
			if strings.Join(killed, ",") != strings.Join(tc.killNames, ",") {
				t.Errorf("kill %v, want %v", killed, tc.killNames)
			}
			if !equalActions(got, tc.want) {
				t.Errorf("actions = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func equalActions(a, b podActions) bool {
	ints := func(x, y []int) bool {
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	return a.CreateSandbox == b.CreateSandbox && a.KillPod == b.KillPod && a.Attempt == b.Attempt &&
		a.InitFailed == b.InitFailed && ints(a.InitContainersToStart, b.InitContainersToStart) && ints(a.ContainersToStart, b.ContainersToStart)
}

// TestCrashLoopBackOff crashes a container again and again and checks each
// restart waits the kubelet's back-off: at once, then 10 s doubling to 5 min.
func TestCrashLoopBackOff(t *testing.T) {
	ctx := context.Background()
	m, rt, events := newManager(t, "busybox")
	clk := m.cfg.Clock.(*clocktesting.FakeClock)
	pod := newPod("crash", false, corev1.PullIfNotPresent, "app")
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	sync := func() error {
		st, err := m.GetPodStatus(ctx, pod.UID)
		if err != nil {
			t.Fatal(err)
		}
		return m.SyncPod(ctx, pod, st, healthy{})
	}
	if err := sync(); err != nil {
		t.Fatal(err)
	}
	wantDelays := []time.Duration{0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 300 * time.Second, 300 * time.Second}
	for restart, want := range wantDelays {
		st, _ := m.GetPodStatus(ctx, pod.UID)
		running := st.Container("app")
		if running.State != runtimeapi.ContainerState_CONTAINER_RUNNING || running.RestartCount != int32(restart) {
			t.Fatalf("restart %d: container %+v, want running with restartCount %d", restart, running, restart)
		}
		// Crash: a stop with no grace is a SIGKILL, exit 137.
		if err := rt.StopContainer(ctx, running.ID, 0); err != nil {
			t.Fatal(err)
		}
		crashedAt := clk.Now()
		err := sync()
		if want == 0 {
			if err != nil {
				t.Fatalf("first crash: restart at once, got %v", err)
			}
			continue
		}
		var b *BackoffError
		if !errors.As(err, &b) || !b.Until.Equal(crashedAt.Add(want)) {
			t.Fatalf("restart %d: err = %v, want a back-off until +%v", restart, err, want)
		}
		w := m.Waiting(pod.UID)["app"]
		if w.Reason != "CrashLoopBackOff" || !strings.Contains(w.Message, "back-off "+want.String()+" restarting failed container=app") {
			t.Errorf("restart %d: waiting = %+v", restart, w)
		}
		clk.Step(want - time.Millisecond)
		if err := sync(); err == nil {
			t.Fatalf("restart %d: restarted %v early", restart, time.Millisecond)
		}
		clk.Step(time.Millisecond)
		if err := sync(); err != nil {
			t.Fatalf("restart %d: not restarted when the back-off expired: %v", restart, err)
		}
		if _, ok := m.Waiting(pod.UID)["app"]; ok {
			t.Errorf("restart %d: still waiting after the restart", restart)
		}
	}
	// Only the running container and the one before it are kept.
	st, _ := m.GetPodStatus(ctx, pod.UID)
	if n := len(st.Containers); n != 2 {
		t.Errorf("%d containers kept, want the newest and its predecessor", n)
	}
	if p := st.Previous("app"); p == nil || p.ExitCode != 137 {
		t.Errorf("previous container = %+v, want the last crash (137)", p)
	}
	drainEvents(events)
}

// failingImages fails every pull, as a registry refusing access.
type failingImages struct {
	internalapi.ImageManagerService
	pulls int
}

func (f *failingImages) PullImage(context.Context, *runtimeapi.ImageSpec, *runtimeapi.AuthConfig, *runtimeapi.PodSandboxConfig) (string, error) {
	f.pulls++
	return "", errors.New("pull access denied")
}

func TestImagePullBackOff(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	rt := fakeruntime.New(fakeruntime.Config{Clock: clk})
	if err := rt.UpdateRuntimeConfig(ctx, &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.64.0.0/16"}}); err != nil {
		t.Fatal(err)
	}
	images := &failingImages{ImageManagerService: rt}
	events := record.NewFakeRecorder(1000)
	m := NewManager(Config{Runtime: rt, Images: images, Events: events, Recorder: reports.Discard{}, Clock: clk})
	pod := newPod("pull", false, corev1.PullIfNotPresent, "app")
	sync := func() {
		st, _ := m.GetPodStatus(ctx, pod.UID)
		if err := m.SyncPod(ctx, pod, st, healthy{}); err == nil {
			t.Fatal("sync succeeded with a failing pull")
		}
	}
	// Pull attempts at 0, 10, 30, 70 s: the back-off doubles from 10 s.
	wantReasons := []string{"ErrImagePull", "ImagePullBackOff"}
	for attempt, gap := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second} {
		sync()
		if images.pulls != attempt+1 {
			t.Fatalf("attempt %d: %d pulls", attempt, images.pulls)
		}
		if r := m.Waiting(pod.UID)["app"].Reason; r != wantReasons[0] {
			t.Errorf("attempt %d: reason %q right after a failed pull, want ErrImagePull", attempt, r)
		}
		clk.Step(gap - time.Millisecond)
		sync()
		if images.pulls != attempt+1 {
			t.Fatalf("attempt %d: pulled again inside the back-off", attempt)
		}
		if r := m.Waiting(pod.UID)["app"].Reason; r != wantReasons[1] {
			t.Errorf("attempt %d: reason %q inside the back-off, want ImagePullBackOff", attempt, r)
		}
		// The kubelet's message carries the failed pull's error.
		if msg, want := m.Waiting(pod.UID)["app"].Message, `Back-off pulling image "busybox": ErrImagePull: pull access denied`; msg != want {
			t.Errorf("attempt %d: message %q inside the back-off, want %q", attempt, msg, want)
		}
		clk.Step(time.Millisecond)
	}
	var sawBackOff bool
	for _, e := range drainEvents(events) {
		sawBackOff = sawBackOff || strings.HasPrefix(e, `Normal BackOff Back-off pulling image "busybox"`)
	}
	if !sawBackOff {
		t.Error("no BackOff event")
	}
}
