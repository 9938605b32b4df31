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

	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
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
	// CouldHaveRunningContainers is the kubelet's PodDeletionSafetyProvider:
	// whether the pod's containers may still run, that is until its worker
	// has stopped them. A terminal phase is not reported before that. nil
	// means never.
	CouldHaveRunningContainers func(types.UID) bool
}

type podEntry struct {
	namespace, name string
	status          corev1.PodStatus
	version, synced uint64
	// finished is the kubelet's podIsFinished: TerminatePod was called, the
	// pod's runtime and volumes are torn down, and a pod being deleted is
	// deleted for good once the API holds its terminal phase.
	finished bool
	deleted  bool
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

// SetPodStatus records the pod's newest status, with the pod's generation
// as observed, as the kubelet's SetPodStatus does. It is sent if it differs
// from the last one recorded, and always while the pod is being deleted:
// the kubelet forces those updates, so that a pod that stopped running
// still reaches the API server and its deletion (each costs a GET, and a
// PATCH only if the API's status differs).
func (m *Manager) SetPodStatus(pod *corev1.Pod, st corev1.PodStatus) {
	st = *st.DeepCopy()
	st.ObservedGeneration = pod.Generation
	m.mu.Lock()
	e, ok := m.pods[pod.UID]
	if !ok {
		e = &podEntry{namespace: pod.Namespace, name: pod.Name}
		m.pods[pod.UID] = e
	}
	m.keepStartTime(e, &st)
	changed := !ok || pod.DeletionTimestamp != nil || !apiequality.Semantic.DeepEqual(e.status, st)
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

// keepStartTime is updateStatusInternal's rule: the start time never
// changes once set, and a status without one gets it now; an older
// observed generation is not sent back.
func (m *Manager) keepStartTime(e *podEntry, st *corev1.PodStatus) {
	switch {
	case e.status.StartTime != nil && !e.status.StartTime.IsZero():
		st.StartTime = e.status.StartTime.DeepCopy()
	case st.StartTime == nil || st.StartTime.IsZero():
		now := metav1.NewTime(m.cfg.Clock.Now())
		st.StartTime = &now
	}
	st.ObservedGeneration = max(st.ObservedGeneration, e.status.ObservedGeneration)
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

// The kubelet's status of a container it could not find when the pod ended.
const (
	reasonContainerStatusUnknown  = "ContainerStatusUnknown"
	messageContainerStatusUnknown = "The container could not be located when the pod was terminated"
	exitCodeContainerUnknown      = 137
)

// TerminatePod is the kubelet's TerminatePod, called once the pod's
// containers, sandbox and volumes are torn down: the final status, in
// which every container the pod may have started but has no terminated
// state for is reported failed, and the phase is terminal (Failed unless
// it already was). Sent at once (forced, as the kubelet marks the pod
// finished), it lets a pod being deleted be deleted for good.
func (m *Manager) TerminatePod(pod *corev1.Pod) {
	m.mu.Lock()
	e, ok := m.pods[pod.UID]
	if !ok {
		e = &podEntry{namespace: pod.Namespace, name: pod.Name, status: *pod.Status.DeepCopy()}
		m.pods[pod.UID] = e
	}
	st := e.status.DeepCopy()
	unknown := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		Reason: reasonContainerStatusUnknown, Message: messageContainerStatusUnknown, ExitCode: exitCodeContainerUnknown,
	}}
	if hasPodInitialized(pod) {
		for i := range st.ContainerStatuses {
			if st.ContainerStatuses[i].State.Terminated == nil {
				st.ContainerStatuses[i].State = *unknown.DeepCopy()
			}
		}
	}
	for i := range initializedContainers(st.InitContainerStatuses) {
		if st.InitContainerStatuses[i].State.Terminated == nil {
			st.InitContainerStatuses[i].State = *unknown.DeepCopy()
		}
	}
	if !isTerminal(st.Phase) {
		st.Phase = corev1.PodFailed
	}
	m.keepStartTime(e, st)
	e.status = *st
	e.finished = true
	e.version++
	m.mu.Unlock()
	m.kick()
}

// hasPodInitialized is the kubelet's: whether the pod, by the API's
// status, ever got past its init containers, so that its app containers
// may have run.
func hasPodInitialized(pod *corev1.Pod) bool {
	if len(pod.Spec.InitContainers) == 0 {
		return true
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.LastTerminationState.Terminated != nil || cs.State.Waiting == nil {
			return true
		}
	}
	n := len(pod.Status.InitContainerStatuses)
	if n == 0 || n > len(pod.Spec.InitContainers) {
		return false
	}
	cs := pod.Status.InitContainerStatuses[n-1]
	if kuberuntime.IsSidecar(&pod.Spec.InitContainers[n-1]) {
		return cs.State.Running != nil && cs.Started != nil && *cs.Started
	}
	for _, t := range []*corev1.ContainerStateTerminated{cs.LastTerminationState.Terminated, cs.State.Terminated} {
		if t != nil && t.ExitCode == 0 {
			return true
		}
	}
	return false
}

// initializedContainers is the kubelet's: the init container statuses but
// the trailing ones that never left waiting (at least the first).
func initializedContainers(statuses []corev1.ContainerStatus) []corev1.ContainerStatus {
	for i := len(statuses) - 1; i >= 0; i-- {
		if statuses[i].State.Waiting == nil || statuses[i].LastTerminationState.Terminated != nil {
			return statuses[:i+1]
		}
	}
	if len(statuses) > 0 {
		return statuses[:1]
	}
	return nil
}

func isTerminal(p corev1.PodPhase) bool { return p == corev1.PodSucceeded || p == corev1.PodFailed }

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
		done, deleted, err := m.syncPod(ctx, w.uid, &w.e)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Failed to update pod status, will retry", "pod", klog.KRef(w.e.namespace, w.e.name), "err", err)
			continue
		}
		m.mu.Lock()
		if e, ok := m.pods[w.uid]; ok {
			if done {
				e.synced = w.e.version
			}
			e.deleted = e.deleted || deleted
		}
		m.mu.Unlock()
	}
}

