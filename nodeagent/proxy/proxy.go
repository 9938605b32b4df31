// Package proxy is the kube-proxy of an emulated node: its watches, its sync
// loop's cadence and its network programming latency; it programs no rules.
//
// A real kube-proxy (1.37) costs the API server four watches under its own
// identity, one event at start, and nothing else: its sync loop writes to
// the node's nftables or iptables only. A Proxy opens the same watches with
// the same selectors (cmd/kube-proxy/app/server.go, pkg/proxy/node.go),
// sends the same event, runs its syncs at the cadence of upstream's
// bounded-frequency runner, and measures network programming latency as
// upstream's proxier does. What it keeps of the watched objects is what
// deciding whether a sync is due needs: keys, resource versions,
// fingerprints and pending trigger times, a few hundred bytes per object
// less than the objects, so that thousands of proxies fit in one process.
// The keys and resource versions are interned (unique.Handle): the proxies
// of a process hold the same objects, and share one copy of each string.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryv1client "k8s.io/client-go/kubernetes/typed/discovery/v1"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	networkingv1client "k8s.io/client-go/kubernetes/typed/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// kube-proxy's defaults (pkg/proxy/apis/config/v1alpha1/defaults.go, for
// the nftables and iptables modes) and its full-sync period
// (proxyutil.FullSyncPeriod in pkg/proxy/util/utils.go).
const (
	DefaultMinSyncPeriod = time.Second
	DefaultSyncPeriod    = 30 * time.Second
	DefaultMaxSyncPeriod = time.Hour
	fullSyncPeriod       = time.Hour
)

// Client is the API a kube-proxy calls. kubernetes.Interface satisfies it;
// so does a client of these four groups alone, which a process of thousands
// of proxies builds instead of a full clientset and its fifty REST clients
// (the fleet's does).
type Client interface {
	CoreV1() corev1client.CoreV1Interface
	DiscoveryV1() discoveryv1client.DiscoveryV1Interface
	NetworkingV1() networkingv1client.NetworkingV1Interface
	EventsV1() eventsv1client.EventsV1Interface
}

// LatencyRecorder receives the proxy's network programming latencies:
// upstream's kubeproxy_network_programming_duration_seconds.
type LatencyRecorder interface {
	ObserveNetworkProgramming(node string, d time.Duration)
}

// Config is what New needs.
type Config struct {
	// NodeName is the node the proxy runs on. Required.
	NodeName string
	// Client is kube-proxy's own identity (user system:kube-proxy) and
	// connection, apart from the kubelet's. Required, also with Shared: the
	// event of the proxy's start is sent through it.
	Client Client
	// Clock times the sync loop and the latencies; nil is the real clock.
	// The watches' retries run on the real clock.
	Clock clock.WithTicker
	// MinSyncPeriod is the least time between the end of a sync and the
	// start of the next; 0 is 1 s.
	MinSyncPeriod time.Duration
	// SyncPeriod is, as in kube-proxy 1.37, how soon a failed sync is
	// retried; 0 is 30 s. The emulated syncs do not fail, so it bounds no
	// sync here; it is kept so that a KubeProxyConfiguration's values map
	// one to one.
	SyncPeriod time.Duration
	// MaxSyncPeriod is the most time between syncs when nothing changes;
	// 0 is one hour, as 1.37's proxiers set it. Releases before 1.3x synced
	// at least once per SyncPeriod: set it to SyncPeriod to emulate them.
	MaxSyncPeriod time.Duration
	// Latency receives the network programming latencies; nil drops them.
	Latency LatencyRecorder
	// Shared, if set, feeds the proxy from the fleet's informers: Start
	// opens no watches of its own, waits for Shared to have listed, and
	// registers the proxy's handlers (Handlers) with it. Nil gives the
	// proxy its four watches, as a real kube-proxy has: what a real node
	// costs the API server.
	Shared SharedSources
}

// SharedSources are informers of what every kube-proxy watches, shared by a
// fleet's proxies: Services, EndpointSlices and ServiceCIDRs with the
// selectors of kube-proxy's watches (ServiceListOptions, and so on), and
// Nodes. Objects outside those selectors are tolerated: the proxy's
// handlers treat them as absent.
type SharedSources interface {
	// HasSynced reports whether the informers have listed once.
	HasSynced() bool
	// AddProxyHandlers delivers to h every Service, EndpointSlice and
	// ServiceCIDR event, and the events of the Node named node, starting,
	// before it returns, with an add for each such object already known.
	// It returns the handlers' removal.
	AddProxyHandlers(node string, h Handlers) (remove func())
}

