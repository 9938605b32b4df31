package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/fleet"
	"github.com/fleetlet/fleetlet/loadprofiles"
	"github.com/fleetlet/fleetlet/reports"
)

// faultInjector is the load driver's hands on the fleet for fault phases
// (loadprofiles.FaultInjector): it throws the fleet's switches and keeps,
// for the report, when each fault began and ended and what the control
// plane did meanwhile, as its watch of the Nodes and pods saw it.
type faultInjector struct {
	fleet  *fleet.Fleet
	client kubernetes.Interface
	// ours says the control plane is the embedded one, whose
	// controller-manager runs with the upstream eviction rates.
	ours  bool
	watch *faultWatch
	// booting, if set, is told of each node about to boot after a power
	// cut: the heartbeat report must not count the cut as a late renewal.
	booting func(node string)

	mu     sync.Mutex
	faults []*injectedFault
}

// injectedFault is one fault phase as it ran.
type injectedFault struct {
	fault      loadprofiles.Fault
	start, end time.Time
	// restartsAtStart are the restart counts of the hit nodes' pods when
	// it began; duplicated is found when it ends.
	restartsAtStart map[types.UID]int32
	duplicated      int
}

// The node lifecycle controller's defaults (kube-controller-manager
// --node-eviction-rate, --secondary-node-eviction-rate), which the
// embedded control plane keeps.
const (
	upstreamNodeEvictionRate          = 0.1
	upstreamSecondaryNodeEvictionRate = 0.01
)

// newFaultInjector starts watching the Nodes and pods; stop it with close.
func newFaultInjector(ctx context.Context, f *fleet.Fleet, client kubernetes.Interface, ours bool, booting func(node string)) *faultInjector {
	return &faultInjector{fleet: f, client: client, ours: ours, booting: booting, watch: startFaultWatch(ctx, client, f.NodeNames())}
}

func (in *faultInjector) close() { in.watch.stop() }

// Nodes implements loadprofiles.FaultInjector.
func (in *faultInjector) Nodes() []loadprofiles.FaultNode {
	members := in.fleet.Members()
	nodes := make([]loadprofiles.FaultNode, len(members))
	for i, m := range members {
		nodes[i] = loadprofiles.FaultNode{Name: m.Name, Pool: m.Pool, Labels: m.Labels()}
	}
	return nodes
}

// faultParallelism bounds the nodes switched at once: a power cut waits
// for an agent to stop, and a zone is hundreds of nodes.
const faultParallelism = 32

// eachNode runs do for every node of f, some at a time, and joins their
// errors.
func eachNode(ctx context.Context, nodes []string, do func(ctx context.Context, node string) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(faultParallelism)
	for _, n := range nodes {
		g.Go(func() error { return do(ctx, n) })
	}
	return g.Wait()
}

// Inject implements loadprofiles.FaultInjector.
func (in *faultInjector) Inject(ctx context.Context, f loadprofiles.Fault) error {
	rec := &injectedFault{fault: f, start: time.Now(), restartsAtStart: in.watch.restarts(f.Nodes)}
	in.mu.Lock()
	in.faults = append(in.faults, rec)
	in.mu.Unlock()
	spec := f.Spec
	return eachNode(ctx, f.Nodes, func(ctx context.Context, node string) error {
		switch spec.Kind {
		case loadprofiles.FaultPartition:
			return in.fleet.Partition(node, true)
		case loadprofiles.FaultNodeDown:
			return in.fleet.PowerOff(ctx, node)
		case loadprofiles.FaultSyncLoopStall:
			return in.fleet.StallPodWorkers(node, true)
		}
		return in.fleet.UpdateRuntimeFault(node, func(rf *fakeruntime.Fault) { setRuntimeFault(rf, spec, true) })
	})
}

// Heal implements loadprofiles.FaultInjector.
func (in *faultInjector) Heal(ctx context.Context, f loadprofiles.Fault) error {
	in.mu.Lock()
	var rec *injectedFault
	for _, r := range in.faults {
		if r.fault.Phase == f.Phase && r.end.IsZero() {
			rec = r
		}
	}
	in.mu.Unlock()
	if rec != nil && f.Spec.Kind == loadprofiles.FaultPartition {
		// Before the nodes hear from the API server again, while what
		// they run is what the partition left.
		rec.duplicated = in.duplicates(ctx, f.Nodes)
	}
	err := eachNode(ctx, f.Nodes, func(ctx context.Context, node string) error {
		switch f.Spec.Kind {
		case loadprofiles.FaultPartition:
			return in.fleet.Partition(node, false)
		case loadprofiles.FaultNodeDown:
			if in.booting != nil {
				in.booting(node)
			}
			return in.fleet.PowerOn(node)
		case loadprofiles.FaultSyncLoopStall:
			return in.fleet.StallPodWorkers(node, false)
		}
		return in.fleet.UpdateRuntimeFault(node, func(rf *fakeruntime.Fault) { setRuntimeFault(rf, f.Spec, false) })
	})
	if rec != nil {
		in.mu.Lock()
		rec.end = time.Now()
		in.mu.Unlock()
	}
	return err
}

