package nodeagent

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/fleetlet/fleetlet/nodeagent/staticpods"
	podstatus "github.com/fleetlet/fleetlet/nodeagent/status"
	"github.com/fleetlet/fleetlet/reports"
)

// housekeepingPeriod is the kubelet's housekeeping interval: a mirror pod
// left without its static pod whose deletion failed is tried again after
// it.
const housekeepingPeriod = 2 * time.Second

// staticPods is what the kubelet's pod manager and pod workers know of the
// node's static pods and mirror pods: the static pods its file source
// holds, the mirror pods the API server shows, which static pod of a full
// name has started (only one at a time: a replaced static pod starts once
// the one before it has terminated), and each static pod's last status,
// which the status manager sends to its mirror pod.
type staticPods struct {
	mu sync.Mutex
	// ctx is the agent's while it runs, for the API calls made outside a
	// pod's sync (deleting orphaned mirror pods).
	ctx context.Context
	// current are the static pods the source holds, by UID; byName the
	// current one of each full name.
	current map[types.UID]*corev1.Pod
	byName  map[string]types.UID
	// mirrors are the mirror pods of the node's pod watch, by full name.
	mirrors map[string]*corev1.Pod
	// started is the static pod started under each full name, until its
	// worker has finished; waiting are those admitted after it, in order.
	started map[string]types.UID
	waiting map[string][]types.UID
	// statuses are the static pods' last statuses, current or terminating.
	statuses map[types.UID]corev1.PodStatus
	// known are the static pods current or terminating, until their
	// worker has finished; mirrorUIDs the mirror pods in the watch. Their
	// milestones are not the load's.
	known, mirrorUIDs sets.Set[types.UID]
	// listed is set once the static pod source has been read, or at once
	// without one: mirror pods without a static pod are deleted only then.
	listed bool
	// deleting are the mirror pods whose deletion is in flight.
	deleting sets.Set[string]
}

func newStaticPods(hasSource bool) *staticPods {
	return &staticPods{
		current: map[types.UID]*corev1.Pod{}, byName: map[string]types.UID{}, mirrors: map[string]*corev1.Pod{},
		started: map[string]types.UID{}, waiting: map[string][]types.UID{}, statuses: map[types.UID]corev1.PodStatus{},
		known: sets.New[types.UID](), mirrorUIDs: sets.New[types.UID](), deleting: sets.New[string](), listed: !hasSource,
	}
}

// newStaticPodSource makes the agent's static pod source, if it has one:
// the fleet's FileSource of its pool (cfg.StaticPods) or, on a node of its
// own, one that reads kc.StaticPodPath.
func (a *Agent) newStaticPodSource() {
	a.mirrorClient = staticpods.NewMirrorClient(a.cfg.Client, a.cfg.NodeName, a.getNode)
	files := a.cfg.StaticPods
	if files == nil && a.cfg.Kubelet.StaticPodPath != "" {
		files = staticpods.NewFileSource(staticpods.FileSourceConfig{
			Path: a.cfg.Kubelet.StaticPodPath, Period: a.cfg.Kubelet.FileCheckFrequency.Duration, Clock: a.cfg.Clock,
		})
		a.staticFiles = files
	}
	if files == nil {
		return
	}
	a.staticSource = staticpods.NewNodeSource(staticpods.NodeSourceConfig{
		NodeName: a.cfg.NodeName, Files: files, Clock: a.cfg.Clock,
		Handler: staticpods.Handler{
			Add: a.onStaticPodAdd, Update: a.onStaticPodUpdate, Remove: a.onStaticPodRemove, Listed: a.onStaticPodsListed,
		},
	})
}

// hasStaticPodSource reports whether the agent's configuration gives it
// static pods.
func (c *Config) hasStaticPodSource() bool {
	return c.StaticPods != nil || (c.Kubelet != nil && c.Kubelet.StaticPodPath != "")
}

