package fakeruntime

import (
	"context"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Container events, for the kubelet's evented PLEG. API calls publish their
// events as they change a record. Exits the behaviour model decides (RunFor,
// OOM) happen lazily, with no timer; while at least one subscriber listens,
// each running container that will exit by itself gets one timer on the
// runtime's clock, so that its CONTAINER_STOPPED_EVENT comes when it exits.
// With no subscriber there are no timers and no events are built.

// eventQueueLimit bounds the events queued for one subscriber. A subscriber
// that falls this far behind loses the newer events (and its log says how
// many) rather than block the runtime or grow without bound: the kubelet's
// evented PLEG only uses them as hints to relist early, and its generic
// relist still sees every change.
const eventQueueLimit = 1024

// eventSubscriber is one GetContainerEvents call's queue.
type eventSubscriber struct {
	mu      sync.Mutex
	queue   []*runtimeapi.ContainerEventResponse
	dropped int
	wake    chan struct{} // capacity 1: "the queue has something"
}

func (s *eventSubscriber) push(ev *runtimeapi.ContainerEventResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) >= eventQueueLimit {
		s.dropped++
		return
	}
	s.queue = append(s.queue, ev)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// take empties the queue, returning its events and how many were dropped
// since the last take.
func (s *eventSubscriber) take() ([]*runtimeapi.ContainerEventResponse, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	evs, dropped := s.queue, s.dropped
	s.queue, s.dropped = nil, 0
	return evs, dropped
}

// exitTimer is a pending timer for a container's exit; the callback checks
// that its entry is still the current one, as a timer stopped too late may
// still fire.
type exitTimer struct{ t clock.Timer }

// GetContainerEvents sends the runtime's container events to
// containerEventsCh until ctx is done, then returns a Canceled or
// DeadlineExceeded status. It calls connectionEstablishedCallback, if set,
// once subscribed, with a nil stream client: in-process there is no gRPC
// stream (the kubelet's callback only counts connections).
//
// Events are CONTAINER_CREATED, _STARTED, _STOPPED and _DELETED for
// containers and, as containerd sends them, for sandboxes (ContainerId is
// then the sandbox's ID). Each carries the sandbox's status and the statuses
// of its containers at the time of the event; a sandbox's DELETED event
// carries the status it had just before removal (containerd sends none,
// which the kubelet ignores). CreatedAt is the runtime clock's time of the
// change; for an exit the behaviour decides, the exit's own time. Only
// changes after the call are sent, as containerd does. While the node is
// Down (see Fault) a new call fails at once; calls already streaming go on.
func (r *Runtime) GetContainerEvents(ctx context.Context, containerEventsCh chan *runtimeapi.ContainerEventResponse, connectionEstablishedCallback func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	if _, err := r.enter(ctx, "GetContainerEvents"); err != nil {
		return err
	}
	established := func() {}
	if connectionEstablishedCallback != nil {
		established = func() { connectionEstablishedCallback(nil) }
	}
	err := r.watchEvents(ctx, established, func(ev *runtimeapi.ContainerEventResponse) error {
		select {
		case containerEventsCh <- ev:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	return ctxError("GetContainerEvents", err)
}

// watchEvents subscribes, calls established, and sends every event with
// send until ctx is done (returning ctx.Err()) or send fails.
func (r *Runtime) watchEvents(ctx context.Context, established func(), send func(*runtimeapi.ContainerEventResponse) error) error {
	sub := r.subscribe()
	defer r.unsubscribe(sub)
	established()
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sub.wake:
		}
		evs, dropped := sub.take()
		if dropped > 0 {
			logger.Info("Dropped container events: the subscriber fell behind; the kubelet's relist still sees every change", "dropped", dropped, "queueLimit", eventQueueLimit)
		}
		for _, ev := range evs {
			if err := send(ev); err != nil {
				return err
			}
		}
	}
}

// subscribe adds a subscriber; the first one arms the exit timers of the
// running containers that will exit by themselves.
func (r *Runtime) subscribe() *eventSubscriber {
	sub := &eventSubscriber{wake: make(chan struct{}, 1)}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subscribers[sub] = struct{}{}
	if len(r.subscribers) == 1 {
		now := r.now()
		for _, c := range r.containers {
			c.settle(now)
			r.scheduleExitLocked(c, now)
		}
	}
	return sub
}

// unsubscribe removes a subscriber; the last one takes the exit timers with
// it, so that idle containers cost nothing again.
func (r *Runtime) unsubscribe(sub *eventSubscriber) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.subscribers, sub)
	if len(r.subscribers) == 0 {
		for id, e := range r.exitTimers {
			e.t.Stop()
			delete(r.exitTimers, id)
		}
	}
}

