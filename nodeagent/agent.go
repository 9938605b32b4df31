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
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-helpers/apimachinery/lease"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/nodeagent/admission"
	"github.com/fleetlet/fleetlet/nodeagent/containergc"
	"github.com/fleetlet/fleetlet/nodeagent/eviction"
	"github.com/fleetlet/fleetlet/nodeagent/images"
	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
	"github.com/fleetlet/fleetlet/nodeagent/nodestatus"
	"github.com/fleetlet/fleetlet/nodeagent/objectcache"
	"github.com/fleetlet/fleetlet/nodeagent/pleg"
	"github.com/fleetlet/fleetlet/nodeagent/podworkers"
	"github.com/fleetlet/fleetlet/nodeagent/prober"
	"github.com/fleetlet/fleetlet/nodeagent/stats"
	"github.com/fleetlet/fleetlet/nodeagent/status"
	"github.com/fleetlet/fleetlet/nodeagent/volumemanager"
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

// Agent is one node's kubelet.
type Agent struct {
	cfg Config

	runtimeName string
	runtime     *kuberuntime.Manager
	statuses    *status.Manager
	pleg        *pleg.Generic
	probes      *prober.Manager
	workers     *podworkers.PodWorkers
	volumes     *volumemanager.Manager
	stats       *stats.Provider
	eviction    *eviction.Manager
	imageGC     *images.Manager
	containerGC *containergc.Manager
	// sourcesReady reports whether the pod informer has listed once: until
	// then a pod unknown to the agent may yet appear, and container GC
	// keeps what it does not know.
	sourcesReady func() bool
	objects      *objectcache.Cache
	events       record.EventRecorder
	nodeLister   cache.Indexer

	mu      sync.Mutex
	pods    map[types.UID]*corev1.Pod
	podCIDR string
	// admitted and rejected are the kubelet's admission decisions, kept
	// until the pod is gone from the API server.
	admitted map[types.UID]bool
	rejected map[types.UID]bool
}

// New validates cfg and returns an Agent ready to Run.
func New(cfg Config) (*Agent, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Agent{cfg: cfg, pods: map[types.UID]*corev1.Pod{}, admitted: map[types.UID]bool{}, rejected: map[types.UID]bool{}}, nil
}

