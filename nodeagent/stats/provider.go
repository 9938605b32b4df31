// Package stats summarises one node's resource usage in the kubelet's
// Summary API shape (k8s.io/kubelet/pkg/apis/stats/v1alpha1), built from CRI
// stats alone, as the kubelet's CRI stats provider does when pod and
// container stats come from the runtime. The eviction manager and image GC
// read it.
package stats

import (
	"context"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// The kubelet's CRI labels that map a sandbox back to its API pod.
const (
	labelPodName      = "io.kubernetes.pod.name"
	labelPodNamespace = "io.kubernetes.pod.namespace"
	labelPodUID       = "io.kubernetes.pod.uid"
)

// Defaults for the parts of a machine that CRI does not report.
const (
	// DefaultPIDLimit is kernel.pid_max as systemd sets it on 64-bit hosts.
	DefaultPIDLimit = 4194304
	// DefaultBytesPerInode is mkfs.ext4's default inode ratio: a filesystem
	// of N bytes has N/16384 inodes.
	DefaultBytesPerInode = 16384
)

// Config describes the node the summary is about. The runtime reports what
// pods use; the machine around them (its memory, disk and PID ceiling, what
// the OS and daemons consume) is configured here, because an emulated node
// has no machine to measure.
type Config struct {
	NodeName string
	Runtime  internalapi.RuntimeService
	Images   internalapi.ImageManagerService
	// Capacity gives memory (the node's memory.available is measured against
	// it) and ephemeral-storage (the size of the node filesystem, nodefs).
	Capacity corev1.ResourceList
	// PIDLimit is the node's PID ceiling (Rlimit.MaxPID); 0 means
	// DefaultPIDLimit.
	PIDLimit int64
	// SystemMemoryBytes, SystemCPUNanoCores and SystemProcesses are what
	// the OS, the runtime and the kubelet use outside pods; the node's usage
	// is the pods' sum plus these. Zero means none; a realistic memory value
	// is the node's systemReserved plus kubeReserved memory.
	SystemMemoryBytes  uint64
	SystemCPUNanoCores uint64
	SystemProcesses    int64
	// ImageFsCapacityBytes is the size of a dedicated image filesystem,
	// which then holds images and container writable layers while nodefs
	// keeps logs. Zero, the default, puts images on nodefs: one disk, as on
	// most nodes, and imagefs then reports nodefs's capacity and availability.
	ImageFsCapacityBytes uint64
	// BytesPerInode sizes the filesystems' inode tables; 0 means
	// DefaultBytesPerInode.
	BytesPerInode uint64
	// ContainerLogBytes is the log size attributed to each container. CRI
	// does not report logs (the kubelet measures /var/log/pods itself), so
	// the summary counts this much per container, and one inode for its file.
	ContainerLogBytes uint64
	Clock             clock.PassiveClock
}

// Provider computes summaries. It keeps nothing between calls: CPU rates
// (usageNanoCores) come from the runtime.
type Provider struct {
	cfg     Config
	started metav1.Time
}

// New validates cfg and returns a Provider.
func New(cfg Config) (*Provider, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.PIDLimit == 0 {
		cfg.PIDLimit = DefaultPIDLimit
	}
	if cfg.BytesPerInode == 0 {
		cfg.BytesPerInode = DefaultBytesPerInode
	}
	if cfg.Runtime == nil || cfg.Images == nil {
		return nil, fmt.Errorf("stats provider for node %q: no CRI runtime or image service; pass the agent's", cfg.NodeName)
	}
	return &Provider{cfg: cfg, started: metav1.NewTime(cfg.Clock.Now())}, nil
}

// HasDedicatedImageFs says whether images live on their own filesystem, the
// eviction manager's DiskInfoProvider question.
func (p *Provider) HasDedicatedImageFs() bool { return p.cfg.ImageFsCapacityBytes > 0 }

// Summary reads the runtime's pods, containers and images and returns the
// node's summary.
func (p *Provider) Summary(ctx context.Context) (*statsapi.Summary, error) {
	snap, err := p.read(ctx)
	if err != nil {
		return nil, err
	}
	return p.summarise(snap), nil
}

// ImageFsStats is the image filesystem of the summary, for image GC.
func (p *Provider) ImageFsStats(ctx context.Context) (*statsapi.FsStats, error) {
	s, err := p.Summary(ctx)
	if err != nil {
		return nil, err
	}
	return s.Node.Runtime.ImageFs, nil
}

// snapshot is one reading of the runtime, the input of summarise.
type snapshot struct {
	now            time.Time
	sandboxes      []*runtimeapi.PodSandbox
	containers     []*runtimeapi.Container
	containerStats map[string]*runtimeapi.ContainerStats
	sandboxStats   map[string]*runtimeapi.PodSandboxStats
	imageBytes     uint64
	imageInodes    uint64
}

func (p *Provider) read(ctx context.Context) (*snapshot, error) {
	rt := p.cfg.Runtime
	fail := func(call string, err error) error {
		return fmt.Errorf("stats of node %s: CRI %s failed: %w; check that the runtime is up", p.cfg.NodeName, call, err)
	}
	s := &snapshot{now: p.cfg.Clock.Now(), containerStats: map[string]*runtimeapi.ContainerStats{}, sandboxStats: map[string]*runtimeapi.PodSandboxStats{}}
	var err error
	if s.sandboxes, err = rt.ListPodSandbox(ctx, nil); err != nil {
		return nil, fail("ListPodSandbox", err)
	}
	if s.containers, err = rt.ListContainers(ctx, nil); err != nil {
		return nil, fail("ListContainers", err)
	}
	cs, err := rt.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{})
	if err != nil {
		return nil, fail("ListContainerStats", err)
	}
	for _, c := range cs {
		if c.GetAttributes() != nil {
			s.containerStats[c.Attributes.Id] = c
		}
	}
	ss, err := p.listSandboxStats(ctx, s.sandboxes)
	if err != nil {
		return nil, fail("PodSandboxStats", err)
	}
	for _, st := range ss {
		if st.GetAttributes() != nil {
			s.sandboxStats[st.Attributes.Id] = st
		}
	}
	fs, err := p.cfg.Images.ImageFsInfo(ctx)
	if err != nil {
		return nil, fail("ImageFsInfo", err)
	}
	for _, u := range fs.GetImageFilesystems() {
		s.imageBytes += u.GetUsedBytes().GetValue()
		s.imageInodes += u.GetInodesUsed().GetValue()
	}
	return s, nil
}

