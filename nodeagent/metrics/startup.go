package metrics

import (
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

type podKey = types.UID

// podStartup is what the pod start histograms need of a pod between its
// first sight and its recorded start: the kubelet's first-seen annotation
// (kubelet_pod_start_duration_seconds, kubelet_pod_worker_start_duration_seconds)
// and its pod startup latency tracker's state (the SLI histograms).
type podStartup struct {
	firstSeen time.Time
	// sli: the pod had not started when first seen, and its SLI is not
	// recorded yet.
	sli bool
	// running: the pod's start duration has seen it Running.
	running bool
	// Image pulls, as the tracker's sessions: the starts not yet matched
	// by a finish, oldest first (a failed pull never finishes, so the next
	// success closes the session its first attempt opened); pulled is the
	// union of the closed sessions, which ends at pullEnd.
	pullStarts []time.Time
	pulled     time.Duration
	pullEnd    time.Time
}

// PodAdded is the pod source's first sight of a pod: its first-seen time,
// and the start of its SLI tracking if it has not started yet
// (ObservedPodOnWatch on a pod it does not know).
func (k *Kubelet) PodAdded(pod *corev1.Pod, now time.Time) {
	if k == nil || isTerminal(pod.Status.Phase) {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.starting == nil {
		k.starting = map[podKey]*podStartup{}
	}
	if _, ok := k.starting[pod.UID]; ok {
		return
	}
	k.starting[pod.UID] = &podStartup{
		firstSeen: now,
		sli:       (pod.Status.StartTime == nil || pod.Status.StartTime.IsZero()) && !isUnschedulable(pod),
	}
}

// PodUpdated is a later watch event of the pod, the kubelet's
// ObservedPodOnWatch: once every container is reported started, the pod's
// SLI and total start durations are recorded, measured from its creation
// to now, the SLI without its image pulls and init containers. The kubelet
// records once its own status update reported the containers started; the
// agent is the only writer of container statuses, so a watched pod whose
// every container is reported running has had that update.
func (k *Kubelet) PodUpdated(pod *corev1.Pod, now time.Time) {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.starting[pod.UID]
	switch {
	case e == nil:
		return
	case isTerminal(pod.Status.Phase):
		k.forgetLocked(pod.UID)
		return
	case !e.sli:
		return
	case isUnschedulable(pod):
		e.sli = false
		k.doneLocked(pod.UID, e)
		return
	case !startedSLO(pod):
		return
	}
	total := now.Sub(pod.CreationTimestamp.Time)
	sli := total
	if e.pulled > 0 {
		sli -= e.pulled
	}
	if d := initContainersRuntime(pod); d > 0 {
		sli -= d
	}
	k.podStartTotal.ObserveDuration(total)
	if !isStateful(pod) {
		k.podStartSLI.ObserveDuration(sli)
		if !pod.Spec.HostNetwork && !k.firstNetworkPodSeen {
			k.firstNetworkSLI.Store(math.Float64bits(sli.Seconds()))
			k.firstNetworkPodSeen = true
		}
	}
	e.sli = false
	k.doneLocked(pod.UID, e)
}

// PodDeleted forgets a pod gone from the pod source.
func (k *Kubelet) PodDeleted(uid types.UID) {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.forgetLocked(uid)
}

// ImagePullStarted and ImagePullFinished bracket one image pull for the
// pod, the tracker's RecordImageStartedPulling (when the pull is asked
// for, before it waits for its turn) and RecordImageFinishedPulling (once
// it succeeded).
func (k *Kubelet) ImagePullStarted(uid types.UID, now time.Time) {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if e := k.starting[uid]; e != nil && e.sli {
		e.pullStarts = append(e.pullStarts, now)
	}
}

// ImagePullFinished: see ImagePullStarted. The session it closes is
// merged into the pod's pulling time as calculateImagePullingTime merges
// overlapping sessions.
func (k *Kubelet) ImagePullFinished(uid types.UID, now time.Time) {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.starting[uid]
	if e == nil || len(e.pullStarts) == 0 {
		return
	}
	start := e.pullStarts[0]
	e.pullStarts = e.pullStarts[1:]
	switch {
	case e.pullEnd.IsZero() || start.After(e.pullEnd):
		e.pulled += now.Sub(start)
		e.pullEnd = now
	case now.After(e.pullEnd):
		e.pulled += now.Sub(e.pullEnd)
		e.pullEnd = now
	}
}

// PodSynced is a sync of a pod that should run, after its status was
// generated: known says the status manager held a status for the pod
// before (prev), phase is the new one. As the kubelet's SyncPod, the first
// sync records the worker start latency (and the pod's container count),
// and the pod's start duration is recorded when it goes from Pending to
// Running, and also, as the 1.37 kubelet does, at a first sync
// (kubernetes/kubernetes#132268), so that a pod started on a fresh node
// counts twice.
func (k *Kubelet) PodSynced(pod *corev1.Pod, known bool, prev, phase corev1.PodPhase, now time.Time) {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.starting[pod.UID]
	if e == nil {
		return
	}
	if !known {
		k.podWorkerStart.ObserveDuration(now.Sub(e.firstSeen))
		k.containersPerPod.Observe(float64(len(pod.Spec.Containers)))
	}
	if isTerminal(phase) {
		return
	}
	if !known || prev == corev1.PodPending && phase == corev1.PodRunning {
		k.podStart.ObserveDuration(now.Sub(e.firstSeen))
	}
	if phase == corev1.PodRunning {
		e.running = true
		k.doneLocked(pod.UID, e)
	}
}

// Starting is the number of pods whose start is being tracked.
func (k *Kubelet) Starting() int {
	if k == nil {
		return 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.starting)
}

// doneLocked forgets the pod once nothing more is to be recorded of it.
func (k *Kubelet) doneLocked(uid types.UID, e *podStartup) {
	if e.running && !e.sli {
		k.forgetLocked(uid)
	}
}

// forgetLocked drops the pod and, with the last one, the map: a map keeps
// its buckets after its entries are deleted.
func (k *Kubelet) forgetLocked(uid types.UID) {
	delete(k.starting, uid)
	if len(k.starting) == 0 {
		k.starting = nil
	}
}

func isTerminal(p corev1.PodPhase) bool { return p == corev1.PodSucceeded || p == corev1.PodFailed }

// startedSLO is the tracker's hasPodStartedSLO, on a pod whose status
// reports its containers: each has been started at least once.
func startedSLO(pod *corev1.Pod) bool {
	if len(pod.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running == nil || cs.State.Running.StartedAt.IsZero() {
			return false
		}
	}
	return true
}

// isStateful is the tracker's isStatefulPod: a volume other than a Secret,
// ConfigMap, downward API, emptyDir or projected one.
func isStateful(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Secret == nil && v.ConfigMap == nil && v.DownwardAPI == nil && v.EmptyDir == nil && v.Projected == nil {
			return true
		}
	}
	return false
}

// isUnschedulable is the tracker's: PodScheduled is False.
func isUnschedulable(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return true
		}
	}
	return false
}

// initContainersRuntime is how long the pod's init containers (not
// sidecars) ran, from their terminated states. The kubelet times them
// from its start call to the runtime's finish time; the status's
// second-precision times are what the agent keeps of them.
func initContainersRuntime(pod *corev1.Pod) time.Duration {
	var d time.Duration
	for _, cs := range pod.Status.InitContainerStatuses {
		t := cs.State.Terminated
		if t == nil || t.StartedAt.IsZero() || t.FinishedAt.IsZero() || isSidecar(pod, cs.Name) {
			continue
		}
		if run := t.FinishedAt.Sub(t.StartedAt.Time); run > 0 {
			d += run
		}
	}
	return d
}

func isSidecar(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		}
	}
	return false
}
