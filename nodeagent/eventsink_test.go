package nodeagent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
)

// opSink is an EventSink that logs what it was asked to write and answers
// with the event named and versioned, as the API server does.
type opSink struct {
	ops []string
	n   int
}

func (s *opSink) answer(verb string, e *corev1.Event) (*corev1.Event, error) {
	s.n++
	out := e.DeepCopy()
	if out.Name == "" {
		out.Name = "e" + strconv.Itoa(s.n)
	}
	out.ResourceVersion = strconv.Itoa(s.n)
	s.ops = append(s.ops, fmt.Sprintf("%s %s/%s %s count=%d %q", verb, e.InvolvedObject.Kind, e.InvolvedObject.UID, e.Reason, e.Count, e.Message))
	return out, nil
}

func (s *opSink) Create(e *corev1.Event) (*corev1.Event, error) { return s.answer("create", e) }
func (s *opSink) Update(e *corev1.Event) (*corev1.Event, error) { return s.answer("update", e) }
func (s *opSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) {
	return s.answer("patch", e)
}

// TestEventSinkCorrelatesAsClientGo feeds the same events to client-go's one
// correlator per broadcaster and to the sink's correlator per object, and
// checks that the API server is asked for exactly the same writes: new
// events, repeats counted by PATCH, similar events aggregated after ten,
// and an object's spam cut after its burst of 25.
func TestEventSinkCorrelatesAsClientGo(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	reference := record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{Clock: clk})
	want := &opSink{}
	refSink := newEventSink(want, clk, func(types.UID) bool { return true })
	got := &opSink{}
	sink := newEventSink(got, clk, func(types.UID) bool { return true })

	objects := []corev1.ObjectReference{{Kind: "Node", Name: "n", UID: "n"}}
	for i := range 5 {
		objects = append(objects, corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))})
	}
	type script struct{ reason, message string }
	var steps []script
	for _, r := range []string{"Pulling", "Pulled", "Created", "Started"} {
		steps = append(steps, script{r, r + " container app"})
	}
	for range 10 {
		steps = append(steps, script{"BackOff", "Back-off restarting failed container app"})
	}
	// FailedMount's messages never repeat: once ten are aggregated,
	// client-go drops one of them at random (sets.PopAny), so a repeated
	// message would make even two of its own correlators disagree.
	for range 40 {
		steps = append(steps, script{"FailedMount", ""})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	for n := range 400 {
		obj := objects[rng.IntN(len(objects))]
		st := steps[rng.IntN(len(steps))]
		if st.message == "" {
			st.message = fmt.Sprintf("MountVolume.SetUp failed for volume \"v%d\"", n)
		}
		now := metav1.NewTime(clk.Now())
		e := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%d", obj.Name, n), Namespace: obj.Namespace},
			InvolvedObject: obj, Reason: st.reason, Message: st.message, Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: "kubelet", Host: "n"}, FirstTimestamp: now, LastTimestamp: now, Count: 1,
		}
		// The reference: client-go's recordToSink, one correlator.
		ref := *e
		if result, err := reference.EventCorrelate(&ref); err != nil {
			t.Fatal(err)
		} else if !result.Skip {
			refSink.write(ctx, result.Event, result.Patch, result.Event.Count > 1, reference)
		}
		sink.record(ctx, e)
		clk.Step(time.Second)
	}
	if len(got.ops) != len(want.ops) {
		t.Fatalf("%d writes, client-go made %d", len(got.ops), len(want.ops))
	}
	patches, combined := 0, 0
	for i := range want.ops {
		if got.ops[i] != want.ops[i] {
			t.Fatalf("write %d: %s, client-go: %s", i, got.ops[i], want.ops[i])
		}
		if strings.HasPrefix(want.ops[i], "patch") {
			patches++
		}
		if strings.Contains(want.ops[i], "(combined from similar events)") {
			combined++
		}
	}
	if patches == 0 || combined == 0 || len(want.ops) >= 400 {
		t.Fatalf("the script missed a path: %d writes of 400 events, %d patches, %d aggregated", len(want.ops), patches, combined)
	}
}

