// Package containergc removes one node's dead containers and sandboxes, as
// the kubelet's container GC does: it keeps the newest MaxPerPodContainer
// exited containers of each (pod, container name), removes every dead
// container and sandbox of pods that are gone, and caps the node's dead
// containers at MaxContainers.
package containergc

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Period is the kubelet's ContainerGCPeriod.
const Period = time.Minute

// The kubelet's CRI labels naming a container's pod.
const (
	labelPodUID = "io.kubernetes.pod.uid"
)

// Policy is the kubelet's GCPolicy. Its settings are the deprecated kubelet
// flags --minimum-container-ttl-duration, --maximum-dead-containers-per-container
// and --maximum-dead-containers; KubeletConfiguration does not carry them.
type Policy struct {
	// MinAge is the age a dead container must reach before removal,
	// counted from its creation, as the kubelet counts it.
	MinAge time.Duration
	// MaxPerPodContainer dead containers are kept per (pod, container name);
	// negative keeps them all.
	MaxPerPodContainer int
	// MaxContainers caps the dead containers of the node; negative is no cap.
	MaxContainers int
}

// DefaultPolicy is the kubelet's defaults: 0, 1 and -1.
func DefaultPolicy() Policy {
	return Policy{MinAge: 0, MaxPerPodContainer: 1, MaxContainers: -1}
}

// PodStateProvider answers what the kubelet's pod workers know about a pod.
type PodStateProvider interface {
	// ShouldPodContentBeRemoved is true once a pod is terminated and
	// deleted, or unknown to the node: all of its runtime state may go.
	ShouldPodContentBeRemoved(uid types.UID) bool
	// ShouldPodRuntimeBeRemoved is true once a pod is terminated, deleted
	// or not: its containers and sandboxes need not be kept.
	ShouldPodRuntimeBeRemoved(uid types.UID) bool
}

// Config wires the GC to its node.
type Config struct {
	NodeName string
	Runtime  internalapi.RuntimeService
	Policy   Policy
	Pods     PodStateProvider
	// AllSourcesReady says the pod source has synced at least once (the
	// agent's pod informer): before that, an unknown pod may be one not yet
	// seen rather than one deleted.
	AllSourcesReady func() bool
	Clock           clock.Clock
}

// Manager is one node's container GC.
type Manager struct {
	cfg Config
}

// NewManager validates cfg and returns a Manager.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Runtime == nil || cfg.Pods == nil || cfg.AllSourcesReady == nil || cfg.Clock == nil {
		return nil, fmt.Errorf("container GC of node %q: Runtime, Pods, AllSourcesReady and Clock are all required", cfg.NodeName)
	}
	return &Manager{cfg: cfg}, nil
}

// Run collects at once and then every Period until ctx ends, as the
// kubelet's loop does.
func (m *Manager) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		if err := m.GarbageCollect(ctx, m.cfg.AllSourcesReady(), false); err != nil {
			logger.Error(err, "Container garbage collection failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-m.cfg.Clock.After(Period):
		}
	}
}

// DeleteAllUnusedContainers removes the dead containers and sandboxes of
// terminated pods too, deleted or not: the eviction manager's reclaim.
func (m *Manager) DeleteAllUnusedContainers(ctx context.Context) error {
	return m.GarbageCollect(ctx, m.cfg.AllSourcesReady(), true)
}

// containerGCInfo is a dead container that may be removed.
type containerGCInfo struct {
	id      string
	name    string
	created time.Time
	unknown bool
}

// evictUnit is the set of a pod's containers of one name.
type evictUnit struct {
	uid  types.UID
	name string
}

// GarbageCollect removes dead containers beyond the policy, then dead
// sandboxes. With evictNonDeletedPods, terminated pods lose theirs even
// before they are deleted.
func (m *Manager) GarbageCollect(ctx context.Context, allSourcesReady, evictNonDeletedPods bool) error {
	containers, err := m.cfg.Runtime.ListContainers(ctx, nil)
	if err != nil {
		return fmt.Errorf("container GC of node %s: CRI ListContainers failed: %w", m.cfg.NodeName, err)
	}
	sandboxes, err := m.cfg.Runtime.ListPodSandbox(ctx, nil)
	if err != nil {
		return fmt.Errorf("container GC of node %s: CRI ListPodSandbox failed: %w", m.cfg.NodeName, err)
	}
	remove := func(uid types.UID) bool {
		return m.cfg.Pods.ShouldPodContentBeRemoved(uid) || (evictNonDeletedPods && m.cfg.Pods.ShouldPodRuntimeBeRemoved(uid))
	}
	var errs []error
	units := evictableContainers(containers, m.cfg.Clock.Now().Add(-m.cfg.Policy.MinAge))
	for _, victim := range containersToRemove(units, m.cfg.Policy, allSourcesReady, remove) {
		errs = append(errs, m.removeContainer(ctx, victim))
	}
	// A sandbox's containers are listed before their removal: a sandbox
	// whose containers were just removed waits for the next round, as in
	// the kubelet.
	for _, id := range sandboxesToRemove(sandboxes, containers, remove) {
		errs = append(errs, m.removeSandbox(ctx, id))
	}
	return errors.Join(errs...)
}