// listSandboxStats asks for every sandbox's stats in one call and, if the
// runtime refuses it, sandbox by sandbox. containerd 1.6 (Debian 12's) fails
// the whole ListPodSandboxStats when one listed sandbox has lost its task,
// as a stopped sandbox has; one dead sandbox must not blank a node's
// summary, which the eviction manager acts on. The fallback asks only for
// ready sandboxes, and skips one that is gone by the time it is asked.
func (p *Provider) listSandboxStats(ctx context.Context, sandboxes []*runtimeapi.PodSandbox) ([]*runtimeapi.PodSandboxStats, error) {
	rt := p.cfg.Runtime
	ss, listErr := rt.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{})
	if listErr == nil {
		return ss, nil
	}
	var out []*runtimeapi.PodSandboxStats
	for _, sb := range sandboxes {
		if sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		st, err := rt.PodSandboxStats(ctx, sb.GetId())
		if status.Code(err) == codes.NotFound {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ListPodSandboxStats: %w, then sandbox %s: %w", listErr, sb.GetId(), err)
		}
		out = append(out, st)
	}
	return out, nil
}

// summarise is a pure function of the configuration and one reading.
func (p *Provider) summarise(s *snapshot) *statsapi.Summary {
	now := metav1.NewTime(s.now)
	logBytes := p.cfg.ContainerLogBytes

	// Every container's writable layer and log occupy disk until container
	// GC removes it, running or not: the disk signals count them all.
	var layerBytes, layerInodes, nContainers uint64
	for _, c := range s.containers {
		wl := s.containerStats[c.Id].GetWritableLayer()
		layerBytes += wl.GetUsedBytes().GetValue()
		layerInodes += wl.GetInodesUsed().GetValue()
		nContainers++
	}
	nodeFs, imageFs := p.filesystems(now, layerBytes, layerInodes, nContainers*logBytes, nContainers, s)

	pods := p.podStats(s, nodeFs)
	var cpuNano, cpuTotal, memWS, memUsage, memRSS uint64
	procs := p.cfg.SystemProcesses
	for i := range pods {
		ps := &pods[i]
		cpuNano += deref(ps.CPU.UsageNanoCores)
		cpuTotal += deref(ps.CPU.UsageCoreNanoSeconds)
		memWS += deref(ps.Memory.WorkingSetBytes)
		memUsage += deref(ps.Memory.UsageBytes)
		memRSS += deref(ps.Memory.RSSBytes)
		procs += int64(deref(ps.ProcessStats.ProcessCount))
	}
	memWS += p.cfg.SystemMemoryBytes
	memUsage += p.cfg.SystemMemoryBytes
	memRSS += p.cfg.SystemMemoryBytes
	cpuNano += p.cfg.SystemCPUNanoCores
	// The system's cumulative CPU is its constant rate over the node's life:
	// readers that take rates from the counter (metrics-server, Prometheus)
	// see the same usage as readers of usageNanoCores.
	cpuTotal += coreNanoSeconds(p.cfg.SystemCPUNanoCores, s.now.Sub(p.started.Time))

	node := statsapi.NodeStats{
		NodeName:  p.cfg.NodeName,
		StartTime: p.started,
		CPU:       &statsapi.CPUStats{Time: now, UsageNanoCores: &cpuNano, UsageCoreNanoSeconds: &cpuTotal},
		Memory:    &statsapi.MemoryStats{Time: now, WorkingSetBytes: &memWS, UsageBytes: &memUsage, RSSBytes: &memRSS},
		Fs:        nodeFs,
		Runtime:   &statsapi.RuntimeStats{ImageFs: imageFs},
		Rlimit:    &statsapi.RlimitStats{Time: now, MaxPID: ptr.To(p.cfg.PIDLimit), NumOfRunningProcesses: &procs},
	}
	if q, ok := p.cfg.Capacity[corev1.ResourceMemory]; ok {
		node.Memory.AvailableBytes = ptr.To(sub(uint64(q.Value()), memWS))
	}
	return &statsapi.Summary{Node: node, Pods: pods}
}

