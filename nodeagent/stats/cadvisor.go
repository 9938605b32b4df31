package stats

import (
	"context"
	"fmt"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/fleetlet/fleetlet/nodeagent/metrics"
)

// cAdvisor's container labels as the kubelet sets them
// (containerPrometheusLabelsFunc), sorted as the exposition sorts them,
// with the "cpu" and "device" label of the families that have one.
var (
	containerLabels    = []string{"container", "id", "image", "name", "namespace", "pod"}
	containerCPULabels = []string{"container", "cpu", "id", "image", "name", "namespace", "pod"}
	machineLabels      = []string{"boot_id", "machine_id", "system_uuid"}
)

// The cAdvisor families users scrape from /metrics/cadvisor (cAdvisor's
// metrics/prometheus.go and prometheus_machine.go). cAdvisor registers
// them raw: no stability prefix.
var (
	cadvisorCPUDesc = metrics.NewDesc("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.",
		dto.MetricType_COUNTER, nil, containerCPULabels...)
	cadvisorWorkingSetDesc = metrics.NewDesc("container_memory_working_set_bytes", "Current working set in bytes.",
		dto.MetricType_GAUGE, nil, containerLabels...)
	cadvisorUsageDesc = metrics.NewDesc("container_memory_usage_bytes",
		"Current memory usage in bytes, including all memory regardless of when it was accessed",
		dto.MetricType_GAUGE, nil, containerLabels...)
	cadvisorRSSDesc = metrics.NewDesc("container_memory_rss", "Size of RSS in bytes.",
		dto.MetricType_GAUGE, nil, containerLabels...)
	cadvisorStartDesc = metrics.NewDesc("container_start_time_seconds", "Start time of the container since unix epoch in seconds.",
		dto.MetricType_GAUGE, nil, containerLabels...)
	cadvisorScrapeErrorDesc = metrics.NewDesc("container_scrape_error", "1 if there was an error while getting container metrics, 0 otherwise",
		dto.MetricType_GAUGE, nil)
	machineCoresDesc = metrics.NewDesc("machine_cpu_cores", "Number of logical CPU cores.",
		dto.MetricType_GAUGE, nil, machineLabels...)
	machineMemoryDesc = metrics.NewDesc("machine_memory_bytes", "Amount of memory installed on the machine.",
		dto.MetricType_GAUGE, nil, machineLabels...)
	machineScrapeErrorDesc = metrics.NewDesc("machine_scrape_error", "1 if there was an error while getting machine metrics, 0 otherwise.",
		dto.MetricType_GAUGE, nil)
)

// Machine identifies the node's machine as cAdvisor's machine_* labels
// do, with what its Node's status.nodeInfo reports.
type Machine struct {
	MachineID, SystemUUID, BootID string
}

// Cadvisor builds the families of the kubelet's /metrics/cadvisor from one
// reading of the runtime: a series per running container, per pod (its
// sandbox's cgroup, with empty container, image and name labels) and for
// the root cgroup "/" (the node, as the summary counts it), labelled as
// the kubelet labels cAdvisor's containers; and the machine's cores and
// memory from the node's capacity. Cgroup paths (the id label) are those
// of the kubelet's cgroupfs driver, which the runtime reports; qos gives a
// pod's QoS class for them. machine is nil when the Node is not known yet:
// machine_scrape_error is then 1, as when cAdvisor cannot read the machine.
func (p *Provider) Cadvisor(ctx context.Context, machine *Machine, qos func(types.UID) corev1.PodQOSClass) metrics.Families {
	snap, err := p.readCgroups(ctx)
	if err != nil {
		klog.FromContext(ctx).Info("Couldn't get containers", "node", p.cfg.NodeName, "err", err)
		snap = nil
	}
	return p.cadvisor(snap, machine, qos)
}

