package eviction

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// node is a stub of what the manager sees: pods with their usage, and disk
// used outside pods, behind a lock since the loop reads them.
type node struct {
	clock *testingclock.FakeClock

	mu        sync.Mutex
	usages    []usage
	fsExtraMi uint64
	kills     []kill
	// imagesFreeMi is what one image GC frees.
	imagesFreeMi uint64
	reclaims     []string
}

type kill struct {
	pod    string
	grace  int64
	status corev1.PodStatus
}

func (n *node) summary(context.Context) (*statsapi.Summary, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return summaryOf(n.clock.Now(), 1024, 1000, n.fsExtraMi, n.usages...), nil
}

func (n *node) activePods() []*corev1.Pod {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*corev1.Pod
	for _, u := range n.usages {
		out = append(out, u.pod)
	}
	return out
}

// killPod removes the pod and its usage, as a real kill would.
func (n *node) killPod(_ context.Context, pod *corev1.Pod, status corev1.PodStatus, grace int64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.kills = append(n.kills, kill{pod.Name, grace, status})
	for i, u := range n.usages {
		if u.pod.UID == pod.UID {
			n.usages = append(n.usages[:i], n.usages[i+1:]...)
			break
		}
	}
	return nil
}

func (n *node) DeleteUnusedImages(context.Context) (int64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.reclaims = append(n.reclaims, "images")
	freed := min(n.imagesFreeMi, n.fsExtraMi)
	n.fsExtraMi -= freed
	return int64(freed * mi), nil
}

func (n *node) DeleteAllUnusedContainers(context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.reclaims = append(n.reclaims, "containers")
	return nil
}

func (n *node) killed() []kill {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]kill(nil), n.kills...)
}

func (n *node) reclaimed() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.reclaims...)
}

func (n *node) set(f func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f()
}

