package nodestatus

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	nodeutil "k8s.io/component-helpers/node/util"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

func equalStatus(a, b *corev1.NodeStatus) bool { return apiequality.Semantic.DeepEqual(a, b) }

// Config wires a Manager.
type Config struct {
	Identity Identity
	// Client registers the node.
	Client kubernetes.Interface
	// HeartbeatClient patches its status and, on a retry, GETs it: the
	// kubelet's heartbeat client. Nil uses Client.
	HeartbeatClient kubernetes.Interface
	// OnRepeatedHeartbeatFailure is called after each failed retry of a
	// status update, as the kubelet's; nil does nothing.
	OnRepeatedHeartbeatFailure func()
	Clock                      clock.WithTicker
	// GetNode reads the node from the agent's node informer: since 1.31 the
	// kubelet no longer GETs its Node on every status update.
	GetNode func() (*corev1.Node, error)
	// RuntimeState asks the CRI runtime for its status.
	RuntimeState func(ctx context.Context) RuntimeState
	// ListImages asks the CRI image service for its images, every
	// ImageListPeriod at most, for status.images; nil reports none.
	ListImages func(ctx context.Context) ([]*runtimeapi.Image, error)
	// MaxImages is the kubelet's nodeStatusMaxImages: how many images
	// status.images lists at most, -1 for all, 0 for none; the kubelet's
	// default is DefaultMaxImages.
	MaxImages       int32
	UpdateFrequency time.Duration
	ReportFrequency time.Duration
	// Seed makes the report delays replayable.
	Seed uint64
}

// Manager registers the node and keeps its status current.
type Manager struct {
	cfg          Config
	lastReported time.Time
	// reportDelay is added once to the next periodic report after a change
	// or a start, as the kubelet's delayAfterNodeStatusChange: nodes that
	// registered together would otherwise post their unchanged status
	// together every ReportFrequency, a burst of thousands of node writes
	// (and their watch events) in a fleet that started in half a minute.
	reportDelay time.Duration
	rng         *rand.Rand
	// images is the kubelet's image cache: status.images as of the last
	// successful list, which was tried at imagesListedAt (zero: never).
	images         []corev1.ContainerImage
	imagesListedAt time.Time
}

// NewManager returns a Manager for cfg.
func NewManager(cfg Config) *Manager {
	if cfg.HeartbeatClient == nil {
		cfg.HeartbeatClient = cfg.Client
	}
	return &Manager{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))}
}

// SetRuntimeVersion sets the nodeInfo.containerRuntimeVersion the Node
// reports, "<name>://<version>" from the runtime's Version, which the
// agent asks at its start, before Register.
func (m *Manager) SetRuntimeVersion(v string) { m.cfg.Identity.RuntimeVersion = v }

// SetKubeletPort sets the port in the Node's daemonEndpoints, once the
// kubelet API listens, before Register.
func (m *Manager) SetKubeletPort(port int32) { m.cfg.Identity.KubeletPort = port }

// Register creates the Node as the kubelet's registerWithAPIServer does:
// it waits 100 ms, tries, and waits twice as long before each retry, up to
// 7 s, for as long as ctx lasts; a kubelet never gives up registering. A
// Node that already exists (the node rebooted, or its kubelet restarted)
// is adopted as the kubelet's tryRegisterWithAPIServer adopts it: its
// well-known labels and its attach-detach annotation are set back to the
// agent's, and the rest, its status included, is left to the status
// updates.
func (m *Manager) Register(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var lastErr error
	for step := registerFirstStep; ; step = min(2*step, registerMaxStep) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("registering node %s: %w (last error: %v)", m.cfg.Identity.Name, context.Cause(ctx), lastErr)
		case <-m.cfg.Clock.After(step):
		}
		now := m.cfg.Clock.Now()
		node := InitialNode(m.cfg.Identity, now)
		m.refreshImages(ctx, now)
		node.Status.Images = m.images
		_, err := m.cfg.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = m.reconcileExisting(ctx, node)
		}
		if err == nil {
			logger.V(2).Info("Successfully registered node")
			return nil
		}
		lastErr = err
		logger.V(2).Info("Unable to register node with API server", "err", err)
	}
}

// reconcileExisting is the kubelet's handling of a Node that already
// exists when it registers: what initial says of the attach-detach
// annotation and of the kubelet's default labels is patched onto it if it
// differs.
func (m *Manager) reconcileExisting(ctx context.Context, initial *corev1.Node) error {
	existing, err := m.cfg.Client.CoreV1().Nodes().Get(ctx, initial.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting node %s, which exists already: %w", initial.Name, err)
	}
	klog.FromContext(ctx).Info("Node was previously registered")
	updated := existing.DeepCopy()
	if !ReconcileExisting(initial, updated) {
		return nil
	}
	if _, _, err := nodeutil.PatchNodeStatus(m.cfg.Client.CoreV1(), types.NodeName(initial.Name), existing, updated); err != nil {
		return fmt.Errorf("reconciling node %s, which exists already: %w", initial.Name, err)
	}
	return nil
}

