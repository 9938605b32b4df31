package loadprofiles

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podRecord is what the run knows of one of its pods, from its own API calls
// and from its watch. Either side may learn of a pod first: the watch can
// deliver a pod before the create call that made it returns.
type podRecord struct {
	key string // namespace/name, from the create call or the watch

	created     bool // the driver's create call returned
	deleting    bool // the driver's delete call returned (or found it gone)
	scheduled   bool // the watch saw spec.nodeName set
	running     bool // the watch saw status.phase Running
	gone        bool // the watch saw the pod removed, or delete found it gone
	seen        bool // the watch delivered the pod at least once
	terminating bool // the watch saw metadata.deletionTimestamp set

	phase     corev1.PodPhase
	nodeName  string
	runningAt time.Time // when the watch first saw it Running: its RunningObserved stamp

	// object is the run's object whose controller made the pod (its
	// LabelObject); "" for the run's own pods. Such pods are never created
	// nor deleted by the driver: they are counted per object instead.
	object string
}

// live says the pod counts towards its object's running pods: Running now,
// not terminating, not gone.
func (r podRecord) live() bool {
	return r.object != "" && r.phase == corev1.PodRunning && !r.terminating && !r.gone
}

// present says the pod of an object still exists, as far as the watch knows.
func (r podRecord) present() bool { return r.object != "" && r.seen && !r.gone }

// tally is the tracker's counts, or what one pod adds to them. The created,
// scheduled, running and gone counts cover only pods whose create call
// returned, so that "N of M" talks about pods the run knows it made; the
// deleting counts cover every pod the run deleted.
type tally struct {
	created, scheduled, running, gone int
	deleting, deletingGone            int
	// objectPresent and objectLive count the pods of the run's objects
	// (podRecord.present and live), for Progress.
	objectPresent, objectLive int
}

// counts is what one pod's record adds to the tally.
func counts(r podRecord) tally {
	var c tally
	if r.created {
		c.created = 1
		c.scheduled = one(r.scheduled)
		c.running = one(r.running)
		c.gone = one(r.gone)
	}
	if r.deleting {
		c.deleting = 1
		c.deletingGone = one(r.gone)
	}
	c.objectPresent, c.objectLive = one(r.present()), one(r.live())
	return c
}