// Handlers are a proxy's change handlers, one per watch, for a shared
// informer to feed it with. They are cheap and never block: a fleet may
// call thousands in a row for one event.
type Handlers struct {
	Services       cache.ResourceEventHandler
	EndpointSlices cache.ResourceEventHandler
	ServiceCIDRs   cache.ResourceEventHandler
	Node           cache.ResourceEventHandler
}

// Stats are the proxy's counts since New, for tests and reports.
type Stats struct {
	// Syncs are the syncs that applied changes or found none, the initial
	// one (once Services and EndpointSlices have listed) included;
	// FullSyncs are those of them upstream would make full.
	Syncs, FullSyncs int
	// ServiceChanges and EndpointSliceChanges are the events that changed
	// what the proxier would program, as its change trackers tell;
	// ServiceCIDRChanges and NodeChanges are the events that changed the
	// objects at all.
	ServiceChanges, EndpointSliceChanges, ServiceCIDRChanges, NodeChanges int
	// Latencies is how many network programming latencies were observed.
	Latencies int
	// BadObjects are the objects the proxy could not read, each counted
	// (and logged) once however often it changed.
	BadObjects int
	// Services, EndpointSlices and ServiceCIDRs are how many the proxy
	// holds: Services it would proxy, IPv4 slices of them.
	Services, EndpointSlices, ServiceCIDRs int
	// LastSync is when the last sync ran.
	LastSync time.Time
}

// Proxy is one node's kube-proxy.
type Proxy struct {
	cfg    Config
	clock  clock.WithTicker
	runner *boundedFrequencyRunner

	services, slices, cidrs, node *objectStore
	reflectors                    []*cache.Reflector

	started      atomic.Bool
	wg           sync.WaitGroup
	removeShared func()

	mu sync.Mutex
	// logger carries the node's name; Start gives it the context's sink.
	logger klog.Logger
	// trackerStart is when the proxy started: trigger times before it are
	// not observed (EndpointsChangeTracker.trackerStartTime).
	trackerStart time.Time
	// initialized: Services and EndpointSlices have listed; syncs before
	// then do nothing, and changes ask for none (the proxier's
	// isInitialized).
	initialized bool

	// serviceFingerprints holds every Service the proxier would proxy.
	serviceFingerprints keyed[uint64]
	// serviceChanges maps each Service changed since the last sync to the
	// fingerprint that sync applied (0: none): ServiceChangeTracker.items,
	// whose change is dropped when it comes back to what was applied.
	serviceChanges map[handle]uint64
	// sliceEntries holds every tracked EndpointSlice.
	sliceEntries keyed[unique.Handle[sliceEntry]]
	// triggerTimes are the trigger times of the EndpointSlice changes since
	// the last sync, by Service (EndpointsChangeTracker.lastChangeTriggerTimes).
	triggerTimes map[handle][]time.Time
	cidrVersions keyed[handle]
	nodeState    nodeRecord
	hasNode      bool
	// bad are the objects already counted as unreadable.
	bad map[badKey]struct{}

	needFullSync bool
	lastFullSync time.Time
	stats        Stats
}

// sliceEntry is what is kept of an EndpointSlice. Its resource version
// stands for the whole object: upstream's EndpointSliceCache compares the
// objects themselves (reflect.DeepEqual), and two states of one slice
// differ exactly when their resource versions do. Entries are interned as
// keys are: every proxy holding a state of a slice holds the same entry,
// and its map's slot has one handle for it rather than two.
type sliceEntry struct {
	rv, serviceKey handle
}

type badKey struct {
	kind string
	key  handle
}

