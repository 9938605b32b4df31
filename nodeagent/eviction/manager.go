package eviction

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/fleetlet/fleetlet/nodeagent/metrics"
)

// MonitoringInterval is the kubelet's evictionMonitoringPeriod.
const MonitoringInterval = 10 * time.Second

// DefaultPressureTransitionPeriod is the kubelet's default
// evictionPressureTransitionPeriod.
const DefaultPressureTransitionPeriod = 5 * time.Minute

// immediateEvictionGracePeriodSeconds is the grace period of an eviction for
// a hard threshold: one second, as in the kubelet (older kubelets used zero).
const immediateEvictionGracePeriodSeconds = 1

// ImageGC deletes unused images, to reclaim disk before evicting pods.
type ImageGC interface {
	DeleteUnusedImages(ctx context.Context) (freed int64, err error)
}

// ContainerGC deletes dead containers and sandboxes, even of pods that
// are terminated but not deleted.
type ContainerGC interface {
	DeleteAllUnusedContainers(ctx context.Context) error
}

// Config wires the manager to its node.
type Config struct {
	NodeName string
	Clock    clock.Clock
	// Kubelet gives the thresholds, evictionMaxPodGracePeriod and
	// evictionPressureTransitionPeriod (5 m when zero).
	Kubelet *kubeletconfig.KubeletConfiguration
	Summary func(ctx context.Context) (*statsapi.Summary, error)
	// ActivePods are the pods admitted to the node and not terminated.
	ActivePods func() []*corev1.Pod
	// KillPod stops the pod with the given grace period and reports status
	// (phase Failed, reason Evicted, the kubelet's message and a
	// DisruptionTarget condition). It returns once the pod's containers have
	// stopped, as the kubelet's killPodFunc does.
	KillPod func(ctx context.Context, pod *corev1.Pod, status corev1.PodStatus, gracePeriodOverride int64) error
	// DedicatedImageFs says images have their own filesystem (see
	// stats.Config.ImageFsCapacityBytes): nodefs pressure then reclaims
	// nothing at node level and ranks pods by logs and local volumes only.
	DedicatedImageFs bool
	Images           ImageGC
	Containers       ContainerGC
	// Events records the kubelet's events: on the node (involved object
	// Kind Node, name and UID the node name, as the kubelet's nodeRef) and
	// on evicted pods.
	Events record.EventRecorder
	// Metrics counts evictions (kubelet_evictions); nil counts none.
	Metrics *metrics.Kubelet
}

// Manager is the eviction manager of one node.
type Manager struct {
	cfg        Config
	nodeRef    *corev1.ObjectReference
	thresholds []Threshold
	transition time.Duration

	// Only the loop writes the state below, and reads it without locking;
	// mu guards it against the readers of the conditions (node status,
	// admission).
	mu                           sync.RWMutex
	nodeConditions               []corev1.NodeConditionType
	nodeConditionsLastObservedAt map[corev1.NodeConditionType]time.Time
	thresholdsFirstObservedAt    map[thresholdKey]time.Time
	thresholdsMet                []Threshold
	lastObservations             observations
}

// NewManager parses the thresholds of cfg.Kubelet and returns a Manager.
func NewManager(cfg Config) (*Manager, error) {
	switch {
	case cfg.Kubelet == nil:
		return nil, fmt.Errorf("eviction manager of node %q: no kubelet configuration", cfg.NodeName)
	case cfg.Clock == nil || cfg.Summary == nil || cfg.ActivePods == nil || cfg.KillPod == nil:
		return nil, fmt.Errorf("eviction manager of node %q: Clock, Summary, ActivePods and KillPod are all required", cfg.NodeName)
	case cfg.Images == nil || cfg.Containers == nil || cfg.Events == nil:
		return nil, fmt.Errorf("eviction manager of node %q: Images, Containers and Events are all required", cfg.NodeName)
	}
	thresholds, err := ParseThresholds(cfg.Kubelet)
	if err != nil {
		return nil, fmt.Errorf("eviction manager of node %q: %w; fix the kubelet configuration", cfg.NodeName, err)
	}
	transition := cfg.Kubelet.EvictionPressureTransitionPeriod.Duration
	if transition == 0 {
		transition = DefaultPressureTransitionPeriod
	}
	return &Manager{
		cfg: cfg, thresholds: thresholds, transition: transition, nodeRef: nodeRef(cfg.NodeName),
		nodeConditionsLastObservedAt: map[corev1.NodeConditionType]time.Time{},
		thresholdsFirstObservedAt:    map[thresholdKey]time.Time{},
	}, nil
}

