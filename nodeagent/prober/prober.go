// Package prober is the node agent's probe manager, the kubelet's
// pkg/kubelet/prober: it runs the startup, liveness and readiness probes of
// a node's containers, keeps their results, and tells the agent when one
// changes.
//
// Each (pod, container, probe kind) has a worker: its counters, thresholds
// and next run time. Workers do not own goroutines, because thousands of
// nodes × pods × probes, one goroutine each as in the kubelet, would cost
// more than the agents themselves. Their next runs wait in a Queue, one
// client-go delaying queue served by a few goroutines, as KWOK's node lease
// controller serves every node's lease; a fleet gives all its nodes' Managers
// one Queue, so that probing costs the fleet a few goroutines and a node
// none. Time is the injected clock's, so tests drive it.
//
// Probes run through a Runner. ExecViaCRI runs exec probes with CRI ExecSync;
// HTTPRunner runs httpGet, tcpSocket and grpc probes over the network, as a
// physical node needs; an emulated node's fleet gives a Runner that asks its
// fake runtime for the outcome. Join puts an exec and a network runner
// together.
package prober

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Kind is a probe's kind.
type Kind int

// The kubelet's probe kinds.
const (
	Liveness Kind = iota
	Readiness
	Startup
	numKinds
)

// String is the kind as the kubelet's events and logs name it.
func (k Kind) String() string {
	switch k {
	case Liveness:
		return "Liveness"
	case Readiness:
		return "Readiness"
	case Startup:
		return "Startup"
	default:
		return "Unknown"
	}
}

// Result is a probe's outcome.
type Result int

const (
	// Unknown is no result yet: a startup probe that has not passed its
	// threshold. From a Runner it means the probe could not decide; it counts
	// as a Failure without an event, as the kubelet counts it.
	Unknown Result = iota
	// Success is a probe that passed (a ready, live or started container).
	Success
	// Failure is a probe that failed (not ready; for liveness and startup:
	// kill the container).
	Failure
	// Warning is a Runner's result only: the probe passed with something to
	// say (an HTTP redirect the kubelet does not follow). It counts as a
	// Success and is recorded as a ProbeWarning event; it is never cached.
	Warning
)

func (r Result) String() string {
	switch r {
	case Success:
		return "Success"
	case Failure:
		return "Failure"
	case Warning:
		return "Warning"
	default:
		return "Unknown"
	}
}

// Update says that a container's cached result for one probe kind changed.
// Updates are sent only on a change, never for the initial value a container
// gets when it starts (the agent, which reported the start, knows it).
type Update struct {
	// ContainerID is the runtime's container ID, as given to ContainerStarted.
	ContainerID   string
	ContainerName string
	PodUID        types.UID
	Kind          Kind
	Result        Result
}

// KillsContainer reports whether the update asks the agent to kill the
// container, as the kubelet's computePodActions does: its liveness or startup
// probe reached the failure threshold. The restart policy then decides
// whether it starts again.
func (u Update) KillsContainer() bool {
	return u.Result == Failure && (u.Kind == Liveness || u.Kind == Startup)
}

// ExecRunner runs exec probes.
type ExecRunner interface {
	// Exec runs cmd in the container (CRI ExecSync) with the probe's
	// timeout; exit code 0 is a Success, any other exit code or a timeout a
	// Failure with the output as the message. An error means that the probe
	// could not be run at all; the manager retries it, records a "probe
	// errored" event and does not count it.
	Exec(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (Result, string, error)
}

// NetworkRunner runs httpGet, tcpSocket and grpc probes.
type NetworkRunner interface {
	// Network runs the probe's httpGet, tcpSocket or grpc action against the
	// pod within probe.TimeoutSeconds. Resolving the pod's address is the
	// runner's job. Results and errors mean what they mean for Exec.
	Network(ctx context.Context, kind Kind, pod *corev1.Pod, container *corev1.Container, containerID string, probe *corev1.Probe) (Result, string, error)
}

// Runner runs probes of every action type. The context it gets is cancelled
// a grace second after the probe's timeout on the manager's clock, to free a
// runner that hangs; runners enforce the timeout themselves and report a
// timed-out probe as a Failure with the kubelet's message.
type Runner interface {
	ExecRunner
	NetworkRunner
}

// Join makes one Runner of an exec runner and a network runner.
func Join(e ExecRunner, n NetworkRunner) Runner { return joined{e, n} }

type joined struct {
	ExecRunner
	NetworkRunner
}