func (m *Manager) removeContainer(ctx context.Context, c containerGCInfo) error {
	if c.unknown {
		// The kubelet kills a container in an unknown state before removal.
		if err := m.cfg.Runtime.StopContainer(ctx, c.id, 0); err != nil {
			return fmt.Errorf("container GC of node %s: stop container %s (%s) in unknown state: %w", m.cfg.NodeName, c.id, c.name, err)
		}
	}
	klog.FromContext(ctx).V(4).Info("Removing container", "containerID", c.id, "containerName", c.name)
	if err := m.cfg.Runtime.RemoveContainer(ctx, c.id); err != nil {
		return fmt.Errorf("container GC of node %s: remove container %s (%s): %w", m.cfg.NodeName, c.id, c.name, err)
	}
	return nil
}

func (m *Manager) removeSandbox(ctx context.Context, id string) error {
	klog.FromContext(ctx).V(4).Info("Removing sandbox", "sandboxID", id)
	if err := m.cfg.Runtime.StopPodSandbox(ctx, id); err != nil {
		return fmt.Errorf("container GC of node %s: stop sandbox %s before removing: %w", m.cfg.NodeName, id, err)
	}
	if err := m.cfg.Runtime.RemovePodSandbox(ctx, id); err != nil {
		return fmt.Errorf("container GC of node %s: remove sandbox %s: %w", m.cfg.NodeName, id, err)
	}
	return nil
}

// evictableContainers groups the containers that are not running and were
// created before newest by (pod, container name).
func evictableContainers(containers []*runtimeapi.Container, newest time.Time) map[evictUnit][]containerGCInfo {
	units := map[evictUnit][]containerGCInfo{}
	for _, c := range containers {
		created := time.Unix(0, c.CreatedAt)
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING || newest.Before(created) {
			continue
		}
		info := containerGCInfo{
			id: c.Id, name: c.GetMetadata().GetName(), created: created,
			unknown: c.State == runtimeapi.ContainerState_CONTAINER_UNKNOWN,
		}
		key := evictUnit{uid: types.UID(c.Labels[labelPodUID]), name: info.name}
		units[key] = append(units[key], info)
	}
	return units
}

// newestFirst sorts containers by creation, newest first.
func newestFirst(cs []containerGCInfo) {
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].created.After(cs[j].created) })
}

// containersToRemove applies the policy to the dead containers and returns
// those to remove: all of pods whose content may go (once all sources are
// ready), the oldest beyond MaxPerPodContainer per unit, then the oldest
// beyond MaxContainers on the node.
func containersToRemove(units map[evictUnit][]containerGCInfo, p Policy, allSourcesReady bool, remove func(types.UID) bool) []containerGCInfo {
	var out []containerGCInfo
	keys := sortedKeys(units)
	keepPerUnit := func(n int) {
		for _, k := range keys {
			cs := units[k]
			if len(cs) <= n {
				continue
			}
			newestFirst(cs)
			out = append(out, cs[n:]...)
			units[k] = cs[:n]
		}
	}
	if allSourcesReady {
		for _, k := range keys {
			if remove(k.uid) {
				newestFirst(units[k])
				out = append(out, units[k]...)
				delete(units, k)
			}
		}
		keys = sortedKeys(units)
	}
	if p.MaxPerPodContainer >= 0 {
		keepPerUnit(p.MaxPerPodContainer)
	}
	total := 0
	for _, cs := range units {
		total += len(cs)
	}
	if p.MaxContainers >= 0 && total > p.MaxContainers {
		keepPerUnit(max(p.MaxContainers/max(len(units), 1), 1))
		var flat []containerGCInfo
		for _, k := range keys {
			flat = append(flat, units[k]...)
		}
		if len(flat) > p.MaxContainers {
			newestFirst(flat)
			out = append(out, flat[p.MaxContainers:]...)
		}
	}
	return out
}

// sortedKeys orders the units so that removals are deterministic.
func sortedKeys(units map[evictUnit][]containerGCInfo) []evictUnit {
	keys := make([]evictUnit, 0, len(units))
	for k := range units {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].uid != keys[j].uid {
			return keys[i].uid < keys[j].uid
		}
		return keys[i].name < keys[j].name
	})
	return keys
}

// sandboxesToRemove returns the inactive sandboxes to remove: all of a pod
// whose runtime may go, else all but the newest of each pod. A sandbox is
// active while ready or while it still has containers.
func sandboxesToRemove(sandboxes []*runtimeapi.PodSandbox, containers []*runtimeapi.Container, remove func(types.UID) bool) []string {
	withContainers := map[string]bool{}
	for _, c := range containers {
		withContainers[c.PodSandboxId] = true
	}
	type info struct {
		id      string
		created int64
		active  bool
	}
	byPod := map[types.UID][]info{}
	var pods []types.UID
	for _, sb := range sandboxes {
		uid := types.UID(sb.GetMetadata().GetUid())
		if _, ok := byPod[uid]; !ok {
			pods = append(pods, uid)
		}
		byPod[uid] = append(byPod[uid], info{
			id: sb.Id, created: sb.CreatedAt,
			active: sb.State == runtimeapi.PodSandboxState_SANDBOX_READY || withContainers[sb.Id],
		})
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i] < pods[j] })
	var out []string
	for _, uid := range pods {
		sbs := byPod[uid]
		sort.SliceStable(sbs, func(i, j int) bool { return sbs[i].created > sbs[j].created })
		keep := 1
		if remove(uid) {
			keep = 0
		}
		for _, sb := range sbs[min(keep, len(sbs)):] {
			if !sb.active {
				out = append(out, sb.id)
			}
		}
	}
	return out
}
