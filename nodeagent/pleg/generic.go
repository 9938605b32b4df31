package pleg

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubelettypes "k8s.io/kubelet/pkg/types"
	"k8s.io/utils/clock"

	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
	"github.com/fleetlet/fleetlet/nodeagent/metrics"
)

// The kubelet's generic PLEG settings.
const (
	// RelistPeriod is how often the runtime is listed.
	RelistPeriod = time.Second
	// RelistThreshold is how stale the last relist may be before the PLEG,
	// and with it the node, is unhealthy.
	RelistThreshold = 3 * time.Minute
	// channelCapacity bounds events waiting for the sync loop; the kubelet
	// uses 1000 and drops (and counts) events beyond it.
	channelCapacity = 1000
)

type containerState int

const (
	stateNonExistent containerState = iota
	stateRunning
	stateExited
	stateUnknown
)

// Generic lists every sandbox and container each period and diffs them with
// the previous list.
type Generic struct {
	runtime internalapi.RuntimeService
	clock   clock.WithTicker
	period  time.Duration
	events  chan *Event
	// requested are pods to relist before the next period, asked for after
	// a sync and by the evented PLEG; requestSignal wakes Run. A set rather
	// than a buffered channel: an idle node's PLEG holds nothing, and a
	// pod asked for twice is relisted once.
	requestMu     sync.Mutex
	requested     map[types.UID]struct{}
	requestSignal chan struct{}

	// reinspect are pods to sync at the next relist even if none of their
	// containers changed, the kubelet's podsToReinspect.
	reinspect sync.Map

	// last maps pod UID to its containers' states at the previous relist.
	last map[types.UID]map[string]containerState

	mu         sync.Mutex
	lastRelist time.Time

	// metrics receives the kubelet's PLEG metrics; nil records none.
	metrics *metrics.Kubelet

	// When the runtime was last listed, as the kubelet's pod status cache
	// keeps it for its pod workers (cache.UpdateTime and each pod's
	// modified time): relistAt is the start of the newest relist of every
	// pod, podRelistAt that of a pod relisted alone (on demand) since.
	// relisted is closed, and replaced, when either moves.
	relistMu    sync.Mutex
	relistAt    time.Time
	podRelistAt map[types.UID]time.Time
	relisted    chan struct{}
}

// NewGeneric returns a generic PLEG relisting every period.
func NewGeneric(runtime internalapi.RuntimeService, clk clock.WithTicker, period time.Duration) *Generic {
	return &Generic{
		runtime: runtime, clock: clk, period: period,
		events:        make(chan *Event, channelCapacity),
		requestSignal: make(chan struct{}, 1),
		last:          map[types.UID]map[string]containerState{},
		podRelistAt:   map[types.UID]time.Time{},
		relisted:      make(chan struct{}),
	}
}

// SetMetrics makes the PLEG record the kubelet's PLEG metrics in m. Call it
// before Run.
func (g *Generic) SetMetrics(m *metrics.Kubelet) { g.metrics = m }

// WaitNewerThan blocks until the pod's containers have been listed by a
// relist that started after t (of every pod, or of this one on demand), or
// ctx ends. It is the kubelet's pod status cache GetNewerThan, on which a
// pod worker waits before each sync so that it acts on a runtime status
// newer than its last sync: up to a relist period after a sync that just
// ended.
func (g *Generic) WaitNewerThan(ctx context.Context, uid types.UID, t time.Time) error {
	for {
		g.relistMu.Lock()
		newer := g.relistAt.After(t) || g.podRelistAt[uid].After(t)
		ch := g.relisted
		g.relistMu.Unlock()
		if newer {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// markRelisted records a relist that started at start, of every pod when
// uid is "", and wakes the waiters.
func (g *Generic) markRelisted(uid types.UID, start time.Time) {
	g.relistMu.Lock()
	defer g.relistMu.Unlock()
	if uid == "" {
		g.relistAt = start
		maps.DeleteFunc(g.podRelistAt, func(_ types.UID, at time.Time) bool { return !at.After(start) })
	} else {
		g.podRelistAt[uid] = start
	}
	close(g.relisted)
	g.relisted = make(chan struct{})
}

// Watch implements PodLifecycleEventGenerator.
func (g *Generic) Watch() <-chan *Event { return g.events }

// Healthy implements PodLifecycleEventGenerator.
func (g *Generic) Healthy() (bool, error) {
	g.mu.Lock()
	last := g.lastRelist
	g.mu.Unlock()
	if last.IsZero() {
		return false, errors.New("pleg has yet to be successful")
	}
	if elapsed := g.clock.Since(last); elapsed > RelistThreshold {
		return false, fmt.Errorf("pleg was last seen active %v ago; threshold is %v", elapsed, RelistThreshold)
	}
	return true, nil
}

// Run relists until ctx ends.
func (g *Generic) Run(ctx context.Context) {
	ticker := g.clock.NewTicker(g.period)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.requestSignal:
			g.requestMu.Lock()
			uids := g.requested
			g.requested = nil
			g.requestMu.Unlock()
			for uid := range uids {
				if err := g.RelistPod(ctx, uid); err != nil && ctx.Err() == nil {
					klog.FromContext(ctx).V(2).Info("GenericPLEG: unable to relist pod", "podUID", uid, "err", err)
				}
			}
			continue
		case <-ticker.C():
		}
		if err := g.Relist(ctx); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("GenericPLEG: unable to relist", "err", err)
		}
	}
}

