package loadprofiles

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestCounts(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    podRecord
		want tally
	}{
		{"unknown to the run", podRecord{}, tally{}},
		{"seen by the watch only: not the run's to count", podRecord{seen: true, scheduled: true, running: true, gone: true}, tally{}},
		{"created", podRecord{created: true}, tally{created: 1}},
		{"created and scheduled", podRecord{created: true, scheduled: true}, tally{created: 1, scheduled: 1}},
		{"created and running", podRecord{created: true, scheduled: true, running: true}, tally{created: 1, scheduled: 1, running: 1}},
		{"created, ran, gone", podRecord{created: true, scheduled: true, running: true, gone: true}, tally{created: 1, scheduled: 1, running: 1, gone: 1}},
		{"created, deleted", podRecord{created: true, deleting: true}, tally{created: 1, deleting: 1}},
		{"created, deleted, gone", podRecord{created: true, deleting: true, gone: true}, tally{created: 1, gone: 1, deleting: 1, deletingGone: 1}},
		{"deleted, its create failed on the client's side", podRecord{deleting: true, scheduled: true}, tally{deleting: 1}},
		{"deleted and gone, not created", podRecord{deleting: true, gone: true}, tally{deleting: 1, deletingGone: 1}},
		{"terminating and its phase do not count", podRecord{created: true, terminating: true, phase: corev1.PodSucceeded}, tally{created: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := counts(tc.r); got != tc.want {
				t.Errorf("counts(%+v) = %+v, want %+v", tc.r, got, tc.want)
			}
		})
	}
}

// TestTrackerKeepsTheSum: whatever order the create calls, delete calls and
// watch events come in, the tracker's counts are the sum of its records'
// counts, and a waiter is woken by each change of them and by nothing else.
func TestTrackerKeepsTheSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tr := newTracker()
	now := time.Unix(1000, 0)
	for i := range 5000 {
		uid := types.UID(fmt.Sprint("u", rng.IntN(40)))
		before := tr.n
		changed := tr.changes()
		switch rng.IntN(6) {
		case 0:
			tr.created(uid, "ns/"+string(uid))
		case 1:
			tr.deleting(uid, rng.IntN(2) == 0)
		case 2:
			tr.observeGone(uid)
		default:
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid, Namespace: "ns", Name: string(uid)}}
			if rng.IntN(2) == 0 {
				pod.Spec.NodeName = "node-1"
			}
			if rng.IntN(2) == 0 {
				pod.Status.Phase = corev1.PodRunning
			}
			tr.observe(pod, now)
		}
		var sum tally
		for _, r := range tr.pods {
			sum = sum.plus(counts(*r))
		}
		if sum != tr.n {
			t.Fatalf("after step %d: counts %+v, sum of the records %+v", i, tr.n, sum)
		}
		select {
		case <-changed:
			if tr.n == before {
				t.Fatalf("step %d woke the waiters without changing a count", i)
			}
		default:
			if tr.n != before {
				t.Fatalf("step %d changed the counts from %+v to %+v without waking the waiters", i, before, tr.n)
			}
		}
	}
}

// TestTrackerMilestones: observe and observeGone report a milestone the
// first time only, and a pod seen Running before its create returned is
// counted from the create on, with its first RunningObserved stamp.
func TestTrackerMilestones(t *testing.T) {
	tr := newTracker()
	t1, t2 := time.Unix(1000, 0), time.Unix(2000, 0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: "u1", Namespace: "ns", Name: "p"},
		Spec:       corev1.PodSpec{NodeName: "node-1"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if _, s, r := tr.observe(pod, t1); !s || !r {
		t.Errorf("first observe = scheduled %v, running %v; want both", s, r)
	}
	if _, s, r := tr.observe(pod, t2); s || r {
		t.Errorf("second observe = scheduled %v, running %v; want neither", s, r)
	}
	if p := tr.progress(); p.Created != 0 || p.Running != 0 {
		t.Errorf("progress before the create returned = %+v, want nothing counted", p)
	}
	tr.created("u1", "ns/p")
	if p := tr.progress(); p.Created != 1 || p.Scheduled != 1 || p.Running != 1 || p.Gone != 0 {
		t.Errorf("progress once created = %+v, want 1 created, scheduled and running", p)
	}
	if v := tr.views([]types.UID{"u1"})[0]; !v.runningAt.Equal(t1) {
		t.Errorf("runningAt = %v, want the first sighting %v", v.runningAt, t1)
	}
	tr.deleting("u1", false)
	if tr.allGone() {
		t.Error("allGone before the watch saw the pod gone")
	}
	if !tr.observeGone("u1") || tr.observeGone("u1") {
		t.Error("observeGone should report the first removal only")
	}
	if p := tr.progress(); p.Gone != 1 || !tr.allGone() || tr.deletingCount() != 1 {
		t.Errorf("progress once gone = %+v, allGone %v, deleting %d", p, tr.allGone(), tr.deletingCount())
	}
}