// TestEventSinkForgetsGonePods: a pod's correlation state outlives the pod
// by the aggregation window and then goes; a pod the node still holds and
// the node itself keep theirs.
func TestEventSinkForgetsGonePods(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	alive := map[types.UID]bool{"running": true}
	sink := newEventSink(&opSink{}, clk, func(uid types.UID) bool { return alive[uid] })
	ctx := context.Background()
	event := func(kind, uid string) *corev1.Event {
		now := metav1.NewTime(clk.Now())
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: uid + "." + strconv.FormatInt(clk.Now().UnixNano(), 10)},
			InvolvedObject: corev1.ObjectReference{Kind: kind, Name: uid, UID: types.UID(uid)}, Reason: "Started",
			Source: corev1.EventSource{Component: "kubelet", Host: "n"}, FirstTimestamp: now, LastTimestamp: now, Count: 1,
		}
	}
	sink.record(ctx, event("Node", "n"))
	sink.record(ctx, event("Pod", "running"))
	sink.record(ctx, event("Pod", "gone"))
	clk.Step(forgetPodEventsAfter - time.Second)
	sink.record(ctx, event("Node", "n"))
	if _, ok := sink.objects["gone"]; !ok {
		t.Fatal("a gone pod's state was dropped inside the aggregation window")
	}
	clk.Step(time.Minute)
	sink.record(ctx, event("Node", "n"))
	if _, ok := sink.objects["gone"]; ok {
		t.Fatal("a gone pod's state outlived the aggregation window")
	}
	for _, uid := range []types.UID{"n", "running"} {
		if _, ok := sink.objects[uid]; !ok {
			t.Fatalf("%s lost its correlation state", uid)
		}
	}
}

// TestEventRecorderQueue: events before the start and after the stop are
// dropped, as a broadcaster not running drops them; while the writer is
// stuck on one, at most maxQueuedEvents wait and the rest are dropped; all
// that waited are written once it is not.
func TestEventRecorderQueue(t *testing.T) {
	client := fake.NewClientset()
	release := make(chan struct{})
	var created atomic.Int32
	client.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		<-release
		created.Add(1)
		return false, nil, nil
	})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p"}}
	r := newEventRecorder(client.CoreV1(), "n", func(types.UID) bool { return true })
	r.Event(pod, corev1.EventTypeNormal, "Early", "before the start")

	ctx, cancel := context.WithCancel(context.Background())
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// One event held by the writer, maxQueuedEvents queued, 10 dropped;
	// distinct reasons, so that no two are correlated into one.
	for i := range 1 + maxQueuedEvents + 10 {
		r.Event(pod, corev1.EventTypeNormal, fmt.Sprintf("R%d", i), "m")
		if i == 0 {
			// Let the writer take the first before the queue fills.
			for deadline := time.Now().Add(10 * time.Second); ; {
				r.mu.Lock()
				n := len(r.queue)
				r.mu.Unlock()
				if n == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	r.mu.Lock()
	queued := len(r.queue)
	r.mu.Unlock()
	if queued != maxQueuedEvents {
		t.Fatalf("%d events queued behind a stuck writer, want %d", queued, maxQueuedEvents)
	}
	close(release)
	// The spam filter lets an object's first 25 through and drops the
	// rest, as client-go's does: the writes stop there.
	for deadline := time.Now().Add(30 * time.Second); created.Load() < 25 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := created.Load(); n != 25 {
		t.Fatalf("%d events written, want the spam filter's burst of 25", n)
	}
	list, err := client.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Reason == "Early" {
			t.Fatal("an event recorded before the start was written")
		}
	}
	cancel()
	r.Wait()
	r.Event(pod, corev1.EventTypeNormal, "Late", "after the stop")
	if r.queue != nil {
		t.Fatalf("an event was queued after the stop")
	}
}
