package pleg

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/fakeruntime"
)

func drain(g *Generic) []Event {
	var out []Event
	for {
		select {
		case e := <-g.Watch():
			out = append(out, *e)
		default:
			return out
		}
	}
}

// newRuntime is a fake runtime with a pod CIDR, ready for sandboxes.
func newRuntime(t testing.TB, clk *clocktesting.FakeClock) *fakeruntime.Runtime {
	t.Helper()
	rt := fakeruntime.New(fakeruntime.Config{Clock: clk, PreloadedImages: []string{"busybox"}})
	if err := rt.UpdateRuntimeConfig(context.Background(), &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.64.0.0/24"}}); err != nil {
		t.Fatal(err)
	}
	return rt
}

// createContainer creates a sandbox for pod uid and one container in it,
// labelled as the agent labels them, and returns the container's ID.
func createContainer(t testing.TB, rt *fakeruntime.Runtime, uid string) string {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"io.kubernetes.pod.uid": uid}
	sbConfig := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: uid, Namespace: "ns", Uid: uid}, Labels: labels}
	sb, err := rt.RunPodSandbox(ctx, sbConfig, "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := rt.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}, Labels: labels,
	}, sbConfig)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestRelistEmitsContainerTransitions(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	rt := newRuntime(t, clk)
	g := NewGeneric(rt, clk, RelistPeriod)
	id := createContainer(t, rt, "u1")

	steps := []struct {
		name   string
		action func() error
		want   []EventType
	}{
		{"created, which the kubelet counts as unknown", func() error { return nil }, []EventType{ContainerChanged}},
		{"started", func() error { return rt.StartContainer(ctx, id) }, []EventType{ContainerStarted}},
		{"nothing changed", func() error { return nil }, nil},
		{"stopped", func() error { return rt.StopContainer(ctx, id, 0) }, []EventType{ContainerDied}},
		{"removed", func() error { return rt.RemoveContainer(ctx, id) }, []EventType{ContainerRemoved}},
	}
	for _, s := range steps {
		if err := s.action(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if err := g.Relist(ctx); err != nil {
			t.Fatalf("%s: relist: %v", s.name, err)
		}
		got := drain(g)
		if len(got) != len(s.want) {
			t.Fatalf("%s: events %v, want types %v", s.name, got, s.want)
		}
		for i, e := range got {
			if e.Type != s.want[i] || e.ID != "u1" || e.Data != id {
				t.Errorf("%s: event %+v, want %s for pod u1 container %s", s.name, e, s.want[i], id)
			}
		}
	}
}

func TestHealthyTurnsFalseWhenRelistStalls(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	g := NewGeneric(fakeruntime.New(fakeruntime.Config{Clock: clk}), clk, RelistPeriod)
	if ok, err := g.Healthy(); ok || err == nil || err.Error() != "pleg has yet to be successful" {
		t.Fatalf("before the first relist: healthy %v (%v), want the kubelet's %q", ok, err, "pleg has yet to be successful")
	}
	if err := g.Relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.Step(RelistThreshold)
	if ok, err := g.Healthy(); !ok {
		t.Fatalf("unhealthy at exactly the threshold: %v", err)
	}
	clk.Step(100 * time.Millisecond)
	want := "pleg was last seen active 3m0.1s ago; threshold is 3m0s"
	if ok, err := g.Healthy(); ok || err == nil || err.Error() != want {
		t.Fatalf("past the relist threshold: healthy %v (%v), want the kubelet's %q", ok, err, want)
	}
}

// TestFailedRelistsMakeThePLEGUnhealthy: relists that fail (the runtime
// does not answer) leave the last good one as it was, so the PLEG turns
// unhealthy past the threshold, and the first relist that succeeds makes
// it healthy again.
func TestFailedRelistsMakeThePLEGUnhealthy(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	rt := &failingLists{RuntimeService: fakeruntime.New(fakeruntime.Config{Clock: clk})}
	g := NewGeneric(rt, clk, RelistPeriod)
	if err := g.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	rt.down.Store(true)
	for range int(RelistThreshold/time.Second) + 1 {
		clk.Step(time.Second)
		if err := g.Relist(ctx); err == nil {
			t.Fatal("a relist succeeded while the runtime's lists fail")
		}
	}
	want := "pleg was last seen active 3m1s ago; threshold is 3m0s"
	if ok, err := g.Healthy(); ok || err == nil || err.Error() != want {
		t.Fatalf("after 3m1s of failed relists: healthy %v (%v), want %q", ok, err, want)
	}
	rt.down.Store(false)
	clk.Step(time.Second)
	if err := g.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := g.Healthy(); !ok {
		t.Fatalf("unhealthy after a relist succeeded: %v", err)
	}
}

// failingLists fails the runtime's container lists while down is set, as
// a runtime that stopped answering.
type failingLists struct {
	internalapi.RuntimeService
	down atomic.Bool
}

func (f *failingLists) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	if f.down.Load() {
		return nil, grpcstatus.Error(codes.Unavailable, "connection refused")
	}
	return f.RuntimeService.ListContainers(ctx, filter)
}

// TestWaitNewerThan is the kubelet's pod cache GetNewerThan: a wait ends
// with a relist that started after the given time, of every pod or of the
// pod alone; a relist of another pod, or one not newer, does not end it.
func TestWaitNewerThan(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	rt := newRuntime(t, clk)
	g := NewGeneric(rt, clk, RelistPeriod)
	wait := func(uid string, after time.Time) <-chan error {
		done := make(chan error, 1)
		go func() { done <- g.WaitNewerThan(ctx, types.UID(uid), after) }()
		return done
	}
	pending := func(what string, done <-chan error) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("%s: the wait ended (%v)", what, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	ended := func(what string, done <-chan error) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the wait did not end", what)
		}
	}

	synced := clk.Now()
	done := wait("u1", synced)
	// A relist in the same instant as the sync's end is not newer.
	if err := g.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	pending("a relist as old as the sync", done)
	clk.Step(time.Millisecond)
	if err := g.RelistPod(ctx, "u2"); err != nil {
		t.Fatal(err)
	}
	pending("another pod's relist", done)
	if err := g.RelistPod(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	ended("the pod's own relist", done)

	clk.Step(time.Millisecond)
	done = wait("u3", clk.Now())
	clk.Step(time.Millisecond)
	if err := g.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	ended("a relist of every pod", done)
	if err := g.WaitNewerThan(ctx, "u1", synced); err != nil {
		t.Errorf("an old time waited: %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancelled := make(chan error, 1)
	go func() { cancelled <- g.WaitNewerThan(cctx, "u1", clk.Now()) }()
	cancel()
	if err := <-cancelled; err == nil {
		t.Error("a cancelled wait returned no error")
	}
}