// staticPodPart is the runnable of the static pod source: it keeps the
// agent's context for mirror pod clean-ups, then subscribes the node's
// source, if it has one.
type staticPodPart struct{ a *Agent }

// Start implements runnable.
func (p staticPodPart) Start(ctx context.Context) error {
	p.a.static.mu.Lock()
	p.a.static.ctx = ctx
	p.a.static.mu.Unlock()
	if p.a.staticSource != nil {
		return p.a.staticSource.Start(ctx)
	}
	return nil
}

// Wait implements runnable.
func (p staticPodPart) Wait() {
	if p.a.staticSource != nil {
		p.a.staticSource.Wait()
	}
}

// onStaticPodAdd is the kubelet's HandlePodAdditions for a static pod:
// admitted as any pod, then started unless another static pod of its full
// name has yet to terminate.
func (a *Agent) onStaticPodAdd(pod *corev1.Pod) {
	s := a.static
	name := staticpods.FullName(pod)
	s.mu.Lock()
	s.current[pod.UID] = pod
	s.byName[name] = pod.UID
	s.known.Insert(pod.UID)
	s.mu.Unlock()
	a.setPod(pod)
	if !a.admit(pod) {
		return
	}
	s.mu.Lock()
	if uid, ok := s.started[name]; ok && uid != pod.UID {
		s.waiting[name] = append(s.waiting[name], pod.UID)
		s.mu.Unlock()
		return
	}
	s.started[name] = pod.UID
	s.mu.Unlock()
	a.workers.UpdatePod(pod)
}

// onStaticPodUpdate is a static pod whose manifest changed but kept its UID
// (one that sets metadata.uid).
func (a *Agent) onStaticPodUpdate(pod *corev1.Pod) {
	s := a.static
	name := staticpods.FullName(pod)
	s.mu.Lock()
	s.current[pod.UID] = pod
	s.byName[name] = pod.UID
	started := s.started[name] == pod.UID
	s.mu.Unlock()
	a.setPod(pod)
	if started && !a.isRejected(pod.UID) {
		a.workers.UpdatePod(pod)
	}
}

// onStaticPodRemove is the kubelet's HandlePodRemoves for a static pod
// whose manifest went: its worker stops it with the pod's grace period,
// as deletePod does. Its mirror pod is deleted once it has terminated.
func (a *Agent) onStaticPodRemove(pod *corev1.Pod) {
	s := a.static
	name := staticpods.FullName(pod)
	s.mu.Lock()
	delete(s.current, pod.UID)
	if s.byName[name] == pod.UID {
		delete(s.byName, name)
	}
	started := s.started[name] == pod.UID
	s.waiting[name] = slices.DeleteFunc(s.waiting[name], func(uid types.UID) bool { return uid == pod.UID })
	if len(s.waiting[name]) == 0 {
		delete(s.waiting, name)
	}
	if !started {
		// It never ran, or has terminated already: nothing to stop. Its
		// mirror pod, if orphaned now, goes once the source has listed.
		delete(s.statuses, pod.UID)
		s.known.Delete(pod.UID)
	}
	s.mu.Unlock()
	a.mu.Lock()
	delete(a.pods, pod.UID)
	delete(a.admitted, pod.UID)
	delete(a.rejected, pod.UID)
	a.mu.Unlock()
	a.allocation.RemovePod(pod.UID)
	if !started {
		a.workers.Forget(pod.UID)
		return
	}
	kill := pod.DeepCopy()
	kill.DeletionTimestamp = &metav1.Time{Time: a.cfg.Clock.Now()}
	a.workers.UpdatePod(kill)
	a.workers.Forget(pod.UID)
}

// onStaticPodsListed runs after each delivery of the static pod source:
// once it has been read, mirror pods without a static pod are deleted.
func (a *Agent) onStaticPodsListed() {
	s := a.static
	s.mu.Lock()
	s.listed = true
	var orphans []string
	for name := range s.mirrors {
		if s.orphaned(name) {
			orphans = append(orphans, name)
		}
	}
	s.mu.Unlock()
	for _, name := range orphans {
		a.deleteOrphanedMirrorPod(name)
	}
}

