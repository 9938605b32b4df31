// Package allocation is the kubelet's allocation manager
// (pkg/kubelet/allocation) for in-place pod resize, with the resize
// conditions that the kubelet's status manager caches beside it: what each
// admitted pod was allocated (the resources its workers run it with, which
// differ from its spec while a resize waits), what the runtime was last
// told (actuated), the resizes waiting for room on the node, and the
// PodResizePending and PodResizeInProgress conditions with their events.
//
// The kubelet checkpoints allocations to disk so that a restart keeps them;
// an agent keeps them in memory, so a restarted agent allocates what the
// spec asks, as a kubelet whose checkpoint was lost.
package allocation

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/clock"
)

// The kubelet's resize event reasons (pkg/kubelet/events).
const (
	ResizeDeferred   = "ResizeDeferred"
	ResizeInfeasible = "ResizeInfeasible"
	ResizeCompleted  = "ResizeCompleted"
	ResizeStarted    = "ResizeStarted"
	ResizeError      = "ResizeError"
)

// RetryDelay is the allocation manager's: pending resizes are retried
// whenever a pod is updated or removed, and at least this often.
const RetryDelay = 3 * time.Minute

// ResourceInfo is what a pod was allocated (or actuated): each resizable
// container's resources by name, and the pod-level resources. Of the
// actuated, only containers' are kept: the pod's cgroup in this model is
// computed from the allocated pod, so it is actuated with it.
type ResourceInfo struct {
	Containers map[string]corev1.ResourceRequirements
	Pod        *corev1.ResourceRequirements
}

// ResourceInfoForPod is the kubelet's: every app container and every init
// container (InPlacePodVerticalScalingInitContainers is GA in 1.37, so
// regular init containers are resizable too), and the pod-level resources
// (InPlacePodLevelResourcesVerticalScaling, on by default).
func ResourceInfoForPod(pod *corev1.Pod) ResourceInfo {
	info := ResourceInfo{Containers: make(map[string]corev1.ResourceRequirements, len(pod.Spec.Containers)+len(pod.Spec.InitContainers))}
	if pod.Spec.Resources != nil {
		info.Pod = pod.Spec.Resources.DeepCopy()
	}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			info.Containers[list[i].Name] = *list[i].Resources.DeepCopy()
		}
	}
	return info
}

// Admit is the node's admission of pod (the resized spec) beside the other
// pods as allocated: the kubelet runs its admit handlers with
// ResizeOperation, and a resize that does not fit is deferred with the
// handler's message.
type Admit func(pod *corev1.Pod, others []*corev1.Pod) (ok bool, reason, message string)

// Events receives the resize events.
type Events interface {
	Event(obj runtime.Object, eventType, reason, message string)
}

// Config wires a Manager.
type Config struct {
	Clock clock.Clock
	Admit Admit
	// ActivePods are the pods admitted and not terminated.
	ActivePods func() []*corev1.Pod
	// GetPod is the newest spec of a pod the node holds.
	GetPod func(types.UID) (*corev1.Pod, bool)
	Events Events
}

type conditions struct {
	pending, inProgress *corev1.PodCondition
}

// Manager holds the allocations. It is safe for concurrent use.
type Manager struct {
	cfg Config

	mu         sync.Mutex
	allocated  map[types.UID]ResourceInfo
	actuated   map[types.UID]ResourceInfo
	pending    []types.UID
	conditions map[types.UID]conditions
}

// NewManager returns an empty Manager.
func NewManager(cfg Config) *Manager {
	return &Manager{
		cfg: cfg, allocated: map[types.UID]ResourceInfo{}, actuated: map[types.UID]ResourceInfo{},
		conditions: map[types.UID]conditions{},
	}
}

// SetAllocated records pod's spec as its allocation: at admission, and when
// a resize is accepted.
func (m *Manager) SetAllocated(pod *corev1.Pod) {
	m.mu.Lock()
	m.allocated[pod.UID] = ResourceInfoForPod(pod)
	m.mu.Unlock()
}

// HasAllocation reports whether pod was admitted with an allocation.
func (m *Manager) HasAllocation(uid types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.allocated[uid]
	return ok
}

