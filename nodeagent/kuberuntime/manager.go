package kuberuntime

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

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
	Clock    clock.PassiveClock
	// SerializeImagePulls pulls one image at a time per node, the kubelet's
	// default, so that a slow pull delays the pods behind it.
	SerializeImagePulls bool
}

// Manager is one node's pod runtime manager.
type Manager struct {
	cfg Config
	// pullLock serializes pulls when SerializeImagePulls is set.
	pullLock sync.Mutex
}

// NewManager returns a Manager for cfg.
func NewManager(cfg Config) *Manager { return &Manager{cfg: cfg} }

// SyncPod brings the runtime to the pod spec: a ready sandbox, then each app
// container created and started in spec order. It returns the first error; the
// caller's pod worker retries the sync. Containers that ran and exited are
// left as they are: restarts and their back-off belong to the kubelet's loops
// (issue 3).
func (m *Manager) SyncPod(ctx context.Context, pod *corev1.Pod, status *PodStatus) error {
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod))
	sandbox := status.ReadySandbox()
	var sandboxConfig *runtimeapi.PodSandboxConfig
	if sandbox == nil {
		attempt := uint32(len(status.Sandboxes))
		// A sandbox that is no longer ready takes its containers with it: the
		// kubelet kills them all before creating a new one.
		if len(status.Sandboxes) > 0 {
			if err := m.KillPod(ctx, pod, status, 0); err != nil {
				return err
			}
		}
		sandboxConfig = m.sandboxConfig(pod, attempt)
		id, err := m.cfg.Runtime.RunPodSandbox(ctx, sandboxConfig, "")
		if err != nil {
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
	} else {
		sandboxConfig = m.sandboxConfig(pod, sandbox.GetMetadata().GetAttempt())
	}

	started := false
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if status.Container(c.Name) != nil {
			continue
		}
		imageRef, err := m.ensureImage(ctx, pod, c, sandboxConfig)
		if err != nil {
			return err
		}
		if err := m.startContainer(ctx, pod, c, imageRef, sandbox.Id, sandboxConfig); err != nil {
			return err
		}
		started = true
	}
	// Reaching here, every app container has been created and started once.
	if started {
		now := m.cfg.Clock.Now()
		m.cfg.Recorder.Mark(pod.UID, reports.ImagesPulled, now)
		m.cfg.Recorder.Mark(pod.UID, reports.ContainersStarted, now)
	}
	return nil
}

// ensureImage makes the container's image present as its pull policy asks and
// returns the image reference to create the container from.
func (m *Manager) ensureImage(ctx context.Context, pod *corev1.Pod, c *corev1.Container, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	spec := &runtimeapi.ImageSpec{Image: c.Image}
	resp, err := m.cfg.Images.ImageStatus(ctx, spec, false)
	if err != nil {
		return "", fmt.Errorf("image status of %q for pod %s/%s: %w", c.Image, pod.Namespace, pod.Name, err)
	}
	present := resp.GetImage() != nil
	if present && c.ImagePullPolicy != corev1.PullAlways {
		m.cfg.Events.Eventf(pod, corev1.EventTypeNormal, "Pulled", "Container image %q already present on machine", c.Image)
		return resp.Image.Id, nil
	}
	if !present && c.ImagePullPolicy == corev1.PullNever {
		m.cfg.Events.Eventf(pod, corev1.EventTypeWarning, "ErrImageNeverPull", "Container image %q is not present with pull policy of Never", c.Image)
		return "", fmt.Errorf("container %s of pod %s/%s: image %q is not present and its pull policy is Never", c.Name, pod.Namespace, pod.Name, c.Image)
	}
	waitStart := m.cfg.Clock.Now()
	if m.cfg.SerializeImagePulls {
		m.pullLock.Lock()
		defer m.pullLock.Unlock()
	}
	m.cfg.Events.Eventf(pod, corev1.EventTypeNormal, "Pulling", "Pulling image %q", c.Image)
	pullStart := m.cfg.Clock.Now()
	m.cfg.Recorder.Mark(pod.UID, reports.PullStarted, pullStart)
	ref, err := m.cfg.Images.PullImage(ctx, spec, nil, sandboxConfig)
	if err != nil {
		m.cfg.Events.Eventf(pod, corev1.EventTypeWarning, "Failed", "Failed to pull image %q: %v", c.Image, err)
		return "", fmt.Errorf("pulling image %q for pod %s/%s: %w", c.Image, pod.Namespace, pod.Name, err)
	}
	now := m.cfg.Clock.Now()
	m.cfg.Events.Eventf(pod, corev1.EventTypeNormal, "Pulled", "Successfully pulled image %q in %v (%v including waiting)",
		c.Image, now.Sub(pullStart).Round(time.Millisecond), now.Sub(waitStart).Round(time.Millisecond))
	return ref, nil
}