// Run registers the node and runs every loop until ctx ends. It returns an
// error only if the agent could not start; once started, failures are retried
// as the kubelet retries them.
func (a *Agent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", a.cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)
	cfg := &a.cfg
	kc := cfg.Kubelet

	ver, err := cfg.Runtime.Version(ctx, "v1")
	if err != nil {
		return fmt.Errorf("node %s: the CRI runtime did not answer Version: %w; check that its endpoint is up", cfg.NodeName, err)
	}
	a.runtimeName = ver.RuntimeName

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cfg.Client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	events := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: cfg.NodeName})
	a.events = events

	runtimeConfig := kuberuntime.Config{
		Runtime: cfg.Runtime, Images: cfg.Images, Events: events, Recorder: cfg.Recorder, Clock: cfg.Clock,
		SerializeImagePulls: ptr.Deref(kc.SerializeImagePulls, true), MaxParallelImagePulls: ptr.Deref(kc.MaxParallelImagePulls, 0),
		MemoryCapacity: cfg.Capacity.Memory().Value(), Host: cfg.Host,
	}
	a.objects = objectcache.New(objectcache.Config{Client: cfg.Client, Clock: cfg.Clock})
	a.volumes = volumemanager.New(volumemanager.Config{
		Clock: cfg.Clock, Client: cfg.Client, Objects: a.objects, Events: events, PodsDir: cfg.PodsDir, Allocatable: cfg.Capacity,
	})
	runtimeConfig.ContainerOptions = a.containerOptions
	if cfg.NetworkProber == nil {
		// A real node: httpGet hooks reach the pod, as probes do.
		runtimeConfig.NetworkHook = networkHook(prober.NewHTTPRunner(nil))
	}
	a.runtime = kuberuntime.NewManager(runtimeConfig)
	a.statuses = status.NewManager(status.Config{Client: cfg.Client, Clock: cfg.Clock, Recorder: cfg.Recorder})
	network := cfg.NetworkProber
	if network == nil {
		network = prober.NewHTTPRunner(nil)
	}
	a.probes = prober.NewManager(prober.Config{
		Clock: cfg.Clock, Events: events, Seed: nodeSeed(cfg.NodeName),
		Runner: prober.Join(prober.ExecViaCRI(cfg.Runtime), network),
	})
	a.pleg = pleg.NewGeneric(cfg.Runtime, cfg.Clock, pleg.RelistPeriod)

	capacity := cfg.Capacity.DeepCopy()
	if _, ok := capacity[corev1.ResourcePods]; !ok {
		capacity[corev1.ResourcePods] = *resourceQuantity(int64(kc.MaxPods))
	}
	if err := a.newResourceManagers(capacity, events); err != nil {
		return err
	}

	var kubeletAPI net.Listener
	var kubeletPort int32
	if cfg.Serving != nil {
		if kubeletAPI, err = a.listenKubeletAPI(); err != nil {
			return err
		}
		defer func() { _ = kubeletAPI.Close() }()
		kubeletPort = int32(kubeletAPI.Addr().(*net.TCPAddr).Port)
	}
	nodeStatus := nodestatus.NewManager(nodestatus.Config{
		Identity: nodestatus.Identity{
			Name: cfg.NodeName, IP: cfg.NodeIP, Labels: cfg.Labels, Taints: cfg.Taints, Capacity: capacity,
			KubeletPort:    kubeletPort,
			KubeletVersion: KubeletVersion, RuntimeVersion: ver.RuntimeName + "://" + ver.RuntimeVersion,
		},
		Client:          cfg.Client,
		Clock:           cfg.Clock,
		GetNode:         a.getNode,
		RuntimeState:    a.runtimeState,
		UpdateFrequency: kc.NodeStatusUpdateFrequency.Duration,
		ReportFrequency: kc.NodeStatusReportFrequency.Duration,
		Seed:            nodeSeed(cfg.NodeName),
	})
	if err := nodeStatus.Register(ctx); err != nil {
		return err
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	goRun := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}

	if shared := cfg.Informers; shared != nil {
		if !cache.WaitForCacheSync(ctx.Done(), shared.HasSynced) {
			return ctx.Err()
		}
		a.nodeLister = shared.Nodes()
		defer shared.AddNodeHandler(cfg.NodeName, a.nodeHandler())()
		// The shared informer listed before this node registered: wait for
		// its watch to bring the Node, or the first status update would
		// find nothing to update and wait a whole period.
		if !cache.WaitForCacheSync(ctx.Done(), func() bool { _, err := a.getNode(); return err == nil }) {
			return ctx.Err()
		}
	} else {
		nodeInformer := NewInformer(cfg.Client, fields.OneTermEqualSelector(metav1.ObjectNameField, a.cfg.NodeName), &corev1.Node{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return cfg.Client.CoreV1().Nodes().List(ctx, o)
			},
			cfg.Client.CoreV1().Nodes().Watch, cache.Indexers{})
		_, _ = nodeInformer.AddEventHandler(a.nodeHandler())
		a.nodeLister = nodeInformer.GetIndexer()
		goRun(nodeInformer.RunWithContext)
		if !cache.WaitForCacheSync(ctx.Done(), nodeInformer.HasSynced) {
			return ctx.Err()
		}
	}

	leaseController := lease.NewController(cfg.Clock, cfg.Client, cfg.NodeName, kc.NodeLeaseDurationSeconds, nil,
		LeaseRenewInterval(kc), cfg.NodeName, leaseNamespace, a.setNodeOwner)
	goRun(leaseController.Run)
	goRun(nodeStatus.Run)
	goRun(a.statuses.Run)
	goRun(a.pleg.Run)
	if kc.FeatureGates[pleg.FeatureEventedPLEG] {
		goRun(pleg.NewEvented(cfg.Runtime, a.pleg).Run)
	}
	goRun(a.probes.Run)

	a.workers = podworkers.New(ctx, a, cfg.Clock)
	defer a.workers.Wait()
	if shared := cfg.Informers; shared != nil {
		defer shared.AddPodHandler(cfg.NodeName, a.podHandler())()
		a.sourcesReady = func() bool { return true }
	} else {
		// The kubelet's pod source: every pod bound to this node, in any
		// namespace.
		pods := cfg.Client.CoreV1().Pods(metav1.NamespaceAll)
		podInformer := NewInformer(cfg.Client, fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName), &corev1.Pod{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) }, pods.Watch, cache.Indexers{})
		_, _ = podInformer.AddEventHandler(a.podHandler())
		a.sourcesReady = podInformer.HasSynced
		goRun(podInformer.RunWithContext)
	}
	// Started once the pod source is wired: they read the pod workers
	// and whether the pods have been listed.
	goRun(a.eviction.Run)
	goRun(a.imageGC.Run)
	goRun(a.containerGC.Run)
	if kubeletAPI != nil {
		srv, err := a.kubeletAPI()
		if err != nil {
			return err
		}
		goRun(func(ctx context.Context) {
			if err := srv.Serve(ctx, kubeletAPI, cfg.Serving.Cert); err != nil {
				logger.Error(err, "Kubelet API stopped")
			}
		})
	}
	goRun(a.syncLoop)
	logger.V(2).Info("Node agent started")
	<-ctx.Done()
	return nil
}

// syncLoop turns PLEG events and probe results into pod syncs, the
// kubelet's syncLoopIteration for its plegCh and probe channels.
func (a *Agent) syncLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
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