// setRuntimeFault sets (on) or clears the part of rf that spec's kind is.
func setRuntimeFault(rf *fakeruntime.Fault, spec *loadprofiles.FaultPhase, on bool) {
	switch spec.Kind {
	case loadprofiles.FaultRuntimeDown:
		rf.Down = on
	case loadprofiles.FaultRuntimeSlow:
		rf.SlowFactor, rf.CallLatency = 0, 0
		if on {
			rf.SlowFactor, rf.CallLatency = spec.SlowFactor, spec.CallLatency.Duration
		}
	case loadprofiles.FaultRegistryErrors:
		rf.PullError = ""
		if on {
			rf.PullError = spec.PullError
		}
	case loadprofiles.FaultCNIMissing:
		rf.CNIMissing = on
	}
}

// WaitReady implements loadprofiles.FaultInjector.
func (in *faultInjector) WaitReady(ctx context.Context, nodes []string, timeout time.Duration) error {
	return fleet.WaitForNodesReady(ctx, in.client, nodes, timeout)
}

// duplicates counts the pods that run on two nodes at once: a pod the
// API server has Running on a node outside nodes whose namespace and name
// a sandbox of nodes' runtimes still runs under another UID, as a
// StatefulSet pod force-deleted from a partitioned node and recreated
// elsewhere.
func (in *faultInjector) duplicates(ctx context.Context, nodes []string) int {
	hit := map[string]bool{}
	for _, n := range nodes {
		hit[n] = true
	}
	elsewhere := in.watch.runningElsewhere(hit)
	n := 0
	for _, m := range in.fleet.Members() {
		if !hit[m.Name] {
			continue
		}
		ready := &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}}
		sandboxes, err := m.CRI.ListPodSandbox(ctx, ready)
		if err != nil {
			continue
		}
		for _, sb := range sandboxes {
			md := sb.GetMetadata()
			if uid, ok := elsewhere[md.GetNamespace()+"/"+md.GetName()]; ok && uid != types.UID(md.GetUid()) {
				n++
			}
		}
	}
	return n
}

// reports are the faults as the report shows them, what the control plane
// did measured up to now.
func (in *faultInjector) reports(now time.Time) []reports.Fault {
	in.mu.Lock()
	faults := slices.Clone(in.faults)
	in.mu.Unlock()
	out := make([]reports.Fault, 0, len(faults))
	for _, rec := range faults {
		rf := in.watch.cost(rec, now)
		if in.ours {
			rf.NodeEvictionRate, rf.SecondaryNodeEvictionRate = upstreamNodeEvictionRate, upstreamSecondaryNodeEvictionRate
		}
		out = append(out, rf)
	}
	return out
}

// faultWatch keeps what the run's watch of the fleet's Nodes and of every
// pod saw, with the times it saw it (the watch's, in nanoseconds, not the
// objects' whole-second timestamps).
type faultWatch struct {
	nodes  map[string]bool
	cancel context.CancelFunc

	mu   sync.Mutex
	node map[string]*nodeSeen
	pods map[types.UID]*podSeen
}

// nodeSeen is one node's Ready changes and its NoExecute taints' arrivals.
type nodeSeen struct {
	ready       []readyState
	unreachable []time.Time // when the taint was seen added, each time
	notReady    []time.Time
	hasUnreach  bool
	hasNotReady bool
}

// podSeen is one pod as the watch saw it.
type podSeen struct {
	namespace, name, node string
	// owner is its controller's UID, "" for a bare pod.
	owner      types.UID
	ownerKind  string
	firstSeen  time.Time
	running    time.Time // first seen Running; zero if never
	evictedAt  time.Time // first seen with DisruptionTarget DeletionByTaintManager
	disrupted  bool      // any DisruptionTarget condition: deleted by the control plane
	goneAt     time.Time
	restarts   int32
	phase      corev1.PodPhase
	deleteSeen bool
}

