// Package pleg is the pod lifecycle event generator: it notices container
// state changes in the runtime and tells the agent which pods to sync, as the
// kubelet's PLEG does. Generic relists the runtime every period.
package pleg

import (
	"k8s.io/apimachinery/pkg/types"
)

// EventType names a container's change between two relists.
type EventType string

// The kubelet's PLEG event types.
const (
	ContainerStarted EventType = "ContainerStarted"
	ContainerDied    EventType = "ContainerDied"
	ContainerRemoved EventType = "ContainerRemoved"
	ContainerChanged EventType = "ContainerChanged"
	// PodSync asks for a pod's sync after a reinspection that found no
	// container change (RequestReinspect).
	PodSync EventType = "PodSync"
)

// Event says that a pod's container changed.
type Event struct {
	ID   types.UID
	Type EventType
	// Data is the container ID.
	Data string
}

// PodLifecycleEventGenerator is what the agent's sync loop consumes.
type PodLifecycleEventGenerator interface {
	Watch() <-chan *Event
	// Healthy reports false until a relist has succeeded and once the last
	// that did is older than the threshold, which the kubelet turns into a
	// NotReady node ("PLEG is not healthy").
	Healthy() (bool, error)
}
