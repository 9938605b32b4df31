package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/fleetlet/fleetlet/nodeagent/metrics"
	"github.com/fleetlet/fleetlet/reports"
)

// podLogsRootDirectory is where the kubelet asks runtimes to write pod logs.
const podLogsRootDirectory = "/var/log/pods"

// Config wires a Manager.
type Config struct {
	Runtime  internalapi.RuntimeService
	Images   internalapi.ImageManagerService
	Events   record.EventRecorder
	Recorder reports.Recorder
	// Metrics receives the kubelet's started pods and containers counts
	// and the image pulls of starting pods; nil records none.
	Metrics *metrics.Kubelet
	Clock   clock.Clock
	// SerializeImagePulls pulls one image at a time per node, the kubelet's
	// default, so that a slow pull delays the pods behind it.
	SerializeImagePulls bool
	// MaxParallelImagePulls bounds concurrent pulls when they are not
	// serialized; 0 means no bound, as the kubelet's nil.
	MaxParallelImagePulls int32
	// NetworkHook runs an httpGet lifecycle handler of a
	// container within timeout; nil means there is nothing to reach (an
	// emulated node), and such a hook succeeds at once.
	NetworkHook func(ctx context.Context, pod *corev1.Pod, c *corev1.Container, h *corev1.LifecycleHandler, timeout time.Duration) error
	// ContainerOptions resolves a container's environment (valueFrom,
	// envFrom) and volume mounts, as the kubelet's
	// GenerateRunContainerOptions does; nil keeps the literal env values and
	// mounts nothing.
	ContainerOptions func(ctx context.Context, pod *corev1.Pod, c *corev1.Container) (*RunContainerOptions, error)
	// RuntimeHandler resolves a pod's runtimeClassName to the CRI handler
	// its sandbox runs with, as the kubelet's runtimeclass.Manager does; nil
	// runs every sandbox with the default handler.
	RuntimeHandler func(runtimeClassName *string) (string, error)
	// SandboxReady is the kubelet's OnPodSandboxReady: called once a new
	// sandbox is up with its network (the pod's volumes are mounted by
	// then), before images are pulled and containers started, so that
	// PodReadyToStartContainers turns True at once. nil calls nothing.
	SandboxReady func(ctx context.Context, pod *corev1.Pod)
	// MemoryCapacity is the node's memory in bytes, which ranks burstable
	// containers' OOM score adjustments as on the kubelet.
	MemoryCapacity int64
	// Host is set when the runtime is real; nil (an emulated node) keeps
	// the manager off the host's disk and cgroups.
	Host *Host
	// Actuated holds the resources each container was last given; nil
	// resizes nothing in place.
	Actuated Actuated
	// RequestReinspect asks the PLEG to sync the pod at its next relist
	// whether or not its containers changed, as the kubelet does after a
	// resize so that the status shows it done; nil asks nothing.
	RequestReinspect func(types.UID)
}