// orphaned reports whether the mirror pod of full name has no static pod:
// none current, none still terminating (IsPodForMirrorPodTerminatingByFullName),
// once the source has been read. s.mu is held.
func (s *staticPods) orphaned(name string) bool {
	_, current := s.byName[name]
	_, started := s.started[name]
	return s.listed && s.mirrors[name] != nil && !current && !started
}

// onMirrorPod is a mirror pod added or changed in the pod watch: it is not
// run, but its static pod is synced, so that a mirror pod being deleted or
// of an older hash is replaced (HandlePodAdditions and HandlePodUpdates
// hand the static pod to its worker). A mirror pod without a static pod is
// deleted.
func (a *Agent) onMirrorPod(old, pod *corev1.Pod) {
	s := a.static
	name := staticpods.FullName(pod)
	s.mu.Lock()
	s.mirrors[name] = pod
	s.mirrorUIDs.Insert(pod.UID)
	static := s.startedPod(name)
	orphaned := s.orphaned(name)
	s.mu.Unlock()
	if static != nil && (old == nil || podsDifferSemantically(old, pod)) {
		a.workers.UpdatePod(static)
	}
	if orphaned {
		a.deleteOrphanedMirrorPod(name)
	}
}

// onMirrorDelete is a mirror pod gone from the API server: its static pod
// is synced, which creates another (HandlePodRemoves).
func (a *Agent) onMirrorDelete(pod *corev1.Pod) {
	s := a.static
	name := staticpods.FullName(pod)
	s.mu.Lock()
	if m := s.mirrors[name]; m != nil && m.UID == pod.UID {
		delete(s.mirrors, name)
	}
	s.mirrorUIDs.Delete(pod.UID)
	static := s.startedPod(name)
	s.mu.Unlock()
	a.statusManager.Forget(pod.UID)
	if static != nil {
		a.workers.UpdatePod(static)
	}
}

// startedPod is the current static pod of full name if it has started;
// s.mu is held.
func (s *staticPods) startedPod(name string) *corev1.Pod {
	uid, ok := s.byName[name]
	if !ok || s.started[name] != uid {
		return nil
	}
	return s.current[uid]
}

// reconcileMirrorPod is the kubelet's tryReconcileMirrorPods, run at each
// sync of a static pod: a mirror pod being deleted, or of another hash, is
// deleted; one is created if there is none (or it was just deleted) and
// the node is not being deleted. Failures are logged; the next sync tries
// again.
func (a *Agent) reconcileMirrorPod(ctx context.Context, pod *corev1.Pod) {
	s := a.static
	name := staticpods.FullName(pod)
	s.mu.Lock()
	current := s.current[pod.UID] != nil
	mirror := s.mirrors[name]
	s.mu.Unlock()
	if !current {
		return
	}
	logger := klog.FromContext(ctx)
	deleted := false
	if mirror != nil && (mirror.DeletionTimestamp != nil || !staticpods.IsMirrorPodOf(mirror, pod)) {
		logger.V(2).Info("Trying to delete pod", "pod", klog.KObj(mirror), "podUID", mirror.UID)
		ok, err := a.mirrorClient.DeleteMirrorPod(ctx, mirror.Namespace, mirror.Name, &mirror.UID)
		switch {
		case err != nil:
			logger.Error(err, "Failed deleting mirror pod", "pod", klog.KObj(mirror))
		case ok:
			deleted = true
			logger.V(2).Info("Deleted mirror pod as it didn't match the static Pod", "pod", klog.KObj(mirror))
		}
	}
	if mirror != nil && !deleted {
		return
	}
	node, err := a.getNode()
	switch {
	case err != nil:
		logger.Error(err, "No need to create a mirror pod, since failed to get node info from the cluster")
	case node.DeletionTimestamp != nil:
		logger.Info("No need to create a mirror pod, since node has been removed from the cluster")
	default:
		logger.V(2).Info("Creating a mirror pod for static pod", "pod", klog.KObj(pod))
		switch err := a.mirrorClient.CreateMirrorPod(ctx, pod); {
		case apierrors.IsAlreadyExists(err):
			// Created by the sync before this one, whose watch event has
			// yet to arrive: the kubelet asks again the same way.
			logger.V(2).Info("Mirror pod already exists", "pod", klog.KObj(pod))
		case err != nil:
			logger.Error(err, "Failed creating a mirror pod", "pod", klog.KObj(pod))
		}
	}
}

