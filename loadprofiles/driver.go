package loadprofiles

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/fleetlet/fleetlet/reports"
)

// Labels the driver puts on every pod it creates, so that a run's pods can be
// watched, listed and cleaned up by selector.
const (
	LabelRun   = "fleetlet.io/run"
	LabelPhase = "fleetlet.io/phase"
)

// DefaultNamespace is where the driver creates pods unless told otherwise.
const DefaultNamespace = "fleetlet-load"

// Driver executes a profile's phases against the API server and stamps the
// milestones it sees at the source: Created when a create call is sent,
// Scheduled and RunningObserved when its watch first sees them, DeleteIssued
// when a delete call is sent (if it succeeds), Gone when its watch sees the
// pod removed.
// A Driver may be reused; each Run is independent.
type Driver struct {
	Client   kubernetes.Interface
	Recorder reports.Recorder // default reports.Discard{}
	// Clock times milestones, rates, waits and sleeps. Default clock.RealClock{},
	// whose readings carry Go's monotonic clock.
	Clock clock.Clock
	// Namespace is where pods are created; default DefaultNamespace. It is
	// created if missing, labelled app.kubernetes.io/managed-by=fleetlet.
	Namespace string
	// Progress, if set, is called at most once per second during Run.
	Progress func(Progress)
	// Objects creates and changes the objects of create phases with an
	// object template; required by profiles that have one. objects.NewClient
	// makes one from a rest.Config.
	Objects ObjectClient
	// Seed seeds the random functions of object templates and the factors
	// of scale phases, so that a run can be replayed; 0 is a seed like any.
	Seed uint64
	// Workloads, if set, is called after each waitRunning that waited for
	// objects, with how long each converged object took, by kind.
	Workloads func(phase string, times WorkloadTimes)
	// Faults fails and heals the fleet's nodes; required by profiles with
	// fault phases.
	Faults FaultInjector
}

// Progress is a snapshot of a run. Counts are over the pods the run created.
type Progress struct {
	Phase string
	// Created, Scheduled, Running and Gone count pods whose create returned,
	// that the watch saw bound, Running, and removed.
	Created, Scheduled, Running, Gone int
	// Target is what the current phase works towards: the number of pods
	// created once a create or churn phase ends (a churn's QPS × Duration
	// on top of those created before), the pods to see Running, deleted or
	// gone; 0 for a sleep or a services phase.
	Target int
	// ObjectPods and ObjectPodsRunning count the pods of the run's objects
	// (made by their controllers, not by the driver) that exist, and that
	// are Running and not terminating, as the watch sees them now.
	ObjectPods, ObjectPodsRunning int
}

// progressInterval is how often Progress is called.
const progressInterval = time.Second

// watchSyncTimeout bounds the wait for the pod watch's first list: an API
// server that refuses the list (RBAC, a wrong namespace) fails the run
// instead of hanging it.
const watchSyncTimeout = time.Minute

// run is the state of one Driver.Run.
type run struct {
	d        *Driver
	client   kubernetes.Interface
	recorder reports.Recorder
	// failFast is the profile's: an object phase stops at its first
	// failed call, and so does the run.
	failFast bool
	// grouper is the recorder when it sorts pods into groups (the report's
	// pod groups: phase and owning kind); nil otherwise.
	grouper   reports.Grouper
	clock     clock.Clock
	namespace string
	id        string // the fleetlet.io/run label value
	pods      *tracker
	services  serviceLedger
	objects   *objectLedger
	faults    faultLedger
	// watchAll says the pod watch covers every namespace: the profile
	// spreads objects over namespaces of their own.
	watchAll bool
}

