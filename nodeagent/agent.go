// Package nodeagent is one node's kubelet, small: it registers the Node,
// renews its Lease, reports node status, watches the pods bound to the node
// and runs them through CRI with the kubelet's loops (pod workers, PLEG,
// status manager). Sub-packages hold one kubelet responsibility each; this
// package only wires them together.
package nodeagent

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"net"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/component-helpers/nodedeclaredfeatures"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/nodeagent/admission"
	"github.com/fleetlet/fleetlet/nodeagent/allocation"
	"github.com/fleetlet/fleetlet/nodeagent/containergc"
	"github.com/fleetlet/fleetlet/nodeagent/eviction"
	"github.com/fleetlet/fleetlet/nodeagent/images"
	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
	"github.com/fleetlet/fleetlet/nodeagent/metrics"
	"github.com/fleetlet/fleetlet/nodeagent/nodestatus"
	"github.com/fleetlet/fleetlet/nodeagent/objectcache"
	"github.com/fleetlet/fleetlet/nodeagent/pleg"
	"github.com/fleetlet/fleetlet/nodeagent/podworkers"
	"github.com/fleetlet/fleetlet/nodeagent/prober"
	"github.com/fleetlet/fleetlet/nodeagent/proxy"
	"github.com/fleetlet/fleetlet/nodeagent/server"
	"github.com/fleetlet/fleetlet/nodeagent/staticpods"
	"github.com/fleetlet/fleetlet/nodeagent/stats"
	podstatus "github.com/fleetlet/fleetlet/nodeagent/status"
	"github.com/fleetlet/fleetlet/nodeagent/volumemanager"
	"github.com/fleetlet/fleetlet/nodeagent/watchers"
	"github.com/fleetlet/fleetlet/reports"
)

// KubeletVersion is the version the agent reports in status.nodeInfo: that of
// the control plane it is built against, so version-skew checks pass.
const KubeletVersion = "v1.37.2"

// The kubelet's lease constants.
const (
	leaseNamespace = corev1.NamespaceNodeLease
	// renewIntervalFraction of the lease duration is the renew interval:
	// 10 s for the default 40 s lease.
	renewIntervalFraction = 0.25
)

// nodeSeed derives a node's random seed from its name, so that a fleet
// replays the same probe jitter and node status report delays run after run.
func nodeSeed(name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return h.Sum64()
}

// LeaseRenewInterval is how often an agent renews its lease: a quarter of
// the lease duration, as the kubelet does (10 s for the default 40 s).
func LeaseRenewInterval(kc *kubeletconfig.KubeletConfiguration) time.Duration {
	return time.Duration(float64(time.Duration(kc.NodeLeaseDurationSeconds)*time.Second) * renewIntervalFraction)
}