// RemovePod forgets everything of a pod gone from the node.
func (m *Manager) RemovePod(uid types.UID) {
	m.mu.Lock()
	delete(m.allocated, uid)
	delete(m.actuated, uid)
	delete(m.conditions, uid)
	m.pending = slices.DeleteFunc(m.pending, func(u types.UID) bool { return u == uid })
	m.mu.Unlock()
}

// UpdatePodFromAllocation is the kubelet's: pod with its resources replaced
// by what it was allocated, and whether that differs from its spec (a
// resize not yet accepted). A pod without an allocation is returned as is.
// Pod workers run the allocated pod, and its status reports it.
func (m *Manager) UpdatePodFromAllocation(pod *corev1.Pod) (*corev1.Pod, bool) {
	m.mu.Lock()
	info, ok := m.allocated[pod.UID]
	m.mu.Unlock()
	if !ok {
		return pod, false
	}
	return fromAllocation(pod, info)
}

func fromAllocation(pod *corev1.Pod, info ResourceInfo) (*corev1.Pod, bool) {
	differs := !apiequality.Semantic.DeepEqual(pod.Spec.Resources, info.Pod)
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if alloc, ok := info.Containers[list[i].Name]; ok && !apiequality.Semantic.DeepEqual(list[i].Resources, alloc) {
				differs = true
			}
		}
	}
	if !differs {
		return pod, false
	}
	pod = pod.DeepCopy()
	pod.Spec.Resources = info.Pod.DeepCopy()
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if alloc, ok := info.Containers[list[i].Name]; ok {
				list[i].Resources = *alloc.DeepCopy()
			}
		}
	}
	return pod, true
}

// AllocatedPods are the active pods that have an allocation, as allocated:
// what a resize is admitted against.
func (m *Manager) AllocatedPods() []*corev1.Pod {
	active := m.cfg.ActivePods()
	out := make([]*corev1.Pod, 0, len(active))
	for _, p := range active {
		m.mu.Lock()
		info, ok := m.allocated[p.UID]
		m.mu.Unlock()
		if ok {
			p, _ = fromAllocation(p, info)
			out = append(out, p)
		}
	}
	return out
}

// PushPendingResize queues a pod whose spec asks for other resources than
// it was allocated.
func (m *Manager) PushPendingResize(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Contains(m.pending, uid) {
		m.pending = append(m.pending, uid)
	}
}

// HasPendingResizes reports whether any resize waits.
func (m *Manager) HasPendingResizes() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pending) > 0
}

// RetryPendingResizes is the kubelet's retryPendingResizes: each pending
// resize, in the kubelet's order, is admitted against the other pods as
// allocated. One that fits is allocated, and its pod gets the
// PodResizeInProgress condition and a ResizeStarted event; one that does
// not gets PodResizePending (Deferred, with the admission's message, or
// Infeasible) and stays queued if deferred. It returns the pods to sync
// now: those whose allocation or resize conditions changed.
func (m *Manager) RetryPendingResizes() []*corev1.Pod {
	m.mu.Lock()
	queue := slices.Clone(m.pending)
	m.mu.Unlock()
	var pods []*corev1.Pod
	for _, uid := range queue {
		if p, ok := m.cfg.GetPod(uid); ok {
			pods = append(pods, p)
		}
	}
	m.sortPending(pods)

	var keep []types.UID
	var toSync []*corev1.Pod
	for _, pod := range pods {
		before := m.Conditions(pod.UID)
		allocated, deferred := m.handleResize(pod)
		if deferred {
			keep = append(keep, pod.UID)
		}
		if allocated || !apiequality.Semantic.DeepEqual(before, m.Conditions(pod.UID)) {
			toSync = append(toSync, pod)
		}
	}
	m.mu.Lock()
	// Pods queued while this ran stay queued.
	for _, uid := range m.pending {
		if !slices.Contains(queue, uid) && !slices.Contains(keep, uid) {
			keep = append(keep, uid)
		}
	}
	m.pending = keep
	m.mu.Unlock()
	return toSync
}

