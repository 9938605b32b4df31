package status

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
)

// statusResources is the kubelet's convertContainerStatusResources: the
// resources allocated to a container that does not run; for one that runs,
// those allocated with the cpu limit, cpu request and memory limit its
// cgroups hold, as the runtime reports them (a value at or below the
// cgroup minimum that the allocation also is at or below stays as
// allocated). A value the runtime does not report stays as the container's
// previous status had it while the same container runs. Limits and
// requests are only reported when some were allocated.
func statusResources(spec *corev1.Container, st *corev1.ContainerStatus, c *kuberuntime.ContainerStatus, old *corev1.ContainerStatus) *corev1.ResourceRequirements {
	res := spec.Resources.DeepCopy()
	if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return res
	}
	var oldRes corev1.ResourceRequirements
	if old != nil && old.Resources != nil {
		oldRes = *old.Resources
	}
	preserve := func(name corev1.ResourceName, oldList, list corev1.ResourceList) {
		if old == nil || old.State.Running == nil || st.ContainerID != old.ContainerID || oldList == nil {
			return
		}
		if q, ok := oldList[name]; ok {
			list[name] = q.DeepCopy()
		}
	}
	actual := c.Resources
	if actual == nil {
		actual = &kuberuntime.ContainerResources{}
	}
	if res.Limits != nil {
		if q := actual.CPULimit; q != nil {
			if q.MilliValue() > minMilliCPULimit || res.Limits.Cpu().MilliValue() > minMilliCPULimit {
				res.Limits[corev1.ResourceCPU] = q.DeepCopy()
			}
		} else {
			preserve(corev1.ResourceCPU, oldRes.Limits, res.Limits)
		}
		if q := actual.MemoryLimit; q != nil {
			res.Limits[corev1.ResourceMemory] = q.DeepCopy()
		} else {
			preserve(corev1.ResourceMemory, oldRes.Limits, res.Limits)
		}
	}
	if res.Requests != nil {
		if q := actual.CPURequest; q != nil {
			if q.MilliValue() > minSharesMilliCPU || res.Requests.Cpu().MilliValue() > minSharesMilliCPU {
				res.Requests[corev1.ResourceCPU] = q.DeepCopy()
			}
		} else {
			preserve(corev1.ResourceCPU, oldRes.Requests, res.Requests)
		}
		// The memory request is not in the cgroups: the kubelet fills it
		// from what it actuated, the allocation, as res has it already.
	}
	return res
}

// podResources is the kubelet's convertToAPIPodLevelResourcesStatus
// (InPlacePodLevelResourcesVerticalScaling, beta and on since 1.36), which
// it reports for every pod. Until the API shows the pod Running it is the
// pod's effective allocation: its pod-level resources with the requests and
// limits of its containers added up. Once Running it is what the kubelet
// reads back from the pod's cgroup: the pod-level resources, the cpu
// request from the cgroup's shares (which on cgroup v2 lose precision
// through cpu.weight, so a pod requesting 350m reads 334m), the memory
// request added up from the containers, and the cpu and memory limits when
// the cgroup has them, else as the previous status had them.
// requests are the pod's requests (PodRequests), which the status'
// allocatedResources holds too.
func podResources(pod *corev1.Pod, old corev1.PodStatus, requests corev1.ResourceList) *corev1.ResourceRequirements {
	res := &corev1.ResourceRequirements{}
	if pod.Spec.Resources != nil {
		res = pod.Spec.Resources.DeepCopy()
	}
	if pod.Status.Phase != corev1.PodRunning {
		res.Requests = requests.DeepCopy()
		res.Limits = resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
		return res
	}
	if res.Requests == nil {
		res.Requests = corev1.ResourceList{}
	}
	if res.Limits == nil {
		res.Limits = corev1.ResourceList{}
	}
	var oldRes corev1.ResourceRequirements
	if old.Resources != nil {
		oldRes = *old.Resources
	}
	preserve := func(name corev1.ResourceName, oldList, list corev1.ResourceList) {
		if old.Phase != corev1.PodRunning || old.Resources == nil {
			return
		}
		if q, ok := oldList[name]; ok {
			list[name] = q.DeepCopy()
		}
	}
	cg := kuberuntime.ReadPodCgroup(pod)
	if milli := kuberuntime.SharesToMilliCPU(int64(cg.CPUShares)); milli > 0 {
		allocated := res.Requests.Cpu().MilliValue()
		if milli > minSharesMilliCPU || allocated > minSharesMilliCPU {
			if !kuberuntime.CPUSharesEqualAfterV2RoundTrip(kuberuntime.MilliCPUToShares(allocated), cg.CPUShares) {
				res.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(milli, resource.DecimalSI)
			}
		}
	} else {
		preserve(corev1.ResourceCPU, oldRes.Requests, res.Requests)
	}
	if _, ok := res.Requests[corev1.ResourceMemory]; !ok {
		if q, ok := requests[corev1.ResourceMemory]; ok {
			res.Requests[corev1.ResourceMemory] = q.DeepCopy()
		}
	}
	if milli := kuberuntime.QuotaToMilliCPU(cg.CPUQuota, int64(cg.CPUPeriod)); cg.CPUPeriod > 0 && milli > 0 {
		if milli > minMilliCPULimit || res.Limits.Cpu().MilliValue() > minMilliCPULimit {
			res.Limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(milli, resource.DecimalSI)
		}
	} else {
		preserve(corev1.ResourceCPU, oldRes.Limits, res.Limits)
	}
	if cg.Memory > 0 {
		res.Limits[corev1.ResourceMemory] = *resource.NewQuantity(cg.Memory, resource.BinarySI)
	} else {
		preserve(corev1.ResourceMemory, oldRes.Limits, res.Limits)
	}
	return res
}