// Agent is one node's kubelet. New builds its parts; Run starts them.
type Agent struct {
	cfg Config

	// cri is the node's CRI runtime service (cfg.Runtime); podRuntime is
	// the kubelet's runtime manager, which runs pods through it.
	cri        internalapi.RuntimeService
	podRuntime *kuberuntime.Manager
	// allocation holds what each admitted pod was allocated and its
	// resizes; resizesPending wakes the sync loop to retry them later.
	allocation     *allocation.Manager
	resizesPending chan struct{}
	statusManager  *podStatuses
	pleg           *pleg.Generic
	eventedPLEG    *pleg.Evented // nil without the EventedPLEG gate
	probes         *prober.Manager
	volumes        *volumemanager.Manager
	stats          *stats.Provider
	eviction       *eviction.Manager
	imageGC        *images.Manager
	containerGC    *containergc.Manager
	objects        *objectcache.Cache
	// watches are the kubelet's Services, RuntimeClasses, CSIDrivers and
	// PodCertificateRequests; ownWatches is the same set when the agent
	// runs them itself, nil when they are the fleet's.
	watches       *watchers.Kubelet
	ownWatches    *watchers.Kubelet
	events        *eventRecorder
	lease         lease.Controller
	kubeletServer *server.Server // nil without cfg.Serving
	kubeProxy     *proxy.Proxy   // nil without cfg.KubeProxy
	// nodeSource and podSource deliver the agent's Node and pods to its
	// handlers; nodeStore is where the Node is read from.
	nodeSource source
	podSource  source
	nodeStore  cache.Store
	// nodeStatus registers the Node and keeps its status; the start tells
	// it what it finds out (the runtime's version, the kubelet port).
	nodeStatus *nodestatus.Manager
	// runtimeState is what the runtime's periodic Status calls (runtimeUp)
	// found, which the node status reads.
	runtimeState *nodestatus.RuntimeSync
	runtimeUp    *runtimeUp
	workers      *podworkers.PodWorkers
	// metrics are the kubelet's metrics of the node (/metrics).
	metrics *metrics.Kubelet
	// static holds the node's static and mirror pods; staticSource (nil
	// without static pods) delivers the static pods, from staticFiles when
	// the agent reads its static pod path itself; mirrorClient makes and
	// removes their mirror pods.
	static       *staticPods
	staticSource *staticpods.NodeSource
	staticFiles  *staticpods.FileSource
	mirrorClient *staticpods.MirrorClient
	// parts are the runnables Run starts, in order.
	parts []part

	// Set by the steps of Run, each before any part that reads it starts.
	// runtimeName is the CRI runtime's name, from its Version.
	runtimeName     string
	kubeletListener net.Listener

	mu      sync.Mutex
	pods    map[types.UID]*corev1.Pod
	podCIDR string
	// admitted and rejected are the kubelet's admission decisions, kept
	// until the pod is gone from the API server.
	admitted map[types.UID]bool
	rejected map[types.UID]bool
}

