// Package podworkers runs one serialized worker per pod, as the kubelet's
// podWorkers: updates for a pod are coalesced to the newest, a pod is never
// synced twice at once, and it moves one way from syncing to terminating to
// terminated.
package podworkers

import (
	"context"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/fleetlet/fleetlet/nodeagent/metrics"
)

// Syncer is what a worker calls; the agent implements it.
type Syncer interface {
	// SyncPod brings a running pod towards its spec. It reports terminal
	// once the pod has reached Succeeded or Failed: the worker then
	// terminates it, though it is not being deleted. postSync, if not nil,
	// runs once the worker has recorded the sync's end, as the kubelet's
	// does (its relist request must count as newer than the sync).
	SyncPod(ctx context.Context, pod *corev1.Pod) (terminal bool, postSync func(), err error)
	// SyncTerminatingPod stops the pod's containers within the grace period.
	SyncTerminatingPod(ctx context.Context, pod *corev1.Pod, gracePeriod int64) error
	// SyncTerminatedPod cleans up after the containers stopped.
	SyncTerminatedPod(ctx context.Context, pod *corev1.Pod) error
}

// Cache is the kubelet's pod status cache as its pod workers use it: the
// PLEG fills it at each relist.
type Cache interface {
	// WaitNewerThan blocks until the pod's runtime status has been read
	// after t, or ctx ends.
	WaitNewerThan(ctx context.Context, uid types.UID, t time.Time) error
}

// The kubelet's pod worker timing: a failed sync is retried after
// BackOffPeriod, or when the back-off it hit expires, but never later than
// ResyncInterval; every retry is stretched by up to half again
// (workerBackOffPeriodJitterFactor), so pods that failed together do not
// retry together. A sync that succeeded is repeated after ResyncInterval
// (the kubelet's syncFrequency), stretched by up to half again
// (workerResyncIntervalJitterFactor): that resync is when the kubelet
// refreshes a running pod's ConfigMap, Secret and token volumes.
const (
	BackOffPeriod      = 10 * time.Second
	ResyncInterval     = time.Minute
	retryJitterFactor  = 0.5
	resyncJitterFactor = 0.5
)

// A worker's states, one way, as the kubelet's podSyncStatus: syncing
// (SyncPod), terminating (SyncTerminatingPod: containers may run),
// terminated (containers stopped: SyncTerminatedPod cleans up), finished.
type state int

const (
	syncing state = iota
	terminating
	terminated
	finished
)

type worker struct {
	pod     *corev1.Pod
	state   state
	pending bool
	// update is the type of the newest pending update, which labels the
	// work that takes it up in kubelet_pod_worker_duration_seconds.
	update UpdateType
	wake   chan struct{}
	retry  clock.Timer
	// retryAt is when retry fires; zero once it has fired or stopped.
	retryAt  time.Time
	finished chan struct{}
	// cancelSync ends the sync in flight, when the pod must terminate
	// instead, as the kubelet's pod workers cancel a sync on a kill.
	cancelSync context.CancelFunc
}

// UpdateType is what an update comes from, the kubelet's SyncPodType.
type UpdateType uint8

// The kubelet's update types. Retries, resyncs and a worker's own moves
// from one state to the next are syncs.
const (
	SyncPodSync UpdateType = iota
	SyncPodUpdate
	SyncPodCreate
	SyncPodKill
)

// PodWorkers owns the workers of one node.
type PodWorkers struct {
	syncer  Syncer
	clock   clock.WithTickerAndDelayedExecution
	cache   Cache
	ctx     context.Context
	metrics *metrics.Kubelet

	mu      sync.Mutex
	workers map[types.UID]*worker
	// resume is set while the workers are stalled (Stall) and closed when
	// they may go on.
	resume chan struct{}
	wg     sync.WaitGroup
}