// Run synchronizes every MonitoringInterval until ctx ends. Like the
// kubelet, it waits the interval after each cycle rather than ticking, so a
// slow cycle is never followed by a burst.
func (m *Manager) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		if _, err := m.Synchronize(ctx); err != nil {
			logger.Error(err, "Eviction manager: failed to synchronize")
		}
		select {
		case <-ctx.Done():
			return
		case <-m.cfg.Clock.After(MonitoringInterval):
		}
	}
}

// nodeRef is the kubelet's reference to its node in events.
func nodeRef(name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", Name: name, UID: types.UID(name)}
}

// IsUnderMemoryPressure reports the MemoryPressure condition.
func (m *Manager) IsUnderMemoryPressure() bool { return m.hasCondition(corev1.NodeMemoryPressure) }

// IsUnderDiskPressure reports the DiskPressure condition.
func (m *Manager) IsUnderDiskPressure() bool { return m.hasCondition(corev1.NodeDiskPressure) }

// IsUnderPIDPressure reports the PIDPressure condition.
func (m *Manager) IsUnderPIDPressure() bool { return m.hasCondition(corev1.NodePIDPressure) }

func (m *Manager) hasCondition(c corev1.NodeConditionType) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Contains(m.nodeConditions, c)
}

// Admit is the kubelet's eviction admit handler: under memory pressure only,
// it rejects BestEffort pods that do not tolerate the memory-pressure taint;
// under any other pressure it rejects every pod. Critical pods are always
// admitted. Reason and message are those the kubelet reports.
func (m *Manager) Admit(pod *corev1.Pod) (ok bool, reason, message string) {
	m.mu.RLock()
	conds := slices.Clone(m.nodeConditions)
	m.mu.RUnlock()
	return admit(pod, conds)
}

func admit(pod *corev1.Pod, conds []corev1.NodeConditionType) (bool, string, string) {
	if len(conds) == 0 || isCriticalPod(pod) {
		return true, "", ""
	}
	if len(conds) == 1 && conds[0] == corev1.NodeMemoryPressure {
		if podQOS(pod) != corev1.PodQOSBestEffort {
			return true, "", ""
		}
		taint := &corev1.Taint{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule}
		if v1helper.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations, taint, false) {
			return true, "", ""
		}
	}
	return false, Reason, fmt.Sprintf(nodeConditionMessageFmt, conds)
}

