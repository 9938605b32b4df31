package fakeruntime

import (
	"context"
	"math"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/internal/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testclock "k8s.io/utils/clock/testing"
)

// wantStatus fails the test unless err is a gRPC status with code and
// exactly the message msg.
func wantStatus(t testing.TB, what string, err error, code codes.Code, msg string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code || st.Message() != msg {
		t.Errorf("%s: got %v, want code %v and message %q", what, err, code, msg)
	}
}

// waitsFor runs call and checks that it returns exactly when the fake
// clock has moved on by d from now, and not a nanosecond earlier; it returns
// what the call returned.
func waitsFor(t *testing.T, clk *testclock.FakeClock, d time.Duration, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	testutil.WaitFor(t, "the call to wait on the clock", clk.HasWaiters)
	clk.Step(d - time.Nanosecond)
	if !clk.HasWaiters() {
		t.Fatalf("the call stopped waiting before %v passed", d)
	}
	select {
	case err := <-done:
		t.Fatalf("the call returned (%v) before %v passed", err, d)
	default:
	}
	clk.Step(time.Nanosecond)
	select {
	case err := <-done:
		return err
	case <-time.After(testutil.Patience):
		t.Fatalf("the call did not return once %v passed", d)
		return nil
	}
}

// TestFaultDown checks that every kind of call, of both services, fails as
// a kubelet's call fails when containerd's socket is gone, and that the
// node serves again, with its state, once the fault is cleared.
func TestFaultDown(t *testing.T) {
	ctx := context.Background()
	rt, _ := newTestRuntime(t, Behaviour{})
	pod := podConfig("web-0")
	sbID := runPod(t, rt, pod)
	cID := runContainer(t, rt, sbID, pod, "app", pauseImage)

	rt.SetFault(Fault{Down: true})
	if got := rt.Fault(); got != (Fault{Down: true}) {
		t.Fatalf("Fault() = %+v after SetFault(Down)", got)
	}
	calls := []struct {
		name string
		call func() error
	}{
		{"Version", func() error { _, err := rt.Version(ctx, "v1"); return err }},
		{"Status", func() error { _, err := rt.Status(ctx, false); return err }},
		{"UpdateRuntimeConfig", func() error {
			return rt.UpdateRuntimeConfig(ctx, &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: testPodCIDR}})
		}},
		{"ListPodSandbox", func() error { _, err := rt.ListPodSandbox(ctx, nil); return err }},
		{"ListContainers", func() error { _, err := rt.ListContainers(ctx, nil); return err }},
		{"PodSandboxStatus", func() error { _, err := rt.PodSandboxStatus(ctx, sbID, false); return err }},
		{"ContainerStatus", func() error { _, err := rt.ContainerStatus(ctx, cID, false); return err }},
		{"RunPodSandbox", func() error { _, err := rt.RunPodSandbox(ctx, podConfig("web-1"), ""); return err }},
		{"CreateContainer", func() error {
			_, err := rt.CreateContainer(ctx, sbID, containerConfig(pod, "sidecar", pauseImage), pod)
			return err
		}},
		{"StopContainer", func() error { return rt.StopContainer(ctx, cID, 30) }},
		{"StopPodSandbox", func() error { return rt.StopPodSandbox(ctx, sbID) }},
		{"ExecSync", func() error { _, _, err := rt.ExecSync(ctx, cID, []string{"true"}, time.Second); return err }},
		{"ListContainerStats", func() error { _, err := rt.ListContainerStats(ctx, nil); return err }},
		{"ListMetricDescriptors (unimplemented)", func() error { _, err := rt.ListMetricDescriptors(ctx); return err }},
		{"PullImage", func() error {
			_, err := rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}, nil, nil)
			return err
		}},
		{"ListImages", func() error { _, err := rt.ListImages(ctx, nil); return err }},
		{"ImageFsInfo", func() error { _, err := rt.ImageFsInfo(ctx); return err }},
		{"GetContainerEvents", func() error {
			return rt.GetContainerEvents(ctx, make(chan *runtimeapi.ContainerEventResponse, 1), nil)
		}},
	}
	for _, c := range calls {
		wantStatus(t, c.name+" while Down", c.call(), codes.Unavailable, downMessage)
	}
	// Containers run on under their shims: the kubelet's network probes,
	// which do not go through CRI, still reach them.
	if ok, err := rt.ProbeNetwork(cID, Readiness); err != nil || !ok {
		t.Errorf("ProbeNetwork while Down = %v, %v; want true: the container still runs", ok, err)
	}

	rt.SetFault(Fault{})
	sbs, err := rt.ListPodSandbox(ctx, nil)
	if err != nil || len(sbs) != 1 || sbs[0].Id != sbID || sbs[0].State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Fatalf("ListPodSandbox after the fault cleared = %v, %v; want the ready sandbox %s", sbs, err, sbID)
	}
	if st := containerStatus(t, rt, cID); st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container is %v after the fault cleared, want it still running", st.State)
	}
	if resp, _ := rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}, false); resp.GetImage() != nil {
		t.Error("a pull while Down left the image")
	}
	pull(t, rt, busyboxImage)
}

