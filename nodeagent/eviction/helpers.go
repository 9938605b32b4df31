package eviction

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The kubelet's reasons, messages and event annotation keys.
const (
	// Reason is the pod status reason of an eviction and of a rejection
	// under node pressure.
	Reason                  = "Evicted"
	nodeLowMessageFmt       = "The node was low on resource: %v. "
	nodeConditionMessageFmt = "The node had condition: %v. "
	thresholdMetMessageFmt  = "Threshold quantity: %v, available: %v. "
	containerMessageFmt     = "Container %s was using %s, request is %s, has larger consumption of %v. "
	podMessageFmt           = "Pod %s was using %s, request is %s, has larger consumption of %v. "

	OffendingContainersKey      = "offending_containers"
	OffendingContainersUsageKey = "offending_containers_usage"
	OffendingPodKey             = "offending_pod"
	OffendingPodUsageKey        = "offending_pod_usage"
	StarvedResourceKey          = "starved_resource"
)

// observation is one signal's available quantity against its capacity.
type observation struct {
	available *resource.Quantity
	capacity  *resource.Quantity
	time      metav1.Time
}

type observations map[Signal]observation

// statsFunc returns a pod's stats from the summary, if it has any.
type statsFunc func(pod *corev1.Pod) (statsapi.PodStats, bool)

// observe derives the signals from a summary, as the kubelet's
// makeSignalObservations.
func observe(summary *statsapi.Summary) (observations, statsFunc) {
	byUID := make(map[string]statsapi.PodStats, len(summary.Pods))
	for _, ps := range summary.Pods {
		byUID[ps.PodRef.UID] = ps
	}
	stats := func(pod *corev1.Pod) (statsapi.PodStats, bool) {
		ps, ok := byUID[string(pod.UID)]
		return ps, ok
	}
	obs := observations{}
	bytes := func(v uint64) *resource.Quantity { return resource.NewQuantity(int64(v), resource.BinarySI) }
	count := func(v uint64) *resource.Quantity { return resource.NewQuantity(int64(v), resource.DecimalSI) }
	node := summary.Node
	if m := node.Memory; m != nil && m.AvailableBytes != nil && m.WorkingSetBytes != nil {
		obs[SignalMemoryAvailable] = observation{bytes(*m.AvailableBytes), bytes(*m.AvailableBytes + *m.WorkingSetBytes), m.Time}
	}
	fsSignals := func(fs *statsapi.FsStats, avail, inodes Signal) {
		if fs == nil {
			return
		}
		if fs.AvailableBytes != nil && fs.CapacityBytes != nil {
			obs[avail] = observation{bytes(*fs.AvailableBytes), bytes(*fs.CapacityBytes), fs.Time}
		}
		if fs.InodesFree != nil && fs.Inodes != nil {
			obs[inodes] = observation{count(*fs.InodesFree), count(*fs.Inodes), fs.Time}
		}
	}
	fsSignals(node.Fs, SignalNodeFsAvailable, SignalNodeFsInodesFree)
	if node.Runtime != nil {
		fsSignals(node.Runtime.ImageFs, SignalImageFsAvailable, SignalImageFsInodesFree)
	}
	if r := node.Rlimit; r != nil && r.MaxPID != nil && r.NumOfRunningProcesses != nil {
		obs[SignalPIDAvailable] = observation{
			resource.NewQuantity(*r.MaxPID-*r.NumOfRunningProcesses, resource.DecimalSI),
			resource.NewQuantity(*r.MaxPID, resource.DecimalSI), r.Time,
		}
	}
	return obs, stats
}

// thresholdsMet returns the thresholds whose signal is below them. With
// enforceMinReclaim, a threshold stays met until the signal has recovered
// its minimum reclaim above it.
func thresholdsMet(thresholds []Threshold, obs observations, enforceMinReclaim bool) []Threshold {
	var out []Threshold
	for _, t := range thresholds {
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		q := t.Value.quantity(o.capacity)
		if enforceMinReclaim && t.MinReclaim != nil {
			q.Add(*t.MinReclaim.quantity(o.capacity))
		}
		if q.Cmp(*o.available) > 0 {
			out = append(out, t)
		}
	}
	return out
}

