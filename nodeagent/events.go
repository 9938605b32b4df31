package nodeagent

import (
	"context"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

// eventRecorder is the agent's record.EventRecorder, and the runnable that
// starts and stops the broadcaster sending its events to the API server, as
// the kubelet's. The parts New builds record through it; the broadcaster
// exists only while the agent runs, because client-go's starts goroutines as
// it is made. Events recorded while it does not exist are dropped, as a
// broadcaster that was shut down drops them.
type eventRecorder struct {
	client typedcorev1.CoreV1Interface
	source corev1.EventSource
	clock  clock.WithTicker
	// alive says whether the node still holds a pod: the sink keeps its
	// events' correlation state while it does.
	alive func(types.UID) bool
	stop  context.CancelFunc

	broadcaster record.EventBroadcaster
	recorder    atomic.Value // of record.EventRecorder, while running
}

func newEventRecorder(client typedcorev1.CoreV1Interface, nodeName string, clk clock.WithTicker, alive func(types.UID) bool) *eventRecorder {
	return &eventRecorder{client: client, source: corev1.EventSource{Component: "kubelet", Host: nodeName}, clock: clk, alive: alive}
}

// Start implements runnable.
func (e *eventRecorder) Start(ctx context.Context) error {
	ctx, e.stop = context.WithCancel(ctx)
	e.broadcaster = record.NewBroadcaster(record.WithContext(ctx))
	sink := newEventSink(&typedcorev1.EventSinkImpl{Interface: e.client.Events("")}, e.clock, e.alive)
	e.broadcaster.StartEventWatcher(func(event *corev1.Event) { sink.record(ctx, event) })
	e.recorder.Store(e.broadcaster.NewRecorder(scheme.Scheme, e.source))
	return nil
}

// Wait implements runnable.
func (e *eventRecorder) Wait() {
	e.broadcaster.Shutdown()
	e.stop()
}

func (e *eventRecorder) current() record.EventRecorder {
	r, _ := e.recorder.Load().(record.EventRecorder)
	return r
}

// Event implements record.EventRecorder.
func (e *eventRecorder) Event(obj runtime.Object, eventType, reason, message string) {
	if r := e.current(); r != nil {
		r.Event(obj, eventType, reason, message)
	}
}

// Eventf implements record.EventRecorder.
func (e *eventRecorder) Eventf(obj runtime.Object, eventType, reason, messageFmt string, args ...any) {
	if r := e.current(); r != nil {
		r.Eventf(obj, eventType, reason, messageFmt, args...)
	}
}

// AnnotatedEventf implements record.EventRecorder.
func (e *eventRecorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventType, reason, messageFmt string, args ...any) {
	if r := e.current(); r != nil {
		r.AnnotatedEventf(obj, annotations, eventType, reason, messageFmt, args...)
	}
}
