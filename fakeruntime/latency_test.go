package fakeruntime

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/internal/testutil"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// latencyCase is one call that must wait for a simulated latency.
type latencyCase struct {
	name      string
	behaviour Behaviour
	latency   time.Duration // what the call must wait
	// setup prepares the runtime and returns the call under test.
	setup func(t *testing.T, rt *Runtime) func(ctx context.Context) error
	// check verifies the effect after the call returned (nil: none).
	check func(t *testing.T, rt *Runtime)
	// unchanged verifies a cancelled call had no effect.
	unchanged func(t *testing.T, rt *Runtime)
}

func latencyCases() []latencyCase {
	ctx := context.Background()
	pod := podConfig("web-0")
	var sbID, cID string
	runningContainer := func(t *testing.T, rt *Runtime) {
		sbID = runPod(t, rt, pod)
		cID = runContainer(t, rt, sbID, pod, "app", pauseImage)
	}
	containerState := func(want runtimeapi.ContainerState) func(t *testing.T, rt *Runtime) {
		return func(t *testing.T, rt *Runtime) {
			if got := containerStatus(t, rt, cID).State; got != want {
				t.Errorf("container is %v, want %v", got, want)
			}
		}
	}
	return []latencyCase{
		{
			name: "RunPodSandbox", behaviour: Behaviour{SandboxStartLatency: 3 * time.Second}, latency: 3 * time.Second,
			setup: func(t *testing.T, rt *Runtime) func(context.Context) error {
				return func(ctx context.Context) error { _, err := rt.RunPodSandbox(ctx, pod, ""); return err }
			},
			check: func(t *testing.T, rt *Runtime) {
				if sbs, _ := rt.ListPodSandbox(ctx, nil); len(sbs) != 1 {
					t.Errorf("%d sandboxes, want 1", len(sbs))
				}
			},
			unchanged: func(t *testing.T, rt *Runtime) {
				if sbs, _ := rt.ListPodSandbox(ctx, nil); len(sbs) != 0 || len(rt.network.used) != 0 {
					t.Errorf("a cancelled RunPodSandbox left %d sandboxes and %d IPs", len(sbs), len(rt.network.used))
				}
			},
		},
		{
			name: "PullImage", behaviour: Behaviour{PullLatency: 10 * time.Second}, latency: 10 * time.Second,
			setup: func(t *testing.T, rt *Runtime) func(context.Context) error {
				return func(ctx context.Context) error {
					_, err := rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: "nginx"}, nil, nil)
					return err
				}
			},
			check: func(t *testing.T, rt *Runtime) {
				if resp, _ := rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: "nginx"}, false); resp.Image == nil {
					t.Error("image absent after the pull")
				}
			},
			unchanged: func(t *testing.T, rt *Runtime) {
				if resp, _ := rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: "nginx"}, false); resp.Image != nil {
					t.Error("a cancelled pull left the image")
				}
			},
		},
		{
			name: "CreateContainer", behaviour: Behaviour{ContainerCreateLatency: 500 * time.Millisecond}, latency: 500 * time.Millisecond,
			setup: func(t *testing.T, rt *Runtime) func(context.Context) error {
				sbID = runPod(t, rt, pod)
				return func(ctx context.Context) error {
					_, err := rt.CreateContainer(ctx, sbID, containerConfig(pod, "app", pauseImage), pod)
					return err
				}
			},
			check: func(t *testing.T, rt *Runtime) {
				if cs, _ := rt.ListContainers(ctx, nil); len(cs) != 1 {
					t.Errorf("%d containers, want 1", len(cs))
				}
			},
			unchanged: func(t *testing.T, rt *Runtime) {
				if cs, _ := rt.ListContainers(ctx, nil); len(cs) != 0 {
					t.Errorf("a cancelled create left %d containers", len(cs))
				}
			},
		},
		{
			name: "StartContainer", behaviour: Behaviour{ContainerStartLatency: time.Second}, latency: time.Second,
			setup: func(t *testing.T, rt *Runtime) func(context.Context) error {
				sbID = runPod(t, rt, pod)
				var err error
				if cID, err = rt.CreateContainer(ctx, sbID, containerConfig(pod, "app", pauseImage), pod); err != nil {
					t.Fatal(err)
				}
				return func(ctx context.Context) error { return rt.StartContainer(ctx, cID) }
			},
			check:     containerState(runtimeapi.ContainerState_CONTAINER_RUNNING),
			unchanged: containerState(runtimeapi.ContainerState_CONTAINER_CREATED),
		},
		{
			name: "StopContainer within the grace period", behaviour: Behaviour{StopLatency: 2 * time.Second}, latency: 2 * time.Second,
			setup: func(t *testing.T, rt *Runtime) func(context.Context) error {
				runningContainer(t, rt)
				return func(ctx context.Context) error { return rt.StopContainer(ctx, cID, 30) }
			},
			check: func(t *testing.T, rt *Runtime) {
				if st := containerStatus(t, rt, cID); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 0 {
					t.Errorf("container %v exit %d, want exited 0", st.State, st.ExitCode)
				}
			},
			unchanged: containerState(runtimeapi.ContainerState_CONTAINER_RUNNING),
		},
		{
			name: "StopContainer past the grace period", behaviour: Behaviour{StopLatency: time.Hour}, latency: 5 * time.Second,
			setup: func(t *testing.T, rt *Runtime) func(context.Context) error {
				runningContainer(t, rt)
				return func(ctx context.Context) error { return rt.StopContainer(ctx, cID, 5) }
			},
			check: func(t *testing.T, rt *Runtime) {
				if st := containerStatus(t, rt, cID); st.State != runtimeapi.ContainerState_CONTAINER_EXITED || st.ExitCode != 137 {
					t.Errorf("container %v exit %d, want exited 137", st.State, st.ExitCode)
				}
			},
			unchanged: containerState(runtimeapi.ContainerState_CONTAINER_RUNNING),
		},
	}
}

