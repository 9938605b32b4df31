package fakeruntime

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRI stats, from the containers' usage curves at the time asked (see
// usage.go). The memory curve is anonymous memory: no page cache is
// modelled, so a container's usageBytes and rssBytes equal its working set,
// and availableBytes is its memory limit minus the working set (none
// without a limit). The pause container's own usage is not modelled beyond
// its one process.

// usage is what a container uses at one moment.
type usage struct {
	memory, writableLayer uint64 // bytes
	nanoCores             uint64 // instantaneous CPU
	coreNanoSeconds       uint64 // cumulative CPU
	pids                  uint64
}

// usageAt is the usage of c, settled at now: a created container has its
// writable layer as it starts and nothing else; a running one its curves at
// its run time; an exited one the memory, CPU time and writable layer it had
// when it exited, and no CPU rate or process (it has none any more).
func (c *container) usageAt(now int64) usage {
	m := c.model
	switch c.state {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return usage{writableLayer: toUint(m.writableLayer.at(0))}
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		t := time.Duration(max(now-c.startedAt, 0))
		u := usageOver(m, t)
		u.nanoCores = toUint(m.cpu.at(t) * 1e9)
		u.pids = 1
		if m.pids != nil {
			u.pids = toUint(m.pids.at(t))
		}
		return u
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return usageOver(m, time.Duration(max(c.finishedAt-c.startedAt, 0)))
	}
	return usage{}
}

// pageSize is the granularity of memory usage: a real runtime counts
// pages, which is why the kubelet's eviction messages read "92604Ki".
const pageSize = 4096

// usageOver is the memory (whole pages), cumulative CPU and writable layer
// of a container that has run for t.
func usageOver(m *model, t time.Duration) usage {
	return usage{
		memory:          toUint(m.memory.at(t)) &^ (pageSize - 1),
		writableLayer:   toUint(m.writableLayer.at(t)),
		coreNanoSeconds: toUint(m.cpu.integral(t) * 1e9),
	}
}

// toUint converts a non-negative usage to an integer, saturating rather
// than wrapping for the absurd.
func toUint(v float64) uint64 {
	if !(v > 0) { // also NaN
		return 0
	}
	if v >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(v)
}

// ContainerStats returns the container's stats (see usageAt), or NotFound.
func (r *Runtime) ContainerStats(ctx context.Context, containerID string) (*runtimeapi.ContainerStats, error) {
	if _, err := r.enter(ctx, "ContainerStats"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := lookupLocked(r.containers, "container", containerID)
	if err != nil {
		return nil, err
	}
	now := r.now()
	c.settle(now)
	return c.toStats(now, c.usageAt(now)), nil
}

// ListContainerStats returns the stats of the containers that match filter,
// oldest first: created, running and exited alike (the last with their
// final usage), as the container list shows them. The ID and sandbox ID
// filters match prefixes, as ListContainers' do.
func (r *Runtime) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	if _, err := r.enter(ctx, "ListContainerStats"); err != nil {
		return nil, err
	}
	cf := &runtimeapi.ContainerFilter{Id: filter.GetId(), PodSandboxId: filter.GetPodSandboxId()}
	selector := compileSelector(filter.GetLabelSelector())
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	matched := make([]*container, 0, len(r.containers))
	for _, c := range r.containers {
		if c.matches(cf, selector) {
			matched = append(matched, c)
		}
	}
	slices.SortFunc(matched, func(a, b *container) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]*runtimeapi.ContainerStats, len(matched))
	for i, c := range matched {
		c.settle(now)
		out[i] = c.toStats(now, c.usageAt(now))
	}
	return out, nil
}

// PodSandboxStats returns the sandbox's stats (see sandboxStatsLocked), or
// NotFound.
func (r *Runtime) PodSandboxStats(ctx context.Context, podSandboxID string) (*runtimeapi.PodSandboxStats, error) {
	if _, err := r.enter(ctx, "PodSandboxStats"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, err := lookupLocked(r.sandboxes, "pod sandbox", podSandboxID)
	if err != nil {
		return nil, err
	}
	return r.sandboxStatsLocked(sb, r.now()), nil
}

// ListPodSandboxStats returns the stats of the sandboxes that match filter,
// ready or not, oldest first. The ID filter matches a prefix.
func (r *Runtime) ListPodSandboxStats(ctx context.Context, filter *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	if _, err := r.enter(ctx, "ListPodSandboxStats"); err != nil {
		return nil, err
	}
	sf := &runtimeapi.PodSandboxFilter{Id: filter.GetId()}
	selector := compileSelector(filter.GetLabelSelector())
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	matched := make([]*sandbox, 0, len(r.sandboxes))
	for _, sb := range r.sandboxes {
		if sb.matches(sf, selector) {
			matched = append(matched, sb)
		}
	}
	slices.SortFunc(matched, func(a, b *sandbox) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]*runtimeapi.PodSandboxStats, len(matched))
	for i, sb := range matched {
		out[i] = r.sandboxStatsLocked(sb, now)
	}
	return out, nil
}