func (m *Manager) startContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, imageRef, sandboxID string, sandboxConfig *runtimeapi.PodSandboxConfig) error {
	config := m.containerConfig(pod, c, imageRef, 0)
	id, err := m.cfg.Runtime.CreateContainer(ctx, sandboxID, config, sandboxConfig)
	if err != nil {
		m.cfg.Events.Eventf(pod, corev1.EventTypeWarning, "Failed", "Error: %v", err)
		return fmt.Errorf("creating container %s of pod %s/%s: %w", c.Name, pod.Namespace, pod.Name, err)
	}
	m.cfg.Events.Eventf(pod, corev1.EventTypeNormal, "Created", "Created container: %s", c.Name)
	if err := m.cfg.Runtime.StartContainer(ctx, id); err != nil {
		m.cfg.Events.Eventf(pod, corev1.EventTypeWarning, "Failed", "Error: %v", err)
		return fmt.Errorf("starting container %s of pod %s/%s: %w", c.Name, pod.Namespace, pod.Name, err)
	}
	m.cfg.Events.Eventf(pod, corev1.EventTypeNormal, "Started", "Started container %s", c.Name)
	return nil
}

// KillPod stops every running container with the grace period, in parallel as
// the kubelet does, then stops the sandbox.
func (m *Manager) KillPod(ctx context.Context, pod *corev1.Pod, status *PodStatus, gracePeriod int64) error {
	var g errgroup.Group
	for _, c := range status.Containers {
		if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING && c.State != runtimeapi.ContainerState_CONTAINER_CREATED {
			continue
		}
		g.Go(func() error {
			m.cfg.Events.Eventf(pod, corev1.EventTypeNormal, "Killing", "Stopping container %s", c.Name)
			if err := m.cfg.Runtime.StopContainer(ctx, c.ID, gracePeriod); err != nil {
				return fmt.Errorf("stopping container %s of pod %s/%s: %w", c.Name, pod.Namespace, pod.Name, err)
			}
			return nil
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
	return err
}

func (m *Manager) sandboxConfig(pod *corev1.Pod, attempt uint32) *runtimeapi.PodSandboxConfig {
	network := runtimeapi.NamespaceMode_POD
	hostname := pod.Name
	if pod.Spec.Hostname != "" {
		hostname = pod.Spec.Hostname
	}
	if pod.Spec.HostNetwork {
		network = runtimeapi.NamespaceMode_NODE
		// runc refuses a hostname without a private UTS namespace, and the
		// kubelet does not set one for host-network pods.
		hostname = ""
	}
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID), Attempt: attempt,
		},
		Hostname:     hostname,
		LogDirectory: filepath.Join(podLogsRootDirectory, fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID)),
		Labels:       podLabels(pod),
		Annotations:  pod.Annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: network},
			},
		},
	}
}

func (m *Manager) containerConfig(pod *corev1.Pod, c *corev1.Container, imageRef string, attempt uint32) *runtimeapi.ContainerConfig {
	envs := make([]*runtimeapi.KeyValue, 0, len(c.Env))
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			envs = append(envs, &runtimeapi.KeyValue{Key: e.Name, Value: []byte(e.Value)})
		}
	}
	return &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: attempt},
		Image:       &runtimeapi.ImageSpec{Image: imageRef, UserSpecifiedImage: c.Image},
		Command:     c.Command,
		Args:        c.Args,
		WorkingDir:  c.WorkingDir,
		Envs:        envs,
		Labels:      containerLabels(pod, c.Name),
		Annotations: map[string]string{annotationRestarts: strconv.Itoa(int(attempt))},
		LogPath:     filepath.Join(c.Name, fmt.Sprintf("%d.log", attempt)),
	}
}

// UID returns the pod UID a sandbox or container belongs to, from its labels.
func UID(labels map[string]string) types.UID { return types.UID(labels[labelPodUID]) }