// sameThreshold compares thresholds by value, as the kubelet's hasThreshold.
func sameThreshold(a, b Threshold) bool {
	if a.Signal != b.Signal || a.GracePeriod != b.GracePeriod {
		return false
	}
	if (a.Value.Quantity == nil) != (b.Value.Quantity == nil) {
		return false
	}
	if a.Value.Quantity != nil {
		return a.Value.Quantity.Cmp(*b.Value.Quantity) == 0
	}
	return a.Value.Percentage == b.Value.Percentage
}

func mergeThresholds(a, b []Threshold) []Threshold {
	out := slices.Clone(a)
	for _, t := range b {
		if !slices.ContainsFunc(out, func(u Threshold) bool { return sameThreshold(t, u) }) {
			out = append(out, t)
		}
	}
	return out
}

// thresholdKey identifies a threshold across cycles: a signal has at most
// one hard and one soft threshold.
type thresholdKey struct {
	signal Signal
	grace  time.Duration
}

func keyOf(t Threshold) thresholdKey { return thresholdKey{t.Signal, t.GracePeriod} }

// thresholdsFirstObservedAt keeps the time each met threshold was first
// seen, so that soft thresholds wait out their grace period.
func thresholdsFirstObservedAt(thresholds []Threshold, last map[thresholdKey]time.Time, now time.Time) map[thresholdKey]time.Time {
	out := map[thresholdKey]time.Time{}
	for _, t := range thresholds {
		at, ok := last[keyOf(t)]
		if !ok {
			at = now
		}
		out[keyOf(t)] = at
	}
	return out
}

// thresholdsMetGracePeriod returns the met thresholds whose grace period has
// passed since they were first observed.
func thresholdsMetGracePeriod(thresholds []Threshold, firstObserved map[thresholdKey]time.Time, now time.Time) []Threshold {
	var out []Threshold
	for _, t := range thresholds {
		if at, ok := firstObserved[keyOf(t)]; ok && now.Sub(at) >= t.GracePeriod {
			out = append(out, t)
		}
	}
	return out
}