func one(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (c tally) plus(d tally) tally {
	return tally{
		created: c.created + d.created, scheduled: c.scheduled + d.scheduled,
		running: c.running + d.running, gone: c.gone + d.gone,
		deleting: c.deleting + d.deleting, deletingGone: c.deletingGone + d.deletingGone,
		objectPresent: c.objectPresent + d.objectPresent, objectLive: c.objectLive + d.objectLive,
	}
}

func (c tally) minus(d tally) tally {
	return c.plus(tally{
		created: -d.created, scheduled: -d.scheduled, running: -d.running, gone: -d.gone,
		deleting: -d.deleting, deletingGone: -d.deletingGone,
		objectPresent: -d.objectPresent, objectLive: -d.objectLive,
	})
}

// tracker holds the run's pods and counts, and wakes waiters when a count
// changes. Every change of a record goes through update, which keeps the
// counts the sum of counts over the records.
type tracker struct {
	mu   sync.Mutex
	pods map[types.UID]*podRecord
	// order lists the pods in the order the run learnt of them, from its
	// create calls or its watch. The watch also reports pods whose create
	// call failed on the client's side (a timeout) but landed on the
	// server's: they are not counted as created, but they are deleted.
	order []types.UID

	phase  string // current phase, for Progress
	target int    // what the current phase is working towards, for Progress

	n tally
	// live and present count the pods of each object (podRecord.live and
	// present), by LabelObject.
	live, present map[string]int

	// changed is closed, and replaced, whenever a count changes: waiters
	// block on it instead of polling.
	changed chan struct{}
}

func newTracker() *tracker {
	return &tracker{pods: map[types.UID]*podRecord{}, live: map[string]int{}, present: map[string]int{}, changed: make(chan struct{})}
}

// record returns uid's record, making it on first sight; key, when known,
// names the pod.
func (t *tracker) record(uid types.UID, key string) *podRecord {
	r, ok := t.pods[uid]
	if !ok {
		r = &podRecord{}
		t.pods[uid] = r
	}
	if r.key == "" && key != "" {
		r.key = key
		t.order = append(t.order, uid)
	}
	return r
}

// update applies mutate to uid's record (made on first sight; key, when
// known, names the pod) and keeps the counts: it takes out what the record
// counted before and adds what it counts after, and wakes the waiters if
// that changed a count. It returns the record before and after. The caller
// holds t.mu.
func (t *tracker) update(uid types.UID, key string, mutate func(*podRecord)) (before, after podRecord) {
	r := t.record(uid, key)
	before = *r
	mutate(r)
	after = *r
	changed := false
	if old, now := counts(before), counts(after); old != now {
		t.n = t.n.minus(old).plus(now)
		changed = true
	}
	for _, c := range []struct {
		m     map[string]int
		count func(podRecord) bool
	}{{t.live, podRecord.live}, {t.present, podRecord.present}} {
		was, is := c.count(before), c.count(after)
		if was != is || (is && before.object != after.object) {
			if was {
				c.m[before.object]--
			}
			if is {
				c.m[after.object]++
			}
			changed = true
		}
	}
	if changed {
		t.signal()
	}
	return before, after
}

// signal wakes every waiter; the caller holds t.mu.
func (t *tracker) signal() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// observe takes a pod the watch delivered at now and reports which
// milestones it shows for the first time; first says this is the first
// sight of it.
func (t *tracker) observe(pod *corev1.Pod, now time.Time) (first, scheduled, running bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	before, after := t.update(pod.UID, pod.Namespace+"/"+pod.Name, func(r *podRecord) {
		r.seen = true
		r.object = pod.Labels[LabelObject]
		r.phase, r.nodeName = pod.Status.Phase, pod.Spec.NodeName
		r.terminating = pod.DeletionTimestamp != nil
		if pod.Spec.NodeName != "" {
			r.scheduled = true
		}
		if pod.Status.Phase == corev1.PodRunning && !r.running {
			r.running, r.runningAt = true, now
		}
	})
	return !before.seen, after.scheduled && !before.scheduled, after.running && !before.running
}

// liveOf is the number of an object's pods Running now.
func (t *tracker) liveOf(object string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live[object]
}

// presentOf is the number of an object's pods that still exist.
func (t *tracker) presentOf(object string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.present[object]
}

// observeGone takes a pod removal the watch delivered and reports whether it
// is the first sign of it.
func (t *tracker) observeGone(uid types.UID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	before, _ := t.update(uid, "", func(r *podRecord) { r.seen, r.gone = true, true })
	return !before.gone
}

// created records a pod whose create call returned.
func (t *tracker) created(uid types.UID, key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.update(uid, key, func(r *podRecord) { r.created = true })
}

// deleting records a pod whose delete call returned; notFound says the API
// server no longer had it, so it counts as gone without waiting for the watch.
func (t *tracker) deleting(uid types.UID, notFound bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.update(uid, "", func(r *podRecord) {
		r.deleting = true
		if notFound {
			r.gone = true
		}
	})
}

// podRef names a pod for an API call.
type podRef struct {
	uid       types.UID
	namespace string
	name      string
}

// toDelete lists the run's pods not yet deleted nor gone, oldest first.
func (t *tracker) toDelete() []podRef {
	t.mu.Lock()
	defer t.mu.Unlock()
	var refs []podRef
	for _, uid := range t.order {
		// An object's pods go with their object.
		if r := t.pods[uid]; !r.deleting && !r.gone && r.object == "" {
			ns, name, _ := strings.Cut(r.key, "/")
			refs = append(refs, podRef{uid: uid, namespace: ns, name: name})
		}
	}
	return refs
}

// setPhase names the phase and its target for Progress.
func (t *tracker) setPhase(name string, target int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.phase, t.target = name, target
}

// deletingCount is the number of pods the run has deleted.
func (t *tracker) deletingCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n.deleting
}

func (t *tracker) progress() Progress {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Progress{
		Phase:     t.phase,
		Created:   t.n.created,
		Scheduled: t.n.scheduled,
		Running:   t.n.running,
		Gone:      t.n.gone,
		Target:    t.target,

		ObjectPods:        t.n.objectPresent,
		ObjectPodsRunning: t.n.objectLive,
	}
}

