package nodeagent

import (
	"context"
	"fmt"
	"runtime"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/fleetlet/fleetlet/nodeagent/envvars"
	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
	"github.com/fleetlet/fleetlet/nodeagent/prober"
	podstatus "github.com/fleetlet/fleetlet/nodeagent/status"
	"github.com/fleetlet/fleetlet/reports"
)

// SyncPod is the kubelet's syncPod for a pod that should run: it reports the
// status the runtime shows now, then asks the runtime manager to converge.
// On a first sync that status is Pending with no sandbox; the runtime
// manager reports PodReadyToStartContainers once the sandbox is up
// (onSandboxReady); what follows (Running, Ready) is reported on the sync
// the PLEG triggers when it sees the containers start, as on a real kubelet.
func (a *Agent) SyncPod(ctx context.Context, pod *corev1.Pod) (terminal bool, postSync func(), err error) {
	// The pod as allocated, as the kubelet's pod workers hold it: a resize
	// not yet accepted runs with the resources it had.
	pod, _ = a.allocation.UpdatePodFromAllocation(pod)
	rs, err := a.podRuntime.GetPodStatus(ctx, pod.UID)
	if err != nil {
		return false, nil, err
	}
	a.updateProbes(pod, rs)
	a.resizeStatus(pod, rs)
	prev, known := a.statusManager.Status(pod.UID)
	phase := a.setStatus(ctx, pod, rs, false)
	a.metrics.PodSynced(pod, known, prev.Phase, phase, a.cfg.Clock.Now())
	if phase == corev1.PodSucceeded || phase == corev1.PodFailed {
		return true, nil, nil
	}
	if a.pastActiveDeadline(pod) {
		return true, nil, nil
	}
	// Until its volumes are set up the pod stays ContainerCreating; the
	// error has the pod worker retry.
	if err := a.volumes.WaitForAttachAndMount(ctx, pod); err != nil {
		return false, nil, err
	}
	a.cfg.Recorder.Mark(pod.UID, reports.VolumesMounted, a.cfg.Clock.Now())
	if err := a.podRuntime.SyncPod(ctx, pod, rs, a.probes); err != nil {
		a.resizeFailed(pod, err)
		return false, nil, err
	}
	// The kubelet relists a pod right after a sync that succeeded
	// (PLEGOnDemandRelist, GA in 1.37), so that containers it just started
	// are reported Running without waiting for the next periodic relist.
	// The kubelet asks only after a sync that acted; relisting a pod that
	// did not change emits nothing and costs one filtered list. It asks
	// once the pod worker has recorded the sync's end (postSync), so the
	// relist counts as newer than the sync.
	return false, func() { a.pleg.RequestRelist(ctx, pod.UID) }, nil
}

// onSandboxReady is the kubelet's OnPodSandboxReady, which the runtime
// manager calls once a new sandbox is up and the pod's volumes are
// mounted: PodReadyToStartContainers turns True in the pod's last status
// at once, before images are pulled and containers started (the kubelet's
// second status update of a starting pod).
func (a *Agent) onSandboxReady(_ context.Context, pod *corev1.Pod) {
	prev, ok := a.statusManager.Status(pod.UID)
	if !ok {
		prev = pod.Status
	}
	a.statusManager.SetPodStatus(a.apiPod(pod), podstatus.SandboxReady(pod, prev, a.cfg.Clock.Now()))
	blockOnCRI()
}

// blockOnCRI stands for the wait of a kubelet's goroutine on the CRI calls
// that follow a status it has just set (the containers' creation after
// OnPodSandboxReady, the kill after the terminating status): a remote call
// blocks, and the status manager runs meanwhile and sends that status on
// its own. The in-process runtime blocks on nothing, and Go's scheduler
// would keep running this goroutine, and those it wakes, ahead of the
// status manager, which would then find the next status set too and send
// both as one request where the kubelet sends two.
func blockOnCRI() { runtime.Gosched() }