// NewInformer is an informer of the objects selector picks, with no resync:
// an agent's own watches, and the fleet's shared ones. The ListWatch carries
// the client, so that clients without watch-list streaming (the fake
// clientset in tests) fall back to list and watch.
func NewInformer(client kubernetes.Interface, selector fields.Selector, obj runtime.Object,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error), indexers cache.Indexers) cache.SharedIndexInformer {
	sel := selector.String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return watchFn(ctx, o)
		},
	}
	return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), obj, 0, indexers)
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
	err := a.cfg.Runtime.UpdateRuntimeConfig(ctx, &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: cidr}})
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
			now := a.cfg.Clock.Now()
			// A pod in this watch is bound to the node: if the agent sees the
			// binding before the driver's watch does, it is the first to
			// observe the scheduling (the Recorder keeps the first stamp).
			a.cfg.Recorder.Mark(pod.UID, reports.Scheduled, now)
			a.cfg.Recorder.Mark(pod.UID, reports.AgentObserved, now)
			a.setPod(pod)
			if pod.DeletionTimestamp == nil && !a.admit(pod) {
				return
			}
			a.workers.UpdatePod(pod)
		},
		UpdateFunc: func(oldObj, obj any) {
			pod := obj.(*corev1.Pod)
			a.setPod(pod)
			if a.isRejected(pod.UID) {
				// A rejected pod never ran: once it is deleted, the status
				// manager deletes it for good.
				if pod.DeletionTimestamp != nil {
					a.statuses.TerminatePod(pod.UID)
				}
				return
			}
			// Like the kubelet's pod config, only a change of what the pod
			// asks for is an update: the echo of our own status patches is not.
			if !podsDifferSemantically(oldObj.(*corev1.Pod), pod) {
				return
			}
			a.workers.UpdatePod(pod)
			// A pod that completed on its own and is deleted later has no
			// worker left to act: the status manager finishes the deletion.
			if pod.DeletionTimestamp != nil && a.workers.IsTerminated(pod.UID) {
				a.statuses.TerminatePod(pod.UID)
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
			a.mu.Lock()
			delete(a.pods, pod.UID)
			delete(a.admitted, pod.UID)
			delete(a.rejected, pod.UID)
			a.mu.Unlock()
			a.workers.KillPod(pod)
			a.workers.Forget(pod.UID)
			a.statuses.Forget(pod.UID)
			a.probes.RemovePod(pod.UID)
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
		a.markAdmitted(pod.UID)
		return true
	}
	r := admission.Admit(pod, node, a.activePods())
	// The eviction manager's admit handler runs first on the kubelet.
	if ok, reason, message := a.eviction.Admit(pod); !ok {
		r = admission.Result{Reason: reason, Message: message}
	}
	if r.Admit {
		a.markAdmitted(pod.UID)
		return true
	}
	a.mu.Lock()
	a.rejected[pod.UID] = true
	a.mu.Unlock()
	a.events.Event(pod, corev1.EventTypeWarning, r.Reason, r.Message)
	a.statuses.SetPodStatus(pod, corev1.PodStatus{
		QOSClass: pod.Status.QOSClass, Phase: corev1.PodFailed,
		Reason: r.Reason, Message: "Pod was rejected: " + r.Message,
	})
	a.statuses.TerminatePod(pod.UID)
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
	obj, ok, err := a.nodeLister.GetByKey(a.cfg.NodeName)
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

// runtimeState folds the runtime's status and the PLEG's health into the
// node's readiness, with the kubelet's messages.
func (a *Agent) runtimeState(ctx context.Context) nodestatus.RuntimeState {
	resp, err := a.cfg.Runtime.Status(ctx, false)
	if err != nil {
		return nodestatus.RuntimeState{Message: fmt.Sprintf("container runtime is down: %v", err)}
	}
	for _, c := range resp.GetStatus().GetConditions() {
		if !c.Status {
			switch c.Type {
			case runtimeapi.RuntimeReady:
				return nodestatus.RuntimeState{Message: fmt.Sprintf("container runtime status check failed: %s: %s", c.Reason, c.Message)}
			case runtimeapi.NetworkReady:
				return nodestatus.RuntimeState{Message: fmt.Sprintf("container runtime network not ready: NetworkReady=false reason:%s message:%s", c.Reason, c.Message)}
			}
		}
	}
	pressure := nodestatus.RuntimeState{
		MemoryPressure: a.eviction.IsUnderMemoryPressure(),
		DiskPressure:   a.eviction.IsUnderDiskPressure(),
		PIDPressure:    a.eviction.IsUnderPIDPressure(),
	}
	if ok, err := a.pleg.Healthy(); !ok {
		pressure.Message = fmt.Sprintf("PLEG is not healthy: %v", err)
		return pressure
	}
	pressure.Ready = true
	return pressure
}