func startFaultWatch(ctx context.Context, client kubernetes.Interface, names []string) *faultWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &faultWatch{nodes: map[string]bool{}, cancel: cancel, node: map[string]*nodeSeen{}, pods: map[types.UID]*podSeen{}}
	for _, n := range names {
		w.nodes[n] = true
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	nodes := factory.Core().V1().Nodes().Informer()
	_, _ = nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.observeNode,
		UpdateFunc: func(_, obj any) { w.observeNode(obj) },
	})
	pods := factory.Core().V1().Pods().Informer()
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.observePod,
		UpdateFunc: func(_, obj any) { w.observePod(obj) },
		DeleteFunc: w.podGone,
	})
	factory.Start(ctx.Done())
	return w
}

func (w *faultWatch) stop() { w.cancel() }

func (w *faultWatch) observeNode(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok || !w.nodes[n.Name] {
		return
	}
	now := time.Now()
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	var unreach, notReady bool
	for _, t := range n.Spec.Taints {
		if t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		switch t.Key {
		case corev1.TaintNodeUnreachable:
			unreach = true
		case corev1.TaintNodeNotReady:
			notReady = true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.node[n.Name]
	if s == nil {
		s = &nodeSeen{}
		w.node[n.Name] = s
	}
	if len(s.ready) == 0 || s.ready[len(s.ready)-1].ready != ready {
		s.ready = append(s.ready, readyState{ready: ready, at: now})
	}
	if unreach && !s.hasUnreach {
		s.unreachable = append(s.unreachable, now)
	}
	if notReady && !s.hasNotReady {
		s.notReady = append(s.notReady, now)
	}
	s.hasUnreach, s.hasNotReady = unreach, notReady
}

func (w *faultWatch) observePod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.pods[p.UID]
	if s == nil {
		s = &podSeen{namespace: p.Namespace, name: p.Name, firstSeen: now}
		if c := metav1.GetControllerOf(p); c != nil {
			s.owner, s.ownerKind = c.UID, c.Kind
		}
		w.pods[p.UID] = s
	}
	s.node, s.phase = p.Spec.NodeName, p.Status.Phase
	if p.Status.Phase == corev1.PodRunning && s.running.IsZero() {
		s.running = now
	}
	var restarts int32
	for _, c := range p.Status.ContainerStatuses {
		restarts += c.RestartCount
	}
	s.restarts = max(s.restarts, restarts)
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			s.disrupted = true
			if c.Reason == "DeletionByTaintManager" && s.evictedAt.IsZero() {
				s.evictedAt = now
			}
		}
	}
	if p.DeletionTimestamp != nil {
		s.deleteSeen = true
	}
}