// TestFaultDownKeepsEventStreams checks that a stream opened before the
// node went down goes on, while a new one is refused.
func TestFaultDownKeepsEventStreams(t *testing.T) {
	rt, _ := newTestRuntime(t, Behaviour{})
	w := watchEvents(t, rt, 16)
	rt.SetFault(Fault{Down: true})
	err := rt.GetContainerEvents(context.Background(), make(chan *runtimeapi.ContainerEventResponse, 1), func(runtimeapi.RuntimeService_GetContainerEventsClient) {
		t.Error("a new GetContainerEvents subscribed while Down")
	})
	wantStatus(t, "GetContainerEvents while Down", err, codes.Unavailable, downMessage)
	rt.SetFault(Fault{})
	pod := podConfig("web-0")
	sbID := runPod(t, rt, pod)
	w.expect(t, pod.Metadata.Uid, wantEvent{sbID, evCreated, testEpoch}, wantEvent{sbID, evStarted, testEpoch})
}

// TestFaultThroughSocket checks that k8s.io/cri-client sees the faults over
// the socket as the in-process caller does, including on the calls the fake
// does not implement, and that the side channel still answers while Down.
func TestFaultThroughSocket(t *testing.T) {
	ctx := context.Background()
	rt, clk := newTestRuntime(t, Behaviour{})
	rs, is := dialForTest(t, serveForTest(t, rt), false)
	pod := podConfig("web-0")
	sbID := runPod(t, rt, pod)
	cID := runContainer(t, rt, sbID, pod, "app", pauseImage)

	rt.SetFault(Fault{Down: true})
	_, err := rs.Version(ctx, "v1")
	wantStatus(t, "Version", err, codes.Unavailable, downMessage)
	_, err = rs.ListPodSandbox(ctx, nil)
	wantStatus(t, "ListPodSandbox", err, codes.Unavailable, downMessage)
	_, _, err = rs.ExecSync(ctx, cID, []string{"cat", "/tmp/healthy"}, time.Second)
	wantStatus(t, "ExecSync", err, codes.Unavailable, downMessage)
	_, err = rs.ListMetricDescriptors(ctx)
	wantStatus(t, "ListMetricDescriptors (unimplemented)", err, codes.Unavailable, downMessage)
	_, err = is.PullImage(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}, nil, nil)
	wantStatus(t, "PullImage", err, codes.Unavailable, downMessage)
	err = rs.GetContainerEvents(ctx, make(chan *runtimeapi.ContainerEventResponse, 1), nil)
	wantStatus(t, "GetContainerEvents", err, codes.Unavailable, downMessage)
	if ok, err := ProbeNetworkOver(ctx, rs.ExecSync, cID, Readiness); err != nil || !ok {
		t.Errorf("ProbeNetworkOver while Down = %v, %v; want true: probes do not go through CRI", ok, err)
	}

	rt.SetFault(Fault{CallLatency: 2 * time.Second})
	err = waitsFor(t, clk, 2*time.Second, func() error {
		cs, err := rs.ListContainers(ctx, nil)
		if err == nil && len(cs) != 1 {
			t.Errorf("ListContainers = %d containers, want 1", len(cs))
		}
		return err
	})
	if err != nil {
		t.Errorf("ListContainers with a call latency: %v", err)
	}
}