// RequestRelist asks for one pod to be relisted now rather than at the next
// period, as the kubelet's PLEGOnDemandRelist does.
func (g *Generic) RequestRelist(_ context.Context, uid types.UID) {
	g.requestMu.Lock()
	if g.requested == nil {
		g.requested = map[types.UID]struct{}{}
	}
	g.requested[uid] = struct{}{}
	g.requestMu.Unlock()
	select {
	case g.requestSignal <- struct{}{}:
	default:
	}
}

// RequestReinspect has the next relist that sees the pod emit a PodSync
// event for it if its containers did not change, as the kubelet's
// RequestReinspect: the runtime manager asks it after resizing a pod, whose
// containers' states stay as they were.
func (g *Generic) RequestReinspect(uid types.UID) { g.reinspect.Store(uid, struct{}{}) }

// RelistPod lists one pod's containers and emits an event for each whose
// state changed since it was last seen.
func (g *Generic) RelistPod(ctx context.Context, uid types.UID) error {
	start := g.clock.Now()
	defer func() { g.metrics.ObservePLEGPodRelist(g.clock.Since(start)) }()
	containers, err := g.runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{kubelettypes.KubernetesPodUIDLabel: string(uid)},
	})
	if err != nil {
		return fmt.Errorf("listing containers of pod %s: %w", uid, err)
	}
	now := make(map[string]containerState, len(containers))
	for _, c := range containers {
		now[c.Id] = convertState(c.State)
	}
	g.diff(ctx, uid, g.last[uid], now)
	if len(now) == 0 {
		delete(g.last, uid)
	} else {
		g.last[uid] = now
	}
	g.markRelisted(uid, start)
	return nil
}

// Relist lists the runtime once and emits an event for every container whose
// state changed since the previous relist.
func (g *Generic) Relist(ctx context.Context) error {
	start := g.clock.Now()
	// As the kubelet's: the interval since the last successful relist,
	// and the duration of every relist, failed or not.
	g.mu.Lock()
	last := g.lastRelist
	g.mu.Unlock()
	if !last.IsZero() {
		g.metrics.ObservePLEGRelistInterval(start.Sub(last))
	}
	defer func() { g.metrics.ObservePLEGRelist(g.clock.Since(start)) }()
	containers, err := g.runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{})
	if err != nil {
		return fmt.Errorf("listing containers: %w", err)
	}
	g.mu.Lock()
	g.lastRelist = start
	g.mu.Unlock()
	g.metrics.SetPLEGLastSeen(start)

	current := make(map[types.UID]map[string]containerState, len(g.last))
	var states [metrics.NumContainerStates]int
	for _, c := range containers {
		uid := kuberuntime.UID(c.Labels)
		if uid == "" {
			continue
		}
		states[metrics.CRIState(c.State)]++
		if current[uid] == nil {
			current[uid] = map[string]containerState{}
		}
		current[uid][c.Id] = convertState(c.State)
	}
	for uid, now := range current {
		g.diff(ctx, uid, g.last[uid], now)
	}
	for uid, before := range g.last {
		if _, ok := current[uid]; !ok {
			g.diff(ctx, uid, before, nil)
		}
	}
	g.last = current
	g.metrics.SetContainerStates(states)
	g.markRelisted("", start)
	return nil
}

// diff emits the events that take a pod's containers from before to now.
func (g *Generic) diff(ctx context.Context, uid types.UID, before, now map[string]containerState) {
	emitted := false
	for id, st := range now {
		emitted = g.emit(ctx, uid, id, before[id], st) || emitted
	}
	for id, st := range before {
		if _, ok := now[id]; !ok {
			emitted = g.emit(ctx, uid, id, st, stateNonExistent) || emitted
		}
	}
	if _, reinspect := g.reinspect.LoadAndDelete(uid); reinspect && !emitted {
		g.send(ctx, &Event{ID: uid, Type: PodSync})
	}
}

func (g *Generic) emit(ctx context.Context, uid types.UID, id string, from, to containerState) bool {
	if from == to {
		return false
	}
	var t EventType
	switch to {
	case stateRunning:
		t = ContainerStarted
	case stateExited:
		t = ContainerDied
	case stateNonExistent:
		if from == stateExited {
			t = ContainerRemoved
		} else {
			// Gone without being seen to exit: the kubelet reports it died.
			t = ContainerDied
		}
	default:
		t = ContainerChanged
	}
	g.send(ctx, &Event{ID: uid, Type: t, Data: id})
	return true
}

func (g *Generic) send(ctx context.Context, e *Event) {
	select {
	case g.events <- e:
	default:
		g.metrics.IncPLEGDiscardEvents()
		klog.FromContext(ctx).Error(nil, "Event channel is full, discard this relist() cycle event", "podUID", e.ID, "type", e.Type)
	}
}

func convertState(s runtimeapi.ContainerState) containerState {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return stateRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return stateExited
	default:
		// The kubelet treats a created-but-not-started container as unknown.
		return stateUnknown
	}
}