// Run executes p's phases in order and returns the first phase's error, which
// names the phase. p must be defaulted and valid, as Load and Parse return it.
// Cancelling ctx stops the run promptly and returns ctx.Err() wrapped with the
// phase name. Pods are left in place when Run fails: they carry the run's
// fleetlet.io/run label, which the log line at the start gives.
//
// Services are not: whatever the outcome, even when a phase failed or ctx
// was cancelled, Run deletes the Services its services phases made before it
// returns, best effort, under a context of its own (ctx's values, not its
// cancellation) with a timeout of a minute plus 20 ms a Service. A Service
// it could not delete is logged with the kubectl command that deletes the
// rest. That failure is Run's error only when everything else succeeded: a
// phase's error says more about the run, and is kept. It is returned then
// because Services are named after their phase, not the run, so one left
// behind would fail the next run's services phase in the namespace.
func (d *Driver) Run(ctx context.Context, p *Profile) (err error) {
	if d.Client == nil {
		return errors.New("load driver: Client is nil")
	}
	if err := p.Validate(); err != nil {
		return withSource(err, p.Name)
	}
	r := &run{
		d:         d,
		client:    d.Client,
		recorder:  d.Recorder,
		clock:     d.Clock,
		namespace: d.Namespace,
		id:        utilrand.String(8),
		pods:      newTracker(),
		objects:   newObjectLedger(d.Seed),
		watchAll:  spreadsNamespaces(p),
	}
	if r.recorder == nil {
		r.recorder = reports.Discard{}
	}
	r.grouper, _ = r.recorder.(reports.Grouper)
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if r.namespace == "" {
		r.namespace = DefaultNamespace
	}
	logger := klog.FromContext(ctx).WithValues("profile", p.Name, "namespace", r.namespace, "run", r.id)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Load run starting", "phases", len(p.Phases), "selector", LabelRun+"="+r.id)
	defer func() {
		// Logged by deleteServices; see the doc comment for when it is
		// returned.
		if cleanupErr := r.deleteServices(ctx); cleanupErr != nil && err == nil {
			err = cleanupErr
		}
	}()
	defer func() {
		// Faults the profile left in place end with the run, first: a
		// fleet left partitioned or powered off fails whatever runs next.
		if healErr := r.healAll(ctx); healErr != nil {
			logger.Error(healErr, "Load run: could not end every fault it started")
			if err == nil {
				err = healErr
			}
		}
	}()

	if err := r.ensureNamespace(ctx); err != nil {
		return err
	}

	// Everything started below stops when Run returns, so that no Mark and no
	// Progress call happens after it.
	bgCtx, stop := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer func() {
		stop()
		bg.Wait()
	}()
	if err := r.startWatch(bgCtx, &bg); err != nil {
		return err
	}
	if d.Progress != nil {
		bg.Go(func() { r.reportProgress(bgCtx) })
	}
	if d.Objects != nil && makesObjects(p) {
		bg.Go(func() { r.watchObjects(bgCtx) })
	}

	r.failFast = p.FailFast
	var failed []error
	for i := range p.Phases {
		ph := &p.Phases[i]
		start := r.clock.Now()
		err := r.runPhase(ctx, ph)
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("phase %q: %w", ph.Name, ctxErr)
		}
		var pf *partialFailure
		if err != nil && errors.As(err, &pf) && !p.FailFast {
			// The API server rejected some objects: said in the report,
			// and the run goes on with the rest.
			logger.Error(err, "Load phase: some calls failed; going on (failFast stops the run instead)", "phase", ph.Name)
			failed = append(failed, fmt.Errorf("phase %q: %w", ph.Name, err))
			continue
		}
		if err != nil {
			return fmt.Errorf("phase %q: %w", ph.Name, err)
		}
		logger.V(2).Info("Load phase done", "phase", ph.Name, "duration", r.clock.Since(start), "progress", r.pods.progress())
	}
	logger.Info("Load run done", "progress", r.pods.progress())
	return errors.Join(failed...)
}

func (r *run) runPhase(ctx context.Context, ph *Phase) error {
	switch {
	case ph.Create != nil && ph.Create.Object != "":
		return r.createObjects(ctx, ph.Name, ph.Create)
	case ph.Create != nil:
		return r.create(ctx, ph.Name, ph.Create)
	case ph.Scale != nil:
		return r.scale(ctx, ph.Name, ph.Scale)
	case ph.Update != nil:
		return r.update(ctx, ph.Name, ph.Update)
	case ph.WaitRunning != nil:
		return r.waitRunning(ctx, ph.Name, ph.WaitRunning.Timeout.Duration)
	case ph.Delete != nil:
		if err := r.deleteObjects(ctx, ph.Delete.Phase, ph.Delete.QPS); err != nil || ph.Delete.Phase != "" {
			return err
		}
		return r.delete(ctx, ph.Name, ph.Delete.QPS)
	case ph.WaitGone != nil:
		return r.waitGone(ctx, ph.Name, ph.WaitGone.Timeout.Duration)
	case ph.Sleep != nil:
		return r.sleep(ctx, ph.Name, ph.Sleep.Duration.Duration)
	case ph.Churn != nil:
		return r.churn(ctx, ph.Name, ph.Churn)
	case ph.Services != nil:
		return r.createServices(ctx, ph.Name, ph.Services)
	case ph.Fault != nil:
		return r.fault(ctx, ph.Name, ph.Fault)
	case ph.Heal != nil:
		return r.healFault(ctx, ph.Name, ph.Heal.Phase, ph.Heal.Timeout.Duration)
	}
	return errors.New("phase has no action") // Validate rejects this first
}

