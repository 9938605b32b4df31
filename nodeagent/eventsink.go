package nodeagent

import (
	"context"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	recordutil "k8s.io/client-go/tools/record/util"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// eventSink writes the broadcaster's events to the API server as client-go's
// StartRecordingToSink does (the same correlation, PATCH of a repeated
// event, retries and back-off), with one difference that the API server
// cannot see: the correlation state is kept per involved object, and a
// pod's is dropped once the node is done with the pod.
//
// Why by hand: client-go keeps one EventCorrelator per broadcaster, whose
// three LRU caches of 4,096 entries hold every pod the node ever ran until
// they fill. On a real node that is a few MiB that no one notices; in a
// fleet it is about 70 MiB an hour per 1,000 agents at 5 pods/s of churn,
// up to 4 GiB, which a soak reads as a leak. Every key of those caches
// holds the involved object's UID, so no event of one object is ever
// correlated with another's: a correlator per object (client-go's own, from
// NewEventCorrelatorWithOptions) correlates exactly as the shared one, and
// a pod that is gone gets no more events to correlate. The write path
// below is client-go's recordToSink and recordEvent (tools/record/event.go,
// v0.37), which are not exported.
type eventSink struct {
	sink  record.EventSink
	clock clock.WithTicker
	// alive says whether the node still holds a pod, by UID.
	alive func(types.UID) bool

	// Touched only by the broadcaster's one watcher goroutine.
	objects   map[types.UID]*objectCorrelator
	lastSweep time.Time
}

type objectCorrelator struct {
	*record.EventCorrelator
	pod      bool
	lastUsed time.Time
}

const (
	// client-go's maxTriesPerEvent and defaultSleepDuration.
	eventMaxTries   = 12
	eventRetrySleep = 10 * time.Second
	// forgetPodEventsAfter is how long a pod's correlator outlives the pod
	// on the node: longer than the sink can stall on one event (12 tries,
	// 10 s apart, while the API server is away), so that an event queued
	// behind such a stall still finds its pod's state.
	forgetPodEventsAfter = 3 * time.Minute
	eventSweepEvery      = time.Minute
)

func newEventSink(sink record.EventSink, clk clock.WithTicker, alive func(types.UID) bool) *eventSink {
	return &eventSink{sink: sink, clock: clk, alive: alive, objects: map[types.UID]*objectCorrelator{}}
}

// correlator is the involved object's correlator, made on its first event.
func (s *eventSink) correlator(ref *corev1.ObjectReference, now time.Time) *objectCorrelator {
	c, ok := s.objects[ref.UID]
	if !ok {
		c = &objectCorrelator{
			EventCorrelator: record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{Clock: s.clock}),
			pod:             ref.Kind == "Pod",
		}
		s.objects[ref.UID] = c
	}
	c.lastUsed = now
	return c
}

// sweep drops the correlators of pods the node no longer holds and that
// have had no event for forgetPodEventsAfter, at most every eventSweepEvery.
func (s *eventSink) sweep(now time.Time) {
	if now.Sub(s.lastSweep) < eventSweepEvery {
		return
	}
	s.lastSweep = now
	for uid, c := range s.objects {
		if c.pod && now.Sub(c.lastUsed) >= forgetPodEventsAfter && !s.alive(uid) {
			delete(s.objects, uid)
		}
	}
}

// record is client-go's recordToSink with the object's correlator.
func (s *eventSink) record(ctx context.Context, event *corev1.Event) {
	now := s.clock.Now()
	s.sweep(now)
	// A copy before modification: the broadcaster may have other watchers.
	eventCopy := *event
	event = &eventCopy
	correlator := s.correlator(&event.InvolvedObject, now)
	result, err := correlator.EventCorrelate(event)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Event correlation failed")
	}
	if result.Skip {
		return
	}
	for tries := 1; ; tries++ {
		if s.write(ctx, result.Event, result.Patch, result.Event.Count > 1, correlator.EventCorrelator) {
			return
		}
		if tries >= eventMaxTries {
			klog.FromContext(ctx).Error(nil, "Unable to write event (retry limit exceeded!)", "event", event)
			return
		}
		// The first sleep is random, so that the nodes do not all come
		// back at once after an outage.
		delay := eventRetrySleep
		if tries == 1 {
			delay = time.Duration(float64(delay) * rand.Float64())
		}
		select {
		case <-ctx.Done():
			klog.FromContext(ctx).Error(nil, "Unable to write event (broadcaster is shut down)", "event", event)
			return
		case <-s.clock.After(delay):
		}
	}
}

// write is client-go's recordEvent: it reports whether the event is done
// with, written or refused for good.
func (s *eventSink) write(ctx context.Context, event *corev1.Event, patch []byte, updateExisting bool, correlator *record.EventCorrelator) bool {
	var written *corev1.Event
	var err error
	if updateExisting {
		written, err = s.sink.Patch(event, patch)
	}
	// A patch fails when the event has expired from the API server.
	if !updateExisting || recordutil.IsKeyNotFoundError(err) {
		event.ResourceVersion = ""
		written, err = s.sink.Create(event)
	}
	if err == nil {
		correlator.UpdateState(written)
		return true
	}
	switch err.(type) {
	case *rest.RequestConstructionError:
		klog.FromContext(ctx).Error(err, "Unable to construct event (will not retry!)", "event", event)
		return true
	case *apierrors.StatusError:
		if apierrors.IsAlreadyExists(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			klog.FromContext(ctx).V(5).Info("Server rejected event (will not retry!)", "event", event, "err", err)
		} else {
			klog.FromContext(ctx).Error(err, "Server rejected event (will not retry!)", "event", event)
		}
		return true
	}
	// Transport errors and unexpected answers are tried again.
	klog.FromContext(ctx).Error(err, "Unable to write event (may retry after sleeping)", "event", event)
	return false
}
