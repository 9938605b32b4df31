package images

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const mi = 1 << 20

// runtimeStub lists the containers whose images are in use.
type runtimeStub struct {
	internalapi.RuntimeService
	disk *diskStub
}

func (r runtimeStub) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	r.disk.mu.Lock()
	defer r.disk.mu.Unlock()
	var out []*runtimeapi.Container
	for i, id := range r.disk.inUse {
		out = append(out, &runtimeapi.Container{Id: "c" + string(rune('0'+i)), ImageRef: id})
	}
	return out, nil
}

// diskStub is an image store on a disk of capacityMi, of which otherMi is
// used by other things.
type diskStub struct {
	internalapi.ImageManagerService
	mu                  sync.Mutex
	capacityMi, otherMi uint64
	sizes               map[string]uint64 // Mi
	pinned              map[string]bool
	inUse               []string
	removed             []string
	lists               int
}

func (d *diskStub) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lists++
	var out []*runtimeapi.Image
	for id, size := range d.sizes {
		out = append(out, &runtimeapi.Image{Id: id, Size: size * mi, Pinned: d.pinned[id]})
	}
	return out, nil
}

func (d *diskStub) RemoveImage(_ context.Context, spec *runtimeapi.ImageSpec) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.sizes, spec.Image)
	d.removed = append(d.removed, spec.Image)
	return nil
}

func (d *diskStub) imageFs(context.Context) (*statsapi.FsStats, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	used := d.otherMi
	for _, s := range d.sizes {
		used += s
	}
	return &statsapi.FsStats{CapacityBytes: ptr.To(d.capacityMi * mi), AvailableBytes: ptr.To((d.capacityMi - used) * mi)}, nil
}

func (d *diskStub) set(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f()
}

func (d *diskStub) removals() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.removed)
}

