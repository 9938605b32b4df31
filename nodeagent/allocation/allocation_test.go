package allocation

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

type events []string

func (e *events) Event(_ runtime.Object, _, reason, _ string) { *e = append(*e, reason) }

func cpuPod(uid string, cpu string, priority int32) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: uid, Generation: 1},
		Spec: corev1.PodSpec{Priority: &priority, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)},
		}}}},
	}
}

func withCPU(p *corev1.Pod, cpu string, gen int64) *corev1.Pod {
	p = p.DeepCopy()
	p.Generation = gen
	p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
	return p
}

type node struct {
	pods  map[types.UID]*corev1.Pod
	order []types.UID // as admitted
}

// TestPendingResizes: resizes are admitted in the kubelet's order, a
// deferred one keeps its transition time and waits, an accepted one is
// allocated, in progress, and announced.
func TestPendingResizes(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	n := &node{pods: map[types.UID]*corev1.Pod{}}
	var ev events
	var admitted []string
	m := NewManager(Config{
		Clock: clk, Events: &ev,
		ActivePods: func() []*corev1.Pod {
			var out []*corev1.Pod
			for _, uid := range n.order {
				out = append(out, n.pods[uid])
			}
			return out
		},
		GetPod: func(uid types.UID) (*corev1.Pod, bool) { p, ok := n.pods[uid]; return p, ok },
		// Four cpus in all.
		Admit: func(pod *corev1.Pod, others []*corev1.Pod) (bool, string, string) {
			admitted = append(admitted, pod.Name)
			used := pod.Spec.Containers[0].Resources.Requests.Cpu().MilliValue()
			for _, o := range others {
				used += o.Spec.Containers[0].Resources.Requests.Cpu().MilliValue()
			}
			if used > 4000 {
				return false, "OutOfcpu", "too much"
			}
			return true, "", ""
		},
	})
	add := func(p *corev1.Pod) {
		n.pods[p.UID], n.order = p, append(n.order, p.UID)
		m.SetAllocated(p)
	}
	add(cpuPod("a", "1", 0))
	add(cpuPod("b", "1", 100))
	add(cpuPod("c", "2", 0))

	// a grows to 2 (does not fit: 5 cpus), b grows to 2 (does not fit), c
	// shrinks to 1. The shrink goes first, then b (higher priority), then a.
	n.pods["a"], n.pods["b"], n.pods["c"] = withCPU(n.pods["a"], "2", 2), withCPU(n.pods["b"], "2", 2), withCPU(n.pods["c"], "1", 2)
	for _, uid := range []types.UID{"a", "b", "c"} {
		m.PushPendingResize(uid)
	}
	toSync := m.RetryPendingResizes()
	if got := admitted; len(got) != 3 || got[0] != "c" || got[1] != "b" || got[2] != "a" {
		t.Fatalf("admitted in order %v, want c, b, a", got)
	}
	// c shrank (3 cpus used), b grew into the room (4 cpus): a waits.
	if len(toSync) != 3 {
		t.Errorf("%d pods to sync, want 3 (two allocated, one newly deferred)", len(toSync))
	}
	if !m.IsDeferred("a") || m.IsDeferred("b") || m.IsDeferred("c") || !m.HasPendingResizes() {
		t.Fatalf("deferred a=%v b=%v c=%v, want only a", m.IsDeferred("a"), m.IsDeferred("b"), m.IsDeferred("c"))
	}
	if got, _ := m.UpdatePodFromAllocation(n.pods["b"]); got != n.pods["b"] {
		t.Error("b's allocation is not its new spec")
	}
	if got, differs := m.UpdatePodFromAllocation(n.pods["a"]); !differs || got.Spec.Containers[0].Resources.Requests.Cpu().String() != "1" {
		t.Errorf("a runs with %v, want its old 1 cpu", got.Spec.Containers[0].Resources.Requests.Cpu())
	}
	conds := m.Conditions("b")
	if len(conds) != 1 || conds[0].Type != corev1.PodResizeInProgress || conds[0].ObservedGeneration != 2 {
		t.Errorf("b's conditions %+v, want PodResizeInProgress at generation 2", conds)
	}
	pending := m.Conditions("a")
	if len(pending) != 1 || pending[0].Reason != corev1.PodReasonDeferred || pending[0].Message != "too much" {
		t.Fatalf("a's conditions %+v, want PodResizePending Deferred", pending)
	}
	if want := []string{ResizeStarted, ResizeStarted, ResizeDeferred}; len(ev) != 3 || ev[0] != want[0] || ev[1] != want[1] || ev[2] != want[2] {
		t.Errorf("events %v, want %v", ev, want)
	}

	// Retried later with no change: no new event, the same transition time.
	clk.Step(time.Minute)
	if toSync := m.RetryPendingResizes(); len(toSync) != 1 {
		// Only the probe time moved; the kubelet syncs on any change of
		// the conditions, which includes it.
		t.Errorf("%d pods to sync on a retry that changed nothing but the probe time, want 1", len(toSync))
	}
	if again := m.Conditions("a"); !again[0].LastTransitionTime.Equal(&pending[0].LastTransitionTime) || len(ev) != 3 {
		t.Errorf("a retried: transition %v (was %v), %d events; want the same time and no event", again[0].LastTransitionTime, pending[0].LastTransitionTime, len(ev))
	}

	// b finishes (InProgress cleared, its generation given back) and c
	// goes away: a fits now.
	if gen, ok := m.ClearInProgress("b"); !ok || gen != 2 {
		t.Errorf("ClearInProgress(b) = %d, %v", gen, ok)
	}
	delete(n.pods, "c")
	n.order = n.order[:2]
	m.RemovePod("c")
	m.RetryPendingResizes()
	if m.HasPendingResizes() || m.IsDeferred("a") {
		t.Error("a still pending after room was freed")
	}
	if _, differs := m.UpdatePodFromAllocation(n.pods["a"]); differs {
		t.Error("a's allocation is not its spec once accepted")
	}
}

// TestSetInProgressKeepsItsGeneration: a later sync does not move an
// existing condition's observed generation, and an error keeps it too.
func TestSetInProgressKeepsItsGeneration(t *testing.T) {
	m := NewManager(Config{Clock: clocktesting.NewFakeClock(time.Now())})
	if _, changed := m.SetInProgress("p", "", "", 2); !changed {
		t.Error("a new condition is a change")
	}
	if gen, changed := m.SetInProgress("p", "", "", 5); gen != 2 || changed {
		t.Errorf("SetInProgress again = %d, %v; want generation 2 kept and no change", gen, changed)
	}
	if gen, changed := m.SetInProgress("p", corev1.PodReasonError, "boom", 5); gen != 2 || !changed {
		t.Errorf("SetInProgress with an error = %d, %v; want generation 2 and a change", gen, changed)
	}
	if c := m.Conditions("p"); c[0].Reason != corev1.PodReasonError || c[0].Message != "boom" {
		t.Errorf("condition %+v", c[0])
	}
}