// coreNanoSeconds is the CPU time a constant rate of nanoCores uses over d,
// split by whole seconds so that a day at many cores does not overflow.
func coreNanoSeconds(nanoCores uint64, d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	sec, frac := uint64(d/time.Second), uint64(d%time.Second)
	return nanoCores*sec + nanoCores*frac/uint64(time.Second)
}

// filesystems returns nodefs and imagefs. On one disk both report the same
// capacity and availability (the device's), and imagefs's UsedBytes is the
// images' share, as cAdvisor and CRI report a shared device to the kubelet.
func (p *Provider) filesystems(now metav1.Time, layerBytes, layerInodes, logBytes, logInodes uint64, s *snapshot) (nodeFs, imageFs *statsapi.FsStats) {
	q, ok := p.cfg.Capacity[corev1.ResourceEphemeralStorage]
	if !ok {
		return nil, nil
	}
	fs := func(capacity, used, inodesUsed uint64) *statsapi.FsStats {
		inodes := capacity / p.cfg.BytesPerInode
		return &statsapi.FsStats{
			Time: now, CapacityBytes: ptr.To(capacity), UsedBytes: ptr.To(used), AvailableBytes: ptr.To(sub(capacity, used)),
			Inodes: ptr.To(inodes), InodesUsed: ptr.To(inodesUsed), InodesFree: ptr.To(sub(inodes, inodesUsed)),
		}
	}
	capacity := uint64(q.Value())
	if p.HasDedicatedImageFs() {
		return fs(capacity, logBytes, logInodes),
			fs(p.cfg.ImageFsCapacityBytes, s.imageBytes+layerBytes, s.imageInodes+layerInodes)
	}
	nodeFs = fs(capacity, layerBytes+logBytes+s.imageBytes, layerInodes+logInodes+s.imageInodes)
	shared := *nodeFs
	imageFs = &shared
	imageFs.UsedBytes, imageFs.InodesUsed = ptr.To(s.imageBytes), ptr.To(s.imageInodes)
	return nodeFs, imageFs
}