// ensureNamespace creates the namespace if it is missing. An existing one is
// used as it is, whoever made it.
func (r *run) ensureNamespace(ctx context.Context) error {
	return r.ensureNamespaceNamed(ctx, r.namespace)
}

// ensureNamespaceNamed is ensureNamespace for any namespace: the run's own,
// or one a create phase spreads its objects over.
func (r *run) ensureNamespaceNamed(ctx context.Context, name string) error {
	namespaces := r.client.CoreV1().Namespaces()
	_, err := namespaces.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("checking namespace %s: %w", name, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   name,
		Labels: map[string]string{"app.kubernetes.io/managed-by": "fleetlet"},
	}}
	if _, err := namespaces.Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return r.waitForDefaultServiceAccount(ctx, name)
}

// serviceAccountTimeout bounds the wait for the controller-manager to give a
// new namespace its default ServiceAccount.
const serviceAccountTimeout = time.Minute

// waitForDefaultServiceAccount waits until the namespace's "default"
// ServiceAccount exists: until then the ServiceAccount admission plugin
// refuses every pod, so creating early would fail the whole phase.
func (r *run) waitForDefaultServiceAccount(ctx context.Context, namespace string) error {
	accounts := r.client.CoreV1().ServiceAccounts(namespace)
	selector := fields.OneTermEqualSelector(metav1.ObjectNameField, "default").String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return accounts.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return accounts.Watch(ctx, o)
		},
	}
	ctx, cancel := context.WithTimeout(ctx, serviceAccountTimeout)
	defer cancel()
	_, err := watchtools.UntilWithSync(ctx, cache.ToListWatcherWithWatchListSemantics(lw, r.client), &corev1.ServiceAccount{}, nil,
		func(e watch.Event) (bool, error) {
			sa, ok := e.Object.(*corev1.ServiceAccount)
			return ok && e.Type != watch.Deleted && sa.Name == "default", nil
		})
	if err != nil {
		return fmt.Errorf("namespace %s has no default ServiceAccount after %v (%v): is kube-controller-manager running?", namespace, serviceAccountTimeout, err)
	}
	return nil
}

// startWatch starts the run's one pod watch (an informer on the run's label,
// no resync) and waits for its first list. Its handlers stamp Scheduled,
// RunningObserved and Gone and wake the phases waiting on the tracker.
func (r *run) startWatch(ctx context.Context, bg *sync.WaitGroup) error {
	selector := LabelRun + "=" + r.id
	namespace := r.namespace
	if r.watchAll {
		namespace = metav1.NamespaceAll
	}
	informer := coreinformers.NewFilteredPodInformer(r.client, namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = selector })
	handle := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		// The selector is applied by the API server; checking it again
		// keeps clients that ignore it (fakes) from leaking other pods in.
		if !ok || pod.Labels[LabelRun] != r.id {
			return
		}
		now := r.clock.Now()
		first, scheduled, running := r.pods.observe(pod, now)
		if first && pod.Labels[LabelObject] != "" {
			// A controller made it: its creation is first seen here, the
			// watch's delivery after the create, with the same clock as
			// the other stamps (creationTimestamp has whole seconds). A
			// pod already bound when first seen was created earlier than
			// the watch says, and the agent may have stamped its binding
			// already: its creationTimestamp, a second's floor, is then
			// the better stamp.
			created := now
			if pod.Spec.NodeName != "" && !pod.CreationTimestamp.IsZero() && pod.CreationTimestamp.Time.Before(now) {
				created = pod.CreationTimestamp.Time
			}
			r.recorder.Mark(pod.UID, reports.Created, created)
			if r.grouper != nil {
				phase := pod.Labels[LabelPhase]
				r.grouper.SetGroup(pod.UID, reports.GroupName(phase, r.objects.kindOf(phase)))
			}
		}
		if scheduled {
			r.recorder.Mark(pod.UID, reports.Scheduled, now)
		}
		if running {
			r.recorder.Mark(pod.UID, reports.RunningObserved, now)
		}
	}
	registration, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj // the watch missed the delete; a relist found it gone
			}
			pod, ok := obj.(*corev1.Pod)
			if !ok || pod.Labels[LabelRun] != r.id {
				return
			}
			now := r.clock.Now()
			if r.pods.observeGone(pod.UID) {
				r.recorder.Mark(pod.UID, reports.Gone, now)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watching pods in %s: %w", r.namespace, err)
	}
	bg.Go(func() { informer.RunWithContext(ctx) })

	syncCtx, cancel := context.WithTimeout(ctx, watchSyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), registration.HasSynced) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("starting the pod watch: %w", err)
		}
		return fmt.Errorf("the pod watch in namespace %s did not sync within %v: check that the API server is reachable and that this client may list and watch pods there",
			r.namespace, watchSyncTimeout)
	}
	return nil
}