// handleResize is the kubelet's handlePodResourcesResize.
func (m *Manager) handleResize(pod *corev1.Pod) (allocated, deferred bool) {
	if _, updated := m.UpdatePodFromAllocation(pod); !updated {
		// The spec went back to what was allocated: nothing is pending.
		m.ClearPending(pod.UID)
		return false, false
	}
	others := slices.DeleteFunc(m.AllocatedPods(), func(p *corev1.Pod) bool { return p.UID == pod.UID })
	ok, reason, message := m.cfg.Admit(pod, others)
	if ok {
		m.SetAllocated(pod)
		m.ClearPending(pod.UID)
		m.ClearInProgress(pod.UID)
		m.SetInProgress(pod.UID, "", "", pod.Generation)
		m.cfg.Events.Event(pod, corev1.EventTypeNormal, ResizeStarted, ResizeMessage(pod, pod.Generation, "", "Pod resize started"))
		return true, false
	}
	if reason != corev1.PodReasonInfeasible {
		reason = corev1.PodReasonDeferred
	}
	if m.SetPending(pod.UID, reason, message, pod.Generation) {
		event := ResizeDeferred
		if reason == corev1.PodReasonInfeasible {
			event = ResizeInfeasible
		}
		m.cfg.Events.Event(pod, corev1.EventTypeWarning, event, ResizeMessage(pod, pod.Generation, message, "Pod resize "+reason))
	}
	return false, reason == corev1.PodReasonDeferred
}

// sortPending is the kubelet's sortPendingResizes: resizes that do not
// increase requests first, then higher priority, then Guaranteed before
// Burstable, then the longest pending.
func (m *Manager) sortPending(pods []*corev1.Pod) {
	increasing := make(map[types.UID]bool, len(pods))
	since := make(map[types.UID]metav1.Time, len(pods))
	for _, p := range pods {
		increasing[p.UID] = m.increasesRequests(p)
		m.mu.Lock()
		if c := m.conditions[p.UID].pending; c != nil {
			since[p.UID] = c.LastTransitionTime
		}
		m.mu.Unlock()
	}
	slices.SortStableFunc(pods, func(a, b *corev1.Pod) int {
		if increasing[a.UID] != increasing[b.UID] {
			if !increasing[a.UID] {
				return -1
			}
			return 1
		}
		pa, pb := ptrInt(a.Spec.Priority), ptrInt(b.Spec.Priority)
		if pa != pb {
			return cmp.Compare(pb, pa)
		}
		ga, gb := a.Status.QOSClass == corev1.PodQOSGuaranteed, b.Status.QOSClass == corev1.PodQOSGuaranteed
		if ga != gb {
			if ga {
				return -1
			}
			return 1
		}
		ta, oka := since[a.UID]
		tb, okb := since[b.UID]
		switch {
		case !oka && !okb:
			return 0
		case !oka:
			return 1
		case !okb:
			return -1
		}
		return ta.Compare(tb.Time)
	})
}