// syncPod is the kubelet's status manager syncPod: a GET for the API's
// current status (the patch is computed against what the server holds), a
// strategic-merge patch if the status differs, and, for a finished pod
// being deleted whose terminal phase the API holds (canBeDeleted), the
// final delete with grace period 0. done is false when that delete waits
// for the phase: the periodic sync tries again.
func (m *Manager) syncPod(ctx context.Context, uid types.UID, e *podEntry) (done, deleted bool, err error) {
	logger := klog.FromContext(ctx)
	pods := m.cfg.Client.CoreV1().Pods(e.namespace)
	pod, err := pods.Get(ctx, e.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, true, nil
	}
	if err != nil {
		return false, false, err
	}
	if pod.UID != uid {
		// A new pod with the same name: ours is gone.
		return true, true, nil
	}
	couldRun := m.cfg.CouldHaveRunningContainers != nil && m.cfg.CouldHaveRunningContainers(uid)
	newStatus := mergeStatus(pod.Status, e.status, couldRun, m.cfg.Clock.Now())
	patch, err := statusPatch(uid, pod.Status, newStatus)
	if err != nil {
		return false, false, err
	}
	if !isEmptyPatch(uid, patch) {
		logger.V(3).Info("Patch status for pod", "pod", klog.KObj(pod), "podUID", uid, "patch", string(patch))
		// Stamped when the patch is sent, not when it returns: the API server
		// may deliver the change to watchers before its response reaches us,
		// and "reported" must never come after "observed".
		sent := m.cfg.Clock.Now()
		patched, err := pods.Patch(ctx, e.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
		if err != nil {
			return false, false, fmt.Errorf("patching status of pod %s/%s: %w", e.namespace, e.name, err)
		}
		pod = patched
		if newStatus.Phase == corev1.PodRunning {
			m.cfg.Recorder.Mark(uid, reports.RunningReported, sent)
		}
		if c := findCondition(newStatus.Conditions, corev1.PodReady); c != nil && c.Status == corev1.ConditionTrue {
			m.cfg.Recorder.Mark(uid, reports.ReadyReported, sent)
		}
	}
	if !e.finished || pod.DeletionTimestamp == nil {
		return true, false, nil
	}
	if !isTerminal(pod.Status.Phase) {
		logger.V(3).Info("Delaying pod deletion as the phase is non-terminal", "pod", klog.KObj(pod), "phase", pod.Status.Phase, "localPhase", e.status.Phase)
		return false, false, nil
	}
	err = pods.Delete(ctx, e.name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64),
		Preconditions:      metav1.NewUIDPreconditions(string(uid)),
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return false, false, fmt.Errorf("deleting terminated pod %s/%s: %w", e.namespace, e.name, err)
	}
	logger.V(3).Info("Pod fully terminated and removed from etcd", "pod", klog.KObj(pod))
	return true, true, nil
}