// readCgroups reads what cAdvisor's cgroups would show: the ready
// sandboxes, the running containers, and their stats, which the pods'
// stats carry (ListContainerStats only if the runtime leaves them out).
// Fewer calls than the summary's reading, as a scrape of every node every
// 30 s of a fleet adds up.
func (p *Provider) readCgroups(ctx context.Context) (*snapshot, error) {
	rt := p.cfg.Runtime
	fail := func(call string, err error) error {
		return fmt.Errorf("cAdvisor metrics of node %s: CRI %s failed: %w; check that the runtime is up", p.cfg.NodeName, call, err)
	}
	s := &snapshot{now: p.cfg.Clock.Now()}
	var err error
	if s.sandboxes, err = rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}); err != nil {
		return nil, fail("ListPodSandbox", err)
	}
	if s.containers, err = rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}); err != nil {
		return nil, fail("ListContainers", err)
	}
	ss, err := p.listSandboxStats(ctx, s.sandboxes)
	if err != nil {
		return nil, fail("PodSandboxStats", err)
	}
	s.sandboxStats = make(map[string]*runtimeapi.PodSandboxStats, len(ss))
	s.containerStats = make(map[string]*runtimeapi.ContainerStats, len(s.containers))
	for _, st := range ss {
		if st.GetAttributes() == nil {
			continue
		}
		s.sandboxStats[st.Attributes.Id] = st
		for _, c := range st.GetLinux().GetContainers() {
			if c.GetAttributes() != nil {
				s.containerStats[c.Attributes.Id] = c
			}
		}
	}
	for _, c := range s.containers {
		if s.containerStats[c.Id] != nil {
			continue
		}
		cs, err := rt.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{})
		if err != nil {
			return nil, fail("ListContainerStats", err)
		}
		for _, st := range cs {
			if st.GetAttributes() != nil {
				s.containerStats[st.Attributes.Id] = st
			}
		}
		break
	}
	return s, nil
}

// cadvisor is a pure function of the configuration and one reading (nil:
// the reading failed).
func (p *Provider) cadvisor(s *snapshot, machine *Machine, qos func(types.UID) corev1.PodQOSClass) metrics.Families {
	scrapeError := cadvisorScrapeErrorDesc.Family(1)
	machineError := machineScrapeErrorDesc.Family(1)
	cores := machineCoresDesc.Family(1)
	memory := machineMemoryDesc.Family(1)
	if machine == nil {
		machineError.Add(1)
	} else {
		machineError.Add(0)
		if q, ok := p.cfg.Capacity[corev1.ResourceCPU]; ok {
			cores.Add(float64(q.Value()), machine.BootID, machine.MachineID, machine.SystemUUID)
		}
		if q, ok := p.cfg.Capacity[corev1.ResourceMemory]; ok {
			memory.Add(float64(q.Value()), machine.BootID, machine.MachineID, machine.SystemUUID)
		}
	}
	if s == nil {
		scrapeError.Add(1)
		return metrics.Gather(scrapeError, machineError, cores, memory)
	}
	scrapeError.Add(0)

	// The pods' cgroups: the ready sandboxes, each with the sums of its
	// running containers.
	type podCgroupUsage struct {
		sb                  *runtimeapi.PodSandbox
		ref                 statsapi.PodReference
		cgroup              string
		cpu, ws, usage, rss uint64
	}
	pods := make([]podCgroupUsage, 0, len(s.sandboxes))
	index := make(map[string]int, len(s.sandboxes))
	for _, sb := range s.sandboxes {
		if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		ref := podRef(sb)
		index[sb.Id] = len(pods)
		pods = append(pods, podCgroupUsage{sb: sb, ref: ref, cgroup: podCgroup(types.UID(ref.UID), qos)})
	}
	n := len(s.containers) + len(pods) + 1
	c := cadvisorFamilies{
		cpu: cadvisorCPUDesc.Family(n), workingSet: cadvisorWorkingSetDesc.Family(n), usage: cadvisorUsageDesc.Family(n),
		rss: cadvisorRSSDesc.Family(n), start: cadvisorStartDesc.Family(n),
	}
	for _, ctr := range s.containers {
		i, ok := index[ctr.PodSandboxId]
		if ctr.State != runtimeapi.ContainerState_CONTAINER_RUNNING || !ok {
			continue
		}
		pod := &pods[i]
		st := s.containerStats[ctr.Id]
		cpu, mem := st.GetCpu(), st.GetMemory()
		image := ctr.GetImage().GetUserSpecifiedImage()
		if image == "" {
			image = ctr.GetImage().GetImage()
		}
		name := ctr.GetMetadata().GetName()
		if v := ctr.Labels[labelContainerName]; v != "" {
			name = v
		}
		l := cgroupLabels{
			container: name, id: pod.cgroup + "/" + ctr.Id, image: image, name: ctr.Id,
			namespace: pod.ref.Namespace, pod: pod.ref.Name,
		}
		u := usage{
			cpu: cpu.GetUsageCoreNanoSeconds().GetValue(), cpuAt: stampTime(cpu.GetTimestamp(), s.now),
			ws: mem.GetWorkingSetBytes().GetValue(), usage: mem.GetUsageBytes().GetValue(), rss: mem.GetRssBytes().GetValue(),
			memAt: stampTime(mem.GetTimestamp(), s.now), hasMem: mem != nil,
			start: time.Unix(0, ctr.CreatedAt),
		}
		c.add(l, u)
		pod.cpu += u.cpu
		pod.ws += u.ws
		pod.usage += u.usage
		pod.rss += u.rss
	}
	var node podCgroupUsage
	for i := range pods {
		pod := &pods[i]
		u := usage{
			cpu: pod.cpu, ws: pod.ws, usage: pod.usage, rss: pod.rss,
			start: time.Unix(0, pod.sb.CreatedAt), cpuAt: s.now, memAt: s.now, hasMem: true,
		}
		// The pod cgroup's own figures where the runtime reports them.
		linux := s.sandboxStats[pod.sb.Id].GetLinux()
		if cpu := linux.GetCpu(); cpu.GetUsageCoreNanoSeconds() != nil {
			u.cpu, u.cpuAt = cpu.GetUsageCoreNanoSeconds().GetValue(), stampTime(cpu.GetTimestamp(), s.now)
		}
		if mem := linux.GetMemory(); mem.GetWorkingSetBytes() != nil {
			u.ws, u.usage, u.rss = mem.GetWorkingSetBytes().GetValue(), mem.GetUsageBytes().GetValue(), mem.GetRssBytes().GetValue()
			u.memAt = stampTime(mem.GetTimestamp(), s.now)
		}
		c.add(cgroupLabels{id: pod.cgroup, namespace: pod.ref.Namespace, pod: pod.ref.Name}, u)
		node.cpu += u.cpu
		node.ws += u.ws
		node.usage += u.usage
		node.rss += u.rss
	}
	sys := p.cfg.SystemMemoryBytes
	c.add(cgroupLabels{id: "/"}, usage{
		cpu: node.cpu, cpuAt: s.now, ws: node.ws + sys, usage: node.usage + sys, rss: node.rss + sys,
		memAt: s.now, hasMem: true, start: p.started.Time,
	})
	return metrics.Gather(c.cpu, c.workingSet, c.usage, c.rss, c.start, scrapeError, machineError, cores, memory)
}

