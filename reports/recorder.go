package reports

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Milestone is one step of a pod's life, stamped where it happens: in the load
// driver (create, watch) or in the node agent (observe, CRI, status patch).
// Phases in a report are differences of two milestones of the same pod.
type Milestone int

const (
	// Created: the driver sent the create call (stamped once it returns the UID).
	Created Milestone = iota
	// Scheduled: a watch first saw spec.nodeName set: the driver's, or the
	// node agent's when it delivers the pod first.
	Scheduled
	// AgentObserved: the node agent's pod watch first delivered the pod.
	AgentObserved
	// SandboxReady: RunPodSandbox returned.
	SandboxReady
	// PullStarted: the agent started pulling an image for the pod. The
	// pod_startup SLI leaves out pods that have it, as the upstream SLO does.
	PullStarted
	// ImagesPulled: every image the pod needs is present on the node.
	ImagesPulled
	// ContainersStarted: StartContainer returned for every app container.
	ContainersStarted
	// RunningReported: the agent sent the status patch with phase Running
	// (the attempt that succeeded).
	RunningReported
	// ReadyReported: the agent sent the status patch with Ready=True (the
	// attempt that succeeded).
	ReadyReported
	// RunningObserved: the driver's watch first saw phase Running.
	RunningObserved
	// DeleteIssued: the driver sent the delete call (that succeeded).
	DeleteIssued
	// Gone: the driver's watch saw the pod object removed.
	Gone
	// RunningSet: the agent's status manager first held phase Running,
	// before any write to the API server. The kubelet's own
	// kubelet_pod_start_duration_seconds ends here; RunningReported follows
	// once the status manager's queue and its GET have gone by.
	RunningSet
	// VolumesMounted: the agent's volume manager had every volume of the
	// pod set up (WaitForAttachAndMount returned), service-account token
	// and ConfigMaps fetched. From here to RunningSet the agent makes no
	// API call for a pod without env from ConfigMaps or Secrets: that
	// phase is its own work and its runtime's.
	VolumesMounted

	numMilestones
)

var milestoneNames = [numMilestones]string{
	"created", "scheduled", "agent_observed", "sandbox_ready", "pull_started", "images_pulled",
	"containers_started", "running_reported", "ready_reported", "running_observed",
	"delete_issued", "gone", "running_set", "volumes_mounted",
}

func (m Milestone) String() string {
	if m < 0 || m >= numMilestones {
		return "unknown"
	}
	return milestoneNames[m]
}

// Recorder receives milestones. Implementations must be safe for concurrent
// use by thousands of agents and keep only the earliest stamp of a milestone
// per pod, so that retries and resyncs do not move it and, of two observers,
// the first to see it counts. The time must come from the
// caller's clock.Clock: with the real clock it carries Go's monotonic reading,
// which is what makes in-process differences exact to the nanosecond.
type Recorder interface {
	Mark(pod types.UID, m Milestone, at time.Time)
}

// Discard is a Recorder that keeps nothing, for agents run without a report.
type Discard struct{}

// Mark implements Recorder.
func (Discard) Mark(types.UID, Milestone, time.Time) {}