// sandboxStatsLocked is a pod's stats as a pod cgroup would count them: the
// stats of each of its containers; CPU time summed over all of them (an
// exited container's CPU time stays spent); CPU rate, memory and processes
// over the running ones, plus the pause process while the sandbox is ready.
func (r *Runtime) sandboxStatsLocked(sb *sandbox, now int64) *runtimeapi.PodSandboxStats {
	var total usage
	if sb.state == runtimeapi.PodSandboxState_SANDBOX_READY {
		total.pids = 1
	}
	containers := make([]*runtimeapi.ContainerStats, 0, len(sb.containers))
	for _, cid := range sb.containers {
		c := r.containers[cid]
		if c == nil {
			continue
		}
		c.settle(now)
		u := c.usageAt(now)
		containers = append(containers, c.toStats(now, u))
		total.coreNanoSeconds += u.coreNanoSeconds
		if c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
			total.nanoCores += u.nanoCores
			total.memory += u.memory
			total.pids += u.pids
		}
	}
	// One allocation for the pod's messages, as for each container's: the
	// kubelet asks for every pod's stats at every eviction check.
	blk := &podStatsBlock{}
	blk.stats = runtimeapi.PodSandboxStats{
		Attributes: &blk.attrs,
		Linux:      &blk.linux,
	}
	blk.attrs = runtimeapi.PodSandboxAttributes{
		Id:          sb.id,
		Metadata:    sb.fillMetadata(&blk.md),
		Labels:      sb.labels,
		Annotations: sb.annotations,
	}
	blk.linux = runtimeapi.LinuxPodSandboxStats{
		Cpu:        fillCPUUsage(&blk.cpu, now, total, blk.values[0:2]),
		Memory:     fillMemoryUsage(&blk.mem, now, total, 0, blk.values[2:6]),
		Process:    &blk.process,
		Containers: containers,
	}
	blk.values[6].Value = total.pids
	blk.process = runtimeapi.ProcessUsage{Timestamp: now, ProcessCount: &blk.values[6]}
	return &blk.stats
}

// podStatsBlock holds one pod's stats messages, allocated together.
type podStatsBlock struct {
	stats   runtimeapi.PodSandboxStats
	attrs   runtimeapi.PodSandboxAttributes
	md      runtimeapi.PodSandboxMetadata
	linux   runtimeapi.LinuxPodSandboxStats
	cpu     runtimeapi.CpuUsage
	mem     runtimeapi.MemoryUsage
	process runtimeapi.ProcessUsage
	values  [7]runtimeapi.UInt64Value
}

// containerStatsBlock holds one container's stats messages, allocated
// together.
type containerStatsBlock struct {
	stats  runtimeapi.ContainerStats
	attrs  runtimeapi.ContainerAttributes
	md     runtimeapi.ContainerMetadata
	cpu    runtimeapi.CpuUsage
	mem    runtimeapi.MemoryUsage
	fs     runtimeapi.FilesystemUsage
	fsID   runtimeapi.FilesystemIdentifier
	values [8]runtimeapi.UInt64Value
}

func (c *container) toStats(now int64, u usage) *runtimeapi.ContainerStats {
	blk := &containerStatsBlock{}
	blk.attrs = runtimeapi.ContainerAttributes{
		Id:          c.id,
		Metadata:    c.fillMetadata(&blk.md),
		Labels:      c.labels,
		Annotations: c.annotations,
	}
	blk.values[6].Value, blk.values[7].Value = u.writableLayer, inodes(u.writableLayer)
	blk.fsID.Mountpoint = imageFsMountpoint
	blk.fs = runtimeapi.FilesystemUsage{Timestamp: now, FsId: &blk.fsID, UsedBytes: &blk.values[6], InodesUsed: &blk.values[7]}
	blk.stats = runtimeapi.ContainerStats{
		Attributes:    &blk.attrs,
		Cpu:           fillCPUUsage(&blk.cpu, now, u, blk.values[0:2]),
		Memory:        fillMemoryUsage(&blk.mem, now, u, c.resources.GetLinux().GetMemoryLimitInBytes(), blk.values[2:6]),
		WritableLayer: &blk.fs,
	}
	return &blk.stats
}

// fillCPUUsage fills cpu with u's CPU, its values in the two of vals.
func fillCPUUsage(cpu *runtimeapi.CpuUsage, now int64, u usage, vals []runtimeapi.UInt64Value) *runtimeapi.CpuUsage {
	vals[0].Value, vals[1].Value = u.coreNanoSeconds, u.nanoCores
	cpu.Timestamp, cpu.UsageCoreNanoSeconds, cpu.UsageNanoCores = now, &vals[0], &vals[1]
	return cpu
}

// fillMemoryUsage fills m with u's memory, its values in the four of vals:
// the working set is usage and RSS too (see the top of this file), and
// what is left under limit is available when there is a limit.
func fillMemoryUsage(m *runtimeapi.MemoryUsage, now int64, u usage, limit int64, vals []runtimeapi.UInt64Value) *runtimeapi.MemoryUsage {
	vals[0].Value, vals[1].Value, vals[2].Value = u.memory, u.memory, u.memory
	m.Timestamp, m.WorkingSetBytes, m.UsageBytes, m.RssBytes = now, &vals[0], &vals[1], &vals[2]
	if limit > 0 {
		vals[3].Value = uint64(limit) - min(u.memory, uint64(limit))
		m.AvailableBytes = &vals[3]
	}
	return m
}
