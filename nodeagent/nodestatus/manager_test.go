package nodestatus

import (
	"context"
	"math/rand/v2"
	goruntime "runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"
)

// fixedSource makes rand.Float64 return the same number, f/2^53, every time.
type fixedSource uint64

func (f fixedSource) Uint64() uint64 { return uint64(f) }

// statusPatches counts the node status writes a fake clientset has seen.
func statusPatches(c *fake.Clientset) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "patch" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

// TestReportDelay checks the kubelet's delayAfterNodeStatusChange: the first
// periodic report after a change comes ReportFrequency plus a one-time
// random delay in [-ReportFrequency/2, +ReportFrequency/2) later, and the
// ones after it at a fixed ReportFrequency.
func TestReportDelay(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rand  float64
		first time.Duration // when the first unchanged report falls due
	}{
		{"late", 0.9, 7 * time.Minute},
		{"early", 0.1, 3 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clk := testingclock.NewFakeClock(t0)
			id := identity()
			client := fake.NewClientset(InitialNode(id, t0))
			m := NewManager(Config{
				Identity: id, Client: client, Clock: clk,
				GetNode: func() (*corev1.Node, error) {
					return client.CoreV1().Nodes().Get(ctx, id.Name, metav1.GetOptions{})
				},
				RuntimeState:    func(context.Context) RuntimeState { return RuntimeState{Ready: true} },
				UpdateFrequency: 10 * time.Second, ReportFrequency: 5 * time.Minute,
			})
			m.rng = rand.New(fixedSource(tc.rand * (1 << 53)))
			syncAt := func(at time.Duration, wantPatches int) {
				t.Helper()
				clk.SetTime(t0.Add(at))
				if err := m.SyncNodeStatus(ctx); err != nil {
					t.Fatal(err)
				}
				if got := statusPatches(client); got != wantPatches {
					t.Fatalf("at %v: %d status patches, want %d", at, got, wantPatches)
				}
			}
			syncAt(0, 1)                                  // the start is a change
			syncAt(tc.first-10*time.Second, 1)            // unchanged, not due
			syncAt(tc.first, 2)                           // the delayed report
			syncAt(tc.first+5*time.Minute-time.Second, 2) // the delay is spent
			syncAt(tc.first+5*time.Minute, 3)
		})
	}
}

// TestRegisterNeverGivesUp: registration retries on the kubelet's schedule
// (100 ms, doubling, at most 7 s between tries) for as long as the API
// server refuses, well past the point where a capped wait.Backoff stops.
func TestRegisterNeverGivesUp(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	client := fake.NewClientset()
	const failures = 15 // about a minute of refusals
	var tries []time.Duration
	client.PrependReactor("create", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		tries = append(tries, clk.Since(t0))
		if len(tries) <= failures {
			return true, nil, apierrors.NewServiceUnavailable("starting")
		}
		return false, nil, nil
	})
	m := NewManager(Config{Identity: identity(), Client: client, Clock: clk})
	done := make(chan error, 1)
	go func() { done <- m.Register(context.Background()) }()
	// Every wait is a multiple of 100 ms: stepping by it lands on each.
	for registered := false; !registered; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			registered = true
		default:
			if clk.HasWaiters() {
				clk.Step(100 * time.Millisecond)
			} else {
				goruntime.Gosched()
			}
		}
	}
	if len(tries) != failures+1 {
		t.Fatalf("%d tries, want %d", len(tries), failures+1)
	}
	want := 100 * time.Millisecond
	for i, at := range tries {
		gap := at
		if i > 0 {
			gap = at - tries[i-1]
		}
		if gap != want {
			t.Fatalf("try %d came %v after the one before, want %v (tries at %v)", i+1, gap, want, tries)
		}
		want = min(2*want, 7*time.Second)
	}
	if _, err := client.CoreV1().Nodes().Get(context.Background(), identity().Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the Node was not created: %v", err)
	}
}

