package kuberuntime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Host is what a manager needs of the machine when the runtime under it is
// real (containerd, CRI-O): where pod logs go, and the cgroups pods run in.
// An emulated node has none, and then the manager touches nothing on disk.
type Host struct {
	// PodLogsDir is the root of the pods' log directories; "" means the
	// kubelet's /var/log/pods.
	PodLogsDir string
	// CgroupRoot is the cgroup under which kubepods lives in every
	// hierarchy, the kubelet's --cgroup-root; "" means "/".
	CgroupRoot string
	// CgroupFS is where the cgroup hierarchies are mounted; "" means
	// /sys/fs/cgroup. Pod cgroups are removed there once their pods are.
	CgroupFS string
	// MinOOMScoreAdj is the lowest oom_score_adj the runtime may give a
	// container. A runtime without CAP_SYS_RESOURCE cannot lower a score
	// below its own, so the kubelet's -997 for guaranteed pods would fail
	// every start; the zero value allows nothing below 0.
	MinOOMScoreAdj int64
}

func (h *Host) podLogsDir() string {
	if h == nil || h.PodLogsDir == "" {
		return podLogsRootDirectory
	}
	return h.PodLogsDir
}

func (h *Host) cgroupFS() string {
	if h.CgroupFS == "" {
		return "/sys/fs/cgroup"
	}
	return h.CgroupFS
}

// podLogDir is the kubelet's per-pod log directory name under root.
func podLogDir(root string, pod *corev1.Pod) string {
	return filepath.Join(root, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
}

// podCgroupParent is the pod's cgroup in the kubelet's cgroupfs layout:
// <root>/kubepods/pod<uid> for guaranteed pods, and
// <root>/kubepods/{burstable,besteffort}/pod<uid> for the others.
func podCgroupParent(root string, pod *corev1.Pod) string {
	if root == "" {
		root = "/"
	}
	qos := ""
	switch PodQOS(pod) {
	case corev1.PodQOSBurstable:
		qos = "burstable"
	case corev1.PodQOSBestEffort:
		qos = "besteffort"
	}
	return path.Join(root, "kubepods", qos, "pod"+string(pod.UID))
}

// removePodCgroups removes the pod's cgroup from every hierarchy once its
// containers are gone, as the kubelet's pod container manager does: runc
// removes each container's own cgroup, never the pod's above it.
func (h *Host) removePodCgroups(uid types.UID) error {
	root := h.CgroupRoot
	if root == "" {
		root = "/"
	}
	// The QoS class is not known from the UID alone: the pod's cgroup is in
	// one of three places.
	rel := []string{
		path.Join(root, "kubepods", "pod"+string(uid)),
		path.Join(root, "kubepods", "burstable", "pod"+string(uid)),
		path.Join(root, "kubepods", "besteffort", "pod"+string(uid)),
	}
	fsRoot := h.cgroupFS()
	// cgroup v2 mounts one hierarchy at the root; v1 one per controller
	// under it. Trying both covers hybrid hosts too.
	hierarchies := []string{fsRoot}
	entries, err := os.ReadDir(fsRoot)
	if err != nil {
		return fmt.Errorf("listing cgroup hierarchies in %s: %w", fsRoot, err)
	}
	for _, e := range entries {
		if e.IsDir() {
			hierarchies = append(hierarchies, filepath.Join(fsRoot, e.Name()))
		}
	}
	var errs []error
	for _, hier := range hierarchies {
		for _, r := range rel {
			if err := os.Remove(filepath.Join(hier, r)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing the cgroup of pod %s: %w", uid, err))
			}
		}
	}
	return errors.Join(errs...)
}

// removePodLogs removes the pod's log directory, found by its UID: the
// kubelet's container GC does so once the pod's sandboxes are gone.
func (h *Host) removePodLogs(uid types.UID) error {
	dirs, err := filepath.Glob(filepath.Join(h.podLogsDir(), "*_"+string(uid)))
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("removing the log directory of pod %s: %w", uid, err))
		}
	}
	return errors.Join(errs...)
}

// PodQOS is the pod's QoS class: the one the API server stored, or else
// computed by the rules of k8s.io/kubernetes' qos.ComputePodQOS (which is
// not importable), from cpu and memory requests and limits.
func PodQOS(pod *corev1.Pod) corev1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	supported := []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}
	requested, guaranteed := false, true
	lists := [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers}
	if resourcehelper.IsPodLevelResourcesSet(pod) {
		// Pod-level resources decide alone (PodLevelResources, on since
		// 1.34), as if they were one container's.
		lists = [][]corev1.Container{{{Resources: *pod.Spec.Resources}}}
	}
	for _, list := range lists {
		for i := range list {
			r := list[i].Resources
			for _, name := range supported {
				req, hasReq := r.Requests[name]
				lim, hasLim := r.Limits[name]
				if (hasReq && !req.IsZero()) || (hasLim && !lim.IsZero()) {
					requested = true
				}
				// A request defaults to its limit, as the API server
				// defaults it.
				if !hasLim || lim.IsZero() || (hasReq && req.Cmp(lim) != 0) {
					guaranteed = false
				}
			}
		}
	}
	switch {
	case !requested:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	default:
		return corev1.PodQOSBurstable
	}
}