// The kubelet's registration back-off.
const (
	registerFirstStep = 100 * time.Millisecond
	registerMaxStep   = 7 * time.Second
)

// Run updates the status every UpdateFrequency until ctx ends. The first
// update happens at once, so a fresh node turns Ready without waiting.
func (m *Manager) Run(ctx context.Context) {
	ticker := m.cfg.Clock.NewTicker(m.cfg.UpdateFrequency)
	defer ticker.Stop()
	for {
		if err := m.SyncNodeStatus(ctx); err != nil {
			klog.FromContext(ctx).V(2).Info("Error updating node status, will retry", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// nodeStatusUpdateRetry is the kubelet's: how many times one status update
// is tried before it waits for the next UpdateFrequency.
const nodeStatusUpdateRetry = 5

// SyncNodeStatus computes the status and posts it if it changed or the report
// interval has passed, trying up to nodeStatusUpdateRetry times at once, as
// the kubelet's updateNodeStatus: the first try reads the Node from the
// informer, each retry GETs it from the API server (a conflict or a stale
// cache then resolves within the same update), and every failed retry calls
// OnRepeatedHeartbeatFailure.
func (m *Manager) SyncNodeStatus(ctx context.Context) error {
	var err error
	for try := range nodeStatusUpdateRetry {
		if err = m.tryUpdate(ctx, try); err == nil {
			return nil
		}
		if try > 0 && m.cfg.OnRepeatedHeartbeatFailure != nil {
			m.cfg.OnRepeatedHeartbeatFailure()
		}
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("node %s: status update failed %d times, last: %w", m.cfg.Identity.Name, nodeStatusUpdateRetry, err)
}

func (m *Manager) tryUpdate(ctx context.Context, try int) error {
	var node *corev1.Node
	var err error
	if try == 0 {
		node, err = m.cfg.GetNode()
		if err != nil {
			return fmt.Errorf("node %s not in the informer cache yet: %w", m.cfg.Identity.Name, err)
		}
	} else if node, err = m.cfg.HeartbeatClient.CoreV1().Nodes().Get(ctx, m.cfg.Identity.Name, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("getting node %s: %w", m.cfg.Identity.Name, err)
	}
	now := m.cfg.Clock.Now()
	// As the kubelet's tryUpdateNodeStatus: the status is computed on a
	// copy of the Node the informer holds and compared with it, not with
	// what was sent last. So whatever else wrote the Node's status (the
	// node lifecycle controller setting every condition Unknown while the
	// API server or the node was unreachable) is seen as a change within
	// one UpdateFrequency of the informer seeing it, and overwritten: the
	// node is Ready again then, rather than at its next periodic report.
	updated := node.DeepCopy()
	rt := m.cfg.RuntimeState(ctx)
	m.refreshImages(ctx, now)
	rt.Images = m.images
	SetStatus(updated, m.cfg.Identity, rt, now)
	changed := Changed(&node.Status, &updated.Status)
	if !changed && !m.lastReported.IsZero() && now.Sub(m.lastReported) < m.cfg.ReportFrequency+m.reportDelay {
		return nil
	}
	// A change or the first report since the start gets a new random
	// delay; a periodic report resets it, so the node then reports at a
	// fixed interval, phase-shifted from its peers.
	if changed || m.lastReported.IsZero() {
		m.reportDelay = time.Duration(float64(m.cfg.ReportFrequency) * (m.rng.Float64() - 0.5))
	} else {
		m.reportDelay = 0
	}
	if _, _, err := nodeutil.PatchNodeStatus(m.cfg.HeartbeatClient.CoreV1(), types.NodeName(node.Name), node, updated); err != nil {
		return err
	}
	m.lastReported = now
	return nil
}

// refreshImages lists the runtime's images into the cache if ImageListPeriod
// has passed since the last try, as the kubelet's image GC manager refreshes
// its cache in the background: a status update between two lists reports
// the cached images. A failed list keeps the images listed before.
func (m *Manager) refreshImages(ctx context.Context, now time.Time) {
	if m.cfg.ListImages == nil || (!m.imagesListedAt.IsZero() && now.Sub(m.imagesListedAt) < ImageListPeriod) {
		return
	}
	m.imagesListedAt = now
	list, err := m.cfg.ListImages(ctx)
	if err != nil {
		klog.FromContext(ctx).Info("Failed to update image list", "err", err)
		return
	}
	m.images = ContainerImages(list, m.cfg.MaxImages)
}
