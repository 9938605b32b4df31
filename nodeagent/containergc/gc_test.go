package containergc

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"
)

var t0 = time.Unix(10000, 0)

// runtimeStub holds containers and sandboxes and records what GC removes.
type runtimeStub struct {
	internalapi.RuntimeService
	mu         sync.Mutex
	containers []*runtimeapi.Container
	sandboxes  []*runtimeapi.PodSandbox
	stopped    []string
	removed    []string
	lists      int
}

func (r *runtimeStub) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lists++
	return slices.Clone(r.containers), nil
}

func (r *runtimeStub) ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sandboxes), nil
}

func (r *runtimeStub) StopContainer(_ context.Context, id string, _ int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = append(r.stopped, id)
	return nil
}

func (r *runtimeStub) RemoveContainer(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed = append(r.removed, id)
	r.containers = slices.DeleteFunc(r.containers, func(c *runtimeapi.Container) bool { return c.Id == id })
	return nil
}

func (r *runtimeStub) StopPodSandbox(context.Context, string) error { return nil }

func (r *runtimeStub) RemovePodSandbox(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed = append(r.removed, id)
	r.sandboxes = slices.DeleteFunc(r.sandboxes, func(s *runtimeapi.PodSandbox) bool { return s.Id == id })
	return nil
}

func (r *runtimeStub) removals() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.removed)
	slices.Sort(out)
	return out
}

// pods says which pods are terminated and which are deleted.
type pods struct{ terminated, deleted map[types.UID]bool }

func (p pods) ShouldPodContentBeRemoved(uid types.UID) bool { return p.deleted[uid] }
func (p pods) ShouldPodRuntimeBeRemoved(uid types.UID) bool {
	return p.deleted[uid] || p.terminated[uid]
}

func ctr(id, pod, name string, state runtimeapi.ContainerState, ageMin int) *runtimeapi.Container {
	return &runtimeapi.Container{
		Id: id, PodSandboxId: "sb-" + pod, State: state, CreatedAt: t0.Add(-time.Duration(ageMin) * time.Minute).UnixNano(),
		Metadata: &runtimeapi.ContainerMetadata{Name: name}, Labels: map[string]string{labelPodUID: pod},
	}
}

func sb(id, pod string, state runtimeapi.PodSandboxState, ageMin int) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{
		Id: id, State: state, CreatedAt: t0.Add(-time.Duration(ageMin) * time.Minute).UnixNano(),
		Metadata: &runtimeapi.PodSandboxMetadata{Uid: pod},
	}
}

const (
	running = runtimeapi.ContainerState_CONTAINER_RUNNING
	exited  = runtimeapi.ContainerState_CONTAINER_EXITED
	unknown = runtimeapi.ContainerState_CONTAINER_UNKNOWN
	ready   = runtimeapi.PodSandboxState_SANDBOX_READY
	dead    = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
)