// TestFaultSlowFactorSandboxStart is the profile's example: a slow node
// takes three times as long to start a sandbox.
func TestFaultSlowFactorSandboxStart(t *testing.T) {
	rt, clk := newTestRuntime(t, Behaviour{SandboxStartLatency: time.Second})
	rt.SetFault(Fault{SlowFactor: 3})
	err := waitsFor(t, clk, 3*time.Second, func() error {
		_, err := rt.RunPodSandbox(context.Background(), podConfig("web-0"), "")
		return err
	})
	if err != nil {
		t.Fatalf("RunPodSandbox on a slow node: %v", err)
	}
}

// TestFaultSlowFactorStretchesEveryLatency runs each call of
// TestLatencyHonoured on a node three times slower. The grace period is
// the kubelet's, not the node's, so a stop killed at its end is not slowed.
func TestFaultSlowFactorStretchesEveryLatency(t *testing.T) {
	for _, tc := range latencyCases() {
		t.Run(tc.name, func(t *testing.T) {
			rt, clk := newTestRuntime(t, tc.behaviour)
			call := tc.setup(t, rt)
			rt.SetFault(Fault{SlowFactor: 3})
			want := 3 * tc.latency
			if tc.name == "StopContainer past the grace period" {
				want = tc.latency
			}
			if err := waitsFor(t, clk, want, func() error { return call(context.Background()) }); err != nil {
				t.Fatalf("the call failed: %v", err)
			}
			tc.check(t, rt)
		})
	}
}

// TestFaultSlowFactorTurnsAStopIntoAKill checks that an application slowed
// past its grace period is killed when the period ends.
func TestFaultSlowFactorTurnsAStopIntoAKill(t *testing.T) {
	rt, clk := newTestRuntime(t, Behaviour{StopLatency: 2 * time.Second})
	pod := podConfig("web-0")
	cID := runContainer(t, rt, runPod(t, rt, pod), pod, "app", pauseImage)
	rt.SetFault(Fault{SlowFactor: 3})
	if err := waitsFor(t, clk, 5*time.Second, func() error { return rt.StopContainer(context.Background(), cID, 5) }); err != nil {
		t.Fatal(err)
	}
	if st := containerStatus(t, rt, cID); st.ExitCode != exitCodeKilled || st.Reason != reasonError {
		t.Errorf("container exited %d (%s), want killed: 137 (Error)", st.ExitCode, st.Reason)
	}
}

func TestFaultSlowed(t *testing.T) {
	tests := []struct {
		factor float64
		d      time.Duration
		want   time.Duration
	}{
		{0, time.Second, time.Second},
		{1, time.Second, time.Second},
		{0.5, time.Second, time.Second}, // Validate rejects it; it slows nothing
		{math.NaN(), time.Second, time.Second},
		{2.5, time.Second, 2500 * time.Millisecond},
		{3, 0, 0},
		{1e30, time.Second, math.MaxInt64},
		{math.Inf(1), time.Second, math.MaxInt64},
	}
	for _, tc := range tests {
		st := &faultState{fault: Fault{SlowFactor: tc.factor}}
		if got := st.slowed(tc.d); got != tc.want {
			t.Errorf("slowed(%v) by %v = %v, want %v", tc.d, tc.factor, got, tc.want)
		}
	}
}