// New validates cfg and builds every part of the agent, as the kubelet's
// NewMainKubelet does. Nothing talks to the API server or the runtime until
// Run.
func New(cfg Config) (*Agent, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	kc := cfg.Kubelet
	a := &Agent{
		cfg: cfg, cri: cfg.Runtime,
		pods: map[types.UID]*corev1.Pod{}, admitted: map[types.UID]bool{}, rejected: map[types.UID]bool{},
		static:  newStaticPods(cfg.hasStaticPodSource()),
		metrics: metrics.NewKubelet(cfg.NodeName, cfg.Clock.Now()),
	}
	if cfg.hasStaticPodSource() {
		// Static pods and their mirror pods are the node's, not the load's.
		cfg.Recorder = staticRecorder{Recorder: cfg.Recorder, static: a.static}
		a.cfg.Recorder = cfg.Recorder
	}
	a.events = newEventRecorder(cfg.EventClient, cfg.NodeName, func(uid types.UID) bool {
		return a.pod(uid) != nil || a.workers.Finished(uid) != nil
	})
	if a.watches = cfg.KubeletWatches; a.watches == nil {
		a.ownWatches = watchers.NewKubelet(watchers.Config{NodeName: cfg.NodeName, Client: cfg.Client, Interners: cfg.Interners, Clock: cfg.Clock})
		a.watches = a.ownWatches
	}
	objectsCfg := objectcache.Config{
		Client: cfg.Client, Clock: cfg.Clock, SyncFrequency: kc.SyncFrequency.Duration,
		Strategy: kc.ConfigMapAndSecretChangeDetectionStrategy,
	}
	if cfg.Informers != nil {
		// The shared watch mode holds a handful of watches for the whole
		// fleet: a watch per node of every referenced ConfigMap and Secret
		// would undo that, so its agents read them as the kubelet's Cache
		// strategy does.
		objectsCfg.Strategy = kubeletconfig.TTLCacheChangeDetectionStrategy
	}
	if err := objectsCfg.Validate(); err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.NodeName, err)
	}
	a.objects = objectcache.New(objectsCfg)
	capacity := cfg.Capacity.DeepCopy()
	if _, ok := capacity[corev1.ResourcePods]; !ok {
		capacity[corev1.ResourcePods] = *resourceQuantity(int64(kc.MaxPods))
	}
	reserved, allocatable, err := a.nodeAllocatable(capacity)
	if err != nil {
		return nil, err
	}
	a.volumes = volumemanager.New(volumemanager.Config{
		Clock: cfg.Clock, Client: cfg.Client, Objects: a.objects, Events: a.events, PodsDir: cfg.PodsDir, Allocatable: allocatable,
		CheckInterval: volumemanager.CheckInterval,
	})
	runtimeConfig := kuberuntime.Config{
		Runtime: a.cri, Images: cfg.Images, Events: a.events, Recorder: cfg.Recorder, Clock: cfg.Clock,
		SerializeImagePulls: ptr.Deref(kc.SerializeImagePulls, true), MaxParallelImagePulls: ptr.Deref(kc.MaxParallelImagePulls, 0),
		MemoryCapacity: cfg.Capacity.Memory().Value(), Host: cfg.Host,
		ContainerOptions: a.containerOptions, RuntimeHandler: a.watches.RuntimeHandler,
		Metrics: a.metrics,
	}
	if cfg.NetworkProber == nil {
		// A real node: httpGet hooks reach the pod, as probes do.
		runtimeConfig.NetworkHook = networkHook(prober.NewHTTPRunner(nil))
	}
	runtimeConfig.SandboxReady = a.onSandboxReady
	a.allocation, a.resizesPending = a.newAllocation(), make(chan struct{}, 1)
	runtimeConfig.Actuated = a.allocation
	runtimeConfig.RequestReinspect = func(uid types.UID) { a.pleg.RequestReinspect(uid) }
	a.podRuntime = kuberuntime.NewManager(runtimeConfig)
	a.statusManager = &podStatuses{static: a.static, clock: cfg.Clock, Manager: podstatus.NewManager(podstatus.Config{
		Client: cfg.Client, Clock: cfg.Clock, Recorder: cfg.Recorder,
		CouldHaveRunningContainers: a.couldHaveRunningContainers,
	})}
	network := cfg.NetworkProber
	if network == nil {
		network = prober.NewHTTPRunner(nil)
	}
	a.probes = prober.NewManager(prober.Config{
		Clock: cfg.Clock, Events: a.events, Seed: nodeSeed(cfg.NodeName), Queue: cfg.ProbeQueue,
		Runner: prober.Join(prober.ExecViaCRI(a.cri), network),
	})
	a.pleg = pleg.NewGeneric(a.cri, cfg.Clock, pleg.RelistPeriod)
	a.pleg.SetMetrics(a.metrics)
	if kc.FeatureGates[pleg.FeatureEventedPLEG] {
		a.eventedPLEG = pleg.NewEvented(a.cri, a.pleg)
	}
	a.nodeSource, a.podSource, a.nodeStore = a.newSources()
	a.newStaticPodSource()

	if err := a.newResourceManagers(capacity); err != nil {
		return nil, err
	}
	if cfg.Serving != nil {
		var err error
		if a.kubeletServer, err = a.newKubeletServer(); err != nil {
			return nil, err
		}
	}
	a.runtimeState = nodestatus.NewRuntimeSync()
	a.runtimeUp = &runtimeUp{cri: a.cri, state: a.runtimeState, clock: cfg.Clock}
	a.nodeStatus = nodestatus.NewManager(nodestatus.Config{
		Identity: nodestatus.Identity{
			Name: cfg.NodeName, IP: cfg.NodeIP, Labels: cfg.Labels, Taints: cfg.Taints, Capacity: capacity,
			Reserved: reserved, KubeletVersion: KubeletVersion,
			// The features that depend on the runtime's (user namespaces
			// with host network, mount options) have gates off in 1.37,
			// so the runtime's Status is not asked here.
			DeclaredFeatures: nodestatus.DeclaredFeatures(KubeletVersion, nodedeclaredfeatures.RuntimeFeatures{}),
		},
		Client:                     cfg.Client,
		HeartbeatClient:            cfg.HeartbeatClient,
		OnRepeatedHeartbeatFailure: cfg.OnRepeatedHeartbeatFailure,
		Clock:                      cfg.Clock,
		GetNode:                    a.getNode,
		RuntimeState:               a.nodeRuntimeState,
		ListImages:                 a.listImages,
		MaxImages:                  ptr.Deref(kc.NodeStatusMaxImages, nodestatus.DefaultMaxImages),
		UpdateFrequency:            kc.NodeStatusUpdateFrequency.Duration,
		ReportFrequency:            kc.NodeStatusReportFrequency.Duration,
		Seed:                       nodeSeed(cfg.NodeName),
	})
	a.workers = podworkers.New(staticSyncer{a}, cfg.Clock, a.pleg)
	a.workers.SetMetrics(a.metrics)
	if kp := cfg.KubeProxy; kp != nil {
		var err error
		a.kubeProxy, err = proxy.New(proxy.Config{
			NodeName: cfg.NodeName, Client: kp.Client, Clock: cfg.Clock,
			MinSyncPeriod: kp.MinSyncPeriod, Latency: kp.Latency, Shared: kp.Shared,
		})
		if err != nil {
			return nil, fmt.Errorf("node %s: kube-proxy: %w", cfg.NodeName, err)
		}
	}
	a.lease = lease.NewController(cfg.Clock, cfg.HeartbeatClient, cfg.NodeName, kc.NodeLeaseDurationSeconds, cfg.OnRepeatedHeartbeatFailure,
		LeaseRenewInterval(kc), cfg.NodeName, leaseNamespace, a.setNodeOwner)
	a.parts = a.runnables()
	return a, nil
}

