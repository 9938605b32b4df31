package kuberuntime

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// Actuated is the kubelet's actuated state: the resources the runtime was
// last given for each container (at its start, and by each successful
// UpdateContainerResources), to which an allocated pod's resources are
// compared to decide a resize.
type Actuated interface {
	ActuatedContainer(uid types.UID, name string) (corev1.ResourceRequirements, bool)
	SetActuatedContainer(uid types.UID, name string, res corev1.ResourceRequirements)
}

// ResizeError is a resize the runtime refused: the kubelet reports it in
// PodResizeInProgress with the reason Error, and a ResizeError event.
type ResizeError struct{ Message string }

func (e *ResizeError) Error() string { return e.Message }

// resourceValues are the four values a resize compares, as the kubelet's
// resourceRequirements: a container's limits fall back to the pod-level
// limits (InPlacePodLevelResourcesVerticalScaling, on in 1.37).
type resourceValues struct {
	memoryLimit, memoryRequest, cpuLimit, cpuRequest int64
}

func containerValues(pod *corev1.ResourceRequirements, c *corev1.ResourceRequirements) resourceValues {
	v := resourceValues{
		memoryLimit: c.Limits.Memory().Value(), memoryRequest: c.Requests.Memory().Value(),
		cpuLimit: c.Limits.Cpu().MilliValue(), cpuRequest: c.Requests.Cpu().MilliValue(),
	}
	if pod != nil {
		if _, ok := c.Limits[corev1.ResourceMemory]; !ok {
			v.memoryLimit = pod.Limits.Memory().Value()
		}
		if _, ok := c.Limits[corev1.ResourceCPU]; !ok {
			v.cpuLimit = pod.Limits.Cpu().MilliValue()
		}
	}
	return v
}

// resizeAction is one running container whose allocated resources are not
// those actuated: it is updated in place, or restarted when its
// resizePolicy says RestartContainer for a resource that changed.
type resizeAction struct {
	spec    *corev1.Container
	status  *ContainerStatus
	restart bool
	// index is the container's in spec.containers, or in
	// spec.initContainers for a sidecar.
	index int
	init  bool
}

// resizeActions is the kubelet's computePodResizeAction for each running
// app container and sidecar of the allocated pod.
func (m *Manager) resizeActions(pod *corev1.Pod, status *PodStatus) []resizeAction {
	if m.cfg.Actuated == nil {
		return nil
	}
	var out []resizeAction
	consider := func(c *corev1.Container, index int, init bool) {
		st := status.Container(c.Name)
		if st == nil || st.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			return
		}
		actuated, _ := m.cfg.Actuated.ActuatedContainer(pod.UID, c.Name)
		desired, current := containerValues(pod.Spec.Resources, &c.Resources), containerValues(pod.Spec.Resources, &actuated)
		if desired == current {
			return
		}
		restart := false
		for _, p := range c.ResizePolicy {
			if p.RestartPolicy != corev1.RestartContainer {
				continue
			}
			switch p.ResourceName {
			case corev1.ResourceMemory:
				restart = restart || desired.memoryLimit != current.memoryLimit || desired.memoryRequest != current.memoryRequest
			case corev1.ResourceCPU:
				restart = restart || desired.cpuLimit != current.cpuLimit || desired.cpuRequest != current.cpuRequest
			}
		}
		out = append(out, resizeAction{spec: c, status: st, restart: restart, index: index, init: init})
	}
	for i := range pod.Spec.InitContainers {
		if IsSidecar(&pod.Spec.InitContainers[i]) {
			consider(&pod.Spec.InitContainers[i], i, true)
		}
	}
	for i := range pod.Spec.Containers {
		consider(&pod.Spec.Containers[i], i, false)
	}
	return out
}

// resize actuates the allocated resources of the running containers, as
// the kubelet's doPodResizeAction: a container whose policy asks for it is
// killed and started again with them (its restart count grows), the others
// get UpdateContainerResources with the cgroup settings the kubelet would
// create them with. The kubelet orders the updates of one resource so that
// decreases come before increases, across memory then cpu, to keep the pod
// cgroup's limit above its containers'; the fake runtime enforces no
// cgroup hierarchy, so each container is updated once, with both. The
// pod's cgroup in this model is computed from the allocated pod, so it
// follows at once. It returns whether it did anything.
func (m *Manager) resize(ctx context.Context, pod *corev1.Pod, status *PodStatus, sandboxID string, sandboxConfig *runtimeapi.PodSandboxConfig) (bool, error) {
	actions := m.resizeActions(pod, status)
	if len(actions) == 0 {
		return false, nil
	}
	logger := klog.FromContext(ctx)
	var errs []error
	for _, a := range actions {
		if a.restart {
			if err := m.killContainer(ctx, pod, a.status, terminationGracePeriod(pod), fmt.Sprintf("Container %s resize requires restart", a.spec.Name)); err != nil {
				errs = append(errs, err)
				continue
			}
			// Started again below with the allocated resources, which it
			// records as actuated when it starts.
			continue
		}
		res := &runtimeapi.ContainerResources{Linux: linuxResources(pod, a.spec, m.cfg.MemoryCapacity, m.minOOMScoreAdj())}
		if err := m.cfg.Runtime.UpdateContainerResources(ctx, a.status.ID, res); err != nil {
			logger.Error(err, "updateContainerResources failed", "container", a.spec.Name, "cID", a.status.ID)
			errs = append(errs, &ResizeError{Message: fmt.Sprintf("failed to update container resources for container %s: %v", a.spec.Name, err)})
			continue
		}
		m.cfg.Actuated.SetActuatedContainer(pod.UID, a.spec.Name, a.spec.Resources)
	}
	for _, a := range actions {
		if !a.restart {
			continue
		}
		if err := m.startContainer(ctx, pod, a.spec, "", status, sandboxID, sandboxConfig); err != nil {
			errs = append(errs, err)
		}
	}
	return true, errors.Join(errs...)
}

// IsPodResizeInProgress is the kubelet's isContainerResourceResizeInProgress:
// whether a running app container or sidecar of the allocated pod has
// actuated resources other than those allocated. The pod's own cgroup is
// computed from the allocated pod here, so it is never behind.
func (m *Manager) IsPodResizeInProgress(pod *corev1.Pod, status *PodStatus) bool {
	if m.cfg.Actuated == nil || status == nil {
		return false
	}
	return len(m.resizeActions(pod, status)) > 0
}
