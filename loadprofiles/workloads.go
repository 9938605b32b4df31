package loadprofiles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	"github.com/fleetlet/fleetlet/loadprofiles/objects"
)

// LabelObject is the label the driver puts on the pod template of every
// object it creates, so that the object's pods say which object they belong
// to: <phase>-<index>, the object's name, unique in the run.
const LabelObject = "fleetlet.io/object"

// ObjectClient creates, changes and reads objects of any kind; an
// *objects.Client (controller-runtime's client with a discovery RESTMapper)
// is one.
type ObjectClient interface {
	Create(ctx context.Context, obj *unstructured.Unstructured) error
	SetReplicas(ctx context.Context, obj *unstructured.Unstructured, n int) error
	Apply(ctx context.Context, obj *unstructured.Unstructured) error
	Delete(ctx context.Context, obj *unstructured.Unstructured) error
	Get(ctx context.Context, obj *unstructured.Unstructured) error
}

// objectPollInterval is how often a waitRunning re-reads an object whose
// pods all run but whose controller may not have said so yet (a rollout's
// last old pod, a DaemonSet's status). Objects with pods still missing are
// not read at all: the pod watch says when to look.
const objectPollInterval = 500 * time.Millisecond

// objectRecord is one object a create phase made.
type objectRecord struct {
	phase string
	index int
	name  string // <phase>-<index>, also its pods' LabelObject
	obj   *unstructured.Unstructured
	// pods says its kind runs pods, so that waitRunning waits for them.
	pods bool
	// replicas is spec.replicas as created, for a scale by factor;
	// scaledTo what the last scale phase set, -1 if none did.
	replicas, scaledTo int64
	// since is when the last create, scale or update of it was sent; done
	// when a waitRunning first saw it converged since then.
	since, done time.Time
	converged   bool
	// reported says a Workloads call has had done - since.
	reported bool
	// missing says what a waitRunning still waited for at its last look.
	missing string
	deleted bool
}

// objectLedger holds the run's objects, in creation order.
type objectLedger struct {
	mu        sync.Mutex
	list      []*objectRecord
	byPhase   map[string][]*objectRecord
	templates map[string]*objects.Template
	params    map[string]map[string]any
	kinds     map[string]string // by create phase; see kindOf
	// namespaces made (or found) by the run, beside its own.
	namespaces map[string]bool
	rng        *rand.Rand
	// touched is closed, and replaced, when an object is added, changed or
	// converges: watchObjects and waitObjects wait on it.
	touched chan struct{}
}

// signal wakes what waits on touched; the caller holds l.mu.
func (l *objectLedger) signal() {
	close(l.touched)
	l.touched = make(chan struct{})
}

// kindOf is the kind of the objects a create phase makes: one template, one
// kind. It is known from the first render, before any create call, so a
// watch never sees a pod of the phase before it. "" for a phase that
// rendered none.
func (l *objectLedger) kindOf(phase string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.kinds[phase]
}