// Synchronize is one cycle of the kubelet's eviction control loop; it
// returns the pod it evicted, if any. Run calls it every interval; a fleet
// that drives many nodes from shared timers may call it instead.
func (m *Manager) Synchronize(ctx context.Context) (*corev1.Pod, error) {
	logger := klog.FromContext(ctx)
	if len(m.thresholds) == 0 {
		return nil, nil
	}
	activePods := m.cfg.ActivePods()
	summary, err := m.cfg.Summary(ctx)
	if err != nil {
		return nil, fmt.Errorf("eviction manager of node %s: no stats summary: %w", m.cfg.NodeName, err)
	}
	obs, stats := observe(summary)

	thresholds := thresholdsMet(m.thresholds, obs, false)
	if len(m.thresholdsMet) > 0 {
		thresholds = mergeThresholds(thresholds, thresholdsMet(m.thresholdsMet, obs, true))
	}
	now := m.cfg.Clock.Now()
	firstObserved := thresholdsFirstObservedAt(thresholds, m.thresholdsFirstObservedAt, now)
	lastObserved := nodeConditionsLastObservedAt(nodeConditions(thresholds), m.nodeConditionsLastObservedAt, now)
	conds := nodeConditionsObservedSince(lastObserved, m.transition, now)
	thresholds = thresholdsMetGracePeriod(thresholds, firstObserved, now)

	m.mu.Lock()
	m.nodeConditions = conds
	m.thresholdsFirstObservedAt = firstObserved
	m.nodeConditionsLastObservedAt = lastObserved
	m.thresholdsMet = thresholds
	updated := thresholdsUpdatedStats(thresholds, obs, m.lastObservations)
	m.lastObservations = obs
	m.mu.Unlock()

	if len(updated) == 0 {
		return nil, nil
	}
	sortByEvictionPriority(updated)
	reclaim := updated[0]
	res, _ := signalToResource(reclaim.Signal)
	logger.Info("Eviction manager: attempting to reclaim", "resourceName", res)
	m.cfg.Events.Eventf(m.nodeRef, corev1.EventTypeWarning, "EvictionThresholdMet", "Attempting to reclaim %s", res)

	if m.reclaimNodeLevelResources(ctx, reclaim.Signal) {
		logger.Info("Eviction manager: able to reduce resource pressure without evicting pods.", "resourceName", res)
		return nil, nil
	}
	if len(activePods) == 0 {
		logger.Error(nil, "Eviction manager: eviction thresholds have been met, but no pods are active to evict")
		return nil, nil
	}
	pods := slices.Clone(activePods)
	rankPods(pods, reclaim.Signal, stats, m.cfg.DedicatedImageFs)
	logger.Info("Eviction manager: pods ranked for eviction", "pods", klog.KObjSlice(pods))

	// At most one pod per cycle: the next cycle sees what this one freed.
	for _, pod := range pods {
		grace := int64(immediateEvictionGracePeriodSeconds)
		if !reclaim.isHard() {
			grace = int64(m.cfg.Kubelet.EvictionMaxPodGracePeriod)
			if pod.Spec.TerminationGracePeriodSeconds != nil {
				grace = min(grace, *pod.Spec.TerminationGracePeriodSeconds)
			}
		}
		message, annotations := evictionMessage(res, pod, stats, updated, obs)
		if m.evictPod(ctx, pod, grace, message, annotations) {
			m.cfg.Metrics.IncEvictions(string(reclaim.Signal))
			return pod, nil
		}
	}
	logger.Info("Eviction manager: unable to evict any pods from the node")
	return nil, nil
}

// reclaimNodeLevelResources runs the signal's node-level reclaimers and says
// whether that resolved every threshold, minimum reclaim included, so that
// no pod need be evicted.
func (m *Manager) reclaimNodeLevelResources(ctx context.Context, s Signal) bool {
	logger := klog.FromContext(ctx)
	if s == SignalMemoryAvailable || s == SignalPIDAvailable ||
		(m.cfg.DedicatedImageFs && (s == SignalNodeFsAvailable || s == SignalNodeFsInodesFree)) {
		return false
	}
	// The kubelet's order: dead containers first, as they hold images.
	if err := m.cfg.Containers.DeleteAllUnusedContainers(ctx); err != nil {
		logger.Info("Eviction manager: unexpected error when attempting to reduce resource pressure", "signal", s, "err", err)
	}
	if _, err := m.cfg.Images.DeleteUnusedImages(ctx); err != nil {
		logger.Info("Eviction manager: unexpected error when attempting to reduce resource pressure", "signal", s, "err", err)
	}
	summary, err := m.cfg.Summary(ctx)
	if err != nil {
		logger.Error(err, "Eviction manager: failed to get summary stats after resource reclaim")
		return false
	}
	obs, _ := observe(summary)
	return len(thresholdsMet(m.thresholds, obs, true)) == 0
}

// evictPod records the eviction and kills the pod; it reports false only
// for a critical pod, which is never evicted.
func (m *Manager) evictPod(ctx context.Context, pod *corev1.Pod, grace int64, message string, annotations map[string]string) bool {
	logger := klog.FromContext(ctx)
	if isCriticalPod(pod) {
		logger.Error(nil, "Eviction manager: cannot evict a critical pod", "pod", klog.KObj(pod))
		return false
	}
	m.cfg.Events.AnnotatedEventf(pod, annotations, corev1.EventTypeWarning, Reason, "%s", message)
	status := corev1.PodStatus{
		Phase: corev1.PodFailed, Reason: Reason, Message: message,
		Conditions: []corev1.PodCondition{{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, ObservedGeneration: pod.Generation,
			Reason: corev1.PodReasonTerminationByKubelet, Message: message,
			LastTransitionTime: metav1.NewTime(m.cfg.Clock.Now()),
		}},
	}
	if err := m.cfg.KillPod(ctx, pod, status, grace); err != nil {
		logger.Error(err, "Eviction manager: pod failed to evict", "pod", klog.KObj(pod))
	} else {
		logger.Info("Eviction manager: pod is evicted successfully", "pod", klog.KObj(pod))
	}
	return true
}