// The kubelet's cgroup constants (pkg/kubelet/cm) and OOM score
// adjustments (pkg/kubelet/qos).
const (
	minShares             = 2
	maxShares             = 262144
	sharesPerCPU          = 1024
	quotaPeriod           = 100000
	minQuotaPeriod        = 1000
	guaranteedOOMScoreAdj = -997
	besteffortOOMScoreAdj = 1000
)

// linuxResources are the container's cgroup settings from its requests and
// limits, as the kubelet's generateLinuxContainerResources computes them
// with the CFS quota on: cpu shares from the request (or the limit), quota
// over a 100 ms period from the cpu limit, the memory limit, and the OOM
// score adjustment of the pod's QoS class.
func linuxResources(pod *corev1.Pod, c *corev1.Container, memoryCapacity, minOOMScoreAdj int64) *runtimeapi.LinuxContainerResources {
	cpuRequest, ok := c.Resources.Requests[corev1.ResourceCPU]
	if !ok {
		cpuRequest = c.Resources.Limits[corev1.ResourceCPU]
	}
	cpuLimit := c.Resources.Limits[corev1.ResourceCPU]
	memLimit := c.Resources.Limits[corev1.ResourceMemory]
	res := &runtimeapi.LinuxContainerResources{
		CpuShares:          milliCPUToShares(cpuRequest.MilliValue()),
		CpuPeriod:          quotaPeriod,
		CpuQuota:           milliCPUToQuota(cpuLimit.MilliValue()),
		MemoryLimitInBytes: memLimit.Value(),
		OomScoreAdj:        max(oomScoreAdj(pod, c, memoryCapacity), minOOMScoreAdj),
	}
	return res
}

func milliCPUToShares(milliCPU int64) int64 {
	if milliCPU == 0 {
		return minShares
	}
	return min(max(milliCPU*sharesPerCPU/1000, minShares), maxShares)
}

func milliCPUToQuota(milliCPU int64) int64 {
	if milliCPU == 0 {
		return 0
	}
	return max(milliCPU*quotaPeriod/1000, minQuotaPeriod)
}

// PodCgroup is a pod's cgroup settings as the kubelet reads them back
// (GetPodCgroupConfig) on a cgroup v2 node: cpu shares converted to
// cpu.weight and back, which loses precision, the CFS quota (-1 for "max")
// over its period, and the memory limit (-1 for "max").
type PodCgroup struct {
	CPUShares uint64
	CPUQuota  int64
	CPUPeriod uint64
	Memory    int64
}

// ReadPodCgroup is what the kubelet reads back from the cgroup it made for
// pod by its ResourceConfigForPod with the CFS quota on: shares from the
// pod's cpu requests (the minimum for best-effort pods), a quota and a
// memory limit for guaranteed pods, and for burstable ones when every init
// and app container (or the pod) declares that limit.
func ReadPodCgroup(pod *corev1.Pod) PodCgroup {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	cpuLimitsDeclared, memoryLimitsDeclared := true, true
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Resources.Limits.Cpu().IsZero() {
				cpuLimitsDeclared = false
			}
			if list[i].Resources.Limits.Memory().IsZero() {
				memoryLimitsDeclared = false
			}
		}
	}
	if resourcehelper.IsPodLevelResourcesSet(pod) {
		cpuLimitsDeclared = cpuLimitsDeclared || !pod.Spec.Resources.Limits.Cpu().IsZero()
		memoryLimitsDeclared = memoryLimitsDeclared || !pod.Spec.Resources.Limits.Memory().IsZero()
	}
	cpuRequest, cpuLimit, memoryLimit := reqs[corev1.ResourceCPU], limits[corev1.ResourceCPU], limits[corev1.ResourceMemory]
	cg := PodCgroup{CPUShares: minShares, CPUQuota: -1, CPUPeriod: quotaPeriod, Memory: -1}
	qos := PodQOS(pod)
	if qos == corev1.PodQOSBestEffort {
		cg.CPUShares = cpuSharesAfterV2RoundTrip(cg.CPUShares)
		return cg
	}
	cg.CPUShares = cpuSharesAfterV2RoundTrip(uint64(milliCPUToShares(cpuRequest.MilliValue())))
	if qos == corev1.PodQOSGuaranteed || cpuLimitsDeclared {
		// cgroup v2 has no "unset" quota: none is "max".
		if q := milliCPUToQuota(cpuLimit.MilliValue()); q > 0 {
			cg.CPUQuota = q
		}
	}
	if (qos == corev1.PodQOSGuaranteed || memoryLimitsDeclared) && memoryLimit.Value() > 0 {
		cg.Memory = memoryLimit.Value()
	}
	return cg
}

