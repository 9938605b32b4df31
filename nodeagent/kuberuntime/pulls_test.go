package kuberuntime

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/reports"
)

// gatedImages holds every pull until released, counting those in flight.
type gatedImages struct {
	internalapi.ImageManagerService
	mu       sync.Mutex
	inFlight int
	most     int
	started  int
	release  chan struct{}
}

func (g *gatedImages) PullImage(ctx context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, sb *runtimeapi.PodSandboxConfig) (string, error) {
	g.mu.Lock()
	g.inFlight++
	g.started++
	g.most = max(g.most, g.inFlight)
	g.mu.Unlock()
	<-g.release
	g.mu.Lock()
	g.inFlight--
	g.mu.Unlock()
	return g.ImageManagerService.PullImage(ctx, spec, auth, sb)
}

func (g *gatedImages) counts() (started, most int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.started, g.most
}

func TestImagePullConcurrency(t *testing.T) {
	cases := []struct {
		name      string
		serialize bool
		max       int32
		want      int
	}{
		{"serialized, the kubelet's default", true, 0, 1},
		{"parallel, bounded by maxParallelImagePulls", false, 2, 2},
		{"parallel, unbounded", false, 0, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clk := clocktesting.NewFakeClock(time.Now())
			rt := fakeruntime.New(fakeruntime.Config{Clock: clk})
			if err := rt.UpdateRuntimeConfig(ctx, &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.64.0.0/16"}}); err != nil {
				t.Fatal(err)
			}
			images := &gatedImages{ImageManagerService: rt, release: make(chan struct{})}
			m := NewManager(Config{Runtime: rt, Images: images, Events: record.NewFakeRecorder(1000), Recorder: reports.Discard{},
				Clock: clk, SerializeImagePulls: tc.serialize, MaxParallelImagePulls: tc.max})
			var wg sync.WaitGroup
			for i := range 4 {
				pod := newPod(fmt.Sprintf("p%d", i), false, corev1.PullIfNotPresent, "app")
				pod.Spec.Containers[0].Image = fmt.Sprintf("img-%d", i)
				wg.Add(1)
				go func() {
					defer wg.Done()
					st, _ := m.GetPodStatus(ctx, pod.UID)
					if err := m.SyncPod(ctx, pod, st, healthy{}); err != nil {
						t.Error(err)
					}
				}()
			}
			if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				started, _ := images.counts()
				return started >= tc.want, nil
			}); err != nil {
				t.Fatalf("fewer than %d pulls started", tc.want)
			}
			// Every pull that may run is now blocked in flight; the bound
			// holds if no more than that ever ran at once.
			close(images.release)
			wg.Wait()
			if _, most := images.counts(); most != tc.want {
				t.Errorf("at most %d pulls ran at once, want %d", most, tc.want)
			}
		})
	}
}
