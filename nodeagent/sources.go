package nodeagent

import (
	"context"
	"fmt"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// A source is how an agent hears of its Node or of the pods bound to it: an
// informer of its own, as a kubelet has (ownInformer), or its share of the
// fleet's shared informers (sharedSource). Run starts and stops either the
// same way; the source delivers its objects' events to the handler it was
// made with.
type source interface {
	runnable
	// HasSynced reports whether the source has delivered every object of
	// the node that the API server held when it started.
	HasSynced() bool
}

// newSources makes the agent's node and pod sources, and the store its
// Node is read from: informers of the agent's own, or, with cfg.Informers,
// its share of the fleet's.
func (a *Agent) newSources() (nodes, pods source, nodeStore cache.Store) {
	cfg := &a.cfg
	if shared := cfg.Informers; shared != nil {
		nodes = &sharedSource{
			node: cfg.NodeName, informers: shared,
			add: func() func() { return shared.AddNodeHandler(cfg.NodeName, a.nodeHandler()) },
			// The shared informer may have listed before this node
			// registered: the node source has synced once its watch has
			// brought the Node, or the first status update would find
			// nothing to update and wait a whole period.
			holds: func() bool { _, err := a.getNode(); return err == nil },
		}
		pods = &sharedSource{
			node: cfg.NodeName, informers: shared,
			add: func() func() { return shared.AddPodHandler(cfg.NodeName, a.podHandler()) },
		}
		return nodes, pods, shared.Nodes()
	}
	nodeInformer := newOwnInformer(cfg.Client, fields.OneTermEqualSelector(metav1.ObjectNameField, cfg.NodeName), &corev1.Node{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cfg.Client.CoreV1().Nodes().List(ctx, o)
		},
		cfg.Client.CoreV1().Nodes().Watch, a.nodeHandler())
	// The kubelet's pod source: every pod bound to this node, in any
	// namespace.
	podsAPI := cfg.Client.CoreV1().Pods(metav1.NamespaceAll)
	podInformer := newOwnInformer(cfg.Client, fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName), &corev1.Pod{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return podsAPI.List(ctx, o) },
		podsAPI.Watch, a.podHandler())
	return nodeInformer, podInformer, nodeInformer.store
}

// NewInformer is a shared informer of the objects selector picks, with no
// resync: the fleet's shared watches, whose events many agents' handlers
// hear.
func NewInformer(client kubernetes.Interface, selector fields.Selector, obj runtime.Object,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error), indexers cache.Indexers) cache.SharedIndexInformer {
	return cache.NewSharedIndexInformer(listWatch(client, selector, list, watchFn), obj, 0, indexers)
}

// listWatch is a ListerWatcher with selector set on every request. It
// carries the client, so that clients without watch-list streaming (the
// fake clientset in tests) fall back to list and watch, as informers do.
func listWatch(client kubernetes.Interface, selector fields.Selector,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.ListerWatcher {
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
	return cache.ToListWatcherWithWatchListSemantics(lw, client)
}

// ownInformer is a source of the agent's own: one watch, the store it
// fills, and the agent's handler, run in a goroutine until the source stops.
//
// It is client-go's plain informer (a reflector, a queue and a loop that
// calls the one handler), not a shared informer: the requests are the same,
// but a shared informer adds a processor and, per handler, two goroutines
// and a ring of 1,024 events (16 KiB) that an agent with one handler per
// watch does not need. Across a fleet's two watches per node that was 6
// goroutines and 32 KiB of heap per agent. The kubelet's own pod source is
// leaner still, a reflector alone (pkg/kubelet/config/apiserver.go); the
// agent keeps the informer's queue so that its handler runs outside the
// reflector's goroutine, as a shared informer's did.
type ownInformer struct {
	*loop
	store      cache.Store
	controller cache.Controller
}

// newOwnInformer makes the informer of the objects selector picks, with h as
// its handler and no resync; it runs once started.
func newOwnInformer(client kubernetes.Interface, selector fields.Selector, obj runtime.Object,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error), h cache.ResourceEventHandler) *ownInformer {
	store, controller := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: listWatch(client, selector, list, watchFn),
		ObjectType:    obj,
		Handler:       h,
	})
	return &ownInformer{loop: newLoop(controller.RunWithContext), store: store, controller: controller}
}

// HasSynced implements source: the informer has listed once.
func (i *ownInformer) HasSynced() bool { return i.controller.HasSynced() }

// sharedSource is an agent's share of one of the fleet's shared informers:
// its handler, registered for the objects of its node. It needs no goroutine
// of its own.
type sharedSource struct {
	node      string
	informers SharedInformers
	// add registers the agent's handler and returns its removal.
	add func() (remove func())
	// holds, if set, says whether the shared store has what the agent needs
	// before it counts as synced.
	holds func() bool

	remove     func()
	registered atomic.Bool
}

// Start implements runnable. The handler is registered once the shared
// informers have listed, so that it is first told of every object of its
// node already known.
func (s *sharedSource) Start(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), s.informers.HasSynced) {
		return fmt.Errorf("node %s: the fleet's shared informers had not listed when the agent stopped: %w", s.node, context.Cause(ctx))
	}
	s.remove = s.add()
	s.registered.Store(true)
	return nil
}

// Wait implements runnable: the handler hears no more events.
func (s *sharedSource) Wait() { s.remove() }

// HasSynced implements source.
func (s *sharedSource) HasSynced() bool {
	return s.registered.Load() && (s.holds == nil || s.holds())
}