// reportProgress calls Progress once per interval of the run's clock.
func (r *run) reportProgress(ctx context.Context) {
	timer := r.clock.NewTimer(progressInterval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
			r.d.Progress(r.pods.progress())
			timer.Reset(progressInterval)
		}
	}
}

// create makes c.Count pods from the template at c.QPS. Calls run
// concurrently, so that the rate holds while the API server is slow, but no
// more than maxInFlight at once, so that a stalled server does not pile up
// goroutines. Failed creates do not stop the phase; it reports them at the end.
func (r *run) create(ctx context.Context, phase string, c *CreatePhase) error {
	before := r.pods.progress().Created
	r.pods.setPhase(phase, before+c.Count)
	limiter := newClockLimiter(c.QPS, r.clock)
	var g errgroup.Group
	g.SetLimit(maxInFlight(c.QPS))
	var failures failureCount
	for range c.Count {
		if limiter.Wait(ctx) != nil {
			break // ctx ended; Run reports it
		}
		pod := r.podFor(phase, &c.Template)
		g.Go(func() error {
			r.createPod(ctx, pod, &failures)
			return nil
		})
	}
	_ = g.Wait() // the goroutines return nil; failures are counted instead
	return failures.err("pod creates", c.Count)
}

// createPod sends one create, stamps Created with the time it was sent and
// records the pod; a failure is counted in failures, and ok is false.
func (r *run) createPod(ctx context.Context, pod *corev1.Pod, failures *failureCount) (ref podRef, sent time.Time, ok bool) {
	// Stamped when the call is sent: the scheduler can bind the pod and a
	// watch deliver it before the create response comes back.
	sent = r.clock.Now()
	created, err := r.client.CoreV1().Pods(r.namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err == nil && created.UID == "" {
		err = fmt.Errorf("the API server returned pod %s/%s without a UID", created.Namespace, created.Name)
	}
	if err != nil {
		failures.add(err)
		return podRef{}, sent, false
	}
	r.recorder.Mark(created.UID, reports.Created, sent)
	if r.grouper != nil {
		r.grouper.SetGroup(created.UID, reports.GroupName(pod.Labels[LabelPhase], "Pod"))
	}
	r.pods.created(created.UID, created.Namespace+"/"+created.Name)
	return podRef{uid: created.UID, namespace: created.Namespace, name: created.Name}, sent, true
}

// podFor builds one pod of a create or churn phase from its template.
func (r *run) podFor(phase string, t *corev1.PodTemplateSpec) *corev1.Pod {
	meta := *t.ObjectMeta.DeepCopy()
	meta.Name, meta.Namespace = "", r.namespace
	meta.GenerateName = phase + "-"
	if meta.Labels == nil {
		meta.Labels = map[string]string{}
	}
	meta.Labels[LabelRun] = r.id
	meta.Labels[LabelPhase] = phase
	return &corev1.Pod{ObjectMeta: meta, Spec: *t.Spec.DeepCopy()}
}

// delete deletes every pod of the run not deleted yet, at qps: those it
// created, and any its watch saw whose create call failed on the client's
// side only. A pod already gone (NotFound) counts as deleted and gone.
func (r *run) delete(ctx context.Context, phase string, qps float64) error {
	refs := r.pods.toDelete()
	r.pods.setPhase(phase, len(refs))
	limiter := newClockLimiter(qps, r.clock)
	var g errgroup.Group
	g.SetLimit(maxInFlight(qps))
	var failures failureCount
	for _, ref := range refs {
		if limiter.Wait(ctx) != nil {
			break
		}
		g.Go(func() error {
			r.deletePod(ctx, ref, &failures)
			return nil
		})
	}
	_ = g.Wait()
	return failures.err("pod deletes", len(refs))
}

// deletePod sends one delete and stamps DeleteIssued with the time it was
// sent. ok is true when the pod is deleted or was already gone (NotFound,
// which counts as gone); a failure is counted in failures.
func (r *run) deletePod(ctx context.Context, ref podRef, failures *failureCount) (ok bool) {
	// The UID precondition makes sure a pod of the same name made by
	// someone else since is left alone.
	sent := r.clock.Now()
	err := r.client.CoreV1().Pods(ref.namespace).Delete(ctx, ref.name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &ref.uid},
	})
	switch {
	case err == nil:
		r.recorder.Mark(ref.uid, reports.DeleteIssued, sent)
		r.pods.deleting(ref.uid, false)
		return true
	case apierrors.IsNotFound(err):
		r.pods.deleting(ref.uid, true)
		return true
	default:
		failures.add(fmt.Errorf("deleting %s/%s: %w", ref.namespace, ref.name, err))
		return false
	}
}