// runtimeHandler is the CRI handler of pod's RuntimeClass, "" for none.
func (m *Manager) runtimeHandler(pod *corev1.Pod) (string, error) {
	if m.cfg.RuntimeHandler == nil {
		return "", nil
	}
	h, err := m.cfg.RuntimeHandler(pod.Spec.RuntimeClassName)
	if err != nil {
		return "", fmt.Errorf("failed to look up the RuntimeClass of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return h, nil
}

// RunContainerOptions is what ContainerOptions resolved for one container.
type RunContainerOptions struct {
	Envs   []*runtimeapi.KeyValue
	Mounts []*runtimeapi.Mount
}

// The kubelet's back-off for restarting crashed containers and for pulling
// images: 10 s doubling to 5 min, forgotten after twice the maximum of
// clean running (flowcontrol.Backoff's expiry).
const (
	backOffInitial = 10 * time.Second
	backOffMax     = 5 * time.Minute
)

// Waiting is why a container is not running, as the kubelet's reason cache
// keeps it between syncs: ErrImagePull, ImagePullBackOff, CrashLoopBackOff,
// CreateContainerError, RunContainerError.
type Waiting struct {
	Reason, Message string
}

// BackoffError says SyncPod could not go on until Until; the pod worker
// syncs again then, so restarts happen when the back-off expires, as on the
// kubelet. A zero Until leaves the retry to the worker's own period.
type BackoffError struct {
	Until time.Time
	Err   error
}

func (e *BackoffError) Error() string { return e.Err.Error() }

// RetryTime implements podworkers.RetryTimer.
func (e *BackoffError) RetryTime() time.Time { return e.Until }
func (e *BackoffError) Unwrap() error        { return e.Err }

// Manager is one node's pod runtime manager.
type Manager struct {
	cfg Config
	// pulls bounds the pulls in flight (1 when serialized); nil: unbounded.
	pulls        *semaphore.Weighted
	crashBackOff *flowcontrol.Backoff
	imageBackOff *flowcontrol.Backoff

	mu      sync.Mutex
	waiting map[types.UID]map[string]Waiting
	// pullErrors are the last failed pull's message by back-off key
	// (pod UID and image), for the message of ImagePullBackOff.
	pullErrors map[string]string
	// rroHandlers are the runtime's handlers that mount recursively
	// read-only, by name, once its Status has said so.
	rroHandlers map[string]bool
}

// NewManager returns a Manager for cfg.
func NewManager(cfg Config) *Manager {
	crash := flowcontrol.NewBackOff(backOffInitial, backOffMax)
	crash.Clock = cfg.Clock
	image := flowcontrol.NewBackOff(backOffInitial, backOffMax)
	image.Clock = cfg.Clock
	m := &Manager{
		cfg: cfg, crashBackOff: crash, imageBackOff: image,
		waiting: map[types.UID]map[string]Waiting{}, pullErrors: map[string]string{},
	}
	switch {
	case cfg.SerializeImagePulls:
		m.pulls = semaphore.NewWeighted(1)
	case cfg.MaxParallelImagePulls > 0:
		m.pulls = semaphore.NewWeighted(int64(cfg.MaxParallelImagePulls))
	}
	return m
}

// Waiting returns why each of the pod's containers is waiting, by name.
func (m *Manager) Waiting(uid types.UID) map[string]Waiting {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.waiting[uid])
}

func (m *Manager) setWaiting(uid types.UID, name, reason, message string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.waiting[uid] == nil {
		m.waiting[uid] = map[string]Waiting{}
	}
	m.waiting[uid][name] = Waiting{Reason: reason, Message: message}
}

// RecursiveReadOnlyMounts is the kubelet's
// runtimeClassSupportsRecursiveReadOnlyMounts: whether the handler of the
// pod's RuntimeClass can mount recursively read-only, as the runtime's
// Status says. The handlers are asked for once; a runtime that cannot say
// supports none, and a failed question is asked again next time.
func (m *Manager) RecursiveReadOnlyMounts(ctx context.Context, pod *corev1.Pod) bool {
	handler, err := m.runtimeHandler(pod)
	if err != nil {
		return false
	}
	m.mu.Lock()
	handlers := m.rroHandlers
	m.mu.Unlock()
	if handlers == nil {
		resp, err := m.cfg.Runtime.Status(ctx, false)
		if err != nil {
			klog.FromContext(ctx).V(4).Info("Failed to read the runtime's handlers", "err", err)
			return false
		}
		handlers = make(map[string]bool, len(resp.GetRuntimeHandlers()))
		for _, h := range resp.GetRuntimeHandlers() {
			handlers[h.GetName()] = h.GetFeatures().GetRecursiveReadOnlyMounts()
		}
		m.mu.Lock()
		m.rroHandlers = handlers
		m.mu.Unlock()
	}
	return handlers[handler]
}

// setPullError records why the last pull under key failed; "" forgets it.
func (m *Manager) setPullError(key, msg string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if msg == "" {
		delete(m.pullErrors, key)
		return
	}
	m.pullErrors[key] = msg
}

func (m *Manager) pullError(key string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	msg, ok := m.pullErrors[key]
	return msg, ok
}

// startErrorCode is the kubelet's code of a failed start, the waiting
// reason the failure set: ErrImagePull, CreateContainerError and so on.
// The failures that set none are the image's status check, the kubelet's
// ImageInspectError, and a wait for a pull's turn cut short.
func (m *Manager) startErrorCode(uid types.UID, name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.waiting[uid][name].Reason; r != "" && r != "CrashLoopBackOff" {
		return r
	}
	return "ImageInspectError"
}

// metricsContainerType is the container_type of the pod's container.
func metricsContainerType(pod *corev1.Pod, name string) metrics.ContainerType {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return metrics.InitContainer
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			return metrics.EphemeralContainer
		}
	}
	return metrics.Container
}