// kubeletOwned reports whether the kubelet owns a pod condition
// (PodConditionByKubelet): it sets them, and drops any it does not set.
// Any other (DisruptionTarget, readiness gates' conditions) is kept as the
// API has it.
func kubeletOwned(t corev1.PodConditionType) bool {
	switch t {
	case corev1.PodScheduled, corev1.PodReady, corev1.PodInitialized, corev1.ContainersReady,
		corev1.PodResizeInProgress, corev1.PodResizePending, corev1.PodReadyToStartContainers:
		return true
	}
	return false
}

// mergeStatus is the kubelet's mergePodStatus: the API's conditions the
// kubelet does not own, then ours; a terminal phase (with a DisruptionTarget
// the kubelet set) only once no container could still run, the API's phase
// until then; and a terminal phase never with Ready True.
func mergeStatus(api, ours corev1.PodStatus, couldHaveRunningContainers bool, now time.Time) corev1.PodStatus {
	out := *ours.DeepCopy()
	out.Conditions = make([]corev1.PodCondition, 0, len(api.Conditions)+len(ours.Conditions))
	for _, c := range api.Conditions {
		if !kubeletOwned(c.Type) {
			out.Conditions = append(out.Conditions, c)
		}
	}
	toTerminal := !isTerminal(api.Phase) && isTerminal(ours.Phase)
	for _, c := range ours.Conditions {
		switch {
		case kubeletOwned(c.Type):
			out.Conditions = append(out.Conditions, c)
		case c.Type == corev1.DisruptionTarget && toTerminal && !couldHaveRunningContainers:
			// Sent with the terminal phase: its time is then.
			if old := findCondition(api.Conditions, c.Type); old == nil || old.Status != c.Status {
				c.LastTransitionTime = metav1.NewTime(now)
			} else {
				c.LastTransitionTime = old.LastTransitionTime
			}
			out.Conditions = replaceOrAppend(out.Conditions, c)
		}
	}
	if toTerminal && couldHaveRunningContainers {
		out.Phase, out.Reason, out.Message = api.Phase, api.Reason, api.Message
	}
	if isTerminal(out.Phase) {
		reason := reasonPodCompleted
		if out.Phase == corev1.PodFailed {
			reason = reasonPodFailed
		}
		for i := range out.Conditions {
			c := &out.Conditions[i]
			if (c.Type == corev1.PodReady || c.Type == corev1.ContainersReady) && c.Status == corev1.ConditionTrue {
				c.Status, c.Reason, c.Message = corev1.ConditionFalse, reason, ""
				c.LastTransitionTime = metav1.NewTime(now)
			}
		}
	}
	return out
}

func replaceOrAppend(conds []corev1.PodCondition, c corev1.PodCondition) []corev1.PodCondition {
	for i := range conds {
		if conds[i].Type == c.Type {
			conds[i] = c
			return conds
		}
	}
	return append(conds, c)
}

// isEmptyPatch tells the patch that changes nothing: the kubelet sends
// none then (PatchPodStatus's unchanged).
func isEmptyPatch(uid types.UID, patch []byte) bool {
	return string(patch) == fmt.Sprintf(`{"metadata":{"uid":%q}}`, uid)
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