// runnables lists the agent's parts in the order Run starts them; they stop
// in reverse. A part without a runnable (the kubelet API on a node that does
// not serve it, the evented PLEG without its gate) is skipped.
func (a *Agent) runnables() []part {
	var kubeletListener, kubeletServer, eventedPLEG, ownWatches, kubeProxy, staticFiles, clientCert, certRotation runnable
	if c := a.cfg.ClientCertificate; c != nil {
		clientCert = step{start: c.Start, stop: c.Stop}
		certRotation = newLoop(c.Run)
	}
	if a.staticFiles != nil {
		staticFiles = newLoop(a.staticFiles.Run)
	}
	if a.ownWatches != nil {
		ownWatches = a.ownWatches
	}
	if a.kubeProxy != nil {
		kubeProxy = a.kubeProxy
	}
	if a.kubeletServer != nil {
		kubeletListener = step{start: a.listenKubeletAPI, stop: a.closeKubeletAPI}
		kubeletServer = newLoop(a.serveKubeletAPI)
	}
	if a.eventedPLEG != nil {
		eventedPLEG = newLoop(a.eventedPLEG.Run)
	}
	return []part{
		// The kubelet builds its clients first; here it also waits for
		// their certificate, where a bootstrapping kubelet sends its first
		// requests without one (refused) until the fast check sees it.
		{"client certificate", clientCert},
		{"client certificate rotation", certRotation},
		{"CRI runtime version", step{start: a.readRuntimeVersion}},
		{"event broadcaster", a.events},
		{"ConfigMap and Secret manager", newLoop(a.objects.Run)},
		// Started before registration, as NewMainKubelet starts them.
		{"kubelet watches", ownWatches},
		// Opened before registration: the Node advertises the port.
		{"kubelet API listener", kubeletListener},
		{"node registration", step{start: a.nodeStatus.Register}},
		{"node source", a.nodeSource},
		{"node source synced", step{start: a.waitForNode}},
		{"node lease", newLoop(a.lease.Run)},
		// The kubelet asks the runtime's Status, and its PLEG has relisted
		// (it relists as it starts), before the first status update, which
		// would report the node NotReady otherwise.
		{"container runtime status", a.runtimeUp},
		{"PLEG first relist", step{start: a.firstRelist}},
		{"node status", newLoop(a.nodeStatus.Run)},
		{"pod status manager", newLoop(a.statusManager.Run)},
		{"PLEG", newLoop(a.pleg.Run)},
		{"evented PLEG", eventedPLEG},
		{"prober", a.probes},
		{"pod workers", a.workers},
		// The static pod source reads its files and hands the static pods
		// to the pod workers; the pod source the API's pods, mirror pods
		// aside.
		{"static pod files", staticFiles},
		{"static pod source", staticPodPart{a}},
		{"pod source", a.podSource},
		// These read the pod workers and whether the pods have been listed.
		{"eviction manager", newLoop(a.eviction.Run)},
		{"image GC", newLoop(a.imageGC.Run)},
		{"container GC", newLoop(a.containerGC.Run)},
		{"kubelet API server", kubeletServer},
		// A separate process on a real node, which starts once the node
		// has registered (kube-proxy reads its Node at start).
		{"kube-proxy", kubeProxy},
		{"sync loop", newLoop(a.syncLoop)},
	}
}

