package prober

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// maxRetries is how often a probe that errors (could not run) is tried at
// once before the error is reported, the kubelet's maxProbeRetries.
const maxRetries = 3

// timeoutGrace is how long past a probe's timeout the manager cancels the
// runner's context. Runners enforce the timeout themselves and answer first,
// with the kubelet's messages; the manager's deadline only frees a pool
// goroutine from a runner that hangs.
const timeoutGrace = time.Second

// errHung is the cause of the manager's cancellation of a hung runner.
var errHung = errors.New("probe runner did not return in time")

// timeHeap orders scheduled workers by next run time.
type timeHeap []*worker

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h timeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timeHeap) Push(x any) {
	w := x.(*worker)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *timeHeap) Pop() any {
	old := *h
	n := len(old) - 1
	w := old[n]
	old[n] = nil
	w.index = -1
	*h = old[:n]
	return w
}

// scheduleLocked puts an idle or finishing worker in the heap at at.
func (m *Manager) scheduleLocked(w *worker, at time.Time) {
	w.next = at
	w.state = scheduled
	heap.Push(&m.queue, w)
	if m.queue[0] == w {
		signal(m.kick)
	}
}

// unscheduleLocked takes a worker out of the heap; a queued worker's entry
// in the ready list is skipped by the state check when it is taken.
func (m *Manager) unscheduleLocked(w *worker) {
	if w.index >= 0 {
		heap.Remove(&m.queue, w.index)
	}
}

// triggerLocked runs a worker now instead of at its next tick, as the
// kubelet's manual trigger does for a readiness probe once the container has
// started; the period restarts from this run.
func (m *Manager) triggerLocked(w *worker, now time.Time) {
	switch w.state {
	case scheduled:
		if w.next.After(now) {
			w.next = now
			heap.Fix(&m.queue, w.index)
			signal(m.kick)
		}
	case running:
		w.trigger = true
	}
}

func (m *Manager) wake() {
	m.timerFired.Store(true)
	signal(m.kick)
}

// Run dispatches due probes to the pool and delivers Updates until ctx ends,
// then waits for the probes in flight. Call it once.
func (m *Manager) Run(ctx context.Context) {
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		m.wg.Wait()
	}()
	for {
		now := m.clock.Now()
		m.mu.Lock()
		m.dispatchLocked(ctx, now)
		m.deliverLocked()
		if m.timerFired.Swap(false) {
			// The timer is spent: whatever armed says, set a new one.
			m.armed = time.Time{}
		}
		var head time.Time
		if len(m.queue) > 0 {
			head = m.queue[0].next
		}
		var out chan<- Update
		var next Update
		if len(m.pending) > 0 {
			out, next = m.updates, m.pending[0]
		}
		if !head.IsZero() && !head.Equal(m.armed) {
			// One timer for the node, set for the earliest worker. A clock
			// callback must not take mu: wakeFn does not.
			if timer != nil {
				timer.Stop()
			}
			timer = m.clock.AfterFunc(head.Sub(now), m.wakeFn)
			m.armed = head
		}
		m.mu.Unlock()

		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		case out <- next:
			m.mu.Lock()
			m.popPendingLocked()
			m.mu.Unlock()
		}
	}
}

// dispatchLocked moves due workers to the ready list and starts pool
// goroutines for them, up to the limit. A liveness or readiness worker whose
// container has not started (its startup probe has not passed) is not run:
// it waits for its next tick, as the kubelet's workers skip.
func (m *Manager) dispatchLocked(ctx context.Context, now time.Time) {
	for len(m.queue) > 0 && !m.queue[0].next.After(now) {
		w := heap.Pop(&m.queue).(*worker)
		if w.kind != Startup && !m.startedLocked(w.containerID) {
			m.scheduleLocked(w, nextTick(w.next, now, w.params.period))
			continue
		}
		w.state = queued
		if !w.inReady {
			w.inReady = true
			m.ready = append(m.ready, w)
		}
	}
	for n := min(m.workers-m.active, len(m.ready)); n > 0; n-- {
		m.active++
		m.wg.Add(1)
		go m.serve(ctx)
	}
}

// deliverLocked hands pending updates to the channel while it has room.
func (m *Manager) deliverLocked() {
	for len(m.pending) > 0 {
		select {
		case m.updates <- m.pending[0]:
			m.popPendingLocked()
		default:
			return
		}
	}
}

func (m *Manager) popPendingLocked() {
	m.pending[0] = Update{}
	m.pending = m.pending[1:]
	if len(m.pending) == 0 {
		m.pending = nil
	}
}

// takeLocked returns the next worker to run, or nil when there is none and
// the calling pool goroutine should end.
func (m *Manager) takeLocked(ctx context.Context) *worker {
	for len(m.ready) > 0 && ctx.Err() == nil {
		w := m.ready[0]
		m.ready[0] = nil
		m.ready = m.ready[1:]
		w.inReady = false
		if w.state == queued {
			w.state = running
			return w
		}
	}
	m.ready = nil
	return nil
}

