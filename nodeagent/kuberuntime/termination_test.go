package kuberuntime

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/reports"
)

// recordingRuntime records the preStop execs and the grace each stop got;
// an exec takes execTime on the fake clock.
type recordingRuntime struct {
	internalapi.RuntimeService
	clock    *clocktesting.FakeClock
	execTime time.Duration
	mu       sync.Mutex
	execs    [][]string
	stops    []int64
}

func (r *recordingRuntime) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	r.mu.Lock()
	r.execs = append(r.execs, cmd)
	r.mu.Unlock()
	r.clock.Step(r.execTime)
	return r.RuntimeService.ExecSync(ctx, id, cmd, timeout)
}

func (r *recordingRuntime) StopContainer(ctx context.Context, id string, timeout int64) error {
	r.mu.Lock()
	r.stops = append(r.stops, timeout)
	r.mu.Unlock()
	return r.RuntimeService.StopContainer(ctx, id, timeout)
}

func TestKillPodRunsPreStopWithinTheGracePeriod(t *testing.T) {
	cases := []struct {
		name      string
		grace     int64
		execTime  time.Duration
		wantGrace int64
	}{
		{"the stop gets what the hook left", 30, 12 * time.Second, 18},
		{"a hook that used it all leaves the minimum", 5, 10 * time.Second, minimumGracePeriod},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clk := clocktesting.NewFakeClock(time.Now())
			fake := fakeruntime.New(fakeruntime.Config{Clock: clk, PreloadedImages: []string{"busybox"}})
			if err := fake.UpdateRuntimeConfig(ctx, &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.64.0.0/16"}}); err != nil {
				t.Fatal(err)
			}
			rt := &recordingRuntime{RuntimeService: fake, clock: clk, execTime: tc.execTime}
			m := NewManager(Config{Runtime: rt, Images: fake, Events: record.NewFakeRecorder(100), Recorder: reports.Discard{}, Clock: clk})
			pod := newPod("stop", false, corev1.PullIfNotPresent, "app")
			pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/bin/drain", "--fast"}}}}
			st, _ := m.GetPodStatus(ctx, pod.UID)
			if err := m.SyncPod(ctx, pod, st, healthy{}); err != nil {
				t.Fatal(err)
			}
			st, _ = m.GetPodStatus(ctx, pod.UID)
			if err := m.KillPod(ctx, pod, st, tc.grace); err != nil {
				t.Fatal(err)
			}
			if len(rt.execs) != 1 || rt.execs[0][0] != "/bin/drain" {
				t.Errorf("preStop execs = %v", rt.execs)
			}
			if len(rt.stops) != 1 || rt.stops[0] != tc.wantGrace {
				t.Errorf("stop grace = %v, want %d", rt.stops, tc.wantGrace)
			}
		})
	}
}

func TestKillPodRunsNetworkPreStopHooks(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newManager(t, "busybox")
	var got []string
	m.cfg.NetworkHook = func(_ context.Context, _ *corev1.Pod, c *corev1.Container, h *corev1.LifecycleHandler, timeout time.Duration) error {
		got = append(got, c.Name+" "+h.HTTPGet.Path+" "+timeout.String())
		return nil
	}
	pod := newPod("hook", false, corev1.PullIfNotPresent, "app")
	pod.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/drain"}}}
	st, _ := m.GetPodStatus(ctx, pod.UID)
	if err := m.SyncPod(ctx, pod, st, healthy{}); err != nil {
		t.Fatal(err)
	}
	st, _ = m.GetPodStatus(ctx, pod.UID)
	if err := m.KillPod(ctx, pod, st, 30); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "app /drain 30s" {
		t.Errorf("hooks run: %v, want the httpGet preStop with the 30s grace", got)
	}
}