// podStats has one entry per pod: its latest sandbox and its running
// containers, as the kubelet's removeTerminatedPods and
// removeTerminatedContainers choose them.
func (p *Provider) podStats(s *snapshot, nodeFs *statsapi.FsStats) []statsapi.PodStats {
	sandboxes := latestSandboxes(s.sandboxes)
	running := map[string][]*runtimeapi.Container{}
	for _, c := range s.containers {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			running[c.PodSandboxId] = append(running[c.PodSandboxId], c)
		}
	}
	out := make([]statsapi.PodStats, 0, len(sandboxes))
	for _, sb := range sandboxes {
		ps := statsapi.PodStats{
			PodRef:    podRef(sb),
			StartTime: metav1.NewTime(time.Unix(0, sb.CreatedAt)),
		}
		for _, c := range running[sb.Id] {
			ps.Containers = append(ps.Containers, p.containerStats(c, s.containerStats[c.Id], s.now))
		}
		sort.Slice(ps.Containers, func(i, j int) bool { return ps.Containers[i].Name < ps.Containers[j].Name })
		p.podCPUMemoryProcess(&ps, s.sandboxStats[sb.Id], s.now)
		ps.EphemeralStorage = ephemeralStorage(&ps, nodeFs, s.now)
		out = append(out, ps)
	}
	return out
}

// latestSandboxes keeps, for each pod, its ready sandboxes or else its newest.
func latestSandboxes(all []*runtimeapi.PodSandbox) []*runtimeapi.PodSandbox {
	byPod := map[statsapi.PodReference][]*runtimeapi.PodSandbox{}
	var order []statsapi.PodReference
	sorted := append([]*runtimeapi.PodSandbox(nil), all...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].CreatedAt < sorted[j].CreatedAt })
	for _, sb := range sorted {
		ref := podRef(sb)
		ref.UID = ""
		if _, ok := byPod[ref]; !ok {
			order = append(order, ref)
		}
		byPod[ref] = append(byPod[ref], sb)
	}
	var out []*runtimeapi.PodSandbox
	for _, ref := range order {
		sbs := byPod[ref]
		found := false
		for _, sb := range sbs {
			if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				out = append(out, sb)
				found = true
			}
		}
		if !found {
			out = append(out, sbs[len(sbs)-1])
		}
	}
	return out
}

// podRef reads the kubelet's pod labels, falling back on the sandbox
// metadata for sandboxes some other tool created.
func podRef(sb *runtimeapi.PodSandbox) statsapi.PodReference {
	ref := statsapi.PodReference{
		Name: sb.Labels[labelPodName], Namespace: sb.Labels[labelPodNamespace], UID: sb.Labels[labelPodUID],
	}
	if ref.UID == "" {
		ref = statsapi.PodReference{Name: sb.GetMetadata().GetName(), Namespace: sb.GetMetadata().GetNamespace(), UID: sb.GetMetadata().GetUid()}
	}
	return ref
}

func (p *Provider) containerStats(c *runtimeapi.Container, st *runtimeapi.ContainerStats, now time.Time) statsapi.ContainerStats {
	cpu, mem := st.GetCpu(), st.GetMemory()
	wl := st.GetWritableLayer()
	out := statsapi.ContainerStats{
		Name:      c.GetMetadata().GetName(),
		StartTime: metav1.NewTime(time.Unix(0, c.CreatedAt)),
		CPU: &statsapi.CPUStats{
			Time:                 stamp(cpu.GetTimestamp(), now),
			UsageNanoCores:       ptr.To(cpu.GetUsageNanoCores().GetValue()),
			UsageCoreNanoSeconds: ptr.To(cpu.GetUsageCoreNanoSeconds().GetValue()),
		},
		Memory: &statsapi.MemoryStats{
			Time:            stamp(mem.GetTimestamp(), now),
			WorkingSetBytes: ptr.To(mem.GetWorkingSetBytes().GetValue()),
			UsageBytes:      ptr.To(mem.GetUsageBytes().GetValue()),
			RSSBytes:        ptr.To(mem.GetRssBytes().GetValue()),
			PageFaults:      ptr.To(mem.GetPageFaults().GetValue()),
			MajorPageFaults: ptr.To(mem.GetMajorPageFaults().GetValue()),
		},
		Rootfs: &statsapi.FsStats{
			Time:       stamp(wl.GetTimestamp(), now),
			UsedBytes:  ptr.To(wl.GetUsedBytes().GetValue()),
			InodesUsed: ptr.To(wl.GetInodesUsed().GetValue()),
		},
		Logs: &statsapi.FsStats{Time: metav1.NewTime(now), UsedBytes: ptr.To(p.cfg.ContainerLogBytes), InodesUsed: ptr.To[uint64](1)},
	}
	if v := mem.GetAvailableBytes(); v != nil {
		out.Memory.AvailableBytes = ptr.To(v.Value)
	}
	return out
}