// New returns PodWorkers, whose goroutines run from Start until its
// context ends. With a cache, a worker moving a pod on to terminating and
// to terminated first waits for a runtime status newer than its last sync,
// as the kubelet's podWorkerLoop waits on its pod cache (GetNewerThan): up
// to a PLEG relist period at each step of a teardown. SyncPod does not
// wait: the agent reads the runtime's status directly, and its readiness
// updates go through SyncPod where the kubelet's go straight to the status
// manager.
func New(syncer Syncer, clk clock.WithTickerAndDelayedExecution, cache Cache) *PodWorkers {
	return &PodWorkers{syncer: syncer, clock: clk, cache: cache, workers: map[types.UID]*worker{}}
}

// SetMetrics makes the workers record kubelet_pod_worker_duration_seconds
// in m: the time each worker iteration takes, from taking up an update
// to the end of its work. Call it before Start.
func (p *PodWorkers) SetMetrics(m *metrics.Kubelet) { p.metrics = m }

// Start binds the workers to ctx: they stop when it ends, and Wait returns
// once they have. UpdatePod must not be called before Start.
func (p *PodWorkers) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx != nil {
		return errors.New("pod workers started twice")
	}
	p.ctx = ctx
	return nil
}

// UpdatePod hands the newest version of a pod to its worker, starting one if
// needed. A pod with a deletion timestamp moves the worker to terminating.
// It is a sync; UpdatePodOfType says what else an update is.
func (p *PodWorkers) UpdatePod(pod *corev1.Pod) { p.UpdatePodOfType(pod, SyncPodSync) }

// UpdatePodOfType is UpdatePod for an update of type t: a pod the node
// sees for the first time (create), a change of its spec (update), or its
// removal (kill).
func (p *PodWorkers) UpdatePodOfType(pod *corev1.Pod, t UpdateType) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx == nil {
		panic("podworkers: UpdatePod before Start")
	}
	w, ok := p.workers[pod.UID]
	if !ok {
		w = &worker{wake: make(chan struct{}, 1), finished: make(chan struct{})}
		p.workers[pod.UID] = w
		p.wg.Add(1)
		go p.run(pod.UID, w)
	}
	if w.state >= terminated {
		return
	}
	w.pod = pod
	if pod.DeletionTimestamp != nil && w.state == syncing {
		w.state = terminating
		if w.cancelSync != nil {
			w.cancelSync()
		}
	}
	w.pending = true
	w.update = t
	signal(w.wake)
}

// KillPod terminates a pod that disappeared from the API server without a
// graceful deletion (a force delete): grace period 0.
func (p *PodWorkers) KillPod(pod *corev1.Pod) {
	pod = pod.DeepCopy()
	if pod.DeletionTimestamp == nil {
		now := p.clock.Now()
		pod.DeletionTimestamp = &metav1.Time{Time: now}
		pod.DeletionGracePeriodSeconds = new(int64)
	}
	p.UpdatePodOfType(pod, SyncPodKill)
}

// Forget removes a terminated pod's worker; it is called when the pod is gone
// from the API server. A worker still terminating finishes first.
func (p *PodWorkers) Forget(uid types.UID) {
	p.mu.Lock()
	w, ok := p.workers[uid]
	p.mu.Unlock()
	if !ok {
		return
	}
	go func() {
		<-w.finished
		p.mu.Lock()
		if p.workers[uid] == w {
			delete(p.workers, uid)
		}
		p.mu.Unlock()
	}()
}

// IsTerminated reports whether the pod's worker has finished terminating:
// its containers are stopped and SyncTerminatedPod has cleaned up.
func (p *PodWorkers) IsTerminated(uid types.UID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.workers[uid]
	return ok && w.state == finished
}

// CouldHaveRunningContainers is the kubelet's: true from the moment a
// worker may sync the pod until SyncTerminatingPod has stopped its
// containers; false for a pod without a worker.
func (p *PodWorkers) CouldHaveRunningContainers(uid types.UID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.workers[uid]
	return ok && w.state < terminated
}