// CPUSharesEqualAfterV2RoundTrip is the kubelet's: whether shares read back
// from a cgroup v2 are those allocated, after the loss of their round trip
// through cpu.weight.
func CPUSharesEqualAfterV2RoundTrip(allocatedShares, readback uint64) bool {
	return cpuSharesAfterV2RoundTrip(allocatedShares) == readback
}

// cpuSharesAfterV2RoundTrip is shares written as cpu.weight and read back
// as shares, by the kubelet's getCPUWeight and cpuWeightToCPUShares.
func cpuSharesAfterV2RoundTrip(shares uint64) uint64 {
	weight := uint64(10000)
	if shares < maxShares {
		weight = 1 + ((shares-2)*9999)/262142
	}
	return (((weight - 1) * 262142) / 9999) + 2
}

// MilliCPUToShares is the kubelet's: the cpu shares of a cpu request.
func MilliCPUToShares(milliCPU int64) uint64 { return uint64(milliCPUToShares(milliCPU)) }

// SharesToMilliCPU is the kubelet's: the cpu request cpu shares stand for.
func SharesToMilliCPU(shares int64) int64 { return sharesToMilliCPU(shares) }

// QuotaToMilliCPU is the kubelet's: the cpu limit of a CFS quota.
func QuotaToMilliCPU(quota, period int64) int64 { return quotaToMilliCPU(quota, period) }

// sharesToMilliCPU is the kubelet's SharesToMilliCPU: the cpu request
// that cpu shares stand for, rounded up.
func sharesToMilliCPU(shares int64) int64 {
	if shares < minShares {
		return 0
	}
	return (shares*1000 + sharesPerCPU - 1) / sharesPerCPU
}

// quotaToMilliCPU is the kubelet's QuotaToMilliCPU: the cpu limit a CFS
// quota over its period stands for; -1 is no limit.
func quotaToMilliCPU(quota, period int64) int64 {
	if quota == -1 {
		return 0
	}
	return quota * 1000 / period
}

// oomScoreAdj is the kubelet's GetContainerOOMScoreAdjust: guaranteed pods
// last to be killed, best-effort first, burstable ones by the share of the
// node's memory they request (999 when the capacity is unknown).
func oomScoreAdj(pod *corev1.Pod, c *corev1.Container, memoryCapacity int64) int64 {
	switch PodQOS(pod) {
	case corev1.PodQOSGuaranteed:
		return guaranteedOOMScoreAdj
	case corev1.PodQOSBestEffort:
		return besteffortOOMScoreAdj
	}
	adj := int64(besteffortOOMScoreAdj)
	if memoryCapacity > 0 {
		adj = 1000 - 1000*memoryRequest(c)/memoryCapacity
	}
	// A sidecar is no likelier to be killed than the smallest regular
	// container of its pod.
	if IsSidecar(c) && memoryCapacity > 0 && len(pod.Spec.Containers) > 0 {
		smallest := memoryRequest(&pod.Spec.Containers[0])
		for i := range pod.Spec.Containers[1:] {
			smallest = min(smallest, memoryRequest(&pod.Spec.Containers[i+1]))
		}
		adj = min(adj, 1000-1000*max(smallest, memoryRequest(c))/memoryCapacity)
	}
	switch {
	case adj < 1000+guaranteedOOMScoreAdj:
		return 1000 + guaranteedOOMScoreAdj
	case adj == besteffortOOMScoreAdj:
		return adj - 1
	}
	return adj
}

func memoryRequest(c *corev1.Container) int64 {
	q := c.Resources.Requests[corev1.ResourceMemory]
	return q.Value()
}

// dnsConfig is the sandbox's resolv.conf when the pod spells it out (dnsPolicy
// None). Otherwise it is nil and the runtime copies the host's, which is the
// kubelet's choice for host-network pods and for ClusterFirst on a node with
// no cluster DNS configured, as an agent's node is.
func dnsConfig(pod *corev1.Pod) *runtimeapi.DNSConfig {
	if pod.Spec.DNSPolicy != corev1.DNSNone || pod.Spec.DNSConfig == nil {
		return nil
	}
	d := pod.Spec.DNSConfig
	out := &runtimeapi.DNSConfig{Servers: d.Nameservers, Searches: d.Searches}
	for _, o := range d.Options {
		if o.Value != nil {
			out.Options = append(out.Options, o.Name+":"+*o.Value)
		} else {
			out.Options = append(out.Options, o.Name)
		}
	}
	return out
}