func ptrInt(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

func (m *Manager) increasesRequests(pod *corev1.Pod) bool {
	allocated, updated := m.UpdatePodFromAllocation(pod)
	if !updated {
		return false
	}
	before := resourcehelper.PodRequests(allocated, resourcehelper.PodResourcesOptions{})
	after := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	return after.Memory().Cmp(*before.Memory()) > 0 || after.Cpu().Cmp(*before.Cpu()) > 0
}

// Conditions are the pod's resize conditions, PodResizePending first, as
// the status manager lists them for generateAPIPodStatus.
func (m *Manager) Conditions(uid types.UID) []corev1.PodCondition {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.conditions[uid]
	var out []corev1.PodCondition
	if c.pending != nil {
		out = append(out, *c.pending)
	}
	if c.inProgress != nil {
		out = append(out, *c.inProgress)
	}
	return out
}

// IsDeferred reports whether the pod's resize waits for room.
func (m *Manager) IsDeferred(uid types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.conditions[uid].pending
	return c != nil && c.Reason == corev1.PodReasonDeferred
}

// updatedCondition is the status manager's updatedPodResizeCondition.
func (m *Manager) updatedCondition(t corev1.PodConditionType, old *corev1.PodCondition, reason, message string, gen int64) *corev1.PodCondition {
	now := metav1.NewTime(m.cfg.Clock.Now())
	transition := now
	if old != nil && old.Reason == reason {
		transition = old.LastTransitionTime
	}
	return &corev1.PodCondition{
		Type: t, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: transition,
		ObservedGeneration: gen, Reason: reason, Message: message,
	}
}

// SetPending sets PodResizePending and reports whether its reason or
// observed generation changed (when the kubelet sends an event).
func (m *Manager) SetPending(uid types.UID, reason, message string, gen int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.conditions[uid]
	prev := c.pending
	c.pending = m.updatedCondition(corev1.PodResizePending, prev, reason, message, gen)
	m.conditions[uid] = c
	return prev == nil || prev.Reason != reason || prev.ObservedGeneration != gen
}

// ClearPending removes PodResizePending.
func (m *Manager) ClearPending(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.conditions[uid]; ok {
		c.pending = nil
		m.conditions[uid] = c
	}
}

// SetInProgress sets PodResizeInProgress as the status manager does: an
// existing condition keeps its observed generation, and its reason and
// message unless new ones are given. It returns the condition's observed
// generation and whether it changed.
func (m *Manager) SetInProgress(uid types.UID, reason, message string, gen int64) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.conditions[uid]
	prev := c.inProgress
	if prev != nil {
		if reason == "" && message == "" {
			reason, message = prev.Reason, prev.Message
		}
		gen = prev.ObservedGeneration
	}
	c.inProgress = m.updatedCondition(corev1.PodResizeInProgress, prev, reason, message, gen)
	m.conditions[uid] = c
	if prev == nil {
		return gen, true
	}
	p := *prev
	p.LastProbeTime, p.LastTransitionTime = c.inProgress.LastProbeTime, c.inProgress.LastTransitionTime
	return gen, !apiequality.Semantic.DeepEqual(&p, c.inProgress)
}

// ClearInProgress removes PodResizeInProgress and returns its observed
// generation, and whether there was one.
func (m *Manager) ClearInProgress(uid types.UID) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.conditions[uid]
	if !ok || c.inProgress == nil {
		return 0, false
	}
	gen := c.inProgress.ObservedGeneration
	c.inProgress = nil
	m.conditions[uid] = c
	return gen, true
}

// ClearConditions drops both conditions of a pod that turned terminal, as
// determinePodResizeStatus does.
func (m *Manager) ClearConditions(uid types.UID) {
	m.mu.Lock()
	delete(m.conditions, uid)
	m.mu.Unlock()
}

// ActuatedContainer is what the runtime was last told of a container's
// resources: set when the container starts and after each successful
// UpdateContainerResources.
func (m *Manager) ActuatedContainer(uid types.UID, name string) (corev1.ResourceRequirements, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.actuated[uid].Containers[name]
	return r, ok
}

// SetActuatedContainer records a container's actuated resources.
func (m *Manager) SetActuatedContainer(uid types.UID, name string, res corev1.ResourceRequirements) {
	m.mu.Lock()
	defer m.mu.Unlock()
	info := m.actuated[uid]
	if info.Containers == nil {
		info.Containers = map[string]corev1.ResourceRequirements{}
	}
	info.Containers[name] = *res.DeepCopy()
	m.actuated[uid] = info
}

// ResizeMessage is the kubelet's podResizeMessage: a prefix and the
// resources the spec asks for, as JSON.
func ResizeMessage(pod *corev1.Pod, generation int64, errorMessage, prefix string) string {
	type containerAllocation struct {
		Name      string                      `json:"name"`
		Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	}
	summary := struct {
		InitContainers []containerAllocation `json:"initContainers,omitempty"`
		Containers     []containerAllocation `json:"containers,omitempty"`
		Generation     int64                 `json:"generation"`
		Error          string                `json:"error,omitempty"`
	}{Generation: generation, Error: errorMessage}
	for _, c := range pod.Spec.InitContainers {
		summary.InitContainers = append(summary.InitContainers, containerAllocation{c.Name, c.Resources})
	}
	for _, c := range pod.Spec.Containers {
		summary.Containers = append(summary.Containers, containerAllocation{c.Name, c.Resources})
	}
	b, err := json.Marshal(summary)
	if err != nil {
		return prefix
	}
	return fmt.Sprintf("%s: %s", prefix, b)
}