// waitRunning blocks until the watch has seen every created pod Running.
func (r *run) waitRunning(ctx context.Context, phase string, timeout time.Duration) error {
	r.pods.setPhase(phase, r.pods.progress().Created)
	timer := r.clock.NewTimer(timeout)
	defer timer.Stop()
	err := r.pods.wait(ctx, timer.C(), r.pods.allRunning)
	if errors.Is(err, errWaitTimedOut) {
		return r.pods.stragglers("Running", timeout,
			func(p *podRecord) bool { return p.created },
			func(p *podRecord) bool { return p.running })
	}
	if err != nil || len(r.phaseObjects("")) == 0 {
		return err
	}
	if err := r.waitObjects(ctx, timer.C(), timeout); err != nil {
		return err
	}
	if r.d.Workloads != nil {
		r.d.Workloads(phase, r.workloadTimes())
	}
	return nil
}

// waitGone blocks until the watch has seen every deleted pod removed.
func (r *run) waitGone(ctx context.Context, phase string, timeout time.Duration) error {
	r.pods.setPhase(phase, r.pods.deletingCount())
	timer := r.clock.NewTimer(timeout)
	defer timer.Stop()
	err := r.pods.wait(ctx, timer.C(), r.pods.allGone)
	if errors.Is(err, errWaitTimedOut) {
		return r.pods.stragglers("gone", timeout,
			func(p *podRecord) bool { return p.deleting },
			func(p *podRecord) bool { return p.gone })
	}
	if err != nil {
		return err
	}
	return r.waitObjectPodsGone(ctx, timer.C(), timeout)
}

func (r *run) sleep(ctx context.Context, phase string, d time.Duration) error {
	r.pods.setPhase(phase, 0)
	timer := r.clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// maxInFlight bounds concurrent calls of a phase: as many as one second of
// calls at qps, so the rate holds while calls take up to a second, between 4
// and 256 so that a slow server neither serialises a low rate nor piles up
// goroutines at a high one.
func maxInFlight(qps float64) int {
	return int(min(max(math.Ceil(qps), 4), 256))
}

// failureCount counts failed API calls of a phase and keeps the first error.
type failureCount struct {
	mu    sync.Mutex
	n     int
	first error
}

func (f *failureCount) add(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if f.first == nil {
		f.first = err
	}
}

// failed says whether a call has failed.
func (f *failureCount) failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n > 0
}

// partialFailure is an object phase's error when some of its calls failed
// and the others went through: without failFast the run goes on.
type partialFailure struct{ err error }

func (e *partialFailure) Error() string { return e.err.Error() }
func (e *partialFailure) Unwrap() error { return e.err }

// partial marks err, if any, as a partialFailure.
func partial(err error) error {
	if err == nil {
		return nil
	}
	return &partialFailure{err}
}

// err is nil when nothing failed, else "N of M <what> failed; the first: ...".
func (f *failureCount) err(what string, of int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d %s failed; the first: %w", f.n, of, what, f.first)
}