// Run starts the agent's parts in order, registering the node, and runs them
// until ctx ends; they then stop in reverse. It returns an error only if the
// agent could not start; once started, failures are retried as the kubelet
// retries them. An Agent runs once.
func (a *Agent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", a.cfg.NodeName)
	return runParts(klog.NewContext(ctx, logger), a.parts)
}

// StallPodWorkers wedges (true) or frees (false) the node's pod workers, as
// a kubelet whose workers hang on a call that never returns: no pod is
// started, synced, killed or cleaned up, so a pod bound meanwhile stays as
// the API shows it (Pending) and a deletion is not carried out, while the
// rest of the node is healthy: its lease and node status (Ready), its
// kubelet API, its PLEG, probes and the status manager go on, and the
// runtime runs the containers it has. Freed, each worker syncs the newest
// version of its pod, so the node catches up with what changed meanwhile.
// A sync already in flight when the stall begins runs to its end. Safe for
// concurrent use, before and during Run; asking for the state the workers
// are in does nothing.
//
// Readiness changes found by probes during a stall are not reported: the
// agent reports them through a pod sync, where the kubelet's prober writes
// them to its status manager directly.
func (a *Agent) StallPodWorkers(stalled bool) {
	a.workers.Stall(stalled)
}

// readRuntimeVersion asks the CRI runtime who it is, as the kubelet does
// before anything else: the node reports it, and container IDs carry its name.
func (a *Agent) readRuntimeVersion(ctx context.Context) error {
	ver, err := a.cri.Version(ctx, "v1")
	if err != nil {
		return fmt.Errorf("node %s: the CRI runtime did not answer Version: %w; check that its endpoint is up", a.cfg.NodeName, err)
	}
	a.runtimeName = ver.RuntimeName
	a.nodeStatus.SetRuntimeVersion(ver.RuntimeName + "://" + ver.RuntimeVersion)
	return nil
}

// firstRelist lists the runtime once, as the kubelet's PLEG does as it
// starts; a failure is the PLEG's to retry.
func (a *Agent) firstRelist(ctx context.Context) error {
	if err := a.pleg.Relist(ctx); err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).V(2).Info("GenericPLEG: unable to relist", "err", err)
	}
	return nil
}

// waitForNode waits until the node source holds the Node: node status,
// admission and the lease's owner read it from there.
func (a *Agent) waitForNode(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), a.nodeSource.HasSynced) {
		return fmt.Errorf("node %s: stopped before its Node was in the informer cache: %w", a.cfg.NodeName, context.Cause(ctx))
	}
	return nil
}

// couldHaveRunningContainers is the status manager's question to the pod
// workers, asked only of pods whose status was set (after the workers
// exist): until its worker has stopped a pod's containers, a terminal
// phase is held back.
func (a *Agent) couldHaveRunningContainers(uid types.UID) bool {
	return a.workers.CouldHaveRunningContainers(uid)
}

// syncLoop turns PLEG events and probe results into pod syncs, the
// kubelet's syncLoopIteration for its plegCh and probe channels.
func (a *Agent) syncLoop(ctx context.Context) {
	// Set while resizes wait for room: the allocation manager's periodic
	// retry, without a goroutine or a timer of its own on nodes that have
	// no pending resize.
	var retryResizes <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.resizesPending:
			if retryResizes == nil {
				retryResizes = a.cfg.Clock.After(allocation.RetryDelay)
			}
		case <-retryResizes:
			retryResizes = nil
			a.retryPendingResizes()
		case e := <-a.pleg.Watch():
			if pod := a.pod(e.ID); pod != nil {
				a.workers.UpdatePod(pod)
			}
		case u := <-a.probes.Updates():
			// Readiness changes the status; a failed liveness or startup
			// probe makes the next sync kill the container.
			if pod := a.pod(u.PodUID); pod != nil {
				a.workers.UpdatePod(pod)
			}
		}
	}
}

