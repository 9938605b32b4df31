package fakeruntime

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/internal/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"
)

const (
	evCreated = runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
	evStarted = runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
	evStopped = runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
	evDeleted = runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
)

// eventWatch is one GetContainerEvents call running for a test.
type eventWatch struct {
	ch     chan *runtimeapi.ContainerEventResponse
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// watchEvents subscribes to rs's events, waits until the subscription is in
// place, and unsubscribes when the test ends.
func watchEvents(t testing.TB, rs internalapi.RuntimeService, buffer int) *eventWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &eventWatch{ch: make(chan *runtimeapi.ContainerEventResponse, buffer), cancel: cancel, done: make(chan error, 1)}
	established := make(chan struct{})
	go func() {
		w.done <- rs.GetContainerEvents(ctx, w.ch, func(runtimeapi.RuntimeService_GetContainerEventsClient) { close(established) })
	}()
	select {
	case <-established:
	case err := <-w.done:
		t.Fatalf("GetContainerEvents = %v before subscribing", err)
	case <-time.After(10 * time.Second):
		t.Fatal("GetContainerEvents did not subscribe")
	}
	t.Cleanup(func() { w.stop(t) })
	return w
}

// stop unsubscribes and returns what GetContainerEvents returned.
func (w *eventWatch) stop(t testing.TB) error {
	t.Helper()
	w.once.Do(func() {
		w.cancel()
		select {
		case w.err = <-w.done:
		case <-time.After(10 * time.Second):
			t.Error("GetContainerEvents did not return after its context ended")
		}
	})
	return w.err
}

// next waits for the next event.
func (w *eventWatch) next(t testing.TB) *runtimeapi.ContainerEventResponse {
	t.Helper()
	select {
	case ev := <-w.ch:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no container event within 10 s")
		return nil
	}
}

type wantEvent struct {
	id  string
	typ runtimeapi.ContainerEventType
	at  time.Time
}

// expect checks the next events, in order, and that each carries its pod's
// sandbox status (the kubelet's evented PLEG drops events without one).
func (w *eventWatch) expect(t testing.TB, podUID string, want ...wantEvent) []*runtimeapi.ContainerEventResponse {
	t.Helper()
	var got []*runtimeapi.ContainerEventResponse
	for i, we := range want {
		ev := w.next(t)
		got = append(got, ev)
		if ev.ContainerId != we.id || ev.ContainerEventType != we.typ || ev.CreatedAt != we.at.UnixNano() {
			t.Errorf("event %d = %s %v at %d, want %s %v at %d", i, ev.ContainerId, ev.ContainerEventType, ev.CreatedAt, we.id, we.typ, we.at.UnixNano())
		}
		if ev.PodSandboxStatus.GetMetadata().GetUid() != podUID {
			t.Errorf("event %d (%v) has sandbox status %v, want pod %s's", i, ev.ContainerEventType, ev.PodSandboxStatus, podUID)
		}
	}
	return got
}

// statusIn returns the status of container id among an event's statuses.
func statusIn(ev *runtimeapi.ContainerEventResponse, id string) *runtimeapi.ContainerStatus {
	for _, st := range ev.ContainersStatuses {
		if st.Id == id {
			return st
		}
	}
	return nil
}