// containerOptions resolves a container's environment and mounts for the
// runtime manager, as the kubelet's GenerateRunContainerOptions does.
func (a *Agent) containerOptions(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (*kuberuntime.RunContainerOptions, error) {
	allocatable := a.cfg.Capacity
	if node, err := a.getNode(); err == nil {
		allocatable = node.Status.Allocatable
	}
	hostIPs := []string{a.cfg.NodeIP.String()}
	envs, err := envvars.Make(ctx, a.objects, envvars.Input{
		Pod: pod, Container: c, HostIPs: hostIPs, Allocatable: allocatable,
		Services: func() ([]*corev1.Service, error) {
			if !a.watches.Services.HasSynced() {
				return nil, envvars.ErrServicesNotSynced
			}
			return a.watches.Services.Store.List(), nil
		},
		PodIPs: func(ctx context.Context) ([]string, error) {
			if pod.Spec.HostNetwork {
				return hostIPs, nil
			}
			rs, err := a.podRuntime.GetPodStatus(ctx, pod.UID)
			if err != nil {
				return nil, err
			}
			network := rs.ReadySandbox().GetNetwork()
			if network == nil {
				return nil, nil
			}
			ips := []string{network.Ip}
			for _, ip := range network.AdditionalIps {
				ips = append(ips, ip.Ip)
			}
			return ips, nil
		},
	})
	if err != nil {
		return nil, err
	}
	mounts, err := a.volumes.Mounts(pod, c)
	if err != nil {
		return nil, err
	}
	return &kuberuntime.RunContainerOptions{Envs: envs, Mounts: mounts}, nil
}

// The kubelet's active deadline handler's reason and message.
const (
	reasonDeadlineExceeded  = "DeadlineExceeded"
	messageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// pastActiveDeadline fails the pod once it has been active longer than its
// activeDeadlineSeconds, counted from its startTime, as the kubelet's
// activeDeadlineHandler does; before that, it asks for a sync at the deadline.
func (a *Agent) pastActiveDeadline(pod *corev1.Pod) bool {
	prev, _ := a.statusManager.Status(pod.UID)
	if pod.Spec.ActiveDeadlineSeconds == nil || prev.StartTime == nil {
		return false
	}
	deadline := prev.StartTime.Add(time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second)
	if a.cfg.Clock.Now().Before(deadline) {
		a.workers.SyncAt(pod.UID, deadline)
		return false
	}
	a.events.Event(pod, corev1.EventTypeWarning, reasonDeadlineExceeded, messageDeadlineExceeded)
	st := *prev.DeepCopy()
	st.Phase, st.Reason, st.Message = corev1.PodFailed, reasonDeadlineExceeded, messageDeadlineExceeded
	a.statusManager.SetPodStatus(pod, st)
	return true
}

// SyncTerminatingPod stops the pod's containers within the grace period.
// As the kubelet's, it reports the pod's status twice: as it stands before
// anything stops (a deletion has moved the pod's generation on), then with
// the containers' final states and the terminal phase.
func (a *Agent) SyncTerminatingPod(ctx context.Context, pod *corev1.Pod, gracePeriod int64) error {
	pod, _ = a.allocation.UpdatePodFromAllocation(pod)
	rs, err := a.podRuntime.GetPodStatus(ctx, pod.UID)
	if err != nil {
		return err
	}
	a.setStatus(ctx, pod, rs, false)
	blockOnCRI()
	// Readiness keeps being probed while the pod stops, as on the kubelet.
	a.probes.StopLivenessAndStartup(pod.UID)
	if err := a.podRuntime.KillPod(ctx, pod, rs, gracePeriod); err != nil {
		return err
	}
	if rs, err = a.podRuntime.GetPodStatus(ctx, pod.UID); err != nil {
		return err
	}
	a.setStatus(ctx, pod, rs, true)
	return nil
}

// SyncTerminatedPod removes the pod's containers, sandbox and volumes, then
// marks its status final (TerminatePod), which lets the status manager
// delete a pod being deleted for good. As the kubelet's, it first reports
// the terminal status again: while the pod is being deleted that update is
// forced, one GET more, and the PATCH that a status held back while
// containers could still run.
func (a *Agent) SyncTerminatedPod(ctx context.Context, pod *corev1.Pod) error {
	rs, err := a.podRuntime.GetPodStatus(ctx, pod.UID)
	if err != nil {
		return err
	}
	a.setStatus(ctx, pod, rs, true)
	if err := a.podRuntime.RemovePod(ctx, rs); err != nil {
		return err
	}
	a.podRuntime.Forget(pod)
	a.probes.RemovePod(pod.UID)
	if err := a.volumes.CleanupPod(pod.UID); err != nil {
		return fmt.Errorf("cleaning up the volumes of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	a.statusManager.TerminatePod(a.apiPod(pod))
	return nil
}

// setStatus generates the pod's status, hands it to the status manager and
// returns its phase. The status is generated from the worker's pod with
// the API's newest status, as the kubelet's pod manager holds it (status
// echoes update it without a sync): generateAPIPodStatus reads the API's
// phase (a pod the API shows Running has its resources read back from its
// cgroup) and conditions.
func (a *Agent) setStatus(ctx context.Context, pod *corev1.Pod, rs *kuberuntime.PodStatus, terminal bool) corev1.PodPhase {
	if p := a.pod(pod.UID); p != nil && p != pod {
		withStatus := *pod
		withStatus.Status = p.Status
		pod = &withStatus
	}
	prev, ok := a.statusManager.Status(pod.UID)
	if !ok {
		prev = pod.Status
	}
	if terminal {
		a.allocation.ClearConditions(pod.UID)
	}
	st := podstatus.Generate(podstatus.Input{
		ResizeConditions: a.allocation.Conditions(pod.UID),
		Pod:              pod, Runtime: rs, Waiting: a.podRuntime.Waiting(pod.UID), Probes: a.probes, Previous: prev,
		NodeIP: a.cfg.NodeIP, RuntimeName: a.runtimeName, Now: a.cfg.Clock.Now(), Terminal: terminal,
		RecursiveReadOnlyMounts: a.podRuntime.RecursiveReadOnlyMounts(ctx, pod),
	})
	a.statusManager.SetPodStatus(a.apiPod(pod), st)
	return st.Phase
}

// apiPod is the pod as the API server holds it, for the status manager: a
// pod worker's copy may carry a deletion it made up (an eviction's kill),
// and the kubelet forces status updates only for pods the API is deleting.
// A pod gone from the API (force-deleted) is the worker's copy.
func (a *Agent) apiPod(pod *corev1.Pod) *corev1.Pod {
	if p := a.pod(pod.UID); p != nil {
		return p
	}
	return pod
}

// networkHook runs httpGet lifecycle handlers with a probe
// runner: the kubelet sends them the same way, and treats any answer it
// would count as a probe's success as the hook's.
func networkHook(runner prober.NetworkRunner) func(context.Context, *corev1.Pod, *corev1.Container, *corev1.LifecycleHandler, time.Duration) error {
	return func(ctx context.Context, pod *corev1.Pod, c *corev1.Container, h *corev1.LifecycleHandler, timeout time.Duration) error {
		probe := &corev1.Probe{
			ProbeHandler:   corev1.ProbeHandler{HTTPGet: h.HTTPGet},
			TimeoutSeconds: int32(max(timeout/time.Second, 1)),
		}
		result, output, err := runner.Network(ctx, prober.Liveness, pod, c, "", probe)
		switch {
		case err != nil:
			return err
		case result == prober.Failure:
			return fmt.Errorf("%s", output)
		}
		return nil
	}
}

// updateProbes tells the prober which containers run: it starts workers for
// new container IDs and lets readiness of exited ones fail.
func (a *Agent) updateProbes(pod *corev1.Pod, rs *kuberuntime.PodStatus) {
	for _, c := range rs.Containers {
		switch c.State {
		case runtimeapi.ContainerState_CONTAINER_RUNNING:
			a.probes.ContainerStarted(pod, c.Name, c.ID, c.StartedAt)
		case runtimeapi.ContainerState_CONTAINER_EXITED:
			a.probes.ContainerStopped(c.ID)
		}
	}
}

func resourceQuantity(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.DecimalSI) }
