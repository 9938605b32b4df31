package kuberuntime

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/fakeruntime"
)

// execRecorder records the commands ExecSync ran.
type execRecorder struct {
	internalapi.RuntimeService
	mu    sync.Mutex
	execs []string
}

func (r *execRecorder) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	r.mu.Lock()
	r.execs = append(r.execs, strings.Join(cmd, " "))
	r.mu.Unlock()
	return r.RuntimeService.ExecSync(ctx, id, cmd, timeout)
}

func postStartPod(uid string, policy corev1.RestartPolicy, h corev1.LifecycleHandler) *corev1.Pod {
	pod := newPod(uid, false, corev1.PullIfNotPresent, "app")
	pod.Spec.RestartPolicy = policy
	pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: &h}
	return pod
}

func hasEvent(events []string, want string) bool {
	return slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, want) })
}

func TestPostStartExec(t *testing.T) {
	ctx := context.Background()
	hook := corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", "touch /tmp/started"}}}

	t.Run("success leaves the container running", func(t *testing.T) {
		m, rt, events := newManager(t, "busybox")
		rec := &execRecorder{RuntimeService: rt}
		m.cfg.Runtime = rec
		pod := postStartPod("ok", corev1.RestartPolicyAlways, hook)
		st, _ := m.GetPodStatus(ctx, pod.UID)
		if err := m.SyncPod(ctx, pod, st, healthy{}); err != nil {
			t.Fatal(err)
		}
		if want := []string{"sh -c touch /tmp/started"}; !slices.Equal(rec.execs, want) {
			t.Errorf("execs %q, want %q", rec.execs, want)
		}
		if st, _ = m.GetPodStatus(ctx, pod.UID); st.Container("app").State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Errorf("container %+v, want running", st.Container("app"))
		}
		if got := drainEvents(events); hasEvent(got, "Warning FailedPostStartHook") {
			t.Errorf("events %q", got)
		}
	})

	// The fake's behaviour fails the hook's command on every container.
	failing := func(uid string, policy corev1.RestartPolicy) *corev1.Pod {
		pod := postStartPod(uid, policy, hook)
		pod.Annotations = map[string]string{fakeruntime.AnnotationBehaviour: `{"app": {"exec": [{"command": "sh -c touch /tmp/started", "steps": [{"after": "0s", "succeed": false}], "stdout": "no space left", "exitCode": 2}]}}`}
		return pod
	}

	t.Run("failure kills the container, which restarts by policy after its back-off", func(t *testing.T) {
		m, _, events := newManager(t, "busybox")
		clk := m.cfg.Clock.(*clocktesting.FakeClock)
		pod := failing("fail", corev1.RestartPolicyAlways)
		sync := func() error {
			st, err := m.GetPodStatus(ctx, pod.UID)
			if err != nil {
				t.Fatal(err)
			}
			return m.SyncPod(ctx, pod, st, healthy{})
		}
		err := sync()
		if !errors.Is(err, ErrPostStartHook) {
			t.Fatalf("err = %v, want ErrPostStartHook", err)
		}
		got := drainEvents(events)
		for _, want := range []string{"Normal Started", "Warning FailedPostStartHook PostStartHook failed", "Normal Killing FailedPostStartHook"} {
			if !hasEvent(got, want) {
				t.Errorf("no event %q in %q", want, got)
			}
		}
		w := m.Waiting(pod.UID)["app"]
		wantMsg := `Exec lifecycle hook ([sh -c touch /tmp/started]) for Container "app" in Pod "p-fail_ns(fail)" failed - error: command 'sh -c touch /tmp/started' exited with 2: , message: "no space left"`
		if w.Reason != "PostStartHookError" || w.Message != wantMsg {
			t.Errorf("waiting = %+v\nwant reason PostStartHookError, message %s", w, wantMsg)
		}
		st, _ := m.GetPodStatus(ctx, pod.UID)
		if c := st.Container("app"); c.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Fatalf("container %+v, want exited", c)
		}

		// The first restart is at once, the second after 10 s.
		if err := sync(); !errors.Is(err, ErrPostStartHook) {
			t.Fatalf("first restart: err = %v, want the hook to fail again", err)
		}
		if st, _ = m.GetPodStatus(ctx, pod.UID); st.Container("app").RestartCount != 1 {
			t.Fatalf("restartCount %d, want 1", st.Container("app").RestartCount)
		}
		var b *BackoffError
		if err := sync(); !errors.As(err, &b) || m.Waiting(pod.UID)["app"].Reason != "CrashLoopBackOff" {
			t.Fatalf("second restart: err = %v, waiting %+v, want CrashLoopBackOff", err, m.Waiting(pod.UID)["app"])
		}
		clk.Step(10 * time.Second)
		if err := sync(); !errors.Is(err, ErrPostStartHook) {
			t.Fatalf("after the back-off: err = %v", err)
		}
		if st, _ = m.GetPodStatus(ctx, pod.UID); st.Container("app").RestartCount != 2 {
			t.Errorf("restartCount %d, want 2", st.Container("app").RestartCount)
		}
	})

	t.Run("restart policy Never leaves it exited", func(t *testing.T) {
		m, _, _ := newManager(t, "busybox")
		pod := failing("never", corev1.RestartPolicyNever)
		st, _ := m.GetPodStatus(ctx, pod.UID)
		if err := m.SyncPod(ctx, pod, st, healthy{}); !errors.Is(err, ErrPostStartHook) {
			t.Fatalf("err = %v", err)
		}
		st, _ = m.GetPodStatus(ctx, pod.UID)
		if err := m.SyncPod(ctx, pod, st, healthy{}); err != nil {
			t.Fatal(err)
		}
		st, _ = m.GetPodStatus(ctx, pod.UID)
		if n := len(st.Containers); n != 1 || st.Containers[0].State != runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Errorf("containers %+v, want the one exited", st.Containers)
		}
	})
}