// New makes a node's kube-proxy; Start runs it.
func New(cfg Config) (*Proxy, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("kube-proxy: a node name is required")
	}
	if cfg.Client == nil {
		return nil, fmt.Errorf("kube-proxy of node %s: a client (kube-proxy's own identity) is required", cfg.NodeName)
	}
	if cfg.MinSyncPeriod == 0 {
		cfg.MinSyncPeriod = DefaultMinSyncPeriod
	}
	if cfg.SyncPeriod == 0 {
		cfg.SyncPeriod = DefaultSyncPeriod
	}
	if cfg.MaxSyncPeriod == 0 {
		cfg.MaxSyncPeriod = DefaultMaxSyncPeriod
	}
	if cfg.MinSyncPeriod < 0 || cfg.SyncPeriod < 0 || cfg.MaxSyncPeriod < cfg.MinSyncPeriod {
		return nil, fmt.Errorf("kube-proxy of node %s: sync periods must not be negative, and MaxSyncPeriod (%v) must be at least MinSyncPeriod (%v)",
			cfg.NodeName, cfg.MaxSyncPeriod, cfg.MinSyncPeriod)
	}
	c := cfg.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	p := &Proxy{
		cfg:          cfg,
		clock:        c,
		logger:       klog.Background().WithValues("node", cfg.NodeName),
		needFullSync: true,
	}
	p.runner = newBoundedFrequencyRunner(func() error { p.syncProxyRules(); return nil },
		cfg.MinSyncPeriod, cfg.SyncPeriod, cfg.MaxSyncPeriod, c)
	p.services = &objectStore{p: p, kind: "Service", reduce: reduceService, apply: p.applyService,
		keys: p.serviceFingerprints.keys(), synced: p.onListed}
	p.slices = &objectStore{p: p, kind: "EndpointSlice", reduce: reduceEndpointSlice, apply: p.applySlice,
		keys: p.sliceEntries.keys(), synced: p.onListed}
	p.cidrs = &objectStore{p: p, kind: "ServiceCIDR", reduce: reduceServiceCIDR, apply: p.applyServiceCIDR,
		keys: p.cidrVersions.keys()}
	p.node = &objectStore{p: p, kind: "Node", reduce: reduceNode, apply: p.applyNode, keys: p.nodeKeys}
	if cfg.Shared == nil {
		p.reflectors = p.newReflectors()
	}
	return p, nil
}

// Start starts the watches (or registers with the shared informers) and
// the sync loop, sends the event of the proxy's start, and returns. The
// loop runs until ctx ends.
func (p *Proxy) Start(ctx context.Context) error {
	if !p.started.CompareAndSwap(false, true) {
		return fmt.Errorf("kube-proxy of node %s: started twice", p.cfg.NodeName)
	}
	logger := klog.FromContext(ctx).WithValues("node", p.cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)
	p.mu.Lock()
	p.logger = logger
	p.trackerStart = p.clock.Now()
	p.mu.Unlock()
	logger.V(2).Info("Starting kube-proxy", "shared", p.cfg.Shared != nil, "minSyncPeriod", p.cfg.MinSyncPeriod,
		"syncPeriod", p.cfg.SyncPeriod, "maxSyncPeriod", p.cfg.MaxSyncPeriod)

	if shared := p.cfg.Shared; shared != nil {
		if !cache.WaitForCacheSync(ctx.Done(), shared.HasSynced) {
			return fmt.Errorf("kube-proxy of node %s: the fleet's shared informers had not listed when the proxy stopped: %w",
				p.cfg.NodeName, context.Cause(ctx))
		}
		// The adds replayed as the handlers register are the initial
		// list: the sources have listed once they return.
		p.removeShared = shared.AddProxyHandlers(p.cfg.NodeName, p.Handlers())
		for _, s := range []*objectStore{p.node, p.services, p.slices, p.cidrs} {
			s.markListed()
		}
	}
	for _, r := range p.reflectors {
		p.wg.Go(func() { r.RunWithContext(ctx) })
	}
	// server.go's Run: the birth cry, then the sync loop. Upstream's event
	// recorder sends it from a goroutine of its own, and so does this.
	p.wg.Go(func() { p.birthCry(ctx) })
	p.wg.Go(func() { p.runner.Loop(ctx) })
	return nil
}

// Wait returns once the watches and the sync loop have stopped, after
// Start's context ended.
func (p *Proxy) Wait() {
	p.wg.Wait()
	if p.removeShared != nil {
		p.removeShared()
	}
}

// HasSynced reports whether all four sources have listed once.
func (p *Proxy) HasSynced() bool {
	return p.node.hasListed() && p.services.hasListed() && p.slices.hasListed() && p.cidrs.hasListed()
}

// Stats returns the proxy's counts.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Services, s.EndpointSlices, s.ServiceCIDRs = p.serviceFingerprints.len(), p.sliceEntries.len(), p.cidrVersions.len()
	return s
}