func newObjectLedger(seed uint64) *objectLedger {
	return &objectLedger{
		byPhase:    map[string][]*objectRecord{},
		templates:  map[string]*objects.Template{},
		params:     map[string]map[string]any{},
		kinds:      map[string]string{},
		namespaces: map[string]bool{},
		touched:    make(chan struct{}),
		rng:        rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
}

// makesObjects reports whether p has a create phase with an object template.
func makesObjects(p *Profile) bool {
	for _, ph := range p.Phases {
		if ph.Create != nil && ph.Create.Object != "" {
			return true
		}
	}
	return false
}

// spreadsNamespaces reports whether a phase of p creates objects in
// namespaces of their own, which the pod watch must then cover.
func spreadsNamespaces(p *Profile) bool {
	for _, ph := range p.Phases {
		if c := ph.Create; c != nil && c.Object != "" && c.Namespaces > 1 {
			return true
		}
	}
	return false
}

// namespaceFor is the namespace of a create phase's index-th object.
func (r *run) namespaceFor(c *CreatePhase, index int) string {
	if c.Namespaces <= 1 {
		return r.namespace
	}
	return fmt.Sprintf("%s-%d", r.namespace, index%c.Namespaces)
}

// templateData is what an object template sees: the params, then Index,
// Name and Namespace, which no param may hide. Numbers in params come from
// YAML as json.Number; integral ones become ints, so that AddInt and
// friends take them.
func templateData(params map[string]any, index int, name, namespace string) map[string]any {
	data := make(map[string]any, len(params)+3)
	for k, v := range params {
		if n, ok := v.(json.Number); ok {
			if i, err := n.Int64(); err == nil {
				v = int(i)
			} else if f, err := n.Float64(); err == nil {
				v = f
			}
		}
		if f, ok := v.(float64); ok && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			v = int(f)
		}
		data[k] = v
	}
	data["Index"], data["Name"], data["Namespace"] = index, name, namespace
	return data
}

// render makes the index-th object of a create phase from its template.
func (r *run) render(phase string, tmpl *objects.Template, params map[string]any, index int, namespace string) (*unstructured.Unstructured, error) {
	name := fmt.Sprintf("%s-%d", phase, index)
	r.objects.mu.Lock()
	obj, err := tmpl.Render(templateData(params, index, name, namespace), r.objects.rng)
	if err == nil {
		r.objects.kinds[phase] = obj.GetKind()
	}
	r.objects.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("object %d: %w", index, err)
	}
	if n := obj.GetName(); n != "" && n != name {
		return nil, fmt.Errorf("object %d: the template names it %q; leave metadata.name out (the driver names it %s) or write {{.Name}}", index, n, name)
	}
	if ns := obj.GetNamespace(); ns != "" && ns != namespace {
		return nil, fmt.Errorf("object %d: the template puts it in namespace %q; leave metadata.namespace out (the driver spreads objects over namespaces) or write {{.Namespace}}", index, ns)
	}
	obj.SetName(name)
	obj.SetNamespace(namespace)
	labels := map[string]string{LabelRun: r.id, LabelPhase: phase}
	if _, ok := objects.PodTemplate(obj); ok {
		labels[LabelObject] = name
	}
	if err := objects.Stamp(obj, labels); err != nil {
		return nil, fmt.Errorf("object %d: %w", index, err)
	}
	return obj, nil
}

