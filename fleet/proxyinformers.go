package fleet

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetlet/fleetlet/nodeagent/proxy"
)

// sharedProxyInformers feed every agent's kube-proxy in the shared watch
// mode: one informer each of Services, EndpointSlices and ServiceCIDRs with
// kube-proxy's selectors, broadcast to every proxy, and the fleet's node
// informer, dispatched by node name. Three watches for the whole fleet
// instead of four per node; each event still reaches every proxy, as it
// does on a real cluster.
type sharedProxyInformers struct {
	services, slices, cidrs cache.SharedIndexInformer
	nodes                   *SharedInformers

	mu sync.RWMutex
	// proxies are the registered handlers, by registration, so that a
	// removal finds its own.
	proxies map[*proxy.Handlers]struct{}
	// nodeHandlers are the proxies' handlers of their own Node.
	nodeHandlers dispatcher
}

func newSharedProxyInformers(client kubernetes.Interface, nodes *SharedInformers) *sharedProxyInformers {
	s := &sharedProxyInformers{
		nodes: nodes, proxies: map[*proxy.Handlers]struct{}{},
		nodeHandlers: dispatcher{handlers: map[string]*cache.ResourceEventHandler{}},
	}
	informer := func(obj runtime.Object, opts metav1.ListOptions,
		list func(context.Context, metav1.ListOptions) (runtime.Object, error),
		watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
		pick func(proxy.Handlers) cache.ResourceEventHandler) cache.SharedIndexInformer {
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector, o.FieldSelector = opts.LabelSelector, opts.FieldSelector
				return list(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector, o.FieldSelector = opts.LabelSelector, opts.FieldSelector
				return watchFn(ctx, o)
			},
		}
		inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), obj, 0, cache.Indexers{})
		_, _ = inf.AddEventHandler(s.broadcast(pick))
		return inf
	}
	svc := client.CoreV1().Services(metav1.NamespaceAll)
	s.services = informer(&corev1.Service{}, proxy.ServiceListOptions(),
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return svc.List(ctx, o) }, svc.Watch,
		func(h proxy.Handlers) cache.ResourceEventHandler { return h.Services })
	eps := client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll)
	s.slices = informer(&discoveryv1.EndpointSlice{}, proxy.EndpointSliceListOptions(),
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return eps.List(ctx, o) }, eps.Watch,
		func(h proxy.Handlers) cache.ResourceEventHandler { return h.EndpointSlices })
	cidrs := client.NetworkingV1().ServiceCIDRs()
	s.cidrs = informer(&networkingv1.ServiceCIDR{}, proxy.ServiceCIDRListOptions(),
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return cidrs.List(ctx, o) }, cidrs.Watch,
		func(h proxy.Handlers) cache.ResourceEventHandler { return h.ServiceCIDRs })
	_, _ = nodes.nodes.AddEventHandler(s.nodeHandlers.handler(func(obj any) string { return obj.(*corev1.Node).Name }))
	return s
}

// broadcast delivers each event to the handler pick chooses of every
// registered proxy.
func (s *sharedProxyInformers) broadcast(pick func(proxy.Handlers) cache.ResourceEventHandler) cache.ResourceEventHandler {
	each := func(f func(cache.ResourceEventHandler)) {
		s.mu.RLock()
		defer s.mu.RUnlock()
		for h := range s.proxies {
			f(pick(*h))
		}
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { each(func(h cache.ResourceEventHandler) { h.OnAdd(obj, initial) }) },
		UpdateFunc: func(oldObj, obj any) { each(func(h cache.ResourceEventHandler) { h.OnUpdate(oldObj, obj) }) },
		DeleteFunc: func(obj any) { each(func(h cache.ResourceEventHandler) { h.OnDelete(obj) }) },
	}
}

// Run runs the three informers until ctx ends; the node informer is the
// fleet's, run with the others.
func (s *sharedProxyInformers) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, inf := range []cache.SharedIndexInformer{s.services, s.slices, s.cidrs} {
		wg.Add(1)
		go func() { defer wg.Done(); inf.RunWithContext(ctx) }()
	}
	wg.Wait()
}

// HasSynced implements proxy.SharedSources.
func (s *sharedProxyInformers) HasSynced() bool {
	return s.services.HasSynced() && s.slices.HasSynced() && s.cidrs.HasSynced() && s.nodes.HasSynced()
}

// AddProxyHandlers implements proxy.SharedSources: h hears of every object
// already known, as adds, before any event that follows, since the
// broadcast waits on the lock the replay holds.
func (s *sharedProxyInformers) AddProxyHandlers(node string, h proxy.Handlers) func() {
	reg := &h
	s.mu.Lock()
	for _, known := range []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{{s.services, h.Services}, {s.slices, h.EndpointSlices}, {s.cidrs, h.ServiceCIDRs}} {
		for _, obj := range known.inf.GetStore().List() {
			known.h.OnAdd(obj, true)
		}
	}
	s.proxies[reg] = struct{}{}
	s.mu.Unlock()
	removeNode := s.nodeHandlers.add(node, h.Node, func() []any {
		obj, ok, _ := s.nodes.Nodes().GetByKey(node)
		if !ok {
			return nil
		}
		return []any{obj}
	})
	return func() {
		removeNode()
		s.mu.Lock()
		delete(s.proxies, reg)
		s.mu.Unlock()
	}
}