// Finished returns a channel closed once the pod's worker has terminated
// the pod (or stopped with the node), or nil if the pod has no worker.
func (p *PodWorkers) Finished(uid types.UID) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w, ok := p.workers[uid]; ok {
		return w.finished
	}
	return nil
}

// SyncAt asks for another sync of the pod at the given time, for work that
// is due then, such as an active deadline.
func (p *PodWorkers) SyncAt(uid types.UID, at time.Time) {
	p.mu.Lock()
	w, ok := p.workers[uid]
	p.mu.Unlock()
	if ok {
		p.retryAfter(w, max(at.Sub(p.clock.Now()), 0))
	}
}

// Wait blocks until every worker goroutine has returned (after ctx ends).
func (p *PodWorkers) Wait() { p.wg.Wait() }

// Stall stops (true) or resumes (false) every worker, as a kubelet whose
// pod workers hang on a call that never returns: while stalled, no worker
// takes up an update, a retry or a resync, nor terminates or cleans up a
// pod (a deletion is recorded, not carried out), and the updates that
// arrive meanwhile are coalesced as they always are, so that on resume
// each worker syncs the newest version of its pod. A sync already in
// flight runs to its end; the next one waits. Stall may be called at any
// time, also before Start; asking for the state the workers are in does
// nothing.
func (p *PodWorkers) Stall(stalled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case stalled && p.resume == nil:
		p.resume = make(chan struct{})
	case !stalled && p.resume != nil:
		close(p.resume)
		p.resume = nil
	}
}

// Stalled reports whether the workers are stalled.
func (p *PodWorkers) Stalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resume != nil
}

func (p *PodWorkers) run(uid types.UID, w *worker) {
	defer p.wg.Done()
	defer close(w.finished)
	logger := klog.FromContext(p.ctx).WithValues("podUID", uid)
	// lastSync is when the worker's previous sync ended.
	var lastSync time.Time
	for {
		select {
		case <-p.ctx.Done():
			p.stopRetry(w)
			return
		case <-w.wake:
		}
		p.mu.Lock()
		// The gate of a stall, checked where the update is taken: no update
		// is taken once Stall returned, and the worker takes the newest
		// when it goes on.
		if resume := p.resume; resume != nil {
			p.mu.Unlock()
			select {
			case <-p.ctx.Done():
				p.stopRetry(w)
				return
			case <-resume:
			}
			signal(w.wake)
			continue
		}
		if !w.pending {
			p.mu.Unlock()
			continue
		}
		w.pending = false
		pod, st, update := w.pod, w.state, w.update
		w.update = SyncPodSync
		p.mu.Unlock()
		began := p.clock.Now()

		ctx := klog.NewContext(p.ctx, logger.WithValues("pod", klog.KObj(pod)))
		if st != syncing && p.cache != nil && !lastSync.IsZero() {
			if err := p.cache.WaitNewerThan(ctx, uid, lastSync); err != nil {
				p.stopRetry(w)
				return
			}
		}
		var err error
		switch st {
		case syncing:
			syncCtx, cancel := context.WithCancel(ctx)
			p.mu.Lock()
			w.cancelSync = cancel
			p.mu.Unlock()
			var terminal bool
			var postSync func()
			terminal, postSync, err = p.syncer.SyncPod(syncCtx, pod)
			lastSync = p.clock.Now()
			if postSync != nil {
				postSync()
			}
			p.mu.Lock()
			w.cancelSync = nil
			p.mu.Unlock()
			cancel()
			if terminal && err == nil {
				p.mu.Lock()
				if w.state == syncing {
					w.state = terminating
				}
				w.pending = true
				p.mu.Unlock()
				signal(w.wake)
			}
		case terminating:
			err = p.syncer.SyncTerminatingPod(ctx, pod, gracePeriod(pod))
			lastSync = p.clock.Now()
			if err == nil {
				// The kubelet's completeTerminating: no container runs
				// any more, and the clean-up comes next.
				p.mu.Lock()
				w.state = terminated
				w.pending = true
				p.mu.Unlock()
				signal(w.wake)
			}
		case terminated:
			err = p.syncer.SyncTerminatedPod(ctx, pod)
			lastSync = p.clock.Now()
			if err == nil {
				p.observe(st, update, began)
				p.mu.Lock()
				w.state = finished
				p.mu.Unlock()
				p.stopRetry(w)
				return
			}
		}
		p.observe(st, update, began)
		p.mu.Lock()
		// A sync cancelled because the pod must terminate is not a
		// failure, and a terminal pod is already on its way to terminate.
		superseded := st == syncing && w.state != syncing
		p.mu.Unlock()
		switch {
		case p.ctx.Err() != nil || superseded:
		case err != nil:
			logger.V(2).Info("Error syncing pod, skipping", "err", err)
			p.retryAfter(w, wait.Jitter(p.retryDelay(err), retryJitterFactor))
		case st == syncing:
			// The kubelet's completeWork: no error, so requeued at the
			// regular resync interval.
			p.retryAfter(w, wait.Jitter(ResyncInterval, resyncJitterFactor))
		}
	}
}