// TestImagesChange: the image list comes from a cache refreshed every
// ImageListPeriod, not from the runtime at every update; a new image is a
// status change, patched once, and an unchanged list patches nothing.
func TestImagesChange(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(t0)
	id := identity()
	client := fake.NewClientset()
	images := []*runtimeapi.Image{image("sha256:pause", 10<<20, nil, []string{"registry.k8s.io/pause:3.10"})}
	lists := 0
	m := NewManager(Config{
		Identity: id, Client: client, Clock: clk,
		GetNode: func() (*corev1.Node, error) {
			return client.CoreV1().Nodes().Get(ctx, id.Name, metav1.GetOptions{})
		},
		RuntimeState: func(context.Context) RuntimeState { return RuntimeState{Ready: true} },
		ListImages: func(context.Context) ([]*runtimeapi.Image, error) {
			lists++
			return images, nil
		},
		MaxImages:       DefaultMaxImages,
		UpdateFrequency: 10 * time.Second, ReportFrequency: 5 * time.Minute,
	})
	// Registration lists the images for the first status, as the kubelet's
	// image cache is filled as it starts.
	regDone := make(chan error, 1)
	go func() { regDone <- m.Register(ctx) }()
	for len(regDone) == 0 {
		if clk.HasWaiters() {
			clk.Step(registerFirstStep)
		} else {
			goruntime.Gosched()
		}
	}
	if err := <-regDone; err != nil {
		t.Fatal(err)
	}
	node, err := client.CoreV1().Nodes().Get(ctx, id.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(node.Status.Images) != 1 || node.Status.Images[0].Names[0] != "registry.k8s.io/pause:3.10" {
		t.Fatalf("registered with images %v, want the pause image", node.Status.Images)
	}
	start := clk.Since(t0)
	syncAt := func(at time.Duration, wantPatches, wantLists int) {
		t.Helper()
		clk.SetTime(t0.Add(start + at))
		if err := m.SyncNodeStatus(ctx); err != nil {
			t.Fatal(err)
		}
		if got := statusPatches(client); got != wantPatches {
			t.Errorf("at %v: %d status patches, want %d", at, got, wantPatches)
		}
		if lists != wantLists {
			t.Errorf("at %v: %d ListImages calls, want %d", at, lists, wantLists)
		}
	}
	syncAt(0, 1, 1)              // the first update; the cache is fresh
	syncAt(10*time.Second, 1, 1) // unchanged, and no list
	images = append(images, image("sha256:nginx", 70<<20, nil, []string{"docker.io/library/nginx:1.27"}))
	syncAt(20*time.Second, 1, 1) // pulled, but the cache has not seen it yet
	syncAt(30*time.Second, 2, 2) // the cache refreshes: one patch
	syncAt(40*time.Second, 2, 2)
	syncAt(60*time.Second, 2, 3) // refreshed, unchanged: no patch
	syncAt(90*time.Second, 2, 4)
	node, err = client.CoreV1().Nodes().Get(ctx, id.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(node.Status.Images) != 2 || node.Status.Images[0].SizeBytes != 70<<20 {
		t.Errorf("images after the pull = %v, want nginx then pause", node.Status.Images)
	}
}

// TestStatusOverwrittenByTheControllerIsPostedAgain: the node lifecycle
// controller set every condition Unknown while the node could not reach
// the API server. The Node the informer holds then differs from what the
// node computes, so the next update (10 s later at most) posts Ready
// again, long before the periodic report is due, as the kubelet does.
func TestStatusOverwrittenByTheControllerIsPostedAgain(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(t0)
	id := identity()
	client := fake.NewClientset(InitialNode(id, t0))
	m := NewManager(Config{
		Identity: id, Client: client, Clock: clk,
		GetNode: func() (*corev1.Node, error) {
			return client.CoreV1().Nodes().Get(ctx, id.Name, metav1.GetOptions{})
		},
		RuntimeState:    func(context.Context) RuntimeState { return RuntimeState{Ready: true} },
		UpdateFrequency: 10 * time.Second, ReportFrequency: 5 * time.Minute,
	})
	sync := func(at time.Duration) {
		t.Helper()
		clk.SetTime(t0.Add(at))
		if err := m.SyncNodeStatus(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sync(0)
	sync(10 * time.Second)
	if got := statusPatches(client); got != 1 {
		t.Fatalf("%d status patches with nothing changed, want 1", got)
	}
	// What the controller writes after the grace period.
	node, err := client.CoreV1().Nodes().Get(ctx, id.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range node.Status.Conditions {
		c := &node.Status.Conditions[i]
		c.Status, c.Reason, c.Message = corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status."
		c.LastTransitionTime = metav1.NewTime(t0.Add(55 * time.Second))
	}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sync(70 * time.Second)
	if got := statusPatches(client); got != 2 {
		t.Fatalf("%d status patches after the controller's Unknown, want 2", got)
	}
	node, err = client.CoreV1().Nodes().Get(ctx, id.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range node.Status.Conditions {
		if c.Status == corev1.ConditionUnknown {
			t.Errorf("%s still Unknown", c.Type)
		}
		if c.Type == corev1.NodeReady && (c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Time.Equal(t0.Add(70*time.Second))) {
			t.Errorf("Ready = %s since %v, want True since the re-post", c.Status, c.LastTransitionTime)
		}
	}
	sync(80 * time.Second)
	if got := statusPatches(client); got != 2 {
		t.Errorf("%d status patches once the Node holds the status again, want 2", got)
	}
}

// TestStatusUpdateRetries checks the kubelet's updateNodeStatus: a failed
// patch is retried at once, each retry reads the Node from the API server
// through the heartbeat client rather than the informer, each failed retry
// calls OnRepeatedHeartbeatFailure, and five failures end the update.
func TestStatusUpdateRetries(t *testing.T) {
	for _, tc := range []struct {
		name              string
		failures          int // patches refused before one is accepted
		wantErr           bool
		wantGets          int
		wantHeartbeatCall int
	}{
		{"first try", 0, false, 0, 0},
		{"conflict once", 1, false, 1, 0},
		{"three failures", 3, false, 3, 2},
		{"every try", 5, true, 4, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			id := identity()
			informer := fake.NewClientset(InitialNode(id, t0))
			heartbeat := fake.NewClientset(InitialNode(id, t0))
			patches := 0
			heartbeat.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				if patches++; patches <= tc.failures {
					return true, nil, apierrors.NewConflict(corev1.Resource("nodes"), id.Name, nil)
				}
				return false, nil, nil
			})
			calls := 0
			m := NewManager(Config{
				Identity: id, Client: informer, HeartbeatClient: heartbeat, Clock: testingclock.NewFakeClock(t0),
				OnRepeatedHeartbeatFailure: func() { calls++ },
				GetNode: func() (*corev1.Node, error) {
					return informer.CoreV1().Nodes().Get(ctx, id.Name, metav1.GetOptions{})
				},
				RuntimeState:    func(context.Context) RuntimeState { return RuntimeState{Ready: true} },
				UpdateFrequency: 10 * time.Second, ReportFrequency: 5 * time.Minute,
			})
			err := m.SyncNodeStatus(ctx)
			if (err != nil) != tc.wantErr {
				t.Fatalf("SyncNodeStatus: %v, want error %v", err, tc.wantErr)
			}
			gets := 0
			for _, a := range heartbeat.Actions() {
				if a.GetVerb() == "get" {
					gets++
				}
			}
			if gets != tc.wantGets || calls != tc.wantHeartbeatCall || statusPatches(informer) != 0 {
				t.Fatalf("%d GETs, %d heartbeat-failure calls, %d patches by the informer's client; want %d, %d, 0",
					gets, calls, statusPatches(informer), tc.wantGets, tc.wantHeartbeatCall)
			}
			if wantPatches := min(tc.failures+1, nodeStatusUpdateRetry); patches != wantPatches {
				t.Fatalf("%d patches tried, want %d", patches, wantPatches)
			}
		})
	}
}