// createObjects makes c.Count objects from c.Object at c.QPS, spread over
// c.Namespaces namespaces. As with pods, calls run concurrently up to
// maxInFlight, and failures are counted and reported at the end.
func (r *run) createObjects(ctx context.Context, phase string, c *CreatePhase) error {
	if r.d.Objects == nil {
		return errors.New("the profile creates objects and the driver has no object client (Driver.Objects)")
	}
	tmpl, err := objects.Parse(phase, c.Object)
	if err != nil {
		return err
	}
	r.objects.mu.Lock()
	r.objects.templates[phase], r.objects.params[phase] = tmpl, c.Params
	r.objects.mu.Unlock()
	for k := range min(c.Namespaces, c.Count) {
		ns := r.namespaceFor(c, k)
		if ns == r.namespace || r.objects.namespaces[ns] {
			continue
		}
		if err := r.ensureNamespaceNamed(ctx, ns); err != nil {
			return err
		}
		r.objects.namespaces[ns] = true
	}
	r.pods.setPhase(phase, 0)
	limiter := newClockLimiter(c.QPS, r.clock)
	var g errgroup.Group
	g.SetLimit(maxInFlight(c.QPS))
	var failures failureCount
	stopped := r.stopOnFailure(&failures)
	for i := range c.Count {
		if limiter.Wait(ctx) != nil || stopped() {
			break
		}
		obj, err := r.render(phase, tmpl, c.Params, i, r.namespaceFor(c, i))
		if err != nil {
			// A template that renders wrong for one index renders wrong
			// for others: stop at the first.
			_ = g.Wait()
			return err
		}
		g.Go(func() error {
			sent := r.clock.Now()
			if err := r.d.Objects.Create(ctx, obj); err != nil {
				failures.add(fmt.Errorf("creating %s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err))
				return nil
			}
			_, runsPods := objects.PodTemplate(obj)
			replicas, _, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas")
			rec := &objectRecord{phase: phase, index: i, name: obj.GetName(), obj: obj, pods: runsPods, replicas: replicas, scaledTo: -1, since: sent}
			r.objects.mu.Lock()
			r.objects.list = append(r.objects.list, rec)
			r.objects.byPhase[phase] = append(r.objects.byPhase[phase], rec)
			r.objects.signal()
			r.objects.mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
	r.objects.mu.Lock()
	sort.Slice(r.objects.byPhase[phase], func(a, b int) bool {
		return r.objects.byPhase[phase][a].index < r.objects.byPhase[phase][b].index
	})
	r.objects.mu.Unlock()
	return partial(failures.err("object creates", c.Count))
}

// stopOnFailure returns what says to stop issuing a phase's calls: with
// failFast, once one has failed; without, never.
func (r *run) stopOnFailure(f *failureCount) func() bool {
	if !r.failFast {
		return func() bool { return false }
	}
	return f.failed
}

// phaseObjects lists the live objects of a create phase, or of every phase
// when phase is "".
func (r *run) phaseObjects(phase string) []*objectRecord {
	r.objects.mu.Lock()
	defer r.objects.mu.Unlock()
	src := r.objects.list
	if phase != "" {
		src = r.objects.byPhase[phase]
	}
	var out []*objectRecord
	for _, rec := range src {
		if !rec.deleted {
			out = append(out, rec)
		}
	}
	return out
}

// forEachObject calls do for each of recs at qps, concurrently up to
// maxInFlight, stamping each record's since with the time its call was
// sent, and reports failures as "N of M <what> failed".
func (r *run) forEachObject(ctx context.Context, recs []*objectRecord, qps float64, what string, do func(*objectRecord) error) error {
	limiter := newClockLimiter(qps, r.clock)
	var g errgroup.Group
	g.SetLimit(maxInFlight(qps))
	var failures failureCount
	stopped := r.stopOnFailure(&failures)
	for _, rec := range recs {
		if limiter.Wait(ctx) != nil || stopped() {
			break
		}
		g.Go(func() error {
			sent := r.clock.Now()
			if err := do(rec); err != nil {
				failures.add(fmt.Errorf("%s/%s: %w", rec.obj.GetNamespace(), rec.name, err))
				return nil
			}
			r.objects.mu.Lock()
			rec.since, rec.converged, rec.reported, rec.done, rec.missing = sent, false, false, time.Time{}, ""
			r.objects.signal()
			r.objects.mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
	return partial(failures.err(what, len(recs)))
}

// scale sets spec.replicas of a create phase's objects.
func (r *run) scale(ctx context.Context, phase string, s *ScalePhase) error {
	recs := r.phaseObjects(s.Phase)
	r.pods.setPhase(phase, 0)
	targets := make(map[*objectRecord]int, len(recs))
	r.objects.mu.Lock()
	for _, rec := range recs {
		if s.Replicas != nil {
			targets[rec] = int(*s.Replicas)
			continue
		}
		f := s.Factor[0] + r.objects.rng.Float64()*(s.Factor[1]-s.Factor[0])
		targets[rec] = int(math.Round(float64(rec.replicas) * f))
	}
	r.objects.mu.Unlock()
	return r.forEachObject(ctx, recs, s.QPS, "scales", func(rec *objectRecord) error {
		if err := r.d.Objects.SetReplicas(ctx, rec.obj, targets[rec]); err != nil {
			return err
		}
		r.objects.mu.Lock()
		rec.scaledTo = int64(targets[rec])
		r.objects.mu.Unlock()
		return nil
	})
}

// update re-renders and applies a create phase's objects.
func (r *run) update(ctx context.Context, phase string, u *UpdatePhase) error {
	r.objects.mu.Lock()
	tmpl, params := r.objects.templates[u.Phase], r.objects.params[u.Phase]
	r.objects.mu.Unlock()
	if u.Object != "" {
		t, err := objects.Parse(phase, u.Object)
		if err != nil {
			return err
		}
		tmpl = t
	}
	merged := make(map[string]any, len(params)+len(u.Params))
	for k, v := range params {
		merged[k] = v
	}
	for k, v := range u.Params {
		merged[k] = v
	}
	recs := r.phaseObjects(u.Phase)
	r.pods.setPhase(phase, 0)
	rendered := make(map[*objectRecord]*unstructured.Unstructured, len(recs))
	for _, rec := range recs {
		obj, err := r.render(u.Phase, tmpl, merged, rec.index, rec.obj.GetNamespace())
		if err != nil {
			return err
		}
		// An update keeps the size a scale phase gave the object: the
		// template's replicas are its size as created, and applying them
		// would undo the scale along with the rollout.
		r.objects.mu.Lock()
		scaledTo := rec.scaledTo
		r.objects.mu.Unlock()
		if _, has, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "replicas"); has && scaledTo >= 0 {
			if err := unstructured.SetNestedField(obj.Object, scaledTo, "spec", "replicas"); err != nil {
				return err
			}
		}
		rendered[rec] = obj
	}
	return r.forEachObject(ctx, recs, u.QPS, "updates", func(rec *objectRecord) error {
		return r.d.Objects.Apply(ctx, rendered[rec])
	})
}

// deleteObjects deletes the live objects of a create phase, or all of them,
// at qps; their pods go with them, by the garbage collector.
func (r *run) deleteObjects(ctx context.Context, phase string, qps float64) error {
	recs := r.phaseObjects(phase)
	if len(recs) == 0 {
		return nil
	}
	return r.forEachObject(ctx, recs, qps, "object deletes", func(rec *objectRecord) error {
		if err := r.d.Objects.Delete(ctx, rec.obj); err != nil {
			return err
		}
		r.objects.mu.Lock()
		rec.deleted = true
		r.objects.mu.Unlock()
		return nil
	})
}

// watchObjects runs for the whole run, beside the pod watch, and marks
// each object converged (objects.Converged: its desired pods Running and its
// rollout done) as soon as it is, so that an object's time is when it got
// there, not when a later waitRunning looked. An object is read when it is
// new or changed, and then only once the pod watch counts as many of its
// pods running as it last wanted, every objectPollInterval while it does:
// the watch costs the API server a few reads per object, not a poll of
// every object.
func (r *run) watchObjects(ctx context.Context) {
	poll := r.clock.NewTimer(objectPollInterval)
	defer poll.Stop()
	wanted := map[*objectRecord]int{} // desired pods at the last read
	for {
		changed := r.pods.changes()
		for _, rec := range r.phaseObjects("") {
			r.objects.mu.Lock()
			skip := !rec.pods || rec.converged
			since := rec.since
			r.objects.mu.Unlock()
			if skip {
				continue
			}
			running := r.pods.liveOf(rec.name)
			if want, ok := wanted[rec]; ok && running < want {
				r.objects.mu.Lock()
				rec.missing = fmt.Sprintf("%d/%d running", running, want)
				r.objects.mu.Unlock()
				continue
			}
			obj := rec.obj.DeepCopy()
			if err := r.d.Objects.Get(ctx, obj); err != nil {
				if ctx.Err() != nil {
					return
				}
				klog.FromContext(ctx).V(2).Info("Reading an object failed; trying again", "object", klog.KRef(rec.obj.GetNamespace(), rec.name), "err", err)
				continue
			}
			if n, ok := objects.DesiredPods(obj); ok {
				wanted[rec] = n
			}
			ok, missing := objects.Converged(obj, running)
			now := r.clock.Now()
			r.objects.mu.Lock()
			// A scale or an update sent while it was read starts again.
			if rec.since.Equal(since) {
				rec.missing = missing
				if ok {
					rec.converged, rec.done = true, now
					delete(wanted, rec)
					r.objects.signal()
				}
			}
			r.objects.mu.Unlock()
		}
		r.objects.mu.Lock()
		touched := r.objects.touched
		r.objects.mu.Unlock()
		select {
		case <-changed:
		case <-touched:
		case <-poll.C():
			poll.Reset(objectPollInterval)
		case <-ctx.Done():
			return
		}
	}
}

// waitObjects blocks until every live object of the run whose kind runs
// pods has converged, as watchObjects marks them, or timeout fires.
func (r *run) waitObjects(ctx context.Context, timeout <-chan time.Time, after time.Duration) error {
	for {
		r.objects.mu.Lock()
		pending := 0
		for _, rec := range r.objects.list {
			if rec.pods && !rec.deleted && !rec.converged {
				pending++
			}
		}
		touched := r.objects.touched
		r.objects.mu.Unlock()
		if pending == 0 {
			return nil
		}
		select {
		case <-touched:
		case <-timeout:
			return r.objectStragglers(after)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// objectStragglers names, for a timeout error, the objects not converged.
func (r *run) objectStragglers(after time.Duration) error {
	r.objects.mu.Lock()
	defer r.objects.mu.Unlock()
	var names []string
	total, missing := 0, 0
	for _, rec := range r.objects.list {
		if rec.deleted || !rec.pods {
			continue
		}
		total++
		if rec.converged {
			continue
		}
		missing++
		if len(names) < straggleLimit {
			names = append(names, fmt.Sprintf("%s %s/%s (%s)", rec.obj.GetKind(), rec.obj.GetNamespace(), rec.name, rec.missing))
		}
	}
	more := ""
	if missing > len(names) {
		more = fmt.Sprintf(", and %d more", missing-len(names))
	}
	return fmt.Errorf("%d of %d objects without all their pods Running after %v: %s%s", missing, total, after, strings.Join(names, ", "), more)
}

// WorkloadTimes is, per kind, how long objects took from their create,
// scale or update call to all their pods Running and their rollout done.
type WorkloadTimes map[string][]time.Duration

// workloadTimes collects, by kind, the times of the objects that converged
// since their last create, scale or update and were not reported yet: a
// waitRunning after a scale phase of Deployments reports the Deployments,
// not the StatefulSets that ran all along.
func (r *run) workloadTimes() WorkloadTimes {
	r.objects.mu.Lock()
	defer r.objects.mu.Unlock()
	out := WorkloadTimes{}
	for _, rec := range r.objects.list {
		if rec.converged && !rec.reported {
			out[rec.obj.GetKind()] = append(out[rec.obj.GetKind()], rec.done.Sub(rec.since))
			rec.reported = true
		}
	}
	return out
}

// waitObjectPodsGone blocks until no pod of a deleted object is left, as
// the pod watch sees them, or timeout fires.
func (r *run) waitObjectPodsGone(ctx context.Context, timeout <-chan time.Time, after time.Duration) error {
	r.objects.mu.Lock()
	var deleted []string
	for _, rec := range r.objects.list {
		if rec.deleted && rec.pods {
			deleted = append(deleted, rec.name)
		}
	}
	r.objects.mu.Unlock()
	for {
		changed := r.pods.changes()
		left, first := 0, ""
		for _, name := range deleted {
			if n := r.pods.presentOf(name); n > 0 {
				if left == 0 {
					first = name
				}
				left += n
			}
		}
		if left == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-timeout:
			return fmt.Errorf("%d pods of deleted objects not gone after %v; the first object with pods left: %s", left, after, first)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