func newGC(t *testing.T, d *diskStub, kc *kubeletconfig.KubeletConfiguration) (*Manager, *testingclock.FakeClock, *record.FakeRecorder) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	events := record.NewFakeRecorder(100)
	m, err := NewManager(Config{
		NodeName: "node-1", Runtime: runtimeStub{disk: d}, Images: d, Kubelet: kc,
		ImageFs: d.imageFs, Clock: clk, Events: events,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, clk, events
}

func TestPolicyFrom(t *testing.T) {
	tests := []struct {
		name    string
		kc      kubeletconfig.KubeletConfiguration
		want    Policy
		wantErr string
	}{
		{"kubelet defaults", kubeletconfig.KubeletConfiguration{}, Policy{85, 80, 2 * time.Minute, 0}, ""},
		{"set values", kubeletconfig.KubeletConfiguration{
			ImageGCHighThresholdPercent: ptr.To[int32](70), ImageGCLowThresholdPercent: ptr.To[int32](50),
			ImageMinimumGCAge: metav1.Duration{Duration: time.Minute}, ImageMaximumGCAge: metav1.Duration{Duration: time.Hour},
		}, Policy{70, 50, time.Minute, time.Hour}, ""},
		{"low above high", kubeletconfig.KubeletConfiguration{ImageGCHighThresholdPercent: ptr.To[int32](70), ImageGCLowThresholdPercent: ptr.To[int32](75)}, Policy{}, "can not be higher"},
		{"out of range", kubeletconfig.KubeletConfiguration{ImageGCHighThresholdPercent: ptr.To[int32](101)}, Policy{}, "must be in range [0-100]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PolicyFrom(&tt.kc)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("PolicyFrom = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestGarbageCollectFreesLeastRecentlyUsedDownToLowThreshold(t *testing.T) {
	// 1000Mi disk, 900Mi used: 90% is over the 85% high threshold; the low
	// threshold of 80% asks for 100Mi.
	d := &diskStub{
		capacityMi: 1000, otherMi: 250,
		sizes:  map[string]uint64{"never-used": 60, "used-earlier": 60, "recent": 70, "running": 300, "pinned": 160},
		pinned: map[string]bool{"pinned": true},
		inUse:  []string{"used-earlier", "recent", "running"},
	}
	m, clk, events := newGC(t, d, &kubeletconfig.KubeletConfiguration{})
	ctx := context.Background()

	// First pass: every image is new, younger than the 2 m minimum age.
	err := m.GarbageCollect(ctx)
	if err == nil || !strings.Contains(err.Error(), "Failed to free sufficient space") {
		t.Fatalf("GarbageCollect = %v, want a failure to free space", err)
	}
	if got := <-events.Events; !strings.HasPrefix(got, "Warning FreeDiskSpaceFailed Insufficient free disk space on the node's image filesystem (90% of") {
		t.Errorf("event = %q", got)
	}
	if got := d.removals(); len(got) != 0 {
		t.Errorf("removed %v before the minimum age", got)
	}

	clk.Step(time.Minute)
	d.set(func() { d.inUse = []string{"recent", "running"} })
	if err := m.GarbageCollect(ctx); err == nil {
		t.Fatal("GarbageCollect freed images younger than 2 m")
	}
	<-events.Events

	clk.Step(2 * time.Minute)
	d.set(func() { d.inUse = []string{"running"} })
	if err := m.GarbageCollect(ctx); err != nil {
		t.Fatal(err)
	}
	// Never used first, then the least recently used, until 100Mi are free.
	if got, want := d.removals(), []string{"never-used", "used-earlier"}; !slices.Equal(got, want) {
		t.Errorf("removed %v, want %v", got, want)
	}
}

func TestGarbageCollectBelowHighThresholdKeepsImages(t *testing.T) {
	d := &diskStub{capacityMi: 1000, otherMi: 100, sizes: map[string]uint64{"a": 100}}
	m, clk, _ := newGC(t, d, &kubeletconfig.KubeletConfiguration{})
	clk.Step(time.Hour)
	if err := m.GarbageCollect(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Hour)
	if err := m.GarbageCollect(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := d.removals(); len(got) != 0 {
		t.Errorf("removed %v at 20%% usage", got)
	}
}

func TestDeleteUnusedImages(t *testing.T) {
	d := &diskStub{
		capacityMi: 1000, sizes: map[string]uint64{"a": 10, "b": 20, "running": 30, "pinned": 40},
		pinned: map[string]bool{"pinned": true}, inUse: []string{"running"},
	}
	m, clk, _ := newGC(t, d, &kubeletconfig.KubeletConfiguration{})
	ctx := context.Background()
	if freed, err := m.DeleteUnusedImages(ctx); err != nil || freed != 0 {
		t.Errorf("DeleteUnusedImages on new images = %d, %v; want 0 before the minimum age", freed, err)
	}
	clk.Step(3 * time.Minute)
	freed, err := m.DeleteUnusedImages(ctx)
	if err != nil || freed != 30*mi {
		t.Errorf("DeleteUnusedImages = %d, %v; want 30Mi", freed, err)
	}
	got := d.removals()
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("removed %v, want a and b", got)
	}
}

func TestMaximumAgeRemovesImagesUnusedForLong(t *testing.T) {
	d := &diskStub{capacityMi: 1000, sizes: map[string]uint64{"old": 10, "running": 10}, inUse: []string{"running", "old"}}
	m, clk, _ := newGC(t, d, &kubeletconfig.KubeletConfiguration{ImageMaximumGCAge: metav1.Duration{Duration: 10 * time.Minute}})
	ctx := context.Background()
	if err := m.GarbageCollect(ctx); err != nil {
		t.Fatal(err)
	}
	d.set(func() { d.inUse = []string{"running"} })
	clk.Step(10 * time.Minute)
	if err := m.GarbageCollect(ctx); err != nil {
		t.Fatal(err)
	}
	if got := d.removals(); len(got) != 0 {
		t.Errorf("removed %v at exactly the maximum age", got)
	}
	clk.Step(time.Minute)
	if err := m.GarbageCollect(ctx); err != nil {
		t.Fatal(err)
	}
	if got := d.removals(); !slices.Equal(got, []string{"old"}) {
		t.Errorf("removed %v, want old (unused for 11 m, disk nearly empty)", got)
	}
}

func TestRunCollectsEveryPeriod(t *testing.T) {
	d := &diskStub{capacityMi: 1000, sizes: map[string]uint64{}}
	m, clk, _ := newGC(t, d, &kubeletconfig.KubeletConfiguration{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitLists := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			d.mu.Lock()
			lists := d.lists
			d.mu.Unlock()
			if lists == n && clk.HasWaiters() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("image GC ran %d times, want %d", lists, n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitLists(1)
	clk.Step(GCPeriod - time.Second)
	waitLists(1)
	clk.Step(time.Second)
	waitLists(2)
}