func TestGarbageCollect(t *testing.T) {
	// Pod a runs; app restarted three times. Pod b is terminated, not
	// deleted. Pod gone is deleted.
	world := func() *runtimeStub {
		return &runtimeStub{
			containers: []*runtimeapi.Container{
				ctr("a-app-3", "a", "app", running, 1), ctr("a-app-2", "a", "app", exited, 2),
				ctr("a-app-1", "a", "app", exited, 3), ctr("a-app-0", "a", "app", unknown, 4),
				ctr("a-side-0", "a", "side", exited, 5),
				ctr("b-app-0", "b", "app", exited, 6),
				ctr("gone-app-0", "gone", "app", exited, 7),
			},
			sandboxes: []*runtimeapi.PodSandbox{
				sb("sb-a", "a", ready, 10), sb("sb-a-old", "a", dead, 20),
				sb("sb-b", "b", dead, 10), sb("sb-gone", "gone", dead, 10),
			},
		}
	}
	state := pods{terminated: map[types.UID]bool{"b": true}, deleted: map[types.UID]bool{"gone": true}}
	tests := []struct {
		name                      string
		policy                    Policy
		allSourcesReady, evictAll bool
		want                      []string
	}{{
		name:   "kubelet defaults: one dead container per (pod, name); the deleted pod's go",
		policy: DefaultPolicy(), allSourcesReady: true,
		want: []string{"a-app-0", "a-app-1", "gone-app-0", "sb-a-old"},
	}, {
		name:   "before all sources are ready, a pod not known is not yet gone",
		policy: DefaultPolicy(),
		want:   []string{"a-app-0", "a-app-1", "sb-a-old"},
	}, {
		name:   "eviction reclaim: terminated pods lose theirs too",
		policy: DefaultPolicy(), allSourcesReady: true, evictAll: true,
		want: []string{"a-app-0", "a-app-1", "b-app-0", "gone-app-0", "sb-a-old"},
	}, {
		name:   "minimum age spares young containers",
		policy: Policy{MinAge: 4*time.Minute + 30*time.Second, MaxPerPodContainer: 0, MaxContainers: -1}, allSourcesReady: true,
		want: []string{"a-side-0", "b-app-0", "gone-app-0", "sb-a-old"},
	}, {
		// 4 units for 2 containers: one per unit first, then the oldest.
		name:   "a node-wide cap removes the oldest beyond it",
		policy: Policy{MaxPerPodContainer: -1, MaxContainers: 2},
		want:   []string{"a-app-0", "a-app-1", "b-app-0", "gone-app-0", "sb-a-old"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := world()
			m, err := NewManager(Config{
				NodeName: "node-1", Runtime: rt, Policy: tt.policy, Pods: state,
				AllSourcesReady: func() bool { return tt.allSourcesReady }, Clock: testingclock.NewFakeClock(t0),
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.GarbageCollect(context.Background(), tt.allSourcesReady, tt.evictAll); err != nil {
				t.Fatal(err)
			}
			if got := rt.removals(); !slices.Equal(got, tt.want) {
				t.Errorf("removed %v, want %v", got, tt.want)
			}
			rt.mu.Lock()
			stopped := slices.Clone(rt.stopped)
			rt.mu.Unlock()
			if slices.Contains(rt.removals(), "a-app-0") && !slices.Equal(stopped, []string{"a-app-0"}) {
				t.Errorf("stopped %v before removal, want the unknown-state a-app-0", stopped)
			}
		})
	}
}

func TestSandboxesWaitForTheirContainers(t *testing.T) {
	rt := &runtimeStub{
		containers: []*runtimeapi.Container{ctr("gone-app-0", "gone", "app", exited, 1)},
		sandboxes:  []*runtimeapi.PodSandbox{sb("sb-gone", "gone", dead, 2)},
	}
	state := pods{deleted: map[types.UID]bool{"gone": true}}
	m, err := NewManager(Config{NodeName: "node-1", Runtime: rt, Policy: DefaultPolicy(), Pods: state,
		AllSourcesReady: func() bool { return true }, Clock: testingclock.NewFakeClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.DeleteAllUnusedContainers(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rt.removals(); !slices.Equal(got, []string{"gone-app-0"}) {
		t.Fatalf("first round removed %v, want the container only", got)
	}
	if err := m.DeleteAllUnusedContainers(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rt.removals(); !slices.Equal(got, []string{"gone-app-0", "sb-gone"}) {
		t.Errorf("second round removed %v, want the sandbox too", got)
	}
}

func TestRunCollectsEveryPeriod(t *testing.T) {
	rt := &runtimeStub{}
	clk := testingclock.NewFakeClock(t0)
	m, err := NewManager(Config{NodeName: "node-1", Runtime: rt, Policy: DefaultPolicy(), Pods: pods{},
		AllSourcesReady: func() bool { return true }, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitRuns := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			rt.mu.Lock()
			lists := rt.lists
			rt.mu.Unlock()
			if lists == n && clk.HasWaiters() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("container GC ran %d times, want %d", lists, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitRuns(1)
	clk.Step(Period)
	waitRuns(2)
	clk.Step(Period)
	waitRuns(3)
}

func TestNewManagerNeedsItsWiring(t *testing.T) {
	if _, err := NewManager(Config{NodeName: "node-1"}); err == nil {
		t.Error("NewManager accepted a config without a runtime")
	}
}