// staticPodTerminated runs once a static pod's worker has finished: the
// next static pod of its full name may start, and a removed pod's mirror
// pod, now orphaned, is deleted (HandlePodCleanups).
func (a *Agent) staticPodTerminated(pod *corev1.Pod) {
	s := a.static
	name := staticpods.FullName(pod)
	s.mu.Lock()
	if !s.known.Has(pod.UID) {
		// Not a static pod.
		s.mu.Unlock()
		return
	}
	if s.started[name] == pod.UID {
		delete(s.started, name)
	}
	var next *corev1.Pod
	if _, ok := s.started[name]; !ok {
		for len(s.waiting[name]) > 0 && next == nil {
			uid := s.waiting[name][0]
			s.waiting[name] = s.waiting[name][1:]
			if p := s.current[uid]; p != nil {
				next = p
				s.started[name] = uid
			}
		}
		if len(s.waiting[name]) == 0 {
			delete(s.waiting, name)
		}
	}
	removed := s.current[pod.UID] == nil
	if removed {
		delete(s.statuses, pod.UID)
		s.known.Delete(pod.UID)
	}
	orphaned := s.orphaned(name)
	s.mu.Unlock()
	if next != nil {
		a.workers.UpdatePod(next)
	}
	if orphaned {
		a.deleteOrphanedMirrorPod(name)
	}
}

// deleteOrphanedMirrorPod deletes, in the background, the mirror pod of
// full name if it is still orphaned, as the kubelet's housekeeping does;
// a failure is tried again a housekeeping period later.
func (a *Agent) deleteOrphanedMirrorPod(name string) {
	s := a.static
	s.mu.Lock()
	ctx, mirror := s.ctx, s.mirrors[name]
	if ctx == nil || ctx.Err() != nil || !s.orphaned(name) || s.deleting.Has(name) {
		s.mu.Unlock()
		return
	}
	s.deleting.Insert(name)
	s.mu.Unlock()
	go func() {
		_, err := a.mirrorClient.DeleteMirrorPod(ctx, mirror.Namespace, mirror.Name, nil)
		s.mu.Lock()
		s.deleting.Delete(name)
		s.mu.Unlock()
		if err != nil {
			klog.FromContext(ctx).Error(err, "Encountered error when deleting mirror pod", "podName", name)
			a.cfg.Clock.AfterFunc(housekeepingPeriod, func() { a.deleteOrphanedMirrorPod(name) })
			return
		}
		klog.FromContext(ctx).V(3).Info("Deleted mirror pod", "podName", name)
	}()
}

// staticSyncer is the agent as its pod workers call it, with the static
// pods' part of the kubelet's syncPod: the mirror pod reconciled at each
// sync, and the next static pod of a full name started once one has
// terminated.
type staticSyncer struct{ *Agent }

// SyncPod implements podworkers.Syncer.
func (s staticSyncer) SyncPod(ctx context.Context, pod *corev1.Pod) (bool, func(), error) {
	s.reconcileMirrorPod(ctx, pod)
	return s.Agent.SyncPod(ctx, pod)
}

// SyncTerminatedPod implements podworkers.Syncer.
func (s staticSyncer) SyncTerminatedPod(ctx context.Context, pod *corev1.Pod) error {
	if err := s.Agent.SyncTerminatedPod(ctx, pod); err != nil {
		return err
	}
	s.staticPodTerminated(pod)
	return nil
}