// serve is a pool goroutine: it runs ready probes until none is left.
func (m *Manager) serve(ctx context.Context) {
	defer m.wg.Done()
	logger := klog.FromContext(ctx)
	for {
		m.mu.Lock()
		w := m.takeLocked(ctx)
		if w == nil {
			m.active--
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()

		res, out, err := m.execute(ctx, w)
		now := m.clock.Now()
		m.mu.Lock()
		ev, ok := m.finishLocked(ctx, w, res, out, err, now)
		m.mu.Unlock()
		if ok {
			m.report(logger, w, res, out, err, ev)
		}
	}
}

// event is what a probe's outcome records.
type event int

const (
	noEvent event = iota
	unhealthy
	probeWarning
	errored
)

// finishLocked folds a probe's outcome into its worker and the cache and
// schedules the next run. It returns the event to record, and false if the
// outcome was dropped: the worker was retired or stopped meanwhile, or the
// manager is shutting down.
func (m *Manager) finishLocked(ctx context.Context, w *worker, res Result, _ string, err error, now time.Time) (event, bool) {
	if w.state != running || ctx.Err() != nil {
		if w.state == running {
			w.state = idle
		}
		return noEvent, false
	}
	ev, hold := noEvent, false
	if err != nil {
		// The probe could not run: not counted, as the kubelet throws it away.
		ev = errored
	} else {
		r := res
		switch r {
		case Warning:
			ev, r = probeWarning, Success
		case Failure:
			ev = unhealthy
		case Unknown:
			r = Failure
		}
		if w.count.add(r, w.params) {
			m.setLocked(w, r)
			if holdsAfter(w.kind, r) {
				hold = true
				w.count.run = 0
			}
			if w.kind == Startup && r == Success {
				if ws := m.containers[w.containerID]; ws != nil && ws[Readiness] != nil {
					m.triggerLocked(ws[Readiness], now)
				}
			}
		}
	}
	switch {
	case hold:
		w.state = idle
		w.trigger = false
	case w.trigger:
		w.trigger = false
		m.scheduleLocked(w, now)
	default:
		m.scheduleLocked(w, nextTick(w.next, now, w.params.period))
	}
	return ev, true
}

// execute runs one probe, retrying one that errors, as the kubelet's
// runProbeWithRetries does.
func (m *Manager) execute(ctx context.Context, w *worker) (res Result, out string, err error) {
	for range maxRetries {
		res, out, err = m.runOnce(ctx, w)
		if err == nil || ctx.Err() != nil {
			return res, out, err
		}
	}
	return res, out, err
}

func (m *Manager) runOnce(ctx context.Context, w *worker) (res Result, out string, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t := m.clock.AfterFunc(w.params.timeout+timeoutGrace, func() { cancel(errHung) })
	defer t.Stop()
	defer func() {
		// A runner's panic must not take down the process: thousands of nodes
		// live in it. It is reported as the probe's error.
		if p := recover(); p != nil {
			res, out, err = Unknown, "", fmt.Errorf("probe runner panicked: %v", p)
		}
	}()
	p := w.probe
	switch {
	case p.Exec != nil:
		res, out, err = m.runner.Exec(ctx, w.containerID, w.command, w.params.timeout)
	case p.HTTPGet != nil, p.TCPSocket != nil, p.GRPC != nil:
		res, out, err = m.runner.Network(ctx, w.kind, w.pod, w.container, w.containerID, p)
	default:
		return Unknown, "", fmt.Errorf("missing probe handler for %s/%s:%s", w.pod.Namespace, w.pod.Name, w.container.Name)
	}
	if err != nil && errors.Is(context.Cause(ctx), errHung) {
		return Failure, fmt.Sprintf("probe did not complete within %v: %v", w.params.timeout, err), nil
	}
	return res, out, err
}

// report logs a probe's outcome and records its event, with the kubelet's
// levels, reasons and messages.
func (m *Manager) report(logger klog.Logger, w *worker, res Result, out string, err error, ev event) {
	switch ev {
	case errored:
		logger.V(1).Info("Probe errored", "probeType", w.kind, "pod", klog.KObj(w.pod), "podUID", w.pod.UID, "containerName", w.container.Name, "err", err)
		m.record(w, "Unhealthy", fmt.Sprintf("%s probe errored and resulted in unknown state: %v", w.kind, err))
	case unhealthy:
		logger.V(1).Info("Probe failed", "probeType", w.kind, "pod", klog.KObj(w.pod), "podUID", w.pod.UID, "containerName", w.container.Name, "output", out)
		m.record(w, "Unhealthy", fmt.Sprintf("%s probe failed: %s", w.kind, out))
	case probeWarning:
		logger.V(3).Info("Probe succeeded with a warning", "probeType", w.kind, "pod", klog.KObj(w.pod), "podUID", w.pod.UID, "containerName", w.container.Name, "output", out)
		m.record(w, "ProbeWarning", fmt.Sprintf("%s probe warning: %s", w.kind, out))
	default:
		// Checked first: most probes succeed, and building the values of a
		// line nobody reads would cost an allocation each.
		if l := logger.V(3); l.Enabled() {
			l.Info("Probe finished", "probeType", w.kind, "pod", klog.KObj(w.pod), "podUID", w.pod.UID, "containerName", w.container.Name, "probeResult", res)
		}
	}
}

func (m *Manager) record(w *worker, reason, message string) {
	if m.events == nil {
		return
	}
	// The event names the container, as the kubelet's container references
	// do, so `kubectl describe pod` shows which one is unhealthy.
	field := "spec.containers{" + w.container.Name + "}"
	if findAppContainer(w.pod, w.container.Name) == nil {
		field = "spec.initContainers{" + w.container.Name + "}"
	}
	ref := &corev1.ObjectReference{
		Kind: "Pod", APIVersion: "v1", Namespace: w.pod.Namespace, Name: w.pod.Name,
		UID: w.pod.UID, ResourceVersion: w.pod.ResourceVersion, FieldPath: field,
	}
	m.events.Event(ref, corev1.EventTypeWarning, reason, message)
}

func findAppContainer(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}