// Handlers returns the proxy's change handlers, for SharedSources.
func (p *Proxy) Handlers() Handlers {
	return Handlers{
		Services:       p.ServiceHandler(),
		EndpointSlices: p.EndpointSliceHandler(),
		ServiceCIDRs:   p.ServiceCIDRHandler(),
		Node:           p.NodeHandler(),
	}
}

// ServiceHandler takes Service events (the proxier's OnServiceAdd, Update
// and Delete).
func (p *Proxy) ServiceHandler() cache.ResourceEventHandler { return p.services.handler() }

// EndpointSliceHandler takes EndpointSlice events.
func (p *Proxy) EndpointSliceHandler() cache.ResourceEventHandler { return p.slices.handler() }

// ServiceCIDRHandler takes ServiceCIDR events.
func (p *Proxy) ServiceCIDRHandler() cache.ResourceEventHandler { return p.cidrs.handler() }

// NodeHandler takes the events of the proxy's Node; other Nodes' are
// ignored.
func (p *Proxy) NodeHandler() cache.ResourceEventHandler { return p.node.handler() }

// onListed is called, p.mu held, when Services or EndpointSlices have
// listed for the first time: OnServiceSynced and OnEndpointSlicesSynced,
// which once both have been called sync at once, outside the runner.
func (p *Proxy) onListed() (latencies []time.Duration) {
	if p.initialized || !p.services.hasListed() || !p.slices.hasListed() {
		return nil
	}
	p.initialized = true
	return p.syncLocked()
}

// syncProxyRules is the runner's sync.
func (p *Proxy) syncProxyRules() {
	p.mu.Lock()
	latencies := p.syncLocked()
	p.mu.Unlock()
	p.observe(latencies)
}

// syncLocked applies the pending changes, p.mu held, and returns the
// network programming latencies to observe: the proxier's syncProxyRules,
// whose rules are programmed at once. For each EndpointSlice change with a
// trigger time it returns now minus that time, now being when the sync
// that applied the change ends.
func (p *Proxy) syncLocked() []time.Duration {
	if !p.initialized {
		return nil
	}
	now := p.clock.Now()
	full := p.needFullSync || now.Sub(p.lastFullSync) > fullSyncPeriod
	// svcPortMap.Update and endpointsMap.Update: the changes are applied.
	p.serviceChanges = nil
	var latencies []time.Duration
	for _, times := range p.triggerTimes {
		for _, t := range times {
			latencies = append(latencies, now.Sub(t))
		}
	}
	p.triggerTimes = nil
	p.needFullSync = false
	if full {
		p.lastFullSync = now
		p.stats.FullSyncs++
	}
	p.stats.Syncs++
	p.stats.Latencies += len(latencies)
	p.stats.LastSync = now
	p.logger.V(4).Info("Synced proxy rules", "full", full, "latencies", len(latencies))
	return latencies
}

func (p *Proxy) observe(latencies []time.Duration) {
	if p.cfg.Latency == nil {
		return
	}
	for _, d := range latencies {
		p.cfg.Latency.ObserveNetworkProgramming(p.cfg.NodeName, d)
	}
}

// applyService records a Service event, p.mu held, and says whether a
// sync is due: ServiceChangeTracker.Update, which asks for one while any
// change is pending.
func (p *Proxy) applyService(rec record, deleted bool) bool {
	r := rec.(*serviceRecord)
	fp := r.fingerprint
	if deleted {
		fp = 0
		p.forgetBad("Service", r.key)
	} else if r.bad != nil {
		p.reportBad("Service", r.key, r.bad)
	}
	prev, _ := p.serviceFingerprints.get(r.key)
	applied, pending := p.serviceChanges[r.key]
	if !pending {
		applied = prev
	}
	if fp == 0 {
		p.serviceFingerprints.remove(r.key)
	} else {
		p.serviceFingerprints.set(r.key, fp)
	}
	if fp != prev {
		p.stats.ServiceChanges++
	}
	switch {
	case fp == applied:
		delete(p.serviceChanges, r.key)
		if len(p.serviceChanges) == 0 {
			// A map does not shrink, and with nothing pending the
			// next sync may be an hour away.
			p.serviceChanges = nil
		}
	case !pending:
		if p.serviceChanges == nil {
			p.serviceChanges = map[handle]uint64{}
		}
		p.serviceChanges[r.key] = applied
	}
	return len(p.serviceChanges) > 0
}