// TestContainerEventsAPI drives a pod's whole life through the API and
// checks the events, as containerd sends them, of its sandbox and container.
func TestContainerEventsAPI(t *testing.T) {
	ctx := context.Background()
	rt, clk := newTestRuntime(t, Behaviour{})
	w := watchEvents(t, rt, 100)
	pod := podConfig("web-0")
	uid := pod.Metadata.Uid
	sbID := runPod(t, rt, pod)
	w.expect(t, uid, wantEvent{sbID, evCreated, clk.Now()}, wantEvent{sbID, evStarted, clk.Now()})

	clk.Step(time.Second)
	id := createAttempt(t, rt, sbID, pod, "app", pauseImage, 0)
	ev := w.expect(t, uid, wantEvent{id, evCreated, clk.Now()})[0]
	if st := statusIn(ev, id); st.GetState() != created {
		t.Errorf("CREATED event's status of the container = %v", st)
	}
	clk.Step(time.Second)
	if err := rt.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	ev = w.expect(t, uid, wantEvent{id, evStarted, clk.Now()})[0]
	if st := statusIn(ev, id); st.GetState() != running {
		t.Errorf("STARTED event's status of the container = %v", st)
	}
	clk.Step(time.Second)
	if err := rt.StopContainer(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	ev = w.expect(t, uid, wantEvent{id, evStopped, clk.Now()})[0]
	if st := statusIn(ev, id); st.GetState() != exited || st.ExitCode != 137 {
		t.Errorf("STOPPED event's status of the container = %v", st)
	}
	if err := rt.StopContainer(ctx, id, 0); err != nil { // already stopped: no event
		t.Fatal(err)
	}
	if err := rt.RemoveContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	ev = w.expect(t, uid, wantEvent{id, evDeleted, clk.Now()})[0]
	if st := statusIn(ev, id); st != nil {
		t.Errorf("DELETED event still lists the container: %v", st)
	}
	if err := rt.StopPodSandbox(ctx, sbID); err != nil {
		t.Fatal(err)
	}
	ev = w.expect(t, uid, wantEvent{sbID, evStopped, clk.Now()})[0]
	if ev.PodSandboxStatus.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("sandbox STOPPED event's sandbox state = %v", ev.PodSandboxStatus.State)
	}
	if err := rt.RemovePodSandbox(ctx, sbID); err != nil {
		t.Fatal(err)
	}
	w.expect(t, uid, wantEvent{sbID, evDeleted, clk.Now()})

	err := w.stop(t)
	wantCode(t, "GetContainerEvents after its context ended", err, codes.Canceled)
	wantErrContains(t, "GetContainerEvents", err, "GetContainerEvents")
}

// TestContainerEventsOfSandboxTeardown checks the events of containers
// killed and removed with their sandbox.
func TestContainerEventsOfSandboxTeardown(t *testing.T) {
	ctx := context.Background()
	rt, clk := newTestRuntime(t, Behaviour{})
	pod := podConfig("web-0")
	uid := pod.Metadata.Uid
	sbID := runPod(t, rt, pod)
	id := runContainer(t, rt, sbID, pod, "app", pauseImage)
	w := watchEvents(t, rt, 100) // only changes from now on
	clk.Step(time.Second)
	if err := rt.StopPodSandbox(ctx, sbID); err != nil {
		t.Fatal(err)
	}
	w.expect(t, uid, wantEvent{id, evStopped, clk.Now()}, wantEvent{sbID, evStopped, clk.Now()})
	if err := rt.StopPodSandbox(ctx, sbID); err != nil { // already stopped: no event
		t.Fatal(err)
	}
	if err := rt.RemovePodSandbox(ctx, sbID); err != nil {
		t.Fatal(err)
	}
	w.expect(t, uid, wantEvent{id, evDeleted, clk.Now()}, wantEvent{sbID, evDeleted, clk.Now()})
}

// TestContainerEventsBehaviourExits checks that exits the behaviour decides
// are sent when the clock reaches them, with the exit's own time, and that
// the timers behind them exist only while someone listens.
func TestContainerEventsBehaviourExits(t *testing.T) {
	for _, tc := range []struct {
		name           string
		behaviour      string
		exitAfter      time.Duration
		exitCode       int32
		reason         string
		subscribeAfter time.Duration // 0: before the start
	}{
		{"runFor", `app: {runFor: 30s, exitCode: 3}`, 30 * time.Second, 3, "Error", 0},
		{"OOM before runFor", `app: {runFor: 1h, memory: {start: 100Mi, perSecond: 2Mi}}`, 14 * time.Second, 137, "OOMKilled", 0},
		{"runFor, subscribed while running", `app: {runFor: 30s}`, 30 * time.Second, 0, "Completed", 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, clk := newTestRuntime(t, Behaviour{})
			pod := podWithBehaviour("web-0", tc.behaviour)
			sbID := runPod(t, rt, pod)
			var w *eventWatch
			if tc.subscribeAfter == 0 {
				w = watchEvents(t, rt, 100)
			}
			id := runContainer(t, rt, sbID, pod, "app", pauseImage)
			start := clk.Now()
			if tc.subscribeAfter > 0 {
				if clk.HasWaiters() {
					t.Fatal("an exit timer is armed with no subscriber")
				}
				clk.Step(tc.subscribeAfter)
				w = watchEvents(t, rt, 100)
			} else {
				w.expect(t, pod.Metadata.Uid, wantEvent{id, evCreated, start}, wantEvent{id, evStarted, start})
			}
			if !clk.HasWaiters() {
				t.Fatal("no exit timer armed while subscribed")
			}
			clk.SetTime(start.Add(tc.exitAfter - time.Nanosecond))
			clk.Step(time.Minute) // late: the event still says when it exited
			ev := w.expect(t, pod.Metadata.Uid, wantEvent{id, evStopped, start.Add(tc.exitAfter)})[0]
			if st := statusIn(ev, id); st.GetState() != exited || st.ExitCode != tc.exitCode || st.Reason != tc.reason {
				t.Errorf("STOPPED event's container status = %v", st)
			}
			if clk.HasWaiters() {
				t.Error("a timer is left after the exit")
			}
		})
	}
}