// scheduleExitLocked arms (or re-arms) c's exit timer while anyone listens
// and c, settled at now, is running and will exit by itself.
func (r *Runtime) scheduleExitLocked(c *container, now int64) {
	if len(r.subscribers) == 0 {
		return
	}
	if old := r.exitTimers[c.id]; old != nil {
		old.t.Stop()
		delete(r.exitTimers, c.id)
	}
	after, _, _, ok := c.life.exit()
	if !ok || c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return
	}
	id := c.id
	e := &exitTimer{}
	// The callback only starts a goroutine: a clock may call it with its
	// own lock held (the fake clock does, from Step), and exitTimerFired
	// takes r.mu, under which other goroutines read the clock.
	e.t = r.clock.AfterFunc(after-time.Duration(now-c.startedAt), func() { go r.exitTimerFired(id, e) })
	r.exitTimers[id] = e
}

func (r *Runtime) exitTimerFired(id string, e *exitTimer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.exitTimers[id] != e {
		return
	}
	delete(r.exitTimers, id)
	c := r.containers[id]
	if c == nil {
		return
	}
	now := r.now()
	c.settle(now)
	if c.state != runtimeapi.ContainerState_CONTAINER_EXITED {
		r.scheduleExitLocked(c, now) // not yet, on this clock
		return
	}
	r.publishLocked(c.id, r.sandboxes[c.sandboxID], runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, c.finishedAt)
}

// cancelExitLocked disarms c's exit timer before an API call stops or
// removes c. If c has meanwhile exited by itself (the timer was about to
// fire), its STOPPED event is published now, so that it is not lost.
func (r *Runtime) cancelExitLocked(c *container, now int64) {
	e := r.exitTimers[c.id]
	if e == nil {
		return
	}
	e.t.Stop()
	delete(r.exitTimers, c.id)
	c.settle(now)
	if c.state == runtimeapi.ContainerState_CONTAINER_EXITED {
		r.publishLocked(c.id, r.sandboxes[c.sandboxID], runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, c.finishedAt)
	}
}

// publishLocked sends an event about id (a container of sb, or sb itself)
// to every subscriber. It builds nothing when nobody listens. sb may be nil
// (its sandbox is gone): the event then has no sandbox status.
func (r *Runtime) publishLocked(id string, sb *sandbox, typ runtimeapi.ContainerEventType, at int64) {
	if len(r.subscribers) == 0 {
		return
	}
	ev := &runtimeapi.ContainerEventResponse{ContainerId: id, ContainerEventType: typ, CreatedAt: at}
	if sb != nil {
		ev.PodSandboxStatus = sb.toStatus()
		now := r.now()
		for _, cid := range sb.containers {
			if c := r.containers[cid]; c != nil {
				c.settle(now)
				ev.ContainersStatuses = append(ev.ContainersStatuses, c.toStatus(r.imageRefLocked(c)))
			}
		}
	}
	// Every subscriber gets the same message: events are read, never
	// changed, and gRPC marshals from concurrent readers safely.
	for sub := range r.subscribers {
		sub.push(ev)
	}
}