// TestLatencyHonoured checks that each call waits for its latency on the
// injected clock, and that the runtime answers other calls meanwhile (its
// lock is not held while waiting).
func TestLatencyHonoured(t *testing.T) {
	for _, tc := range latencyCases() {
		t.Run(tc.name, func(t *testing.T) {
			rt, clk := newTestRuntime(t, tc.behaviour)
			call := tc.setup(t, rt)
			done := make(chan error, 1)
			go func() { done <- call(context.Background()) }()

			testutil.WaitFor(t, "the call to wait on the clock", clk.HasWaiters)
			// Not before the latency has passed...
			clk.Step(tc.latency - time.Nanosecond)
			if !clk.HasWaiters() {
				t.Fatal("the call stopped waiting before its latency passed")
			}
			select {
			case err := <-done:
				t.Fatalf("the call returned (%v) before its latency passed", err)
			default:
			}
			// ...and the runtime is not locked meanwhile.
			if _, err := rt.ListPodSandbox(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			if _, err := rt.ImageFsInfo(context.Background()); err != nil {
				t.Fatal(err)
			}
			clk.Step(time.Nanosecond)
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("the call failed: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the call did not return once its latency passed")
			}
			tc.check(t, rt)
		})
	}
}

// TestLatencyCancelled checks that a call waiting for its latency returns
// Canceled when its context is cancelled, changes nothing, and leaves no
// timer behind.
func TestLatencyCancelled(t *testing.T) {
	for _, tc := range latencyCases() {
		t.Run(tc.name, func(t *testing.T) {
			rt, clk := newTestRuntime(t, tc.behaviour)
			call := tc.setup(t, rt)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- call(ctx) }()

			testutil.WaitFor(t, "the call to wait on the clock", clk.HasWaiters)
			cancel()
			select {
			case err := <-done:
				wantCode(t, "cancelled call", err, codes.Canceled)
			case <-time.After(10 * time.Second):
				t.Fatal("the call did not return once its context was cancelled")
			}
			if clk.HasWaiters() {
				t.Error("a cancelled call left its timer on the clock")
			}
			tc.unchanged(t, rt)
		})
	}
}

func TestLatencyDeadlineExceeded(t *testing.T) {
	rt, _ := newTestRuntime(t, Behaviour{SandboxStartLatency: time.Second})
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := rt.RunPodSandbox(ctx, podConfig("a"), "")
	wantCode(t, "RunPodSandbox past its deadline", err, codes.DeadlineExceeded)
}

func TestZeroLatencyNeedsNoTimer(t *testing.T) {
	rt, clk := newTestRuntime(t, Behaviour{})
	pod := podConfig("a")
	runContainer(t, rt, runPod(t, rt, pod), pod, "app", pauseImage)
	if clk.HasWaiters() {
		t.Error("zero latencies created timers")
	}
	// A cancelled context fails even with nothing to wait for, as gRPC would.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := rt.RunPodSandbox(ctx, podConfig("b"), "")
	wantCode(t, "RunPodSandbox with a cancelled context", err, codes.Canceled)
}

func TestBehaviourDefaultsAndValidate(t *testing.T) {
	b := Behaviour{PullLatency: -time.Second}.withDefaults()
	if b.PullLatency != 0 || b.ImageSizeBytes != 10<<20 {
		t.Errorf("withDefaults = %+v", b)
	}
	if err := (Behaviour{StopLatency: -1, ImageSizeBytes: -1}).Validate(); err == nil {
		t.Error("Validate accepted negative values")
	}
	if err := (Behaviour{StopLatency: time.Second}).Validate(); err != nil {
		t.Errorf("Validate rejected a valid behaviour: %v", err)
	}
}

func TestBehaviourFromJSON(t *testing.T) {
	var b Behaviour
	in := `{"pullLatency": 2000000000, "sandboxStartLatency": 1000000, "stopLatency": 3000000000, "imageSizeBytes": 1024}`
	if err := json.Unmarshal([]byte(in), &b); err != nil {
		t.Fatal(err)
	}
	want := Behaviour{PullLatency: 2 * time.Second, SandboxStartLatency: time.Millisecond, StopLatency: 3 * time.Second, ImageSizeBytes: 1024}
	if !reflect.DeepEqual(b, want) {
		t.Errorf("got %+v, want %+v", b, want)
	}
}
