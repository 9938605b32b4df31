package status

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/fleetlet/fleetlet/reports"
)

// syncPeriod is the kubelet's status manager batch interval: every pod whose
// status was not confirmed is retried this often, so a failed patch is never
// lost while the API server is away.
const syncPeriod = 10 * time.Second

// Config wires a Manager.
type Config struct {
	Client   kubernetes.Interface
	Clock    clock.WithTicker
	Recorder reports.Recorder
}

type podEntry struct {
	namespace, name string
	status          corev1.PodStatus
	version, synced uint64
	// terminated is set once the pod's containers and sandbox are stopped; a
	// terminated pod that is being deleted is then deleted for good.
	terminated bool
	deleted    bool
}

// Manager keeps the latest status of each pod on the node and sends it.
type Manager struct {
	cfg    Config
	mu     sync.Mutex
	pods   map[types.UID]*podEntry
	notify chan struct{}
}

// NewManager returns a Manager for cfg.
func NewManager(cfg Config) *Manager {
	return &Manager{cfg: cfg, pods: map[types.UID]*podEntry{}, notify: make(chan struct{}, 1)}
}

// SetPodStatus records the pod's newest status; it is sent only if it differs
// from the last one recorded.
func (m *Manager) SetPodStatus(pod *corev1.Pod, st corev1.PodStatus) {
	m.mu.Lock()
	e, ok := m.pods[pod.UID]
	if !ok {
		e = &podEntry{namespace: pod.Namespace, name: pod.Name}
		m.pods[pod.UID] = e
	}
	changed := !ok || !apiequality.Semantic.DeepEqual(e.status, st)
	if changed {
		e.status = st
		e.version++
	}
	m.mu.Unlock()
	if changed {
		if st.Phase == corev1.PodRunning {
			// Where the kubelet observes its pod start duration: the
			// recorder keeps the first stamp, the moment Running was held.
			m.cfg.Recorder.Mark(pod.UID, reports.RunningSet, m.cfg.Clock.Now())
		}
		m.kick()
	}
}

// Status returns the last status recorded for the pod.
func (m *Manager) Status(uid types.UID) (corev1.PodStatus, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.pods[uid]; ok {
		return e.status, true
	}
	return corev1.PodStatus{}, false
}

// TerminatePod marks the pod's runtime as torn down: once its final status
// is sent, a pod being deleted is removed from the API server.
func (m *Manager) TerminatePod(uid types.UID) {
	m.mu.Lock()
	if e, ok := m.pods[uid]; ok {
		e.terminated = true
		e.version++
	}
	m.mu.Unlock()
	m.kick()
}

// Forget drops the pod once it is gone from the API server.
func (m *Manager) Forget(uid types.UID) {
	m.mu.Lock()
	delete(m.pods, uid)
	m.mu.Unlock()
}

func (m *Manager) kick() {
	select {
	case m.notify <- struct{}{}:
	default:
	}
}

// Run sends pending statuses until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	ticker := m.cfg.Clock.NewTicker(syncPeriod)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.notify:
		case <-ticker.C():
		}
		m.syncBatch(ctx)
	}
}

func (m *Manager) syncBatch(ctx context.Context) {
	type work struct {
		uid types.UID
		e   podEntry
	}
	var pending []work
	m.mu.Lock()
	for uid, e := range m.pods {
		if e.version != e.synced && !e.deleted {
			pending = append(pending, work{uid, *e})
		}
	}
	m.mu.Unlock()
	for _, w := range pending {
		if ctx.Err() != nil {
			return
		}
		deleted, err := m.syncPod(ctx, w.uid, &w.e)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Failed to update pod status, will retry", "pod", klog.KRef(w.e.namespace, w.e.name), "err", err)
			continue
		}
		m.mu.Lock()
		if e, ok := m.pods[w.uid]; ok {
			e.synced = w.e.version
			e.deleted = e.deleted || deleted
		}
		m.mu.Unlock()
	}
}

// syncPod sends one pod's status: a GET for the API's current status (as the
// kubelet does, so the patch is computed against what the server holds),
// a strategic-merge patch of what differs, and, for a terminated pod that is
// being deleted, the final delete with grace period 0.
func (m *Manager) syncPod(ctx context.Context, uid types.UID, e *podEntry) (deleted bool, err error) {
	pods := m.cfg.Client.CoreV1().Pods(e.namespace)
	pod, err := pods.Get(ctx, e.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if pod.UID != uid {
		// A new pod with the same name: ours is gone.
		return true, nil
	}
	newStatus := mergeStatus(pod.Status, e.status)
	if !apiequality.Semantic.DeepEqual(pod.Status, newStatus) {
		patch, err := statusPatch(uid, pod.Status, newStatus)
		if err != nil {
			return false, err
		}
		// Stamped when the patch is sent, not when it returns: the API server
		// may deliver the change to watchers before its response reaches us,
		// and "reported" must never come after "observed".
		sent := m.cfg.Clock.Now()
		if _, err := pods.Patch(ctx, e.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			return false, fmt.Errorf("patching status of pod %s/%s: %w", e.namespace, e.name, err)
		}
		if newStatus.Phase == corev1.PodRunning {
			m.cfg.Recorder.Mark(uid, reports.RunningReported, sent)
		}
		if c := findCondition(newStatus.Conditions, corev1.PodReady); c != nil && c.Status == corev1.ConditionTrue {
			m.cfg.Recorder.Mark(uid, reports.ReadyReported, sent)
		}
	}
	if !e.terminated || pod.DeletionTimestamp == nil {
		return false, nil
	}
	err = pods.Delete(ctx, e.name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64),
		Preconditions:      metav1.NewUIDPreconditions(string(uid)),
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("deleting terminated pod %s/%s: %w", e.namespace, e.name, err)
	}
	return true, nil
}

// kubeletOwned reports whether the kubelet owns a pod condition; any other
// (PodScheduled, DisruptionTarget, readiness gates) is kept as the API has it.
func kubeletOwned(t corev1.PodConditionType) bool {
	switch t {
	case corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady:
		return true
	}
	return false
}

func mergeStatus(api, ours corev1.PodStatus) corev1.PodStatus {
	out := *ours.DeepCopy()
	out.Conditions = out.Conditions[:0]
	for _, c := range ours.Conditions {
		if kubeletOwned(c.Type) {
			out.Conditions = append(out.Conditions, c)
		}
	}
	// A DisruptionTarget the kubelet set (its eviction) goes out with the
	// terminal phase, as the kubelet's mergePodStatus sends it; otherwise
	// the API server's stands.
	ownDisruption := findCondition(ours.Conditions, corev1.DisruptionTarget)
	if ownDisruption != nil {
		out.Conditions = append(out.Conditions, *ownDisruption)
	}
	for _, c := range api.Conditions {
		if !kubeletOwned(c.Type) && (ownDisruption == nil || c.Type != corev1.DisruptionTarget) {
			out.Conditions = append(out.Conditions, c)
		}
	}
	return out
}

// statusPatch is the kubelet's pod status patch: a two-way strategic merge
// patch whose new side carries the UID, so the server rejects it if the name
// now belongs to another pod. Written here because the kubelet's helper lives
// in k8s.io/kubernetes, which is not importable as a library.
func statusPatch(uid types.UID, oldStatus, newStatus corev1.PodStatus) ([]byte, error) {
	oldData, err := json.Marshal(corev1.Pod{Status: oldStatus})
	if err != nil {
		return nil, err
	}
	newData, err := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: newStatus})
	if err != nil {
		return nil, err
	}
	return strategicpatch.CreateTwoWayMergePatch(oldData, newData, corev1.Pod{})
}
