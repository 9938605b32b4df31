package pleg

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// eventStream is a runtime whose event stream sends events and then fails.
type eventStream struct {
	internalapi.RuntimeService
	events   []*runtimeapi.ContainerEventResponse
	mu       sync.Mutex
	attempts int
}

func (s *eventStream) GetContainerEvents(ctx context.Context, ch chan *runtimeapi.ContainerEventResponse, _ func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	s.mu.Lock()
	s.attempts++
	first := s.attempts == 1
	s.mu.Unlock()
	if first {
		for _, e := range s.events {
			ch <- e
		}
	}
	return errors.New("stream broken")
}

type recordingRelister struct {
	mu   sync.Mutex
	uids []types.UID
}

func (r *recordingRelister) RequestRelist(_ context.Context, uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.uids = append(r.uids, uid)
}

func event(t runtimeapi.ContainerEventType, uid string) *runtimeapi.ContainerEventResponse {
	resp := &runtimeapi.ContainerEventResponse{ContainerId: "c-" + uid, ContainerEventType: t}
	if uid != "" {
		resp.PodSandboxStatus = &runtimeapi.PodSandboxStatus{Metadata: &runtimeapi.PodSandboxMetadata{Uid: uid}}
	}
	return resp
}

func TestEventedRequestsRelistsOfStoppedContainersOnly(t *testing.T) {
	rt := &eventStream{events: []*runtimeapi.ContainerEventResponse{
		event(runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, "a"),
		event(runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, "a"),
		event(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, "a"),
		event(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, ""),
		event(runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, "a"),
		event(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, "b"),
	}}
	rel := &recordingRelister{}
	e := &Evented{runtime: rt, generic: rel}
	// Run returns once the stream has failed eventedMaxStreamRetries times,
	// after processing everything it received.
	e.Run(context.Background())
	if rt.attempts != eventedMaxStreamRetries {
		t.Errorf("stream opened %d times, want %d", rt.attempts, eventedMaxStreamRetries)
	}
	if want := []types.UID{"a", "b"}; !slices.Equal(rel.uids, want) {
		t.Errorf("relists requested for %v, want %v", rel.uids, want)
	}
}

func TestRelistPodSeesOnlyThatPod(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	rt := newRuntime(t, clk)
	g := NewGeneric(rt, clk, RelistPeriod)
	ids := map[string]string{}
	for _, uid := range []string{"u1", "u2"} {
		ids[uid] = createContainer(t, rt, uid)
		if err := rt.StartContainer(ctx, ids[uid]); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	drain(g)

	for _, id := range ids {
		if err := rt.StopContainer(ctx, id, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.RelistPod(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	got := drain(g)
	if len(got) != 1 || got[0] != (Event{ID: "u1", Type: ContainerDied, Data: ids["u1"]}) {
		t.Fatalf("RelistPod(u1) events = %v, want u1's container died", got)
	}
	// The periodic relist then reports the other pod only: u1's change is
	// not reported twice.
	if err := g.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	got = drain(g)
	if len(got) != 1 || got[0].ID != "u2" || got[0].Type != ContainerDied {
		t.Errorf("next relist events = %v, want only u2's container died", got)
	}
}

func TestRunServesRelistRequests(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clocktesting.NewFakeClock(time.Now())
	rt := newRuntime(t, clk)
	g := NewGeneric(rt, clk, RelistPeriod)
	id := createContainer(t, rt, "u1")
	go g.Run(ctx)
	// No clock step: only the request can make Run relist.
	g.RequestRelist(ctx, "u1")
	select {
	case e := <-g.Watch():
		if e.ID != "u1" || e.Data != id {
			t.Errorf("event = %+v, want one for u1's container", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event 30 s after a relist request")
	}
}