// run starts a manager over n and returns it with a function that lets
// one monitoring interval pass and waits until the next cycle has finished.
func run(t *testing.T, n *node, kc *kubeletconfig.KubeletConfiguration) (*Manager, func()) {
	t.Helper()
	m, err := NewManager(Config{
		NodeName: "node-1", Clock: n.clock, Kubelet: kc,
		Summary: n.summary, ActivePods: n.activePods, KillPod: n.killPod,
		Images: n, Containers: n, Events: record.NewFakeRecorder(1000),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitCycle := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !n.clock.HasWaiters() {
			if time.Now().After(deadline) {
				t.Fatal("the eviction loop did not finish its cycle within 10 s")
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitCycle()
	return m, func() {
		t.Helper()
		n.clock.Step(MonitoringInterval)
		waitCycle()
	}
}

func newNode(usages ...usage) *node {
	return &node{clock: testingclock.NewFakeClock(time.Unix(1000, 0)), usages: usages}
}

func TestHardThresholdEvictsOnePodPerCycle(t *testing.T) {
	// 1024Mi of memory, 100Mi hard threshold: 980Mi used leaves 44Mi.
	n := newNode(
		usage{pod: podSpec("guaranteed", 0, 200, 200), memMi: 180},
		usage{pod: podSpec("best-effort", 0, 0, 0), memMi: 500},
		usage{pod: podSpec("burstable", 0, 100, 0), memMi: 300},
	)
	kc := &kubeletconfig.KubeletConfiguration{EvictionHard: map[string]string{"memory.available": "100Mi"}}
	m, step := run(t, n, kc)

	kills := n.killed()
	if len(kills) != 1 {
		t.Fatalf("first cycle killed %d pods, want 1", len(kills))
	}
	k := kills[0]
	if k.pod != "best-effort" || k.grace != immediateEvictionGracePeriodSeconds {
		t.Errorf("first cycle killed %s with grace %d, want best-effort with %d", k.pod, k.grace, immediateEvictionGracePeriodSeconds)
	}
	if k.status.Phase != corev1.PodFailed || k.status.Reason != "Evicted" ||
		!strings.HasPrefix(k.status.Message, "The node was low on resource: memory. Threshold quantity: 100Mi, available: 44Mi. Container app was using 500Mi, request is 0") {
		t.Errorf("status = %s %s %q", k.status.Phase, k.status.Reason, k.status.Message)
	}
	if len(k.status.Conditions) != 1 || k.status.Conditions[0].Type != corev1.DisruptionTarget ||
		k.status.Conditions[0].Reason != corev1.PodReasonTerminationByKubelet || k.status.Conditions[0].Message != k.status.Message {
		t.Errorf("conditions = %+v, want one DisruptionTarget by the kubelet", k.status.Conditions)
	}
	if !m.IsUnderMemoryPressure() || m.IsUnderDiskPressure() || m.IsUnderPIDPressure() {
		t.Error("want memory pressure only")
	}
	events := m.cfg.Events.(*record.FakeRecorder).Events
	if got := <-events; got != "Warning EvictionThresholdMet Attempting to reclaim memory" {
		t.Errorf("node event = %q", got)
	}
	wantEvent := "Warning Evicted " + k.status.Message + " map[offending_containers:app offending_containers_usage:500Mi starved_resource:memory]"
	if got := <-events; got != wantEvent {
		t.Errorf("pod event =\n%q\nwant the status message and the kubelet's annotations\n%q", got, wantEvent)
	}

	// 480Mi used now: no threshold met, no more evictions.
	step()
	if got := len(n.killed()); got != 1 {
		t.Errorf("after pressure ended, %d kills, want still 1", got)
	}

	// Usage grows again above the threshold: both pods left exceed their
	// requests, and the next cycle takes the one with the larger excess.
	n.set(func() { n.usages[0].memMi = 700 })
	step()
	if kills := n.killed(); len(kills) != 2 || kills[1].pod != "guaranteed" {
		t.Errorf("kills = %v, want the guaranteed pod (500Mi over its request) second", kills)
	}
}

func TestSoftThresholdWaitsForItsGracePeriod(t *testing.T) {
	n := newNode(
		usage{pod: podSpec("short", 0, 0, 0), memMi: 300},
		usage{pod: podSpec("long", 0, 0, 0), memMi: 400},
	)
	n.usages[0].pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
	n.usages[1].pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](60)
	kc := &kubeletconfig.KubeletConfiguration{
		EvictionHard:              map[string]string{"memory.available": "1Mi"},
		EvictionSoft:              map[string]string{"memory.available": "500Mi"},
		EvictionSoftGracePeriod:   map[string]string{"memory.available": "30s"},
		EvictionMaxPodGracePeriod: 20,
	}
	m, step := run(t, n, kc)
	if !m.IsUnderMemoryPressure() {
		t.Error("a soft threshold met raises the condition before its grace period")
	}
	for i := 1; i <= 2; i++ {
		step()
		if got := len(n.killed()); got != 0 {
			t.Fatalf("%d s after the soft threshold was met, %d kills; want none before 30 s", i*10, got)
		}
	}
	step()
	kills := n.killed()
	if len(kills) != 1 || kills[0].pod != "long" || kills[0].grace != 20 {
		t.Fatalf("at 30 s, kills = %v, want long with its grace capped to evictionMaxPodGracePeriod 20", kills)
	}
	// 300Mi used still leaves less than 500Mi: next cycle, the pod whose
	// own grace period is shorter keeps it.
	n.set(func() { n.usages[0].memMi = 600 })
	step()
	if kills := n.killed(); len(kills) != 2 || kills[1].pod != "short" || kills[1].grace != 5 {
		t.Errorf("kills = %v, want short with its own 5 s grace", kills)
	}
}

func TestConditionClearsAfterTransitionPeriod(t *testing.T) {
	n := newNode(usage{pod: podSpec("critical", systemCriticalPriority, 0, 0), memMi: 1000})
	kc := &kubeletconfig.KubeletConfiguration{
		EvictionHard:                     map[string]string{"memory.available": "100Mi"},
		EvictionPressureTransitionPeriod: metav1.Duration{Duration: 30 * time.Second},
	}
	m, step := run(t, n, kc)
	if !m.IsUnderMemoryPressure() {
		t.Fatal("no memory pressure while 24Mi are available")
	}
	if len(n.killed()) != 0 {
		t.Error("a critical pod was evicted")
	}
	if ok, _, msg := m.Admit(podSpec("new", 0, 0, 0)); ok || msg != "The node had condition: [MemoryPressure]. " {
		t.Errorf("Admit(BestEffort) under memory pressure = %v %q", ok, msg)
	}
	n.set(func() { n.usages[0].memMi = 100 })
	for i := 1; i <= 2; i++ {
		step()
		if !m.IsUnderMemoryPressure() {
			t.Fatalf("pressure cleared %d s after it was last observed, before the 30 s transition period", i*10)
		}
	}
	step()
	if m.IsUnderMemoryPressure() {
		t.Error("pressure still on 30 s after it was last observed")
	}
	if ok, _, _ := m.Admit(podSpec("new", 0, 0, 0)); !ok {
		t.Error("Admit rejected a pod without pressure")
	}
}

func TestDiskPressureReclaimsImagesFirst(t *testing.T) {
	// nodefs: 1000Mi, 10% threshold; 950Mi used, 900Mi of it by images.
	n := newNode(usage{pod: podSpec("writer", 0, 0, 0), diskMi: 50})
	n.fsExtraMi, n.imagesFreeMi = 900, 900
	kc := &kubeletconfig.KubeletConfiguration{EvictionHard: map[string]string{"nodefs.available": "10%"}}
	m, step := run(t, n, kc)
	if got := n.reclaimed(); fmt.Sprint(got) != "[containers images]" {
		t.Errorf("reclaims = %v, want dead containers then images", got)
	}
	if len(n.killed()) != 0 {
		t.Errorf("kills = %v; image GC freed enough, want none", n.killed())
	}
	if !m.IsUnderDiskPressure() {
		t.Error("the condition reflects the threshold met this cycle")
	}

	// Images are all gone and disk fills again: reclaim frees nothing, and
	// the pod goes.
	n.set(func() { n.fsExtraMi, n.imagesFreeMi = 940, 0 })
	step()
	if kills := n.killed(); len(kills) != 1 || kills[0].pod != "writer" ||
		!strings.HasPrefix(kills[0].status.Message, "The node was low on resource: ephemeral-storage. ") {
		t.Errorf("kills = %v, want writer for ephemeral-storage", kills)
	}
}

func TestMemoryPressureDoesNotReclaimNodeLevel(t *testing.T) {
	n := newNode(usage{pod: podSpec("a", 0, 0, 0), memMi: 1000})
	_, _ = run(t, n, &kubeletconfig.KubeletConfiguration{EvictionHard: map[string]string{"memory.available": "100Mi"}})
	if got := n.reclaimed(); len(got) != 0 {
		t.Errorf("reclaims = %v for memory, want none", got)
	}
	if kills := n.killed(); len(kills) != 1 {
		t.Errorf("kills = %v, want a", kills)
	}
}

func TestNewManagerRejectsBadConfiguration(t *testing.T) {
	n := newNode()
	_, err := NewManager(Config{
		NodeName: "node-1", Clock: n.clock, Kubelet: &kubeletconfig.KubeletConfiguration{EvictionHard: map[string]string{"memory.available": "lots"}},
		Summary: n.summary, ActivePods: n.activePods, KillPod: n.killPod, Images: n, Containers: n, Events: record.NewFakeRecorder(1),
	})
	if err == nil || !strings.Contains(err.Error(), `node "node-1"`) || !strings.Contains(err.Error(), "evictionHard[memory.available]") {
		t.Errorf("error = %v, want one naming the node and the setting", err)
	}
}