func (m *Manager) clearWaiting(uid types.UID, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.waiting[uid], name)
}

// Forget drops what the manager remembers of a pod once it is gone.
func (m *Manager) Forget(pod *corev1.Pod) {
	m.mu.Lock()
	delete(m.waiting, pod.UID)
	m.mu.Unlock()
	forget := func(c *corev1.Container) {
		m.crashBackOff.DeleteEntry(backOffKey(pod, c.Name))
		m.imageBackOff.DeleteEntry(string(pod.UID) + "_" + c.Image)
		m.setPullError(string(pod.UID)+"_"+c.Image, "")
	}
	for i := range pod.Spec.InitContainers {
		forget(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		forget(&pod.Spec.Containers[i])
	}
	for i := range pod.Spec.EphemeralContainers {
		forget((*corev1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
}

// SyncPod brings the runtime to the pod spec, as the kubelet's SyncPod: a
// ready sandbox, init containers one by one (sidecars kept running), then
// the app containers; crashed containers restart by the pod's restart policy
// after their back-off, and containers whose liveness probe failed are
// killed and restarted. It returns the first error; a *BackoffError says
// when to try again.
func (m *Manager) SyncPod(ctx context.Context, pod *corev1.Pod, status *PodStatus, probes ProbeState) error {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod))
	actions := computePodActions(pod, status, probes)
	if actions.KillPod {
		if err := m.KillPod(ctx, pod, status, 0); err != nil {
			return err
		}
	}
	if len(actions.ContainersToKill) > 0 {
		for _, c := range actions.ContainersToKill {
			msg := fmt.Sprintf("Container %s failed liveness probe, will be restarted", c.Name)
			if err := m.killContainer(ctx, pod, c, terminationGracePeriod(pod), msg); err != nil {
				return err
			}
		}
		// Restart only after the PLEG has seen them exit: the back-off
		// counts from the finish time.
		return nil
	}

	var sandbox *runtimeapi.PodSandboxStatus
	var sandboxConfig *runtimeapi.PodSandboxConfig
	if actions.CreateSandbox {
		m.cfg.Metrics.IncStartedPods()
		var err error
		if sandboxConfig, err = m.sandboxConfig(pod, actions.Attempt); err != nil {
			return err
		}
		if m.cfg.Host != nil {
			// The kubelet makes the directory: runtimes write container logs
			// into it but do not create it.
			if err := os.MkdirAll(sandboxConfig.LogDirectory, 0o755); err != nil {
				return fmt.Errorf("creating the log directory of pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
		}
		handler, err := m.runtimeHandler(pod)
		if err != nil {
			// The kubelet's createPodSandbox fails the same way, before it
			// asks the runtime anything.
			m.cfg.Metrics.IncStartedPodsErrors()
			m.cfg.Events.Eventf(pod, corev1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
			return fmt.Errorf("creating sandbox for pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		id, err := m.cfg.Runtime.RunPodSandbox(ctx, sandboxConfig, handler)
		if err != nil {
			m.cfg.Metrics.IncStartedPodsErrors()
			m.cfg.Events.Eventf(pod, corev1.EventTypeWarning, "FailedCreatePodSandBox", "Failed to create pod sandbox: %v", err)
			return fmt.Errorf("creating sandbox for pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		m.cfg.Recorder.Mark(pod.UID, reports.SandboxReady, m.cfg.Clock.Now())
		logger.V(4).Info("Created pod sandbox", "sandbox", id)
		resp, err := m.cfg.Runtime.PodSandboxStatus(ctx, id, false)
		if err != nil {
			return fmt.Errorf("status of new sandbox %s of pod %s/%s: %w", id, pod.Namespace, pod.Name, err)
		}
		sandbox = resp.Status
		// Containers of the old sandbox do not count in the new one.
		status = &PodStatus{UID: status.UID}
		if m.cfg.SandboxReady != nil {
			m.cfg.SandboxReady(ctx, pod)
		}
	} else {
		sandbox = status.ReadySandbox()
		var err error
		if sandboxConfig, err = m.sandboxConfig(pod, sandbox.GetMetadata().GetAttempt()); err != nil {
			return err
		}
	}

	var errs []error
	var until time.Time
	if !actions.CreateSandbox {
		// Step 6 of the kubelet's SyncPod: resize the running containers
		// in place, before any container starts.
		resized, err := m.resize(ctx, pod, status, sandbox.Id, sandboxConfig)
		if resized && m.cfg.RequestReinspect != nil {
			m.cfg.RequestReinspect(pod.UID)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	failed := func(err error) {
		errs = append(errs, err)
		var b *BackoffError
		if errors.As(err, &b) && !b.Until.IsZero() && (until.IsZero() || b.Until.Before(until)) {
			until = b.Until
		}
	}
	// Ephemeral containers first, as the kubelet starts them, so that a
	// pod whose init containers fail can still be debugged; their failures
	// hold nothing else back.
	for _, i := range actions.EphemeralContainersToStart {
		ec := &pod.Spec.EphemeralContainers[i]
		if err := m.startContainer(ctx, pod, (*corev1.Container)(&ec.EphemeralContainerCommon), ec.TargetContainerName, status, sandbox.Id, sandboxConfig); err != nil {
			failed(err)
		}
	}
	for _, i := range actions.InitContainersToStart {
		if err := m.startContainer(ctx, pod, &pod.Spec.InitContainers[i], "", status, sandbox.Id, sandboxConfig); err != nil {
			failed(err)
			return &BackoffError{Until: until, Err: errors.Join(errs...)}
		}
	}
	for _, i := range actions.ContainersToStart {
		if err := m.startContainer(ctx, pod, &pod.Spec.Containers[i], "", status, sandbox.Id, sandboxConfig); err != nil {
			failed(err)
		}
	}
	if len(errs) > 0 {
		return &BackoffError{Until: until, Err: errors.Join(errs...)}
	}
	if len(actions.ContainersToStart) > 0 && len(actions.ContainersToStart) == len(pod.Spec.Containers) {
		// Every app container has now started once: stamped on the first
		// time only, as the Recorder keeps first stamps.
		now := m.cfg.Clock.Now()
		m.cfg.Recorder.Mark(pod.UID, reports.ImagesPulled, now)
		m.cfg.Recorder.Mark(pod.UID, reports.ContainersStarted, now)
	}
	return nil
}

// ensureImage makes the container's image present as its pull policy asks and
// returns the image reference to create the container from. Failed pulls back
// off as the kubelet's image manager does: ErrImagePull, then
// ImagePullBackOff until the back-off expires.
func (m *Manager) ensureImage(ctx context.Context, pod *corev1.Pod, c *corev1.Container, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	spec := &runtimeapi.ImageSpec{Image: c.Image}
	resp, err := m.cfg.Images.ImageStatus(ctx, spec, false)
	if err != nil {
		return "", fmt.Errorf("image status of %q for pod %s/%s: %w", c.Image, pod.Namespace, pod.Name, err)
	}
	ref := containerRef(pod, c.Name)
	present := resp.GetImage() != nil
	if present && c.ImagePullPolicy != corev1.PullAlways {
		m.cfg.Events.Eventf(ref, corev1.EventTypeNormal, "Pulled", "Container image %q already present on machine", c.Image)
		return resp.Image.Id, nil
	}
	if !present && c.ImagePullPolicy == corev1.PullNever {
		msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", c.Image)
		m.cfg.Events.Event(ref, corev1.EventTypeWarning, "ErrImageNeverPull", msg)
		m.setWaiting(pod.UID, c.Name, "ErrImageNeverPull", msg)
		return "", fmt.Errorf("container %s of pod %s/%s: image %q is not present and its pull policy is Never", c.Name, pod.Namespace, pod.Name, c.Image)
	}
	key := string(pod.UID) + "_" + c.Image
	if m.imageBackOff.IsInBackOffSinceUpdate(key, m.cfg.Clock.Now()) {
		msg := fmt.Sprintf("Back-off pulling image %q", c.Image)
		m.cfg.Events.Event(ref, corev1.EventTypeNormal, "BackOff", msg)
		m.cfg.Events.Event(ref, corev1.EventTypeWarning, "Failed", "Error: ImagePullBackOff")
		// The waiting message carries the pull's error, as the kubelet's
		// image manager keeps it for the back-off.
		if prev, ok := m.pullError(key); ok {
			msg += ": " + prev
		}
		m.setWaiting(pod.UID, c.Name, "ImagePullBackOff", msg)
		return "", &BackoffError{Err: fmt.Errorf("container %s of pod %s/%s: %s", c.Name, pod.Namespace, pod.Name, msg)}
	}
	// The kubelet reports the pull when it asks for it, before it waits
	// for its turn; the pull's own duration starts with that turn.
	m.cfg.Events.Eventf(ref, corev1.EventTypeNormal, "Pulling", "Pulling image %q", c.Image)
	waitStart := m.cfg.Clock.Now()
	m.cfg.Metrics.ImagePullStarted(pod.UID, waitStart)
	if m.pulls != nil {
		if err := m.pulls.Acquire(ctx, 1); err != nil {
			return "", err
		}
		defer m.pulls.Release(1)
	}
	pullStart := m.cfg.Clock.Now()
	m.cfg.Recorder.Mark(pod.UID, reports.PullStarted, pullStart)
	imageRef, err := m.cfg.Images.PullImage(ctx, spec, nil, sandboxConfig)
	if err != nil {
		m.imageBackOff.Next(key, m.cfg.Clock.Now())
		m.cfg.Events.Eventf(ref, corev1.EventTypeWarning, "Failed", "Failed to pull image %q: %v", c.Image, err)
		m.cfg.Events.Event(ref, corev1.EventTypeWarning, "Failed", "Error: ErrImagePull")
		m.setPullError(key, "ErrImagePull: "+err.Error())
		m.setWaiting(pod.UID, c.Name, "ErrImagePull", err.Error())
		return "", &BackoffError{Err: fmt.Errorf("pulling image %q for pod %s/%s: %w", c.Image, pod.Namespace, pod.Name, err)}
	}
	m.setPullError(key, "")
	m.cfg.Metrics.ImagePullFinished(pod.UID, m.cfg.Clock.Now())
	// The kubelet's puller asks for the image's size after the pull, at
	// its best effort, and counts that in the pull.
	var size uint64
	if st, err := m.cfg.Images.ImageStatus(ctx, spec, false); err == nil {
		size = st.GetImage().GetSize()
	}
	now := m.cfg.Clock.Now()
	m.cfg.Events.Eventf(ref, corev1.EventTypeNormal, "Pulled", "Successfully pulled image %q in %v (%v including waiting). Image size: %v bytes.",
		c.Image, now.Sub(pullStart).Truncate(time.Millisecond), now.Sub(waitStart).Truncate(time.Millisecond), size)
	return imageRef, nil
}

// attemptAfterReboot is the restart count of a container the runtime has
// no trace of: 0, unless the pod's status says it ran on this node before
// (it has a container ID). Then the runtime lost it, as a rebooted node's
// does, and the kubelet counts on from the log files it left in
// /var/log/pods (calcRestartCountByLogDir): one more than the last. An
// emulated node has no log directory; the pod's status holds the same count.
func attemptAfterReboot(pod *corev1.Pod, name string) uint32 {
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, cs := range statuses {
			if cs.Name == name && cs.ContainerID != "" {
				return uint32(cs.RestartCount) + 1
			}
		}
	}
	return 0
}

// startContainer starts one container, the first time or as a restart after
// its back-off, keeping only the newest dead container of that name for its
// lastState (the rest is what container GC would remove). target names the
// container whose PID namespace an ephemeral container joins, "" for none.
func (m *Manager) startContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, target string, status *PodStatus, sandboxID string, sandboxConfig *runtimeapi.PodSandboxConfig) (err error) {
	prev := status.Container(c.Name)
	attempt := uint32(0)
	if prev == nil {
		attempt = attemptAfterReboot(pod, c.Name)
	}
	if prev != nil {
		attempt = uint32(prev.RestartCount) + 1
		key := backOffKey(pod, c.Name)
		if m.crashBackOff.IsInBackOffSince(key, prev.FinishedAt) {
			d := m.crashBackOff.Get(key)
			m.cfg.Events.Eventf(containerRef(pod, c.Name), corev1.EventTypeWarning, "BackOff", "Back-off restarting failed container %s in pod %s", c.Name, podDesc(pod))
			msg := fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", d, c.Name, podDesc(pod))
			m.setWaiting(pod.UID, c.Name, "CrashLoopBackOff", msg)
			return &BackoffError{Until: prev.FinishedAt.Add(d), Err: errors.New(msg)}
		}
		m.crashBackOff.Next(key, prev.FinishedAt)
	}
	// Counted past the crash back-off, as the kubelet counts a start.
	typ := metricsContainerType(pod, c.Name)
	m.cfg.Metrics.IncStartedContainers(typ)
	defer func() {
		if err != nil {
			m.cfg.Metrics.IncStartedContainersErrors(typ, m.startErrorCode(pod.UID, c.Name))
		}
	}()
	imageRef, err := m.ensureImage(ctx, pod, c, sandboxConfig)
	if err != nil {
		return err
	}
	var targetID string
	if target != "" {
		t := status.Container(target)
		if t == nil {
			// The kubelet's getTargetID, reported as a config error.
			msg := fmt.Sprintf("unable to find target container %v", target)
			m.cfg.Events.Eventf(containerRef(pod, c.Name), corev1.EventTypeWarning, "Failed", "Error: %v", msg)
			m.setWaiting(pod.UID, c.Name, "CreateContainerConfigError", msg)
			return &BackoffError{Err: fmt.Errorf("container %s of pod %s/%s: %s", c.Name, pod.Namespace, pod.Name, msg)}
		}
		targetID = t.ID
	}
	config, err := m.containerConfig(ctx, pod, c, imageRef, attempt, targetID)
	if err != nil {
		// The kubelet's ErrCreateContainerConfig: the next sync tries again,
		// with no back-off of its own.
		m.cfg.Events.Eventf(containerRef(pod, c.Name), corev1.EventTypeWarning, "Failed", "Error: %v", err)
		m.setWaiting(pod.UID, c.Name, "CreateContainerConfigError", err.Error())
		return &BackoffError{Err: fmt.Errorf("container %s of pod %s/%s: %w", c.Name, pod.Namespace, pod.Name, err)}
	}
	id, err := m.cfg.Runtime.CreateContainer(ctx, sandboxID, config, sandboxConfig)
	if err != nil {
		m.cfg.Events.Eventf(containerRef(pod, c.Name), corev1.EventTypeWarning, "Failed", "Error: %v", err)
		m.setWaiting(pod.UID, c.Name, "CreateContainerError", err.Error())
		return fmt.Errorf("creating container %s of pod %s/%s: %w", c.Name, pod.Namespace, pod.Name, err)
	}
	m.cfg.Events.Event(containerRef(pod, c.Name), corev1.EventTypeNormal, "Created", "Container created")
	if err := m.cfg.Runtime.StartContainer(ctx, id); err != nil {
		m.cfg.Events.Eventf(containerRef(pod, c.Name), corev1.EventTypeWarning, "Failed", "Error: %v", err)
		m.setWaiting(pod.UID, c.Name, "RunContainerError", err.Error())
		return fmt.Errorf("starting container %s of pod %s/%s: %w", c.Name, pod.Namespace, pod.Name, err)
	}
	m.cfg.Events.Event(containerRef(pod, c.Name), corev1.EventTypeNormal, "Started", "Container started")
	m.clearWaiting(pod.UID, c.Name)
	if m.cfg.Actuated != nil {
		// Created with the allocated resources: those are now actuated.
		m.cfg.Actuated.SetActuatedContainer(pod.UID, c.Name, c.Resources)
	}
	if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
		if err := m.runPostStart(ctx, pod, c, id); err != nil {
			return err
		}
	}
	if prev != nil {
		for _, old := range status.Containers {
			if old.Name == c.Name && old.ID != prev.ID {
				if err := m.cfg.Runtime.RemoveContainer(ctx, old.ID); err != nil {
					klog.FromContext(ctx).V(2).Info("Failed to remove an old dead container", "container", old.ID, "err", err)
				}
			}
		}
	}
	return nil
}

func backOffKey(pod *corev1.Pod, container string) string {
	return string(pod.UID) + "_" + container
}

// podDesc formats a pod as the kubelet's messages do: name_namespace(uid).
func podDesc(pod *corev1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}

func terminationGracePeriod(pod *corev1.Pod) int64 {
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return *pod.Spec.TerminationGracePeriodSeconds
	}
	return corev1.DefaultTerminationGracePeriodSeconds
}

// minimumGracePeriod is what a container gets to stop after its preStop
// hook, however long the hook took: the kubelet's minimumGracePeriodInSeconds.
const minimumGracePeriod = 2

// KillPod stops every running container with the grace period, in parallel as
// the kubelet does, then stops the sandbox.
func (m *Manager) KillPod(ctx context.Context, pod *corev1.Pod, status *PodStatus, gracePeriod int64) error {
	var g errgroup.Group
	for _, c := range status.Containers {
		if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING && c.State != runtimeapi.ContainerState_CONTAINER_CREATED {
			continue
		}
		g.Go(func() error {
			return m.killContainer(ctx, pod, c, gracePeriod, fmt.Sprintf("Stopping container %s", c.Name))
		})
	}
	err := g.Wait()
	for _, sb := range status.Sandboxes {
		if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		if stopErr := m.cfg.Runtime.StopPodSandbox(ctx, sb.Id); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stopping sandbox %s of pod %s/%s: %w", sb.Id, pod.Namespace, pod.Name, stopErr))
		}
	}
	return err
}

// killContainer runs the container's preStop hook, then stops it with what
// is left of the grace period (at least minimumGracePeriod), as the
// kubelet's killContainer.
func (m *Manager) killContainer(ctx context.Context, pod *corev1.Pod, c *ContainerStatus, gracePeriod int64, message string) error {
	m.cfg.Events.Event(containerRef(pod, c.Name), corev1.EventTypeNormal, "Killing", message)
	if spec := containerSpec(pod, c.Name); spec != nil && spec.Lifecycle != nil && spec.Lifecycle.PreStop != nil && gracePeriod > 0 &&
		c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
		gracePeriod -= m.runPreStopHook(ctx, pod, c, spec, gracePeriod)
	}
	gracePeriod = max(gracePeriod, minimumGracePeriod)
	if err := m.cfg.Runtime.StopContainer(ctx, c.ID, gracePeriod); err != nil {
		return fmt.Errorf("stopping container %s of pod %s/%s: %w", c.Name, pod.Namespace, pod.Name, err)
	}
	return nil
}

// runPreStopHook runs the hook within the grace period and returns the
// seconds it took. A failed hook is reported and the stop goes on.
func (m *Manager) runPreStopHook(ctx context.Context, pod *corev1.Pod, c *ContainerStatus, spec *corev1.Container, gracePeriod int64) int64 {
	hook := spec.Lifecycle.PreStop
	start := m.cfg.Clock.Now()
	budget := time.Duration(gracePeriod) * time.Second
	var err error
	switch {
	case hook.Exec != nil:
		_, _, err = m.cfg.Runtime.ExecSync(ctx, c.ID, hook.Exec.Command, budget)
	case hook.Sleep != nil:
		select {
		case <-m.cfg.Clock.After(min(time.Duration(hook.Sleep.Seconds)*time.Second, budget)):
		case <-ctx.Done():
			err = ctx.Err()
		}
	case hook.TCPSocket != nil:
		// Kept in the API for compatibility; the kubelet fails it.
		err = fmt.Errorf("invalid handler: %v", strings.TrimSpace(hook.String()))
	case m.cfg.NetworkHook != nil:
		err = m.cfg.NetworkHook(ctx, pod, spec, hook, budget)
	}
	if err != nil {
		m.cfg.Events.Eventf(containerRef(pod, c.Name), corev1.EventTypeWarning, "FailedPreStopHook", "PreStopHook failed")
	}
	return int64(m.cfg.Clock.Since(start).Seconds())
}

// containerSpec is the kubelet's GetContainerSpec: the app, init or
// ephemeral container of that name.
func containerSpec(pod *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			return (*corev1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
		}
	}
	return nil
}

// containerRef is the kubelet's GenerateContainerRef: the pod, with the
// field path of the container events are about, so that they read
// spec.containers{app}, spec.initContainers{init} or
// spec.ephemeralContainers{debugger}. A name the spec does not hold (a
// container from an older spec) refers to the pod alone.
func containerRef(pod *corev1.Pod, name string) *corev1.ObjectReference {
	ref := &corev1.ObjectReference{
		Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name,
		UID: pod.UID, ResourceVersion: pod.ResourceVersion,
	}
	for _, f := range []struct {
		field string
		list  []corev1.Container
	}{{"spec.containers", pod.Spec.Containers}, {"spec.initContainers", pod.Spec.InitContainers}} {
		for i := range f.list {
			if f.list[i].Name == name {
				ref.FieldPath = f.field + "{" + name + "}"
				return ref
			}
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			ref.FieldPath = "spec.ephemeralContainers{" + name + "}"
			return ref
		}
	}
	return ref
}

// RemovePod removes the pod's containers and sandboxes from the runtime, once
// the pod is gone from the API server.
func (m *Manager) RemovePod(ctx context.Context, status *PodStatus) error {
	var err error
	for _, c := range status.Containers {
		if rmErr := m.cfg.Runtime.RemoveContainer(ctx, c.ID); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("removing container %s of pod %s: %w", c.ID, status.UID, rmErr))
		}
	}
	for _, sb := range status.Sandboxes {
		if rmErr := m.cfg.Runtime.RemovePodSandbox(ctx, sb.Id); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("removing sandbox %s of pod %s: %w", sb.Id, status.UID, rmErr))
		}
	}
	if m.cfg.Host != nil && err == nil {
		err = errors.Join(m.cfg.Host.removePodCgroups(status.UID), m.cfg.Host.removePodLogs(status.UID))
	}
	return err
}

