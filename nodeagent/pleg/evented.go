package pleg

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// FeatureEventedPLEG is the kubelet feature gate that turns the evented
// PLEG on; an agent reads it from its KubeletConfiguration's featureGates.
const FeatureEventedPLEG = "EventedPLEG"

// eventedMaxStreamRetries is how many times the event stream is reopened
// before the evented PLEG gives up, leaving the generic relist alone: the
// kubelet's eventedPlegMaxStreamRetries.
const eventedMaxStreamRetries = 5

var errStreamClosed = errors.New("CRI container event stream closed without an error")

// relister is the generic PLEG as the evented one uses it.
type relister interface {
	RequestRelist(ctx context.Context, uid types.UID)
}

// Evented watches the runtime's container events and asks the generic PLEG
// to relist a pod as soon as one of its containers stops, as the kubelet's
// EventedPLEG does since it became a container-termination fast path: the
// generic PLEG keeps relisting every period and stays the only source of
// events, so a lost stream costs latency, never correctness.
type Evented struct {
	runtime internalapi.RuntimeService
	generic relister
}

// NewEvented returns an evented PLEG that requests relists of generic.
func NewEvented(runtime internalapi.RuntimeService, generic *Generic) *Evented {
	return &Evented{runtime: runtime, generic: generic}
}

// Run streams container events until ctx ends or the stream has failed
// eventedMaxStreamRetries times.
func (e *Evented) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	events := make(chan *runtimeapi.ContainerEventResponse, channelCapacity)
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.process(ctx, events)
	}()
	defer func() {
		close(events)
		<-done
	}()
	var lastErr error
	for attempt := 0; attempt < eventedMaxStreamRetries; attempt++ {
		err := e.runtime.GetContainerEvents(ctx, events, nil)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errStreamClosed
		}
		lastErr = err
		logger.V(4).Info("Evented PLEG: failed to get container events, retrying", "err", err)
	}
	logger.Error(lastErr, "Evented PLEG: disabling container-termination fast path after exhausting event stream retries", "retries", eventedMaxStreamRetries)
}

func (e *Evented) process(ctx context.Context, events <-chan *runtimeapi.ContainerEventResponse) {
	for ev := range events {
		// A sandbox already gone leaves no pod to relist; the periodic
		// relist reports what happened to it.
		if ev.GetPodSandboxStatus().GetMetadata() == nil || ev.ContainerEventType != runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT {
			continue
		}
		e.generic.RequestRelist(ctx, types.UID(ev.PodSandboxStatus.Metadata.Uid))
	}
}
