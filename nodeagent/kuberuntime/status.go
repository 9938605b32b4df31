package kuberuntime

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodStatus is what the runtime knows of one pod, newest sandbox first.
type PodStatus struct {
	UID        types.UID
	Sandboxes  []*runtimeapi.PodSandboxStatus
	Containers []*ContainerStatus
}

// ContainerStatus is one container as the runtime reports it.
type ContainerStatus struct {
	ID           string
	Name         string
	State        runtimeapi.ContainerState
	CreatedAt    time.Time
	StartedAt    time.Time
	FinishedAt   time.Time
	ExitCode     int32
	Reason       string
	Message      string
	Image        string
	ImageRef     string
	RestartCount int32
	// Resources are the cgroup settings the runtime reports for the
	// container, nil when it reports none.
	Resources *ContainerResources
	// User is whom the container's first process runs as, as the runtime
	// reports it; nil when it does not say (containerd before 2.0).
	User *ContainerUser
}

// ContainerResources are a container's cgroup settings read back as the
// kubelet's toKubeContainerResources reads the runtime's: the cpu request
// from the shares, the cpu limit from the quota over the period, the memory
// limit; each nil when unset.
type ContainerResources struct {
	CPURequest, CPULimit, MemoryLimit *resource.Quantity
}

// ContainerUser is the identity of a container's first process on Linux.
type ContainerUser struct {
	UID, GID           int64
	SupplementalGroups []int64
}

// ReadySandbox returns the newest sandbox if it is ready, else nil.
func (s *PodStatus) ReadySandbox() *runtimeapi.PodSandboxStatus {
	if len(s.Sandboxes) == 0 || s.Sandboxes[0].State != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil
	}
	return s.Sandboxes[0]
}

// Container returns the newest container with the given name (the highest
// restart attempt), or nil.
func (s *PodStatus) Container(name string) *ContainerStatus {
	return s.nth(name, 0)
}

// Previous returns the container the newest one of that name replaced: the
// kubelet reports it as lastState.
func (s *PodStatus) Previous(name string) *ContainerStatus {
	return s.nth(name, 1)
}

func (s *PodStatus) nth(name string, n int) *ContainerStatus {
	var byName []*ContainerStatus
	for _, c := range s.Containers {
		if c.Name == name {
			byName = append(byName, c)
		}
	}
	if n >= len(byName) {
		return nil
	}
	// Attempts order restarts even when two containers were created in the
	// same clock tick.
	slices.SortFunc(byName, func(a, b *ContainerStatus) int {
		if c := cmp.Compare(b.RestartCount, a.RestartCount); c != 0 {
			return c
		}
		return b.CreatedAt.Compare(a.CreatedAt)
	})
	return byName[n]
}

// GetPodStatus lists the pod's sandboxes and containers by the kubelet's UID
// label, then asks for each one's status, as the kubelet's GetPodStatus does.
func (m *Manager) GetPodStatus(ctx context.Context, uid types.UID) (*PodStatus, error) {
	selector := map[string]string{labelPodUID: string(uid)}
	sandboxes, err := m.cfg.Runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes of pod %s: %w", uid, err)
	}
	status := &PodStatus{UID: uid}
	for _, sb := range sandboxes {
		resp, err := m.cfg.Runtime.PodSandboxStatus(ctx, sb.Id, false)
		if err != nil {
			return nil, fmt.Errorf("status of sandbox %s of pod %s: %w", sb.Id, uid, err)
		}
		status.Sandboxes = append(status.Sandboxes, resp.Status)
	}
	sortSandboxesNewestFirst(status.Sandboxes)
	containers, err := m.cfg.Runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("listing containers of pod %s: %w", uid, err)
	}
	for _, c := range containers {
		resp, err := m.cfg.Runtime.ContainerStatus(ctx, c.Id, false)
		if err != nil {
			return nil, fmt.Errorf("status of container %s of pod %s: %w", c.Id, uid, err)
		}
		st := resp.Status
		status.Containers = append(status.Containers, &ContainerStatus{
			ID:           st.Id,
			Name:         st.GetMetadata().GetName(),
			State:        st.State,
			CreatedAt:    unixNano(st.CreatedAt),
			StartedAt:    unixNano(st.StartedAt),
			FinishedAt:   unixNano(st.FinishedAt),
			ExitCode:     st.ExitCode,
			Reason:       st.Reason,
			Message:      st.Message,
			Image:        st.GetImage().GetImage(),
			ImageRef:     st.ImageRef,
			RestartCount: restartCount(st.Annotations),
			Resources:    toContainerResources(st.GetResources().GetLinux()),
			User:         toContainerUser(st.GetUser().GetLinux()),
		})
	}
	return status, nil
}

// toContainerResources is the kubelet's toKubeContainerResources.
func toContainerResources(r *runtimeapi.LinuxContainerResources) *ContainerResources {
	if r == nil {
		return nil
	}
	var out ContainerResources
	if r.CpuPeriod > 0 {
		if milli := quotaToMilliCPU(r.CpuQuota, r.CpuPeriod); milli > 0 {
			out.CPULimit = resource.NewMilliQuantity(milli, resource.DecimalSI)
		}
	}
	if r.CpuShares > 0 {
		if milli := sharesToMilliCPU(r.CpuShares); milli > 0 {
			out.CPURequest = resource.NewMilliQuantity(milli, resource.DecimalSI)
		}
	}
	if r.MemoryLimitInBytes > 0 {
		out.MemoryLimit = resource.NewQuantity(r.MemoryLimitInBytes, resource.BinarySI)
	}
	if out == (ContainerResources{}) {
		return nil
	}
	return &out
}

func toContainerUser(u *runtimeapi.LinuxContainerUser) *ContainerUser {
	if u == nil {
		return nil
	}
	return &ContainerUser{UID: u.Uid, GID: u.Gid, SupplementalGroups: slices.Clone(u.SupplementalGroups)}
}

func unixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

func sortSandboxesNewestFirst(s []*runtimeapi.PodSandboxStatus) {
	slices.SortFunc(s, func(a, b *runtimeapi.PodSandboxStatus) int { return cmp.Compare(b.CreatedAt, a.CreatedAt) })
}