// observe records one iteration of a worker, labelled as the kubelet's:
// the clean-up of a terminated pod as "terminated", other work by the
// type of the update it took up.
func (p *PodWorkers) observe(st state, update UpdateType, began time.Time) {
	op := metrics.OpSync
	switch {
	case st == terminated:
		op = metrics.OpTerminated
	case update == SyncPodUpdate:
		op = metrics.OpUpdate
	case update == SyncPodCreate:
		op = metrics.OpCreate
	case update == SyncPodKill:
		op = metrics.OpKill
	}
	p.metrics.ObservePodWorker(op, p.clock.Since(began))
}

// RetryTimer is implemented by sync errors that know when the sync can
// succeed: a container's crash back-off expiring. The kubelet requeues the
// pod for then, so restarts happen on the back-off's schedule.
type RetryTimer interface {
	RetryTime() time.Time
}

// retryDelay is how long to wait before retrying after err, before jitter.
func (p *PodWorkers) retryDelay(err error) time.Duration {
	var rt RetryTimer
	if errors.As(err, &rt) && !rt.RetryTime().IsZero() {
		return min(max(rt.RetryTime().Sub(p.clock.Now()), 0), ResyncInterval)
	}
	return BackOffPeriod
}

// retryAfter schedules another sync of the worker's newest pod.
// retryAfter schedules another sync of the worker's newest pod in d, or
// keeps the one already scheduled if that comes sooner: a sync asked for
// at a time (SyncAt: an active deadline, which the kubelet checks every
// second) must not be pushed back by the resync or retry of the sync that
// asked for it.
func (p *PodWorkers) retryAfter(w *worker, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := p.clock.Now().Add(d)
	if !w.retryAt.IsZero() && !w.retryAt.After(at) {
		return
	}
	if w.retry != nil {
		w.retry.Stop()
	}
	w.retryAt = at
	var timer clock.Timer
	timer = p.clock.AfterFunc(d, func() {
		p.mu.Lock()
		if w.retry == timer {
			w.retryAt = time.Time{}
		}
		w.pending = true
		p.mu.Unlock()
		signal(w.wake)
	})
	w.retry = timer
}

func (p *PodWorkers) stopRetry(w *worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.retry != nil {
		w.retry.Stop()
	}
	w.retryAt = time.Time{}
}

func gracePeriod(pod *corev1.Pod) int64 {
	if pod.DeletionGracePeriodSeconds != nil {
		return *pod.DeletionGracePeriodSeconds
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return *pod.Spec.TerminationGracePeriodSeconds
	}
	return corev1.DefaultTerminationGracePeriodSeconds
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