// applySlice records an EndpointSlice event, p.mu held, and says whether a
// sync is due: EndpointsChangeTracker.EndpointSliceUpdate.
func (p *Proxy) applySlice(rec record, deleted bool) bool {
	r := rec.(*sliceRecord)
	if deleted || r.skip {
		p.forgetBad("EndpointSlice", r.key)
		old, ok := p.sliceEntries.get(r.key)
		if !ok {
			return false
		}
		p.sliceEntries.remove(r.key)
		p.stats.EndpointSliceChanges++
		// A deletion's trigger time is that of the slice's last update,
		// so upstream drops its Service's pending trigger times instead.
		delete(p.triggerTimes, old.Value().serviceKey)
		return true
	}
	if r.bad != nil {
		p.reportBad("EndpointSlice", r.key, r.bad)
	}
	if r.serviceKey == noHandle {
		return false
	}
	if old, ok := p.sliceEntries.get(r.key); ok && old.Value().rv == r.rv {
		return false
	}
	p.sliceEntries.set(r.key, unique.Make(sliceEntry{rv: r.rv, serviceKey: r.serviceKey}))
	p.stats.EndpointSliceChanges++
	if !r.trigger.IsZero() && r.trigger.After(p.trackerStart) {
		if p.triggerTimes == nil {
			p.triggerTimes = map[handle][]time.Time{}
		}
		p.triggerTimes[r.serviceKey] = append(p.triggerTimes[r.serviceKey], r.trigger)
	}
	return true
}

// applyServiceCIDR records a ServiceCIDR event, p.mu held. The proxier
// only notes the CIDRs (OnServiceCIDRsChanged): no sync is due.
func (p *Proxy) applyServiceCIDR(rec record, deleted bool) bool {
	r := rec.(*cidrRecord)
	old, ok := p.cidrVersions.get(r.key)
	switch {
	case deleted:
		if ok {
			p.cidrVersions.remove(r.key)
			p.stats.ServiceCIDRChanges++
		}
	case !ok || old != r.rv:
		p.cidrVersions.set(r.key, r.rv)
		p.stats.ServiceCIDRChanges++
	}
	return false
}

// applyNode records an event of the proxy's Node, p.mu held: a change of
// its zone label asks for a full sync (NodeTopologyConfig and the
// proxier's OnTopologyChange).
func (p *Proxy) applyNode(rec record, deleted bool) bool {
	r := rec.(*nodeRecord)
	if r.key.Value() != p.cfg.NodeName {
		return false
	}
	if deleted {
		if p.hasNode {
			// NodeManager.OnNodeDelete: a real kube-proxy exits here, and is
			// restarted by its DaemonSet. This one goes on.
			p.logger.Info("Node is being deleted; a real kube-proxy would exit")
			p.hasNode = false
			p.nodeState.rv = noHandle
			p.stats.NodeChanges++
		}
		return false
	}
	if p.hasNode && p.nodeState.rv == r.rv {
		return false
	}
	p.stats.NodeChanges++
	p.hasNode = true
	zoneChanged := r.hasZone != p.nodeState.hasZone || r.zone != p.nodeState.zone
	p.nodeState = *r
	if zoneChanged {
		p.needFullSync = true
		// OnTopologyChange asks for a sync whether or not the proxier has
		// initialized; the sync does nothing until it has.
		return true
	}
	return false
}

func (p *Proxy) nodeKeys(yield func(handle) bool) {
	if p.hasNode {
		yield(p.nodeState.key)
	}
}

// reportBad counts and logs, once per object, an object the proxy could not
// read, p.mu held.
func (p *Proxy) reportBad(kind string, key handle, err error) {
	k := badKey{kind, key}
	if _, seen := p.bad[k]; seen {
		return
	}
	if p.bad == nil {
		p.bad = map[badKey]struct{}{}
	}
	p.bad[k] = struct{}{}
	p.stats.BadObjects++
	p.logger.Error(err, "Cannot read object; ignoring what cannot be read", "kind", kind, "object", key.Value())
}

// log is the proxy's logger, for code not holding p.mu.
func (p *Proxy) log() klog.Logger {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logger
}

func (p *Proxy) forgetBad(kind string, key handle) {
	if len(p.bad) > 0 {
		delete(p.bad, badKey{kind, key})
	}
}