// TestContainerEventsTimerCancelled checks that an API stop or a removal
// disarms the exit timer, and that unsubscribing disarms all of them.
func TestContainerEventsTimerCancelled(t *testing.T) {
	ctx := context.Background()
	rt, clk := newTestRuntime(t, Behaviour{Containers: ContainerBehaviour{RunFor: new(Duration(time.Minute))}})
	pod := podConfig("web-0")
	uid := pod.Metadata.Uid
	sbID := runPod(t, rt, pod)
	w := watchEvents(t, rt, 100)
	stopped := runContainer(t, rt, sbID, pod, "stopped", pauseImage)
	removed := runContainer(t, rt, sbID, pod, "removed", pauseImage)
	kept := runContainer(t, rt, sbID, pod, "kept", pauseImage)
	now := clk.Now()
	w.expect(t, uid, wantEvent{stopped, evCreated, now}, wantEvent{stopped, evStarted, now}, wantEvent{removed, evCreated, now},
		wantEvent{removed, evStarted, now}, wantEvent{kept, evCreated, now}, wantEvent{kept, evStarted, now})
	if err := rt.StopContainer(ctx, stopped, 0); err != nil {
		t.Fatal(err)
	}
	if err := rt.RemoveContainer(ctx, removed); err != nil {
		t.Fatal(err)
	}
	w.expect(t, uid, wantEvent{stopped, evStopped, now}, wantEvent{removed, evDeleted, now})
	clk.Step(2 * time.Minute)
	// Only kept exits by itself; stopped's timer, had it survived, would
	// send a second STOPPED event before this one.
	w.expect(t, uid, wantEvent{kept, evStopped, now.Add(time.Minute)})

	other := runContainer(t, rt, sbID, pod, "other", pauseImage)
	if !clk.HasWaiters() {
		t.Fatal("no exit timer for a new container while subscribed")
	}
	_ = w.stop(t)
	if clk.HasWaiters() {
		t.Error("exit timers left after the last subscriber left")
	}
	if got := containerStatus(t, rt, other).State; got != running {
		t.Errorf("container %v after unsubscribing, want running", got)
	}
}

// TestContainerEventsRemovedAfterItsExit checks that a container that exits
// by itself and is removed before its timer runs still gets its STOPPED
// event, before its DELETED one.
func TestContainerEventsRemovedAfterItsExit(t *testing.T) {
	ctx := context.Background()
	// The timer must not run before the removal: a clock whose timers
	// never fire stands in for a late one.
	clk := &frozenTimersClock{FakeClock: testclock.NewFakeClock(testEpoch)}
	rt := New(Config{Clock: clk, PreloadedImages: []string{pauseImage}, Seed: 5})
	setPodCIDR(t, rt, testPodCIDR)
	pod := podWithBehaviour("web-0", `app: {runFor: 10s}`)
	sbID := runPod(t, rt, pod)
	w := watchEvents(t, rt, 100)
	id := runContainer(t, rt, sbID, pod, "app", pauseImage)
	w.expect(t, pod.Metadata.Uid, wantEvent{id, evCreated, testEpoch}, wantEvent{id, evStarted, testEpoch})
	clk.Step(time.Minute)
	if err := rt.RemoveContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	w.expect(t, pod.Metadata.Uid, wantEvent{id, evStopped, testEpoch.Add(10 * time.Second)}, wantEvent{id, evDeleted, testEpoch.Add(time.Minute)})
}