// TestFaultCallLatency checks that CallLatency delays a call before it does
// anything, adds to the call's own latency, and gives way to a cancelled
// context at once.
func TestFaultCallLatency(t *testing.T) {
	ctx := context.Background()
	t.Run("delays ListContainers", func(t *testing.T) {
		rt, clk := newTestRuntime(t, Behaviour{})
		pod := podConfig("web-0")
		runContainer(t, rt, runPod(t, rt, pod), pod, "app", pauseImage)
		rt.SetFault(Fault{CallLatency: 5 * time.Second})
		var got []*runtimeapi.Container
		err := waitsFor(t, clk, 5*time.Second, func() error {
			var err error
			got, err = rt.ListContainers(ctx, nil)
			return err
		})
		if err != nil || len(got) != 1 {
			t.Errorf("ListContainers = %d containers, %v; want 1", len(got), err)
		}
	})
	t.Run("adds to the pull latency", func(t *testing.T) {
		rt, clk := newTestRuntime(t, Behaviour{PullLatency: time.Second})
		rt.SetFault(Fault{CallLatency: 2 * time.Second})
		done := make(chan error, 1)
		go func() {
			_, err := rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}, nil, nil)
			done <- err
		}()
		testutil.WaitFor(t, "the call latency's timer", clk.HasWaiters)
		clk.Step(2 * time.Second)
		if err := waitsFor(t, clk, time.Second, func() error { return <-done }); err != nil {
			t.Fatalf("PullImage: %v", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		rt, clk := newTestRuntime(t, Behaviour{})
		rt.SetFault(Fault{CallLatency: time.Hour})
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { _, err := rt.ListContainers(cctx, nil); done <- err }()
		testutil.WaitFor(t, "ListContainers to wait on the clock", clk.HasWaiters)
		cancel()
		select {
		case err := <-done:
			wantCode(t, "cancelled ListContainers", err, codes.Canceled)
		case <-time.After(testutil.Patience):
			t.Fatal("ListContainers did not return once its context was cancelled")
		}
		if clk.HasWaiters() {
			t.Error("a cancelled call left its timer on the clock")
		}
	})
}

// TestFaultReachesOnlyCallsThatStartAfterIt checks that a call already
// waiting out its latency finishes as it started, however the fault
// changes meanwhile.
func TestFaultReachesOnlyCallsThatStartAfterIt(t *testing.T) {
	rt, clk := newTestRuntime(t, Behaviour{SandboxStartLatency: time.Second})
	done := make(chan error, 1)
	go func() { _, err := rt.RunPodSandbox(context.Background(), podConfig("web-0"), ""); done <- err }()
	testutil.WaitFor(t, "RunPodSandbox to wait on the clock", clk.HasWaiters)
	rt.SetFault(Fault{Down: true, CNIMissing: true})
	if err := waitsFor(t, clk, time.Second, func() error { return <-done }); err != nil {
		t.Errorf("RunPodSandbox begun before the fault: %v, want success", err)
	}
}

