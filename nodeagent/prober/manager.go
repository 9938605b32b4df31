package prober

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

// DefaultWorkers is how many probes of one node (or of a Queue's nodes) run
// at once by default.
// Emulated probes answer at once, so a few goroutines keep up with thousands
// of containers; a physical node whose probes take real time should size
// Workers to about (probes × typical duration / period).
const DefaultWorkers = 4

// updatesBuffer lets the manager hand over a burst of changes without
// waiting for the agent at each one.
const updatesBuffer = 16

// Config wires a Manager.
type Config struct {
	// Clock drives probe schedules and timeouts; nil means Queue's clock,
	// or the real clock.
	Clock clock.WithTickerAndDelayedExecution
	// Runner runs the probes; required.
	Runner Runner
	// Events receives the Unhealthy and ProbeWarning events, with the
	// kubelet's reasons and messages; nil records none.
	Events record.EventRecorder
	// Queue times and runs the probes, shared with other Managers (a
	// fleet's); it must run on the same clock. Nil means a Queue of the
	// Manager's own, with Workers, started and stopped with it.
	Queue *Queue
	// Workers bounds the probes that run at once on the Manager's own
	// Queue; 0 means DefaultWorkers. A shared Queue has its own bound.
	Workers int
	// Seed makes the restart jitter of first probes replayable.
	Seed uint64
}

// workerKey names a worker within its pod.
type workerKey struct {
	container string
	kind      Kind
}

type podEntry struct {
	workers map[workerKey]*worker
	// terminating: StopLivenessAndStartup was called; only readiness probes
	// run, so a pod that stops answering turns NotReady during its grace
	// period while nothing kills its containers.
	terminating bool
}

// Manager runs the probes of one node's containers. Its methods are safe for
// concurrent use. Probes run only between Start (or Run) and the end of its
// context.
type Manager struct {
	clock   clock.WithTickerAndDelayedExecution
	runner  Runner
	events  record.EventRecorder
	shared  *Queue
	workers int
	start   time.Time
	updates chan Update
	// wg counts the probes in flight and the goroutine delivering updates.
	wg   sync.WaitGroup
	done chan struct{} // closed once stopped

	// mu guards everything below. Invariant: no clock callback takes mu,
	// nor does the queue but in serve, on its workers, so mu may be held
	// while calling the clock or adding to the queue, and a FakeClock's Step
	// never waits for it.
	mu         sync.Mutex
	ctx        context.Context // Start's; nil before
	queue      *Queue          // set by Start
	stopped    bool            // Start's context ended
	backlog    []*worker       // scheduled before Start
	delivering bool            // deliver runs
	rng        *rand.Rand
	pods       map[types.UID]*podEntry
	containers map[string]*[numKinds]*worker
	results    [numKinds]map[string]Result
	pending    []Update
}