// podCPUMemoryProcess takes the pod-level figures from the sandbox's stats
// and, where the runtime leaves them out, sums its containers'. A runtime
// that reports no process count is assumed to run one process per running
// container.
func (p *Provider) podCPUMemoryProcess(ps *statsapi.PodStats, sb *runtimeapi.PodSandboxStats, now time.Time) {
	var nano, total, ws, usage, rss uint64
	for _, c := range ps.Containers {
		nano += *c.CPU.UsageNanoCores
		total += *c.CPU.UsageCoreNanoSeconds
		ws += *c.Memory.WorkingSetBytes
		usage += *c.Memory.UsageBytes
		rss += *c.Memory.RSSBytes
	}
	ps.CPU = &statsapi.CPUStats{Time: metav1.NewTime(now), UsageNanoCores: &nano, UsageCoreNanoSeconds: &total}
	ps.Memory = &statsapi.MemoryStats{Time: metav1.NewTime(now), WorkingSetBytes: &ws, UsageBytes: &usage, RSSBytes: &rss}
	ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: ptr.To(uint64(len(ps.Containers)))}
	linux := sb.GetLinux()
	if cpu := linux.GetCpu(); cpu != nil && cpu.UsageNanoCores != nil {
		ps.CPU = &statsapi.CPUStats{
			Time:                 stamp(cpu.Timestamp, now),
			UsageNanoCores:       ptr.To(cpu.GetUsageNanoCores().GetValue()),
			UsageCoreNanoSeconds: ptr.To(cpu.GetUsageCoreNanoSeconds().GetValue()),
		}
	}
	if mem := linux.GetMemory(); mem != nil && mem.WorkingSetBytes != nil {
		ps.Memory = &statsapi.MemoryStats{
			Time:            stamp(mem.Timestamp, now),
			WorkingSetBytes: ptr.To(mem.GetWorkingSetBytes().GetValue()),
			UsageBytes:      ptr.To(mem.GetUsageBytes().GetValue()),
			RSSBytes:        ptr.To(mem.GetRssBytes().GetValue()),
		}
	}
	if n := linux.GetProcess().GetProcessCount(); n != nil {
		ps.ProcessStats.ProcessCount = ptr.To(n.Value)
	}
}

// ephemeralStorage is the pod's writable layers and logs on nodefs, as the
// kubelet's calcEphemeralStorage adds them up for the CRI provider.
func ephemeralStorage(ps *statsapi.PodStats, nodeFs *statsapi.FsStats, now time.Time) *statsapi.FsStats {
	var used, inodes uint64
	for _, c := range ps.Containers {
		used += *c.Rootfs.UsedBytes + *c.Logs.UsedBytes
		inodes += *c.Rootfs.InodesUsed + *c.Logs.InodesUsed
	}
	out := &statsapi.FsStats{Time: metav1.NewTime(now), UsedBytes: &used, InodesUsed: &inodes}
	if nodeFs != nil {
		out.AvailableBytes, out.CapacityBytes = nodeFs.AvailableBytes, nodeFs.CapacityBytes
		out.InodesFree, out.Inodes = nodeFs.InodesFree, nodeFs.Inodes
	}
	return out
}

// stamp is a CRI timestamp (ns since the epoch), or now when the runtime
// gave none.
func stamp(ns int64, now time.Time) metav1.Time {
	if ns == 0 {
		return metav1.NewTime(now)
	}
	return metav1.NewTime(time.Unix(0, ns))
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

func deref(v *uint64) uint64 { return ptr.Deref(v, 0) }