func (a *Agent) nodeHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.onNode(obj.(*corev1.Node)) },
		UpdateFunc: func(_, obj any) { a.onNode(obj.(*corev1.Node)) },
	}
}

// onNode passes the pod CIDR the controller-manager allocated to the runtime,
// as the kubelet's updatePodCIDR does; the runtime's network hands out pod
// IPs from it.
func (a *Agent) onNode(node *corev1.Node) {
	cidr := node.Spec.PodCIDR
	a.mu.Lock()
	changed := cidr != "" && cidr != a.podCIDR
	if changed {
		a.podCIDR = cidr
	}
	a.mu.Unlock()
	if !changed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := a.cri.UpdateRuntimeConfig(ctx, &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: cidr}})
	if err != nil {
		klog.Background().Error(err, "Failed to update pod CIDR in the runtime", "node", a.cfg.NodeName, "podCIDR", cidr)
		a.mu.Lock()
		a.podCIDR = ""
		a.mu.Unlock()
	}
}

func (a *Agent) podHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			pod := obj.(*corev1.Pod)
			if staticpods.IsMirrorPod(pod) {
				// The API's face of a static pod: never run.
				a.onMirrorPod(nil, pod)
				return
			}
			now := a.cfg.Clock.Now()
			// A pod in this watch is bound to the node: if the agent sees the
			// binding before the driver's watch does, it is the first to
			// observe the scheduling (the Recorder keeps the first stamp).
			a.cfg.Recorder.Mark(pod.UID, reports.Scheduled, now)
			a.cfg.Recorder.Mark(pod.UID, reports.AgentObserved, now)
			a.metrics.PodAdded(pod, now)
			// As the kubelet's pod manager: a pod's ConfigMaps and Secrets
			// are registered (with the Watch strategy, watched) from the
			// moment the node knows the pod.
			a.objects.RegisterPod(pod)
			a.setPod(pod)
			if pod.DeletionTimestamp == nil && !a.admit(pod) {
				return
			}
			a.workers.UpdatePodOfType(pod, podworkers.SyncPodCreate)
		},
		UpdateFunc: func(oldObj, obj any) {
			pod := obj.(*corev1.Pod)
			if staticpods.IsMirrorPod(pod) {
				a.onMirrorPod(oldObj.(*corev1.Pod), pod)
				return
			}
			// The kubelet's pod manager registers every update, its own
			// status echoes (reconciles) too.
			a.objects.RegisterPod(pod)
			a.setPod(pod)
			a.metrics.PodUpdated(pod, a.cfg.Clock.Now())
			if a.isRejected(pod.UID) {
				// A rejected pod never ran: once it is deleted, the status
				// manager deletes it for good.
				if pod.DeletionTimestamp != nil {
					a.statusManager.TerminatePod(pod)
				}
				return
			}
			// Like the kubelet's pod config, only a change of what the pod
			// asks for is an update: the echo of our own status patches is not.
			if !podsDifferSemantically(oldObj.(*corev1.Pod), pod) {
				// The kubelet's HandlePodReconcile: a readiness gate's
				// condition set by its controller changes Ready.
				if podstatus.NeedToReconcilePodReadiness(pod) {
					a.workers.UpdatePodOfType(pod, podworkers.SyncPodSync)
				}
				return
			}
			a.onResize(oldObj.(*corev1.Pod), pod)
			a.workers.UpdatePodOfType(pod, podworkers.SyncPodUpdate)
			// A pod that completed on its own and is deleted later has no
			// worker left to act: the status manager finishes the deletion.
			if pod.DeletionTimestamp != nil && a.workers.IsTerminated(pod.UID) {
				a.statusManager.TerminatePod(pod)
			}
		},
		DeleteFunc: func(obj any) {
			pod, ok := obj.(*corev1.Pod)
			if !ok {
				tomb, ok := obj.(cache.DeletedFinalStateUnknown)
				if !ok {
					return
				}
				if pod, ok = tomb.Obj.(*corev1.Pod); !ok {
					return
				}
			}
			if staticpods.IsMirrorPod(pod) {
				a.onMirrorDelete(pod)
				return
			}
			a.objects.UnregisterPod(pod)
			a.metrics.PodDeleted(pod.UID)
			a.mu.Lock()
			delete(a.pods, pod.UID)
			delete(a.admitted, pod.UID)
			delete(a.rejected, pod.UID)
			a.mu.Unlock()
			a.workers.KillPod(pod)
			a.workers.Forget(pod.UID)
			a.statusManager.Forget(pod.UID)
			a.probes.RemovePod(pod.UID)
			a.allocation.RemovePod(pod.UID)
			// Room freed on the node: deferred resizes may fit now.
			if a.allocation.HasPendingResizes() {
				a.retryPendingResizes()
			}
		},
	}
}