// NewManager returns a Manager for cfg. It panics without a Runner, a
// wiring mistake that the first test of the caller shows.
func NewManager(cfg Config) *Manager {
	if cfg.Runner == nil {
		panic("prober.NewManager: Config.Runner is nil; give the node's probe runner")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
		if cfg.Queue != nil {
			cfg.Clock = cfg.Queue.clock
		}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	m := &Manager{
		clock:      cfg.Clock,
		runner:     cfg.Runner,
		events:     cfg.Events,
		shared:     cfg.Queue,
		workers:    cfg.Workers,
		start:      cfg.Clock.Now(),
		updates:    make(chan Update, updatesBuffer),
		done:       make(chan struct{}),
		rng:        rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		pods:       map[types.UID]*podEntry{},
		containers: map[string]*[numKinds]*worker{},
	}
	for k := range m.results {
		m.results[k] = map[string]Result{}
	}
	return m
}

// Updates delivers every change of a cached result, in order, from Start
// until its context ends. The agent syncs the pod on each: a readiness
// change changes its status; an update whose KillsContainer is true means
// kill and restart.
func (m *Manager) Updates() <-chan Update { return m.updates }

// ContainerStarted starts probing a running container: one worker for each
// of its startup, liveness and readiness probes. The agent calls it for
// every running app container and restartable init container (sidecar) it
// sees, with the runtime's container ID and start time; calling it again
// for the same ID does nothing, and a new ID for the same container (a
// restart) replaces the workers and drops the old ID's results. The manager
// keeps pod and reads it later: it must not be modified.
//
// A container started before the manager (the agent restarted) keeps what
// pod.Status said of it (Started, Ready) until probed again, so that a
// restart does not flap ready pods, and is first probed after a random part
// of the period.
func (m *Manager) ContainerStarted(pod *corev1.Pod, containerName, containerID string, startedAt time.Time) {
	c := findContainer(pod, containerName)
	if c == nil || containerID == "" || (c.StartupProbe == nil && c.LivenessProbe == nil && c.ReadinessProbe == nil) {
		return
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	pe := m.pods[pod.UID]
	if pe == nil {
		pe = &podEntry{workers: map[workerKey]*worker{}}
		m.pods[pod.UID] = pe
	}
	if pod.DeletionTimestamp != nil {
		pe.terminating = true
	}
	restarted := !startedAt.IsZero() && startedAt.Before(m.start)
	prev := previousStatus(pod, containerName, containerID)
	for k := range numKinds {
		p := probeOf(c, k)
		if p == nil || (pe.terminating && k != Readiness) {
			continue
		}
		key := workerKey{containerName, k}
		var carried probeMetrics
		if old := pe.workers[key]; old != nil {
			if old.containerID == containerID {
				continue
			}
			m.retireLocked(old)
			carried = old.metrics
		}
		w := &worker{
			m: m, kind: k, pod: pod, container: c, containerID: containerID,
			probe: p, params: paramsOf(p), metrics: carried,
		}
		if p.Exec != nil {
			w.command = expandCommand(p.Exec.Command, c.Env)
		}
		w.slot = newSlot(w)
		pe.workers[key] = w
		ws := m.containers[containerID]
		if ws == nil {
			ws = new([numKinds]*worker)
			m.containers[containerID] = ws
		}
		ws[k] = w

		initial := initialResult(k)
		if restarted && prev != nil {
			switch {
			case k == Startup && prev.Started != nil && *prev.Started:
				initial = Success
			case k == Readiness && prev.Ready:
				initial = Success
			}
		}
		m.results[k][containerID] = initial
		if k == Startup && initial == Success {
			// Started already; a startup probe never runs again.
			continue
		}
		m.scheduleLocked(w, firstRun(now, startedAt, m.start, w.params, m.rng.Float64()))
	}
}

// ContainerStopped stops probing a container that exited or was killed. Its
// readiness becomes Failure (an Update if it was ready); its other results
// stay until the container is replaced or the pod removed, so that only a
// probe ever reports a liveness or startup Failure.
func (m *Manager) ContainerStopped(containerID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ws := m.containers[containerID]
	if ws == nil {
		return
	}
	for _, w := range ws {
		if w == nil {
			continue
		}
		// Not scheduled any more: its entry in the queue is dropped when
		// due.
		if w.state != retired {
			w.state = idle
		}
		if w.kind == Readiness {
			m.setLocked(w, Failure)
		}
	}
}

// StopLivenessAndStartup stops the liveness and startup probes of a pod that
// is terminating, as the kubelet does when its pod worker starts to
// terminate the pod; readiness probes go on until RemovePod. Their results
// are dropped: nothing is killed, and Started reports true.
func (m *Manager) StopLivenessAndStartup(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pe := m.pods[uid]
	if pe == nil {
		return
	}
	pe.terminating = true
	for key, w := range pe.workers {
		if key.kind != Readiness {
			m.retireLocked(w)
			delete(pe.workers, key)
		}
	}
}

// RemovePod stops every probe of the pod and forgets its results, without
// updates. The agent calls it when the pod is terminated or gone.
func (m *Manager) RemovePod(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pe := m.pods[uid]
	if pe == nil {
		return
	}
	for _, w := range pe.workers {
		m.retireLocked(w)
	}
	delete(m.pods, uid)
}

// Get returns the cached result of a container's probe of one kind, and
// whether there is one: there is from ContainerStarted until the container
// is replaced or its pod removed.
func (m *Manager) Get(kind Kind, containerID string) (Result, bool) {
	if kind < 0 || kind >= numKinds {
		return Unknown, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.results[kind][containerID]
	return r, ok
}

// Readiness is the container's readiness result: Success for a container
// without a readiness probe (or one the manager was not told of), Failure
// until its probe passes. A container is ready when it runs, is Started, and
// its Readiness is Success, as the kubelet's UpdatePodStatus decides.
func (m *Manager) Readiness(containerID string) Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ws := m.containers[containerID]; ws == nil || ws[Readiness] == nil {
		return Success
	}
	if r, ok := m.results[Readiness][containerID]; ok {
		return r
	}
	return Failure
}

// Ready reports whether the container's Readiness is Success. With Started
// and Unhealthy it makes the Manager the agent's view of probes
// (kuberuntime.ProbeState, status.Probes).
func (m *Manager) Ready(containerID string) bool { return m.Readiness(containerID) == Success }

// Unhealthy reports whether the container's liveness or startup probe
// reached its failure threshold, so that the agent kills it and its restart
// policy decides what follows (the kubelet's computePodActions). It stays
// true for that container ID; its replacement starts healthy.
func (m *Manager) Unhealthy(containerID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.results[Liveness][containerID] == Failure || m.results[Startup][containerID] == Failure
}

// Started reports whether the container's startup probe has succeeded, or
// it has none (or the manager was not told of it): status.containerStatuses
// [].started, which gates its liveness and readiness probes.
func (m *Manager) Started(containerID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.startedLocked(containerID)
}

func (m *Manager) startedLocked(containerID string) bool {
	ws := m.containers[containerID]
	if ws == nil || ws[Startup] == nil {
		return true
	}
	return m.results[Startup][containerID] == Success
}

// setLocked caches a result and queues an Update if it changed.
func (m *Manager) setLocked(w *worker, r Result) {
	if prev, ok := m.results[w.kind][w.containerID]; ok && prev == r {
		return
	}
	m.results[w.kind][w.containerID] = r
	m.pending = append(m.pending, Update{
		ContainerID: w.containerID, ContainerName: w.container.Name,
		PodUID: w.pod.UID, Kind: w.kind, Result: r,
	})
	m.flushLocked()
}

// retireLocked stops a worker for good and forgets its result. Its entry
// in the queue, if any, is dropped when due.
func (m *Manager) retireLocked(w *worker) {
	w.state = retired
	w.slot.w.Store(nil)
	delete(m.results[w.kind], w.containerID)
	if ws := m.containers[w.containerID]; ws != nil && ws[w.kind] == w {
		ws[w.kind] = nil
		if *ws == ([numKinds]*worker{}) {
			delete(m.containers, w.containerID)
		}
	}
}

// findContainer returns the named container if it can have probes: an app
// container or a restartable init container (a sidecar).
func findContainer(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.Name == name && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			return c
		}
	}
	return nil
}

// previousStatus finds what the pod's status said of this very container (a
// status ContainerID is "<runtime>://<id>").
func previousStatus(pod *corev1.Pod, name, id string) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for i := range list {
			st := &list[i]
			if st.Name == name && (st.ContainerID == id || strings.HasSuffix(st.ContainerID, "://"+id)) {
				return st
			}
		}
	}
	return nil
}