// TestFaultPullError checks that a broken registry fails every pull, after
// its latency and whatever the image and the pod say, with the error the
// image behaviours give.
func TestFaultPullError(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		pullError string
		images    map[string]ImageBehaviour // of the node under the fault
		pod       *runtimeapi.PodSandboxConfig
	}{
		{"unauthorized, an image that would pull", PullErrorUnauthorized, nil, nil},
		{"not found, an image that would pull", PullErrorNotFound, nil, podConfig("web-0")},
		{"unauthorized over an image's not found", PullErrorUnauthorized, map[string]ImageBehaviour{busyboxImage: {PullError: PullErrorNotFound}}, nil},
		{"not found over a pod's unauthorized", PullErrorNotFound, nil, func() *runtimeapi.PodSandboxConfig {
			p := podConfig("web-0")
			p.Annotations[AnnotationPullError] = PullErrorUnauthorized
			return p
		}()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The error an image behaviour gives, on a healthy node.
			ref, _ := newTestRuntime(t, Behaviour{Images: map[string]ImageBehaviour{busyboxImage: {PullError: tc.pullError}}})
			_, want := ref.PullImage(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}, nil, nil)
			if want == nil {
				t.Fatal("the image behaviour did not fail the pull")
			}

			rt, clk := newTestRuntime(t, Behaviour{PullLatency: time.Second, Images: tc.images})
			rt.SetFault(Fault{PullError: tc.pullError})
			err := waitsFor(t, clk, time.Second, func() error {
				_, err := rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}, nil, tc.pod)
				return err
			})
			wantStatus(t, "PullImage", err, status.Code(want), status.Convert(want).Message())
			if resp, _ := rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}, false); resp.GetImage() != nil {
				t.Error("a failed pull left the image present")
			}
		})
	}
	t.Run("an image already present", func(t *testing.T) {
		rt, _ := newTestRuntime(t, Behaviour{})
		pull(t, rt, busyboxImage)
		rt.SetFault(Fault{PullError: PullErrorUnauthorized})
		_, err := rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}, nil, nil)
		wantCode(t, "PullImage of a present image", err, codes.Unknown)
		if resp, _ := rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}, false); resp.GetImage() == nil {
			t.Error("a failed pull removed the image on disk")
		}
		rt.SetFault(Fault{})
		pull(t, rt, busyboxImage)
	})
}

var cniMissingRE = regexp.MustCompile(`^failed to setup network for sandbox "[0-9a-f]{64}": plugin type="bridge" failed \(add\): failed to find plugin "bridge" in path \[/opt/cni/bin\]$`)

// TestFaultCNIMissing checks that without its CNI plugin a node cannot run
// pod-network sandboxes, after the sandbox latency and leaving nothing
// behind, but still runs host-network ones.
func TestFaultCNIMissing(t *testing.T) {
	ctx := context.Background()
	rt, clk := newTestRuntime(t, Behaviour{SandboxStartLatency: time.Second})
	rt.SetFault(Fault{CNIMissing: true})
	pod := podConfig("web-0")
	err := waitsFor(t, clk, time.Second, func() error { _, err := rt.RunPodSandbox(ctx, pod, ""); return err })
	wantCode(t, "RunPodSandbox of a pod-network pod", err, codes.Unknown)
	if msg := status.Convert(err).Message(); !cniMissingRE.MatchString(msg) {
		t.Errorf("message %q, want containerd's missing-plugin error", msg)
	}
	if sbs, _ := rt.ListPodSandbox(ctx, nil); len(sbs) != 0 || len(rt.network.used) != 0 {
		t.Errorf("a failed RunPodSandbox left %d sandboxes and %d IPs", len(sbs), len(rt.network.used))
	}
	if st, err := rt.Status(ctx, false); err != nil || !st.Status.Conditions[1].Status {
		t.Errorf("Status = %v, %v; want the network ready: the CNI config is in place", st, err)
	}

	var hostID string
	err = waitsFor(t, clk, time.Second, func() error {
		var err error
		hostID, err = rt.RunPodSandbox(ctx, hostNetworkPodConfig("node-exporter"), "")
		return err
	})
	if err != nil {
		t.Fatalf("RunPodSandbox of a host-network pod: %v", err)
	}
	if ip := sandboxStatus(t, rt, hostID).Network.Ip; ip != "" {
		t.Errorf("host-network sandbox has IP %q, want none", ip)
	}

	rt.SetFault(Fault{})
	var sbID string
	if err := waitsFor(t, clk, time.Second, func() error {
		var err error
		sbID, err = rt.RunPodSandbox(ctx, pod, "")
		return err
	}); err != nil {
		t.Fatalf("RunPodSandbox of the same pod attempt once the plugin is back: %v", err)
	}
	if ip := sandboxStatus(t, rt, sbID).Network.Ip; ip == "" {
		t.Error("the sandbox got no IP once the plugin is back")
	}
}

