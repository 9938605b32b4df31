package nodeagent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/fleetlet/fleetlet/nodeagent/containergc"
	"github.com/fleetlet/fleetlet/nodeagent/eviction"
	"github.com/fleetlet/fleetlet/nodeagent/images"
	"github.com/fleetlet/fleetlet/nodeagent/nodestatus"
	"github.com/fleetlet/fleetlet/nodeagent/podworkers"
	"github.com/fleetlet/fleetlet/nodeagent/stats"
)

// newResourceManagers builds the node's stats provider and the managers
// that act on it: eviction, image GC and container GC.
func (a *Agent) newResourceManagers(capacity corev1.ResourceList) error {
	cfg := &a.cfg
	var err error
	if a.stats, err = stats.New(stats.Config{
		NodeName: cfg.NodeName, Runtime: a.cri, Images: cfg.Images, Capacity: capacity, Clock: cfg.Clock,
		SystemCPUNanoCores: uint64(max(cfg.SystemUsage.Cpu().ScaledValue(resource.Nano), 0)),
		SystemMemoryBytes:  uint64(max(cfg.SystemUsage.Memory().Value(), 0)),
	}); err != nil {
		return err
	}
	if a.imageGC, err = images.NewManager(images.Config{
		NodeName: cfg.NodeName, Runtime: a.cri, Images: cfg.Images, Kubelet: cfg.Kubelet,
		ImageFs: a.stats.ImageFsStats, Clock: cfg.Clock, Events: a.events,
	}); err != nil {
		return err
	}
	if a.containerGC, err = containergc.NewManager(containergc.Config{
		NodeName: cfg.NodeName, Runtime: a.cri, Policy: containergc.DefaultPolicy(), Pods: podState{a},
		AllSourcesReady: a.podSource.HasSynced, Clock: cfg.Clock,
	}); err != nil {
		return err
	}
	a.eviction, err = eviction.NewManager(eviction.Config{
		NodeName: cfg.NodeName, Clock: cfg.Clock, Kubelet: cfg.Kubelet, Summary: a.stats.Summary,
		ActivePods: a.activePods, KillPod: a.evict, DedicatedImageFs: a.stats.HasDedicatedImageFs(),
		Images: a.imageGC, Containers: a.containerGC, Events: a.events, Metrics: a.metrics,
	})
	return err
}

// nodeAllocatable is the node's reservation and allocatable, as the
// kubelet's container manager computes them from capacity and the
// configuration's systemReserved, kubeReserved and evictionHard. A
// reservation larger than the capacity stops the agent, as it stops the
// kubelet's container manager at its start.
func (a *Agent) nodeAllocatable(capacity corev1.ResourceList) (reserved, allocatable corev1.ResourceList, err error) {
	reserved, err = nodestatus.Reservation(capacity, a.cfg.Kubelet)
	if err == nil {
		err = nodestatus.ValidateReservation(capacity, reserved)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("node %s: %w; lower systemReserved, kubeReserved or evictionHard, or give the node more capacity", a.cfg.NodeName, err)
	}
	return reserved, nodestatus.Allocatable(capacity, reserved), nil
}

// nodeRuntimeState is what the node status reports of the runtime, as the
// kubelet's Ready condition reads its runtime state: what the periodic CRI
// Status calls found (runtimeUp), the PLEG's health, with the kubelet's
// messages, and the eviction manager's pressure conditions. It asks the
// runtime nothing itself: a runtime that stops answering leaves the node
// Ready until nodestatus.MaxWaitForContainerRuntime has passed.
func (a *Agent) nodeRuntimeState(context.Context) nodestatus.RuntimeState {
	st := a.runtimeState.State(a.cfg.Clock.Now(), nodestatus.HealthCheck{Name: "PLEG", Healthy: a.pleg.Healthy})
	st.MemoryPressure = a.eviction.IsUnderMemoryPressure()
	st.DiskPressure = a.eviction.IsUnderDiskPressure()
	st.PIDPressure = a.eviction.IsUnderPIDPressure()
	return st
}

// listImages is the node status's image list, the CRI image service's.
func (a *Agent) listImages(ctx context.Context) ([]*runtimeapi.Image, error) {
	return a.cfg.Images.ListImages(ctx, nil)
}

// activePods are the admitted pods whose workers have not terminated them:
// what admission counts against the node and what eviction ranks.
func (a *Agent) activePods() []*corev1.Pod {
	a.mu.Lock()
	defer a.mu.Unlock()
	var active []*corev1.Pod
	for uid := range a.admitted {
		if p := a.pods[uid]; p != nil && !a.workers.IsTerminated(uid) {
			active = append(active, p)
		}
	}
	return active
}

// evictionWait bounds how long an eviction waits for the pod's containers
// to stop beyond its grace period, as the kubelet's killPodNow does.
const evictionWait = 10 * time.Second

// evict is the eviction manager's kill: the pod's final status (Failed,
// Evicted) goes to the status manager first, then its worker stops it with
// the given grace period, as a deletion would. The pod object stays in the
// API server, failed, as on a real kubelet.
func (a *Agent) evict(ctx context.Context, pod *corev1.Pod, st corev1.PodStatus, gracePeriod int64) error {
	prev, ok := a.statusManager.Status(pod.UID)
	if !ok {
		prev = pod.Status
	}
	final := prev.DeepCopy()
	final.Phase, final.Reason, final.Message = st.Phase, st.Reason, st.Message
	for _, c := range st.Conditions {
		replaced := false
		for i := range final.Conditions {
			if final.Conditions[i].Type == c.Type {
				final.Conditions[i], replaced = c, true
			}
		}
		if !replaced {
			final.Conditions = append(final.Conditions, c)
		}
	}
	a.statusManager.SetPodStatus(pod, *final)

	kill := pod.DeepCopy()
	kill.DeletionTimestamp = &metav1.Time{Time: a.cfg.Clock.Now()}
	kill.DeletionGracePeriodSeconds = &gracePeriod
	a.workers.UpdatePodOfType(kill, podworkers.SyncPodKill)
	finished := a.workers.Finished(pod.UID)
	if finished == nil {
		return nil
	}
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-a.cfg.Clock.After(time.Duration(gracePeriod)*time.Second + evictionWait):
		return fmt.Errorf("pod %s/%s evicted from node %s has not stopped within %ds", pod.Namespace, pod.Name, a.cfg.NodeName, gracePeriod+int64(evictionWait/time.Second))
	}
}

// podState answers container GC's questions from the agent's pods and
// workers, as the kubelet's pod workers do.
type podState struct{ a *Agent }

func (p podState) known(uid types.UID) (pod *corev1.Pod, terminated bool) {
	p.a.mu.Lock()
	pod = p.a.pods[uid]
	p.a.mu.Unlock()
	return pod, p.a.workers.IsTerminated(uid)
}

// ShouldPodContentBeRemoved implements containergc.PodStateProvider.
func (p podState) ShouldPodContentBeRemoved(uid types.UID) bool {
	pod, terminated := p.known(uid)
	return pod == nil || (terminated && pod.DeletionTimestamp != nil)
}

// ShouldPodRuntimeBeRemoved implements containergc.PodStateProvider.
func (p podState) ShouldPodRuntimeBeRemoved(uid types.UID) bool {
	pod, terminated := p.known(uid)
	return pod == nil || terminated
}