// admit runs the kubelet's admission for a newly seen pod against the pods
// admitted before it that are still active. A rejected pod fails at once,
// with the kubelet's reason, message and event, and is never started.
func (a *Agent) admit(pod *corev1.Pod) bool {
	node, err := a.getNode()
	if err != nil {
		// The node informer is synced before pods are watched; without a
		// node there is nothing to judge against, as for the kubelet.
		a.allocation.SetAllocated(pod)
		a.markAdmitted(pod.UID)
		return true
	}
	// Against the other pods as allocated, as the kubelet's allocation
	// manager admits (AddPod), which then records the allocation.
	r := admission.Admit(pod, node, a.allocation.AllocatedPods())
	// The eviction manager's admit handler runs first on the kubelet.
	if ok, reason, message := a.eviction.Admit(pod); !ok {
		r = admission.Result{Reason: reason, Message: message}
	}
	if r.Admit {
		a.allocation.SetAllocated(pod)
		a.markAdmitted(pod.UID)
		return true
	}
	a.mu.Lock()
	a.rejected[pod.UID] = true
	a.mu.Unlock()
	a.events.Event(pod, corev1.EventTypeWarning, r.Reason, r.Message)
	a.statusManager.SetPodStatus(pod, corev1.PodStatus{
		QOSClass: pod.Status.QOSClass, Phase: corev1.PodFailed,
		Reason: r.Reason, Message: "Pod was rejected: " + r.Message,
	})
	a.statusManager.TerminatePod(pod)
	return false
}

func (a *Agent) markAdmitted(uid types.UID) {
	a.mu.Lock()
	a.admitted[uid] = true
	a.mu.Unlock()
}

func (a *Agent) isRejected(uid types.UID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rejected[uid]
}

// podsDifferSemantically mirrors the kubelet's check of the same name: the
// spec, labels, annotations or deletion changed.
func podsDifferSemantically(existing, ref *corev1.Pod) bool {
	return !apiequality.Semantic.DeepEqual(existing.Spec, ref.Spec) ||
		!maps.Equal(existing.Labels, ref.Labels) ||
		!maps.Equal(existing.Annotations, ref.Annotations) ||
		!existing.DeletionTimestamp.Equal(ref.DeletionTimestamp) ||
		!ptr.Equal(existing.DeletionGracePeriodSeconds, ref.DeletionGracePeriodSeconds)
}

func (a *Agent) setPod(pod *corev1.Pod) {
	a.mu.Lock()
	a.pods[pod.UID] = pod
	a.mu.Unlock()
}

func (a *Agent) pod(uid types.UID) *corev1.Pod {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pods[uid]
}

func (a *Agent) getNode() (*corev1.Node, error) {
	obj, ok, err := a.nodeStore.GetByKey(a.cfg.NodeName)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("node %q not found in the informer cache", a.cfg.NodeName)
	}
	return obj.(*corev1.Node), nil
}

// setNodeOwner makes the Node own its Lease, as the kubelet does, so the
// garbage collector removes the Lease with the Node.
func (a *Agent) setNodeOwner(l *coordinationv1.Lease) error {
	if len(l.OwnerReferences) > 0 {
		return nil
	}
	node, err := a.getNode()
	if err != nil {
		return err
	}
	l.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: corev1.SchemeGroupVersion.WithKind("Node").Version,
		Kind:       "Node",
		Name:       node.Name,
		UID:        node.UID,
	}}
	return nil
}
