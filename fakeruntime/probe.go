package fakeruntime

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ProbeKind names one of a container's probes. The values are the
// ContainerBehaviour fields that hold their schedules.
type ProbeKind string

// The kubelet's three probes.
const (
	Readiness ProbeKind = "readiness"
	Liveness  ProbeKind = "liveness"
	Startup   ProbeKind = "startup"
)

// ProbeNetwork answers a network probe (httpGet, tcpSocket or grpc) of a
// container: nothing listens on an emulated node, so the outcome is the one
// the container's behaviour schedules for now, success by default. It is not
// part of CRI: a node agent's prober reaches it through an interface of its
// own, wired by the fleet. A container that is not running (or unknown)
// yields an error, as a real probe of a dead container gets no answer; so
// does an unknown kind.
func (r *Runtime) ProbeNetwork(containerID string, kind ProbeKind) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := lookupLocked(r.containers, "container", containerID)
	if err != nil {
		return false, err
	}
	steps, ok := c.model.steps(kind)
	if !ok {
		return false, status.Errorf(codes.InvalidArgument, "ProbeNetwork %s: unknown probe kind %q; use %q, %q or %q", c.id, kind, Readiness, Liveness, Startup)
	}
	now := r.now()
	c.settle(now)
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return false, status.Errorf(codes.FailedPrecondition, "ProbeNetwork %s of container %s: container is in %s state", kind, c.id, c.state)
	}
	return probeAt(steps, time.Duration(now-c.startedAt)), nil
}