func TestPostStartNetworkAndSleep(t *testing.T) {
	ctx := context.Background()
	httpHook := corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/warm", Port: intstr.FromInt32(8080)}}
	tcpHook := corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}}
	refused := func(context.Context, *corev1.Pod, *corev1.Container, *corev1.LifecycleHandler, time.Duration) error {
		return errors.New("connect: connection refused")
	}
	cases := []struct {
		name    string
		hook    corev1.LifecycleHandler
		network func(context.Context, *corev1.Pod, *corev1.Container, *corev1.LifecycleHandler, time.Duration) error
		wantMsg string
	}{
		{name: "httpGet with nothing to reach succeeds", hook: httpHook},
		{name: "httpGet refused", hook: httpHook, network: refused,
			wantMsg: `HTTP lifecycle hook (/warm) for Container "app" in Pod "p-net_ns(net)" failed - error: connect: connection refused`},
		// The kubelet fails a tcpSocket hook whatever the network says: the
		// field is kept in the API for compatibility only.
		{name: "tcpSocket is an invalid handler", hook: tcpHook,
			wantMsg: `Cannot run handler: invalid handler: &LifecycleHandler{Exec:nil,HTTPGet:nil,TCPSocket:&TCPSocketAction{Port:{1 0 http},Host:,},Sleep:nil,}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, _, _ := newManager(t, "busybox")
			m.cfg.NetworkHook = tc.network
			pod := postStartPod("net", corev1.RestartPolicyAlways, tc.hook)
			st, _ := m.GetPodStatus(ctx, pod.UID)
			err := m.SyncPod(ctx, pod, st, healthy{})
			if tc.wantMsg == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrPostStartHook) || m.Waiting(pod.UID)["app"].Message != tc.wantMsg {
				t.Errorf("err = %v, waiting %+v, want message %s", err, m.Waiting(pod.UID)["app"], tc.wantMsg)
			}
		})
	}

	t.Run("sleep waits on the clock", func(t *testing.T) {
		m, _, _ := newManager(t, "busybox")
		clk := m.cfg.Clock.(*clocktesting.FakeClock)
		pod := postStartPod("sleep", corev1.RestartPolicyAlways, corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}})
		st, _ := m.GetPodStatus(ctx, pod.UID)
		done := make(chan error, 1)
		go func() { done <- m.SyncPod(ctx, pod, st, healthy{}) }()
		deadline := time.Now().Add(30 * time.Second)
		for !clk.HasWaiters() {
			if time.Now().After(deadline) {
				t.Fatal("the hook never waited on the clock")
			}
			time.Sleep(time.Millisecond)
		}
		clk.Step(5*time.Second - time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("sync returned before the sleep ended: %v", err)
		default:
		}
		clk.Step(time.Millisecond)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("sync did not return once the sleep ended")
		}
	})
}