// changes returns a channel that is closed at the next change of a count. A
// waiter takes it before looking at the state, so that no change between its
// look and its wait goes unnoticed.
func (t *tracker) changes() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

// podView is what the run's watch has seen of one pod.
type podView struct {
	running   bool
	runningAt time.Time
	gone      bool
}

// views returns what the watch has seen of each pod in uids, in order, under
// one lock.
func (t *tracker) views(uids []types.UID) []podView {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]podView, len(uids))
	for i, uid := range uids {
		if r, ok := t.pods[uid]; ok {
			out[i] = podView{running: r.running, runningAt: r.runningAt, gone: r.gone}
		}
	}
	return out
}

// describePod names a pod and its state as the watch last saw it, for errors:
// "ns/name (Pending, node-1)".
func (t *tracker) describePod(uid types.UID) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.pods[uid]
	if !ok {
		return string(uid) + " (not seen by the watch)"
	}
	return fmt.Sprintf("%s (%s)", r.key, r.describe())
}

// errWaitTimedOut is returned by wait when timeout fires first.
var errWaitTimedOut = errors.New("timed out")

// wait blocks until done (called with t.mu held) is true, ctx ends, or
// timeout fires. It wakes only when a count changes.
func (t *tracker) wait(ctx context.Context, timeout <-chan time.Time, done func() bool) error {
	for {
		t.mu.Lock()
		ok, changed := done(), t.changed
		t.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-timeout:
			return errWaitTimedOut
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// allRunning is a wait condition: every created pod observed Running.
func (t *tracker) allRunning() bool { return t.n.running == t.n.created }

// allGone is a wait condition: every deleted pod observed gone.
func (t *tracker) allGone() bool { return t.n.deletingGone == t.n.deleting }

// straggleLimit is how many unfinished pods a timeout error names.
const straggleLimit = 3

// stragglers describes the pods that did not reach a state, for a timeout
// error: "3 of 1000 pods not Running after 5m0s: ns/a (Pending, unscheduled), ...".
// waitedFor selects the pods the wait is about, done those that got there;
// both are called with t.mu held.
func (t *tracker) stragglers(state string, after time.Duration, waitedFor, done func(*podRecord) bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	total, missing, list := t.unfinishedLocked(t.order, waitedFor, done)
	return fmt.Errorf("%d of %d pods not %s after %v: %s", missing, total, state, after, list)
}

// unfinished is stragglers' count for the pods in uids: how many of them
// waitedFor selects, how many of those done does not, and the first few of
// those named with their state.
func (t *tracker) unfinished(uids []types.UID, waitedFor, done func(*podRecord) bool) (total, missing int, list string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.unfinishedLocked(uids, waitedFor, done)
}

// unfinishedLocked is unfinished for a caller that holds t.mu. A pod the
// tracker has never heard of counts as waited for and not done.
func (t *tracker) unfinishedLocked(uids []types.UID, waitedFor, done func(*podRecord) bool) (total, missing int, list string) {
	var named []string
	for _, uid := range uids {
		r, ok := t.pods[uid]
		if !ok {
			r = &podRecord{key: string(uid)}
		}
		if !waitedFor(r) {
			continue
		}
		total++
		if done(r) {
			continue
		}
		missing++
		if len(named) < straggleLimit {
			named = append(named, fmt.Sprintf("%s (%s)", r.key, r.describe()))
		}
	}
	list = strings.Join(named, ", ")
	if missing > len(named) {
		list += ", ..."
	}
	return total, missing, list
}

// describe is a pod's state as the watch last saw it: phase, node, and
// whether it is terminating.
func (r *podRecord) describe() string {
	if !r.seen {
		return "not seen by the watch"
	}
	if r.gone {
		return "gone"
	}
	phase := string(r.phase)
	if phase == "" {
		phase = string(corev1.PodPending) // what the API server defaults it to
	}
	node := r.nodeName
	if node == "" {
		node = "unscheduled"
	}
	s := phase + ", " + node
	if r.terminating {
		s += ", terminating"
	}
	return s
}