// nodeConditions lists the conditions the thresholds raise, without repeats.
func nodeConditions(thresholds []Threshold) []corev1.NodeConditionType {
	var out []corev1.NodeConditionType
	for _, t := range thresholds {
		if c := signalToNodeCondition(t.Signal); !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// nodeConditionsLastObservedAt stamps the observed conditions with now and
// keeps the older stamps of the others.
func nodeConditionsLastObservedAt(conds []corev1.NodeConditionType, last map[corev1.NodeConditionType]time.Time, now time.Time) map[corev1.NodeConditionType]time.Time {
	out := map[corev1.NodeConditionType]time.Time{}
	for k, v := range last {
		out[k] = v
	}
	for _, c := range conds {
		out[c] = now
	}
	return out
}

// nodeConditionsObservedSince is the pressure transition period: a condition
// stays on until it has not been observed for period.
func nodeConditionsObservedSince(observedAt map[corev1.NodeConditionType]time.Time, period time.Duration, now time.Time) []corev1.NodeConditionType {
	var out []corev1.NodeConditionType
	for c, at := range observedAt {
		if now.Sub(at) < period {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// thresholdsUpdatedStats keeps the thresholds whose signal was measured anew
// since the last cycle, so that one stale measurement does not evict twice.
func thresholdsUpdatedStats(thresholds []Threshold, obs, last observations) []Threshold {
	var out []Threshold
	for _, t := range thresholds {
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		l, seen := last[t.Signal]
		if !seen || o.time.IsZero() || o.time.After(l.time.Time) {
			out = append(out, t)
		}
	}
	return out
}

// sortByEvictionPriority puts memory first, as the kubelet's
// byEvictionPriority does; the others keep their order.
func sortByEvictionPriority(thresholds []Threshold) {
	sort.SliceStable(thresholds, func(i, j int) bool {
		return thresholds[i].Signal == SignalMemoryAvailable && thresholds[j].Signal != SignalMemoryAvailable
	})
}

// fsStatsType is a part of a pod's disk usage.
type fsStatsType int

const (
	fsStatsRoot fsStatsType = iota
	fsStatsLogs
	fsStatsLocalVolumeSource
)

// diskStatsToMeasure is what a disk signal counts of a pod: on one disk,
// everything; with a dedicated imagefs, nodefs holds logs and local volumes
// and imagefs holds the writable layers (the kubelet's buildSignalToRankFunc).
func diskStatsToMeasure(s Signal, dedicatedImageFs bool) []fsStatsType {
	switch {
	case !dedicatedImageFs:
		return []fsStatsType{fsStatsRoot, fsStatsLogs, fsStatsLocalVolumeSource}
	case s == SignalNodeFsAvailable || s == SignalNodeFsInodesFree:
		return []fsStatsType{fsStatsLogs, fsStatsLocalVolumeSource}
	}
	return []fsStatsType{fsStatsRoot}
}

// cmpFunc orders two pods: negative when p1 is to be evicted first.
type cmpFunc func(p1, p2 *corev1.Pod) int

// orderedBy sorts pods by the comparisons in turn, the kubelet's multiSorter.
func orderedBy(pods []*corev1.Pod, cmps ...cmpFunc) {
	sort.SliceStable(pods, func(i, j int) bool {
		for _, c := range cmps {
			if r := c(pods[i], pods[j]); r != 0 {
				return r < 0
			}
		}
		return false
	})
}

// cmpBool places true before false.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// priority evicts lower priority first.
func priority(p1, p2 *corev1.Pod) int {
	return cmp.Compare(podPriority(p1), podPriority(p2))
}

func podPriority(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// withStats wraps a comparison of two pods' stats: pods without stats go first.
func withStats(stats statsFunc, f func(p1 *corev1.Pod, s1 statsapi.PodStats, p2 *corev1.Pod, s2 statsapi.PodStats) int) cmpFunc {
	return func(p1, p2 *corev1.Pod) int {
		s1, ok1 := stats(p1)
		s2, ok2 := stats(p2)
		if !ok1 || !ok2 {
			return cmpBool(!ok1, !ok2)
		}
		return f(p1, s1, p2, s2)
	}
}

func podRequest(pod *corev1.Pod, name corev1.ResourceName) resource.Quantity {
	return resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})[name]
}

func memoryUsage(m *statsapi.MemoryStats) *resource.Quantity {
	if m == nil || m.WorkingSetBytes == nil {
		return resource.NewQuantity(0, resource.BinarySI)
	}
	return resource.NewQuantity(int64(*m.WorkingSetBytes), resource.BinarySI)
}

// exceedMemoryRequests evicts first the pods using more memory than they
// requested.
func exceedMemoryRequests(stats statsFunc) cmpFunc {
	return withStats(stats, func(p1 *corev1.Pod, s1 statsapi.PodStats, p2 *corev1.Pod, s2 statsapi.PodStats) int {
		r1, r2 := podRequest(p1, corev1.ResourceMemory), podRequest(p2, corev1.ResourceMemory)
		return cmpBool(memoryUsage(s1.Memory).Cmp(r1) > 0, memoryUsage(s2.Memory).Cmp(r2) > 0)
	})
}

// memory evicts first the pod using the most memory above its request.
func memory(stats statsFunc) cmpFunc {
	return withStats(stats, func(p1 *corev1.Pod, s1 statsapi.PodStats, p2 *corev1.Pod, s2 statsapi.PodStats) int {
		u1, u2 := memoryUsage(s1.Memory), memoryUsage(s2.Memory)
		u1.Sub(podRequest(p1, corev1.ResourceMemory))
		u2.Sub(podRequest(p2, corev1.ResourceMemory))
		return u2.Cmp(*u1)
	})
}

// process evicts first the pod running the most processes.
func process(stats statsFunc) cmpFunc {
	return withStats(stats, func(_ *corev1.Pod, s1 statsapi.PodStats, _ *corev1.Pod, s2 statsapi.PodStats) int {
		return cmp.Compare(processCount(s2.ProcessStats), processCount(s1.ProcessStats))
	})
}

func processCount(p *statsapi.ProcessStats) uint64 {
	if p == nil || p.ProcessCount == nil {
		return 0
	}
	return *p.ProcessCount
}

// podDiskUsage adds up the parts of the pod's disk (bytes or inodes) that
// the signal counts.
func podDiskUsage(pod *corev1.Pod, ps statsapi.PodStats, measure []fsStatsType, res corev1.ResourceName) resource.Quantity {
	var total uint64
	add := func(fs *statsapi.FsStats) {
		if fs == nil {
			return
		}
		v := fs.UsedBytes
		if res == resourceInodes {
			v = fs.InodesUsed
		}
		if v != nil {
			total += *v
		}
	}
	for _, c := range ps.Containers {
		if slices.Contains(measure, fsStatsRoot) {
			add(c.Rootfs)
		}
		if slices.Contains(measure, fsStatsLogs) {
			add(c.Logs)
		}
	}
	if slices.Contains(measure, fsStatsLocalVolumeSource) {
		local := localVolumeNames(pod)
		for i := range ps.VolumeStats {
			if slices.Contains(local, ps.VolumeStats[i].Name) {
				add(&ps.VolumeStats[i].FsStats)
			}
		}
	}
	if res == resourceInodes {
		return *resource.NewQuantity(int64(total), resource.DecimalSI)
	}
	return *resource.NewQuantity(int64(total), resource.BinarySI)
}

// localVolumeNames are the pod's volumes on the node's disk: hostPath and
// the kubelet's local ephemeral volumes.
func localVolumeNames(pod *corev1.Pod) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil || v.GitRepo != nil || v.ConfigMap != nil ||
			(v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumDefault) {
			out = append(out, v.Name)
		}
	}
	return out
}

// exceedDiskRequests evicts first the pods using more disk than requested.
func exceedDiskRequests(stats statsFunc, measure []fsStatsType, res corev1.ResourceName) cmpFunc {
	return withStats(stats, func(p1 *corev1.Pod, s1 statsapi.PodStats, p2 *corev1.Pod, s2 statsapi.PodStats) int {
		u1, u2 := podDiskUsage(p1, s1, measure, res), podDiskUsage(p2, s2, measure, res)
		return cmpBool(u1.Cmp(podRequest(p1, res)) > 0, u2.Cmp(podRequest(p2, res)) > 0)
	})
}

// disk evicts first the pod using the most disk above its
// ephemeral-storage request.
func disk(stats statsFunc, measure []fsStatsType, res corev1.ResourceName) cmpFunc {
	return withStats(stats, func(p1 *corev1.Pod, s1 statsapi.PodStats, p2 *corev1.Pod, s2 statsapi.PodStats) int {
		u1, u2 := podDiskUsage(p1, s1, measure, res), podDiskUsage(p2, s2, measure, res)
		u1.Sub(podRequest(p1, corev1.ResourceEphemeralStorage))
		u2.Sub(podRequest(p2, corev1.ResourceEphemeralStorage))
		return u2.Cmp(u1)
	})
}

// rankPods orders pods for eviction under the signal's pressure: memory by
// usage above requests, then priority, then usage above requests; PIDs by
// priority then process count; disk like memory with the signal's disk usage.
func rankPods(pods []*corev1.Pod, s Signal, stats statsFunc, dedicatedImageFs bool) {
	switch s {
	case SignalMemoryAvailable:
		orderedBy(pods, exceedMemoryRequests(stats), priority, memory(stats))
	case SignalPIDAvailable:
		orderedBy(pods, priority, process(stats))
	default:
		res, _ := signalToResource(s)
		measure := diskStatsToMeasure(s, dedicatedImageFs)
		orderedBy(pods, exceedDiskRequests(stats, measure, res), priority, disk(stats, measure, res))
	}
}

// thresholdMetInfo is the first met threshold of the resource, with the
// observed availability, for the eviction message.
func thresholdMetInfo(res corev1.ResourceName, thresholds []Threshold, obs observations) (quantity, available *resource.Quantity) {
	for _, t := range thresholds {
		if r, _ := signalToResource(t.Signal); r != res {
			continue
		}
		if o, ok := obs[t.Signal]; ok {
			return t.Value.quantity(o.capacity), o.available
		}
	}
	return nil, nil
}

// evictionMessage is the kubelet's message and event annotations for
// evicting pod to reclaim res.
func evictionMessage(res corev1.ResourceName, pod *corev1.Pod, stats statsFunc, thresholds []Threshold, obs observations) (string, map[string]string) {
	annotations := map[string]string{}
	message := fmt.Sprintf(nodeLowMessageFmt, res)
	if q, a := thresholdMetInfo(res, thresholds, obs); q != nil && a != nil {
		message += fmt.Sprintf(thresholdMetMessageFmt, q, a)
	}
	ps, ok := stats(pod)
	if !ok {
		return message, annotations
	}
	if res == corev1.ResourceMemory && resourcehelper.IsPodLevelResourcesSet(pod) {
		if req, ok := pod.Spec.Resources.Requests[res]; ok && ps.Memory != nil {
			usage := memoryUsage(ps.Memory)
			message += fmt.Sprintf(podMessageFmt, pod.Name, usage, req.String(), res)
			annotations[OffendingPodKey] = pod.Name
			annotations[OffendingPodUsageKey] = usage.String()
		}
	}
	containers := append(slices.Clone(pod.Spec.Containers), pod.Spec.InitContainers...)
	var exceeded, usages []string
	for _, cs := range ps.Containers {
		i := slices.IndexFunc(containers, func(c corev1.Container) bool { return c.Name == cs.Name })
		if i < 0 {
			continue
		}
		req := containers[i].Resources.Requests[res]
		var usage *resource.Quantity
		switch res {
		case corev1.ResourceEphemeralStorage:
			if cs.Rootfs != nil && cs.Rootfs.UsedBytes != nil && cs.Logs != nil && cs.Logs.UsedBytes != nil {
				usage = resource.NewQuantity(int64(*cs.Rootfs.UsedBytes+*cs.Logs.UsedBytes), resource.BinarySI)
			}
		case corev1.ResourceMemory:
			if cs.Memory != nil && cs.Memory.WorkingSetBytes != nil {
				usage = resource.NewQuantity(int64(*cs.Memory.WorkingSetBytes), resource.BinarySI)
			}
		}
		if usage != nil && usage.Cmp(req) > 0 {
			message += fmt.Sprintf(containerMessageFmt, cs.Name, usage, req.String(), res)
			exceeded = append(exceeded, cs.Name)
			usages = append(usages, usage.String())
		}
	}
	annotations[OffendingContainersKey] = strings.Join(exceeded, ",")
	annotations[OffendingContainersUsageKey] = strings.Join(usages, ",")
	annotations[StarvedResourceKey] = string(res)
	return message, annotations
}

// The kubelet's static and mirror pod annotations and the lowest critical
// priority (scheduling.SystemCriticalPriority, not importable from
// k8s.io/kubernetes).
const (
	configSourceAnnotationKey = "kubernetes.io/config.source"
	apiserverSource           = "api"
	systemCriticalPriority    = 2 * 1000000000
)

// isCriticalPod is the kubelet's IsCriticalPod: static, mirror, or of
// system-critical priority. Such pods are neither evicted nor rejected.
func isCriticalPod(pod *corev1.Pod) bool {
	if src, ok := pod.Annotations[configSourceAnnotationKey]; ok && src != apiserverSource {
		return true
	}
	if _, ok := pod.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		return true
	}
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority
}

// podQOS is the pod's QoS class: the one the API server recorded, else
// computed as the kubelet's ComputePodQOS does (that helper lives in
// k8s.io/kubernetes, which is not importable).
func podQOS(pod *corev1.Pod) corev1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	if pod.Spec.Resources != nil && resourcehelper.IsPodLevelResourcesSet(pod) {
		return requirementsQOS(pod.Spec.Resources)
	}
	var qos corev1.PodQOSClass
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		switch q := requirementsQOS(&c.Resources); {
		case q == corev1.PodQOSBurstable:
			return q
		case qos == "":
			qos = q
		case qos != q:
			return corev1.PodQOSBurstable
		}
	}
	if qos == "" {
		return corev1.PodQOSBestEffort
	}
	return qos
}

func requirementsQOS(r *corev1.ResourceRequirements) corev1.PodQOSClass {
	if len(r.Requests) == 0 && len(r.Limits) == 0 {
		return corev1.PodQOSBestEffort
	}
	var qos corev1.PodQOSClass
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := r.Requests[name], r.Limits[name]
		q := corev1.PodQOSGuaranteed
		switch {
		case !req.Equal(lim):
			return corev1.PodQOSBurstable
		case req.IsZero():
			q = corev1.PodQOSBestEffort
		}
		if qos != "" && qos != q {
			return corev1.PodQOSBurstable
		}
		qos = q
	}
	return qos
}