// sandboxConfig is the kubelet's generatePodSandboxConfig for pod.
func (m *Manager) sandboxConfig(pod *corev1.Pod, attempt uint32) (*runtimeapi.PodSandboxConfig, error) {
	sc, err := sandboxSecurityContext(pod)
	if err != nil {
		return nil, fmt.Errorf("sandbox config of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	hostname := pod.Name
	if pod.Spec.Hostname != "" {
		hostname = pod.Spec.Hostname
	}
	if pod.Spec.HostNetwork {
		// runc refuses a hostname without a private UTS namespace, and the
		// kubelet does not set one for host-network pods.
		hostname = ""
	}
	config := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID), Attempt: attempt,
		},
		Hostname:     hostname,
		LogDirectory: podLogDir(m.cfg.Host.podLogsDir(), pod),
		DnsConfig:    dnsConfig(pod),
		Labels:       podLabels(pod),
		Annotations:  pod.Annotations,
		Linux:        &runtimeapi.LinuxPodSandboxConfig{SecurityContext: sc},
	}
	if m.cfg.Host != nil {
		config.Linux.CgroupParent = podCgroupParent(m.cfg.Host.CgroupRoot, pod)
	}
	return config, nil
}

// containerConfig is the kubelet's generateContainerConfig; targetID is
// the runtime ID of the container an ephemeral container targets.
func (m *Manager) containerConfig(ctx context.Context, pod *corev1.Pod, c *corev1.Container, imageRef string, attempt uint32, targetID string) (*runtimeapi.ContainerConfig, error) {
	sc, err := containerSecurityContext(pod, c, targetID)
	if err != nil {
		return nil, err
	}
	var envs []*runtimeapi.KeyValue
	var mounts []*runtimeapi.Mount
	if m.cfg.ContainerOptions != nil {
		opts, err := m.cfg.ContainerOptions(ctx, pod, c)
		if err != nil {
			return nil, err
		}
		envs, mounts = opts.Envs, opts.Mounts
	} else {
		envs = make([]*runtimeapi.KeyValue, 0, len(c.Env))
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				envs = append(envs, &runtimeapi.KeyValue{Key: e.Name, Value: []byte(e.Value)})
			}
		}
	}
	return &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: attempt},
		Image:       &runtimeapi.ImageSpec{Image: imageRef, UserSpecifiedImage: c.Image},
		Command:     c.Command,
		Args:        c.Args,
		WorkingDir:  c.WorkingDir,
		Envs:        envs,
		Mounts:      mounts,
		Labels:      containerLabels(pod, c.Name),
		Annotations: map[string]string{annotationRestarts: strconv.Itoa(int(attempt))},
		LogPath:     filepath.Join(c.Name, fmt.Sprintf("%d.log", attempt)),
		// What `kubectl debug -it` and `kubectl attach` need.
		Stdin:     c.Stdin,
		StdinOnce: c.StdinOnce,
		Tty:       c.TTY,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       linuxResources(pod, c, m.cfg.MemoryCapacity, m.minOOMScoreAdj()),
			SecurityContext: sc,
		},
	}, nil
}

// minOOMScoreAdj is the lowest OOM score adjustment the runtime can set:
// the fake has no floor below the kubelet's own values.
func (m *Manager) minOOMScoreAdj() int64 {
	if m.cfg.Host == nil {
		return guaranteedOOMScoreAdj
	}
	return m.cfg.Host.MinOOMScoreAdj
}

// UID returns the pod UID a sandbox or container belongs to, from its labels.
func UID(labels map[string]string) types.UID { return types.UID(labels[labelPodUID]) }