// TestReboot checks that a power cycle loses the sandboxes and containers,
// tells event subscribers nothing about them, and keeps images and the pod
// CIDR, so that the kubelet can run the same pods again.
func TestReboot(t *testing.T) {
	ctx := context.Background()
	rt, clk := newTestRuntime(t, Behaviour{})
	w := watchEvents(t, rt, 64)
	// A subscriber that has not yet taken its events, as a stream busy
	// sending is.
	lagging := rt.subscribe()
	defer rt.unsubscribe(lagging)
	pull(t, rt, busyboxImage)
	imagesBefore, err := rt.ListImages(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// One container that will exit by itself, so that it has an exit timer.
	pod := podWithBehaviour("web-0", `app: {runFor: 30s}`)
	sbID := runPod(t, rt, pod)
	runContainer(t, rt, sbID, pod, "app", busyboxImage)
	runPod(t, rt, hostNetworkPodConfig("node-exporter"))
	for range 6 { // CREATED and STARTED of each sandbox and the container
		w.next(t)
	}
	rt.SetFault(Fault{Down: true})

	rt.Reboot()

	if got := rt.Fault(); got != (Fault{}) {
		t.Errorf("Fault() = %+v after Reboot, want it cleared", got)
	}
	if sbs, err := rt.ListPodSandbox(ctx, nil); err != nil || len(sbs) != 0 {
		t.Errorf("ListPodSandbox after Reboot = %d sandboxes, %v; want none", len(sbs), err)
	}
	if cs, err := rt.ListContainers(ctx, nil); err != nil || len(cs) != 0 {
		t.Errorf("ListContainers after Reboot = %d containers, %v; want none", len(cs), err)
	}
	if imgs, err := rt.ListImages(ctx, nil); err != nil || len(imgs) != len(imagesBefore) {
		t.Errorf("ListImages after Reboot = %d images, %v; want the %d on disk", len(imgs), err, len(imagesBefore))
	}
	if len(rt.network.used) != 0 || len(rt.names) != 0 || len(rt.exitTimers) != 0 {
		t.Errorf("Reboot kept %d IPs, %d names and %d exit timers", len(rt.network.used), len(rt.names), len(rt.exitTimers))
	}
	if clk.HasWaiters() {
		t.Error("Reboot left a timer on the clock")
	}
	if evs, _ := lagging.take(); len(evs) != 0 {
		t.Errorf("a subscriber still has %d events of before the Reboot queued", len(evs))
	}
	clk.Step(time.Minute) // past the old container's exit

	// The kubelet after the boot recreates the pod: same name and attempt,
	// an IP from the pod CIDR it set before the reboot.
	newID := runPod(t, rt, pod)
	if ip := sandboxStatus(t, rt, newID).Network.Ip; ip == "" {
		t.Error("the sandbox run after Reboot got no IP")
	}
	runContainer(t, rt, newID, pod, "app", busyboxImage)
	// The first event after the boot is the new sandbox's: nothing came for
	// the old ones.
	w.expect(t, pod.Metadata.Uid, wantEvent{newID, evCreated, clk.Now()})
}

// TestRebootInterruptsCallsInFlight checks that a call waiting out its
// latency when the power goes fails as its broken connection would, and
// leaves nothing in the node's next life.
func TestRebootInterruptsCallsInFlight(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		behaviour Behaviour
		call      func(rt *Runtime) error
		check     func(t *testing.T, rt *Runtime)
	}{
		{
			name: "RunPodSandbox", behaviour: Behaviour{SandboxStartLatency: time.Second},
			call: func(rt *Runtime) error { _, err := rt.RunPodSandbox(ctx, podConfig("web-0"), ""); return err },
			check: func(t *testing.T, rt *Runtime) {
				if sbs, _ := rt.ListPodSandbox(ctx, nil); len(sbs) != 0 || len(rt.network.used) != 0 || len(rt.names) != 0 {
					t.Errorf("the interrupted call left %d sandboxes, %d IPs and %d names", len(sbs), len(rt.network.used), len(rt.names))
				}
			},
		},
		{
			name: "PullImage", behaviour: Behaviour{PullLatency: time.Second},
			call: func(rt *Runtime) error {
				_, err := rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}, nil, nil)
				return err
			},
			check: func(t *testing.T, rt *Runtime) {
				if resp, _ := rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}, false); resp.GetImage() != nil {
					t.Error("the interrupted pull left the image")
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt, clk := newTestRuntime(t, tc.behaviour)
			done := make(chan error, 1)
			go func() { done <- tc.call(rt) }()
			testutil.WaitFor(t, "the call to wait on the clock", clk.HasWaiters)
			rt.Reboot()
			clk.Step(time.Second)
			select {
			case err := <-done:
				wantStatus(t, "the interrupted call", err, codes.Unavailable, rebootMessage)
			case <-time.After(testutil.Patience):
				t.Fatal("the call did not return")
			}
			tc.check(t, rt)
			// The node's next life serves the same call.
			if err := waitsFor(t, clk, time.Second, func() error { return tc.call(rt) }); err != nil {
				t.Errorf("the same call after the boot: %v", err)
			}
		})
	}
}

