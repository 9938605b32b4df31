package prober

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// maxRetries is how often a probe that errors (could not run) is tried at
// once before the error is reported, the kubelet's maxProbeRetries.
const maxRetries = 3

// timeoutGrace is how long past a probe's timeout the manager cancels the
// runner's context. Runners enforce the timeout themselves and answer first,
// with the kubelet's messages; the manager's deadline only frees a queue
// worker from a runner that hangs.
const timeoutGrace = time.Second

// errHung is the cause of the manager's cancellation of a hung runner.
var errHung = errors.New("probe runner did not return in time")

// scheduleLocked makes w's next run at at. Before Start the worker waits in
// the backlog, which Start hands to the queue; after the Manager stopped it
// is not queued.
//
// A worker is queued under its own pointer, and the queue keeps the earlier
// of two times for one item, so a worker may come due more often than it
// is scheduled; serve runs it only when it is scheduled and due.
func (m *Manager) scheduleLocked(w *worker, at time.Time) {
	w.next = at
	w.state = scheduled
	switch {
	case m.stopped:
	case m.queue == nil:
		m.backlog = append(m.backlog, w)
	default:
		m.queue.q.AddAt(w.slot, at)
	}
}

// triggerLocked runs a worker now instead of at its next tick, as the
// kubelet's manual trigger does for a readiness probe once the container has
// started; the period restarts from this run.
func (m *Manager) triggerLocked(w *worker, now time.Time) {
	switch w.state {
	case scheduled:
		if w.next.After(now) {
			m.scheduleLocked(w, now)
		}
	case running:
		w.trigger = true
	}
}

// Start starts probing: the probes scheduled so far, and every one from
// now on, run when due until ctx ends; Wait then returns once the probes in
// flight have. Updates are delivered from now on. Call it once. Of its own,
// the Manager takes no goroutine: its probes run on its Queue's workers, and
// an Update that does not fit the channel's buffer waits on a goroutine that
// lives until the agent takes it.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx != nil {
		return errors.New("prober: Manager.Start called twice; start a node's probe manager once")
	}
	q, own := m.shared, m.shared == nil
	if own {
		q = NewQueue(QueueConfig{Clock: m.clock, Workers: m.workers})
		q.q.Start()
	}
	m.ctx, m.queue = ctx, q
	for _, w := range m.backlog {
		if w.state == scheduled {
			q.q.AddAt(w.slot, w.next)
		}
	}
	m.backlog = nil
	m.flushLocked()
	context.AfterFunc(ctx, func() {
		m.mu.Lock()
		m.stopped = true
		// A shared Queue outlives the Manager: what it holds of its
		// workers must not keep them, nor the node, alive.
		for _, ws := range m.containers {
			for _, w := range ws {
				if w != nil {
					w.slot.w.Store(nil)
				}
			}
		}
		for _, pe := range m.pods {
			for _, w := range pe.workers {
				w.slot.w.Store(nil)
			}
		}
		m.mu.Unlock()
		m.wg.Wait()
		if own {
			q.q.Stop()
		}
		close(m.done)
	})
	return nil
}

// Wait returns once the Manager has stopped after Start's context ended: no
// probe runs and no Update is sent any more.
func (m *Manager) Wait() { <-m.done }

// Run runs the probes and delivers Updates until ctx ends, then waits for
// the probes in flight: Start, then Wait once ctx has ended. Call it once.
func (m *Manager) Run(ctx context.Context) {
	if err := m.Start(ctx); err != nil {
		panic(err.Error())
	}
	<-ctx.Done()
	m.Wait()
}

// serve is a queue worker's run of a worker that came due: one that is
// no longer scheduled (stopped, retired, or running already) is dropped,
// and one scheduled for later (the queue kept an earlier time) is queued
// again. A liveness or readiness worker whose container has not started
// (its startup probe has not passed) waits for its next tick, as the
// kubelet's workers skip; any other probes.
func (m *Manager) serve(w *worker) {
	now := m.clock.Now()
	m.mu.Lock()
	if m.stopped || w.state != scheduled {
		m.mu.Unlock()
		return
	}
	if w.next.After(now) {
		m.queue.q.AddAt(w.slot, w.next)
		m.mu.Unlock()
		return
	}
	if w.kind != Startup && !m.startedLocked(w.containerID) {
		m.scheduleLocked(w, nextTick(w.next, now, w.params.period))
		m.mu.Unlock()
		return
	}
	w.state = running
	ctx := m.ctx
	m.wg.Add(1)
	m.mu.Unlock()
	defer m.wg.Done()

	start := now
	res, out, err := m.execute(ctx, w)
	now = m.clock.Now()
	m.mu.Lock()
	if ctx.Err() == nil && w.state == running {
		w.metrics.record(res, err, now.Sub(start))
	}
	ev, ok := m.finishLocked(ctx, w, res, out, err, now)
	m.mu.Unlock()
	if ok {
		m.report(klog.FromContext(ctx), w, res, out, err, ev)
	}
}

// flushLocked hands pending updates to the channel while it has room, and
// leaves the rest to a goroutine that waits for the agent to take them.
// Before Start updates wait; while that goroutine runs, it alone sends, so
// that they keep their order.
func (m *Manager) flushLocked() {
	if m.ctx == nil || m.stopped || m.delivering {
		return
	}
	for len(m.pending) > 0 {
		select {
		case m.updates <- m.pending[0]:
			m.popPendingLocked()
		default:
			m.delivering = true
			m.wg.Add(1)
			go m.deliver(m.ctx)
			return
		}
	}
}

// deliver sends the pending updates as the agent takes them, then ends.
func (m *Manager) deliver(ctx context.Context) {
	defer m.wg.Done()
	for {
		m.mu.Lock()
		if len(m.pending) == 0 {
			m.delivering = false
			m.mu.Unlock()
			return
		}
		next := m.pending[0]
		m.mu.Unlock()
		select {
		case m.updates <- next:
			m.mu.Lock()
			m.popPendingLocked()
			m.mu.Unlock()
		case <-ctx.Done():
			m.mu.Lock()
			m.delivering = false
			m.mu.Unlock()
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