// frozenTimersClock is a fake clock whose AfterFunc timers never fire:
// they are set on another fake clock, which nobody steps.
type frozenTimersClock struct{ *testclock.FakeClock }

func (c *frozenTimersClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return testclock.NewFakeClock(testEpoch).AfterFunc(d, f)
}

// TestContainerEventsSubscribers checks that every subscriber gets every
// event, and that one that never reads blocks nobody.
func TestContainerEventsSubscribers(t *testing.T) {
	rt, _ := newTestRuntime(t, Behaviour{})
	stuck := watchEvents(t, rt, 0) // never read
	a := watchEvents(t, rt, 4096)
	b := watchEvents(t, rt, 4096)
	// Two events a pod, in batches of half a queue, each read by a and b
	// before the next: a reader that keeps up never loses an event, however
	// slowly its sender is scheduled, while the stuck one is sent twice what
	// its queue holds (and the runtime neither blocks on it nor on its queue).
	const pods, batch = eventQueueLimit, eventQueueLimit / 4
	for start := 0; start < pods; start += batch {
		for i := start; i < start+batch; i++ {
			runPod(t, rt, hostNetworkPodConfig(fmt.Sprintf("pod-%d", i)))
		}
		for _, w := range []*eventWatch{a, b} {
			for range 2 * batch {
				w.next(t)
			}
		}
	}
	if err := stuck.stop(t); status.Code(err) != codes.Canceled {
		t.Errorf("the stuck subscriber's GetContainerEvents = %v, want Canceled", err)
	}
}

func TestEventSubscriberQueueBound(t *testing.T) {
	sub := &eventSubscriber{wake: make(chan struct{}, 1)}
	for i := range eventQueueLimit + 6 {
		sub.push(&runtimeapi.ContainerEventResponse{ContainerId: fmt.Sprint(i)})
	}
	evs, dropped := sub.take()
	if len(evs) != eventQueueLimit || dropped != 6 || evs[0].ContainerId != "0" || evs[len(evs)-1].ContainerId != fmt.Sprint(eventQueueLimit-1) {
		t.Errorf("take = %d events (%s to %s), %d dropped; want the first %d, 6 dropped", len(evs), evs[0].ContainerId, evs[len(evs)-1].ContainerId, dropped, eventQueueLimit)
	}
	if evs, dropped := sub.take(); len(evs) != 0 || dropped != 0 {
		t.Errorf("second take = %d events, %d dropped; want none", len(evs), dropped)
	}
	sub.push(&runtimeapi.ContainerEventResponse{ContainerId: "again"})
	if evs, _ := sub.take(); len(evs) != 1 {
		t.Errorf("after draining, a push is queued again: %v", evs)
	}
}

// TestContainerEventsThroughSocket receives a runFor exit through
// k8s.io/cri-client and the unix socket, on a fake clock's Step.
func TestContainerEventsThroughSocket(t *testing.T) {
	clk := testclock.NewFakeClock(testEpoch)
	rt := New(Config{Clock: clk, PreloadedImages: []string{pauseImage}, Seed: 3})
	setPodCIDR(t, rt, testPodCIDR)
	rs, _ := dialForTest(t, serveForTest(t, rt), false)
	w := watchEvents(t, rs, 100)
	// The client's stream exists before the server's handler subscribes.
	testutil.WaitFor(t, "the server to subscribe", func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return len(rt.subscribers) == 1
	})
	pod := podWithBehaviour("web-0", `app: {runFor: 30s, exitCode: 1}`)
	uid := pod.Metadata.Uid
	sbID := runPod(t, rt, pod)
	id := runContainer(t, rt, sbID, pod, "app", pauseImage)
	w.expect(t, uid, wantEvent{sbID, evCreated, testEpoch}, wantEvent{sbID, evStarted, testEpoch},
		wantEvent{id, evCreated, testEpoch}, wantEvent{id, evStarted, testEpoch})
	clk.Step(30 * time.Second)
	ev := w.expect(t, uid, wantEvent{id, evStopped, testEpoch.Add(30 * time.Second)})[0]
	if st := statusIn(ev, id); st.GetExitCode() != 1 || st.GetReason() != "Error" {
		t.Errorf("STOPPED event's status = %v", st)
	}
}