func TestFaultValidate(t *testing.T) {
	tests := []struct {
		name  string
		fault Fault
		want  []string // the fields the error names, one line each
	}{
		{"healthy", Fault{}, nil},
		{"everything wrong at once, validly", Fault{Down: true, SlowFactor: 3, CallLatency: time.Second, PullError: PullErrorNotFound, CNIMissing: true}, nil},
		{"slow factor 1", Fault{SlowFactor: 1}, nil},
		{"slow factor below 1", Fault{SlowFactor: 0.5}, []string{"fault.slowFactor"}},
		{"negative slow factor", Fault{SlowFactor: -2}, []string{"fault.slowFactor"}},
		{"NaN slow factor", Fault{SlowFactor: math.NaN()}, []string{"fault.slowFactor"}},
		{"infinite slow factor", Fault{SlowFactor: math.Inf(1)}, []string{"fault.slowFactor"}},
		{"negative call latency", Fault{CallLatency: -time.Second}, []string{"fault.callLatency"}},
		{"unknown pull error", Fault{PullError: "timeout"}, []string{"fault.pullError"}},
		{"three at once", Fault{SlowFactor: 0.1, CallLatency: -1, PullError: "x"}, []string{"fault.slowFactor", "fault.callLatency", "fault.pullError"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.fault.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors naming %v", tc.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("Validate() = %q: %d lines, want %d", err, len(lines), len(tc.want))
			}
			for i, field := range tc.want {
				if !strings.HasPrefix(lines[i], field+":") {
					t.Errorf("line %d = %q, want it to name %s", i, lines[i], field)
				}
			}
		})
	}
}

// TestFaultConcurrentUse changes the fault and reboots while calls run, for
// the race detector.
func TestFaultConcurrentUse(t *testing.T) {
	rt, _ := newTestRuntime(t, Behaviour{})
	ctx := context.Background()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 4 {
		wg.Go(func() {
			pod := podConfig("web-" + string(rune('a'+i)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if id, err := rt.RunPodSandbox(ctx, pod, ""); err == nil {
					_, _ = rt.ListContainers(ctx, nil)
					_ = rt.RemovePodSandbox(ctx, id)
				}
				_ = rt.Fault()
			}
		})
	}
	for i := range 200 {
		switch i % 3 {
		case 0:
			rt.SetFault(Fault{Down: true})
		case 1:
			rt.SetFault(Fault{CNIMissing: true, SlowFactor: 2})
		default:
			rt.Reboot()
		}
	}
	close(stop)
	wg.Wait()
	rt.Reboot()
	if len(rt.network.used) != 0 {
		t.Errorf("%d IPs held after the last Reboot", len(rt.network.used))
	}
}
