package kuberuntime

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

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
		})
	}
	return status, nil
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
