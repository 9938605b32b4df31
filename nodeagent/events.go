package nodeagent

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	recordutil "k8s.io/client-go/tools/record/util"
	ref "k8s.io/client-go/tools/reference"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// eventRecorder is the agent's record.EventRecorder, and the runnable that
// sends its events to the API server, as the kubelet's broadcaster does:
// events are made as client-go's recorder makes them, queued (at most
// maxQueuedEvents, the rest dropped), and written one at a time by
// eventSink, which correlates them as client-go does. Events recorded
// while the agent does not run are dropped, as a broadcaster that was shut
// down drops them.
//
// Why not client-go's broadcaster: it allocates its queue up front, a
// channel of 1,000 events for the broadcaster and another for its one
// watcher, plus a ring buffer, about 100 KiB per node before any event
// (heap profile of a 200-node fleet), with two goroutines; here the queue
// grows with what is queued, and one goroutine drains it. Nothing of that
// is visible to the API server.
type eventRecorder struct {
	client typedcorev1.CoreV1Interface
	source corev1.EventSource
	clock  clock.WithTicker
	// alive says whether the node still holds a pod: the sink keeps its
	// events' correlation state while it does.
	alive func(types.UID) bool

	mu      sync.Mutex
	running bool
	queue   []*corev1.Event
	wake    chan struct{} // one token: the queue has events
	done    chan struct{} // closed when the writer has stopped
}

// maxQueuedEvents is client-go's: events beyond it are dropped.
const maxQueuedEvents = 1000

// newEventRecorder's events are stamped, correlated and retried on the real
// clock, as client-go's recorder and broadcaster are whatever clock the
// kubelet runs on: an event's name is its object's and the time's, so a
// stopped test clock would give two events one name.
func newEventRecorder(client typedcorev1.CoreV1Interface, nodeName string, alive func(types.UID) bool) *eventRecorder {
	return &eventRecorder{
		client: client, source: corev1.EventSource{Component: "kubelet", Host: nodeName}, clock: clock.RealClock{}, alive: alive,
		wake: make(chan struct{}, 1),
	}
}

// Start implements runnable.
func (e *eventRecorder) Start(ctx context.Context) error {
	sink := newEventSink(&typedcorev1.EventSinkImpl{Interface: e.client.Events("")}, e.clock, e.alive)
	e.mu.Lock()
	e.running, e.done = true, make(chan struct{})
	e.mu.Unlock()
	go e.run(ctx, sink)
	return nil
}

// Wait implements runnable: it returns once the writer has stopped.
func (e *eventRecorder) Wait() { <-e.done }

func (e *eventRecorder) run(ctx context.Context, sink *eventSink) {
	defer close(e.done)
	defer func() {
		e.mu.Lock()
		e.running, e.queue = false, nil
		e.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.wake:
		}
		for {
			e.mu.Lock()
			if len(e.queue) == 0 {
				e.queue = nil // let a burst's backing array go
				e.mu.Unlock()
				break
			}
			event := e.queue[0]
			e.queue[0] = nil
			e.queue = e.queue[1:]
			e.mu.Unlock()
			sink.record(ctx, event)
			if ctx.Err() != nil {
				return
			}
		}
	}
}

// generate is client-go's recorderImpl.generateEvent.
func (e *eventRecorder) generate(obj runtime.Object, annotations map[string]string, eventType, reason, message string) {
	logger := klog.Background()
	r, err := ref.GetReference(scheme.Scheme, obj)
	if err != nil {
		logger.Error(err, "Could not construct reference, will not report event", "object", obj, "eventType", eventType, "reason", reason, "message", message)
		return
	}
	if !recordutil.ValidateEventType(eventType) {
		logger.Error(nil, "Unsupported event type", "eventType", eventType)
		return
	}
	t := metav1.Time{Time: e.clock.Now()}
	namespace := r.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	event := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name: recordutil.GenerateEventName(r.Name, t.UnixNano()), Namespace: namespace, Annotations: annotations,
		},
		InvolvedObject: *r, Reason: reason, Message: message, FirstTimestamp: t, LastTimestamp: t, Count: 1, Type: eventType,
		Source: e.source, ReportingController: e.source.Component, ReportingInstance: e.source.Host,
	}
	e.mu.Lock()
	switch {
	case !e.running:
		e.mu.Unlock()
		return
	case len(e.queue) >= maxQueuedEvents:
		e.mu.Unlock()
		logger.Error(nil, "Unable to record event: too many queued events, dropped event", "event", event)
		return
	}
	e.queue = append(e.queue, event)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

var _ record.EventRecorder = (*eventRecorder)(nil)

// Event implements record.EventRecorder.
func (e *eventRecorder) Event(obj runtime.Object, eventType, reason, message string) {
	e.generate(obj, nil, eventType, reason, message)
}

// Eventf implements record.EventRecorder.
func (e *eventRecorder) Eventf(obj runtime.Object, eventType, reason, messageFmt string, args ...any) {
	e.generate(obj, nil, eventType, reason, fmt.Sprintf(messageFmt, args...))
}

// AnnotatedEventf implements record.EventRecorder.
func (e *eventRecorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventType, reason, messageFmt string, args ...any) {
	e.generate(obj, annotations, eventType, reason, fmt.Sprintf(messageFmt, args...))
}