// podStatuses is the pod status manager as the agent's parts use it: the
// status of a static pod is kept under the static pod's UID, and sent, as
// the kubelet's status manager translates it, to its mirror pod (the API
// object of its name, under the mirror pod's UID) while it has one. A
// static pod without a mirror pod, or whose manifest went, sends nothing.
type podStatuses struct {
	*podstatus.Manager
	static *staticPods
	clock  clock.PassiveClock
}

// mirrorOf returns whether uid is a static pod's, and the mirror pod its
// status goes to, if any.
func (m *podStatuses) mirrorOf(uid types.UID) (mirror *corev1.Pod, static bool) {
	s := m.static
	s.mu.Lock()
	defer s.mu.Unlock()
	pod, current := s.current[uid]
	if !current {
		return nil, s.known.Has(uid)
	}
	return s.mirrors[staticpods.FullName(pod)], true
}

// SetPodStatus records pod's status, as podstatus.Manager does.
func (m *podStatuses) SetPodStatus(pod *corev1.Pod, st corev1.PodStatus) {
	mirror, static := m.mirrorOf(pod.UID)
	if !static {
		m.Manager.SetPodStatus(pod, st)
		return
	}
	if mirror != nil {
		m.Manager.SetPodStatus(mirror, st)
		if sent, ok := m.Manager.Status(mirror.UID); ok {
			st = sent
		}
	} else {
		m.keepStartTime(pod.UID, &st)
	}
	m.static.mu.Lock()
	m.static.statuses[pod.UID] = *st.DeepCopy()
	m.static.mu.Unlock()
}

// keepStartTime is the status manager's rule, for a static pod's status
// that has no mirror pod to go to: the start time never changes once set.
func (m *podStatuses) keepStartTime(uid types.UID, st *corev1.PodStatus) {
	m.static.mu.Lock()
	prev, ok := m.static.statuses[uid]
	m.static.mu.Unlock()
	switch {
	case ok && prev.StartTime != nil && !prev.StartTime.IsZero():
		st.StartTime = prev.StartTime.DeepCopy()
	case st.StartTime == nil || st.StartTime.IsZero():
		now := metav1.NewTime(m.clock.Now())
		st.StartTime = &now
	}
}

// TerminatePod marks pod's status final, as podstatus.Manager does.
func (m *podStatuses) TerminatePod(pod *corev1.Pod) {
	mirror, static := m.mirrorOf(pod.UID)
	if !static {
		m.Manager.TerminatePod(pod)
		return
	}
	var st corev1.PodStatus
	if mirror != nil {
		m.Manager.TerminatePod(mirror)
		st, _ = m.Manager.Status(mirror.UID)
	} else {
		st, _ = m.Status(pod.UID)
		if st.Phase != corev1.PodSucceeded && st.Phase != corev1.PodFailed {
			st.Phase = corev1.PodFailed
		}
		m.keepStartTime(pod.UID, &st)
	}
	m.static.mu.Lock()
	m.static.statuses[pod.UID] = *st.DeepCopy()
	m.static.mu.Unlock()
}

// Status returns the last status recorded for the pod.
func (m *podStatuses) Status(uid types.UID) (corev1.PodStatus, bool) {
	m.static.mu.Lock()
	st, ok := m.static.statuses[uid]
	m.static.mu.Unlock()
	if ok {
		return st, true
	}
	return m.Manager.Status(uid)
}

// staticRecorder drops the milestones of static pods and their mirror pods:
// the report is of the pods the load makes.
type staticRecorder struct {
	reports.Recorder
	static *staticPods
}

// Mark implements reports.Recorder.
func (r staticRecorder) Mark(uid types.UID, m reports.Milestone, at time.Time) {
	r.static.mu.Lock()
	static := r.static.known.Has(uid) || r.static.mirrorUIDs.Has(uid)
	r.static.mu.Unlock()
	if !static {
		r.Recorder.Mark(uid, m, at)
	}
}