func (w *faultWatch) podGone(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	w.observePod(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	if s := w.pods[p.UID]; s != nil && s.goneAt.IsZero() {
		s.goneAt = time.Now()
	}
}

// restarts are the container restarts so far of the pods on nodes.
func (w *faultWatch) restarts(nodes []string) map[types.UID]int32 {
	hit := map[string]bool{}
	for _, n := range nodes {
		hit[n] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[types.UID]int32{}
	for uid, p := range w.pods {
		if hit[p.node] && p.goneAt.IsZero() {
			out[uid] = p.restarts
		}
	}
	return out
}

// runningElsewhere maps namespace/name to the UID of every pod Running on a
// node not in hit.
func (w *faultWatch) runningElsewhere(hit map[string]bool) map[string]types.UID {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]types.UID{}
	for uid, p := range w.pods {
		if p.node != "" && !hit[p.node] && p.phase == corev1.PodRunning && p.goneAt.IsZero() {
			out[p.namespace+"/"+p.name] = uid
		}
	}
	return out
}

// cost is what the control plane did about rec, as seen until now.
func (w *faultWatch) cost(rec *injectedFault, now time.Time) reports.Fault {
	f := rec.fault
	out := reports.Fault{
		Phase: f.Phase, Kind: f.Spec.Kind, Selector: f.Selector, Nodes: len(f.Nodes),
		Start: rec.start, End: rec.end,
	}
	end := rec.end
	if end.IsZero() {
		out.Seconds = now.Sub(rec.start).Seconds()
	} else {
		out.Seconds = end.Sub(rec.start).Seconds()
	}
	hit := map[string]bool{}
	for _, n := range f.Nodes {
		hit[n] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()

	var notReady, unreach, notReadyTaint, readyAgain []time.Duration
	var taintedAt []time.Time
	for _, name := range f.Nodes {
		s := w.node[name]
		if s == nil {
			continue
		}
		wentDown := time.Time{}
		for _, r := range s.ready {
			if !r.ready && !r.at.Before(rec.start) && (end.IsZero() || r.at.Before(end)) {
				wentDown = r.at
				break
			}
		}
		if !wentDown.IsZero() {
			notReady = append(notReady, wentDown.Sub(rec.start))
			back := time.Time{}
			if !end.IsZero() {
				for _, r := range s.ready {
					if r.ready && !r.at.Before(end) {
						back = r.at
						break
					}
				}
			}
			if back.IsZero() {
				if !end.IsZero() {
					out.NotReadyAtReport++
				}
			} else {
				readyAgain = append(readyAgain, back.Sub(end))
			}
		}
		if t, ok := firstIn(s.unreachable, rec.start, end); ok {
			unreach = append(unreach, t.Sub(rec.start))
			taintedAt = append(taintedAt, t)
		}
		if t, ok := firstIn(s.notReady, rec.start, end); ok {
			notReadyTaint = append(notReadyTaint, t.Sub(rec.start))
			taintedAt = append(taintedAt, t)
		}
	}
	out.NotReady = reports.SpreadOf(notReady)
	out.UnreachableTaint = reports.SpreadOf(unreach)
	out.NotReadyTaint = reports.SpreadOf(notReadyTaint)
	out.ReadyAgain = reports.SpreadOf(readyAgain)
	if len(taintedAt) > 1 {
		sort.Slice(taintedAt, func(i, j int) bool { return taintedAt[i].Before(taintedAt[j]) })
		if span := taintedAt[len(taintedAt)-1].Sub(taintedAt[0]).Seconds(); span > 0 {
			out.TaintRatePerSecond = float64(len(taintedAt)-1) / span
		}
	}

	// Pods: evicted from the hit nodes, and the ones their controllers made
	// to replace them, wherever the scheduler put them (on another of the
	// hit nodes too, if it was schedulable by then).
	lostOwners := map[types.UID]time.Time{}
	stuck := 0
	for uid, p := range w.pods {
		if !hit[p.node] {
			continue
		}
		if !p.evictedAt.IsZero() && !p.evictedAt.Before(rec.start) {
			out.PodsEvicted++
			if p.owner != "" {
				if at, ok := lostOwners[p.owner]; !ok || p.evictedAt.Before(at) {
					lostOwners[p.owner] = p.evictedAt
				}
			}
		}
		if p.owner == "" && p.disrupted && !p.goneAt.IsZero() && !p.goneAt.Before(rec.start) {
			out.PodsLost++
		}
		if at, ok := rec.restartsAtStart[uid]; ok {
			out.ContainerRestarts += int(max(0, p.restarts-at))
		}
		// Bound while the fault lasted and not Running before its end (nor
		// gone before it: deleted while the fault lasted).
		if p.firstSeen.After(rec.start) && (end.IsZero() || p.firstSeen.Before(end)) &&
			(p.running.IsZero() || (!end.IsZero() && p.running.After(end))) &&
			(p.goneAt.IsZero() || (!end.IsZero() && p.goneAt.After(end))) {
			stuck++
		}
	}
	var startup []time.Duration
	for _, p := range w.pods {
		at, ok := lostOwners[p.owner]
		if p.owner == "" || !ok || p.firstSeen.Before(at) {
			continue
		}
		out.PodsRescheduled++
		if !p.running.IsZero() {
			startup = append(startup, p.running.Sub(p.firstSeen))
		}
	}
	out.RescheduledStartup = reports.SpreadOf(startup)
	out.PodsDuplicated = rec.duplicated
	if stuck > 0 {
		out.Notes = append(out.Notes, fmt.Sprintf("%d pods bound to these nodes while the fault lasted did not run until it ended", stuck))
	}
	if out.NotReady.Count == 0 && f.Spec.Kind != loadprofiles.FaultSyncLoopStall {
		out.Notes = append(out.Notes, "the control plane saw nothing wrong with the nodes: they stayed Ready")
	}
	return out
}

// firstIn is the first of times in [from, until) (until zero: no end).
func firstIn(times []time.Time, from, until time.Time) (time.Time, bool) {
	for _, t := range times {
		if !t.Before(from) && (until.IsZero() || t.Before(until)) {
			return t, true
		}
	}
	return time.Time{}, false
}