type cadvisorFamilies struct {
	cpu, workingSet, usage, rss, start *metrics.Family
}

// cgroupLabels are one cgroup's label values, as the kubelet's
// containerPrometheusLabelsFunc fills them.
type cgroupLabels struct {
	container, id, image, name, namespace, pod string
}

// usage is one cgroup's figures and when they were measured.
type usage struct {
	cpu, ws, usage, rss uint64
	cpuAt, memAt        time.Time
	hasMem              bool
	start               time.Time
}

// add adds one cgroup's series. As cAdvisor, CPU usage is left out until
// the cgroup has used some, samples carry the time they were measured at,
// and the start time is in whole seconds.
func (c *cadvisorFamilies) add(l cgroupLabels, u usage) {
	if u.cpu > 0 {
		c.cpu.AddAt(float64(u.cpu)/float64(time.Second), u.cpuAt, l.container, "total", l.id, l.image, l.name, l.namespace, l.pod)
	}
	if u.hasMem {
		c.workingSet.AddAt(float64(u.ws), u.memAt, l.container, l.id, l.image, l.name, l.namespace, l.pod)
		c.usage.AddAt(float64(u.usage), u.memAt, l.container, l.id, l.image, l.name, l.namespace, l.pod)
		c.rss.AddAt(float64(u.rss), u.memAt, l.container, l.id, l.image, l.name, l.namespace, l.pod)
	}
	c.start.Add(float64(u.start.Unix()), l.container, l.id, l.image, l.name, l.namespace, l.pod)
}

// labelContainerName is the kubelet's CRI label of a container's name.
const labelContainerName = "io.kubernetes.container.name"

// podCgroup is the pod's cgroup under the kubelet's cgroupfs driver:
// /kubepods/pod<uid> for a Guaranteed pod, /kubepods/<qos>/pod<uid> for
// the others.
func podCgroup(uid types.UID, qos func(types.UID) corev1.PodQOSClass) string {
	class := corev1.PodQOSBestEffort
	if qos != nil {
		class = qos(uid)
	}
	switch class {
	case corev1.PodQOSGuaranteed:
		return "/kubepods/pod" + string(uid)
	case corev1.PodQOSBurstable:
		return "/kubepods/burstable/pod" + string(uid)
	default:
		return "/kubepods/besteffort/pod" + string(uid)
	}
}

// stampTime is a CRI timestamp (ns since the epoch), or now when the
// runtime gave none.
func stampTime(ns int64, now time.Time) time.Time {
	if ns == 0 {
		return now
	}
	return time.Unix(0, ns)
}
