package proxy

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// The selectors of kube-proxy's watches (cmd/kube-proxy/app/server.go's Run
// and pkg/proxy/node.go's newNodeManager), for a fleet's shared informers
// to use the same.

// The selectors' strings, made once for every proxy.
var (
	serviceLabelSelector = mustNotExist(LabelServiceProxyName)
	serviceFieldSelector = fields.OneTermNotEqualSelector("spec.clusterIP", corev1.ClusterIPNone).String()
	sliceLabelSelector   = mustNotExist(corev1.IsHeadlessService)
)

// ServiceListOptions selects Services that no other proxy claims, headless
// ones left out.
func ServiceListOptions() metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: serviceLabelSelector, FieldSelector: serviceFieldSelector}
}

// EndpointSliceListOptions selects the slices of Services that are not
// headless.
func EndpointSliceListOptions() metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: sliceLabelSelector}
}

// ServiceCIDRListOptions selects every ServiceCIDR.
func ServiceCIDRListOptions() metav1.ListOptions { return metav1.ListOptions{} }

// NodeListOptions selects the proxy's Node alone.
func NodeListOptions(node string) metav1.ListOptions {
	return metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector(metav1.ObjectNameField, node).String()}
}

func mustNotExist(label string) string {
	r, err := labels.NewRequirement(label, selection.DoesNotExist, nil)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*r).String()
}

// newReflectors makes the proxy's four watches, in the order kube-proxy
// opens them: its Node (the NodeManager, before the proxier exists), then
// Services, EndpointSlices and ServiceCIDRs.
//
// Each is a bare cache.Reflector writing into an objectStore rather than a
// SharedIndexInformer: the API server sees the same list and watch, while
// the proxy pays for neither an informer's indexer of whole objects nor its
// delta queue and processor goroutines, which across thousands of proxies
// would cost more than the proxies themselves. The ListWatch carries the
// client, so that a client without watch-list streaming (the fake clientset
// in tests) falls back to list and watch, as nodeagent.NewInformer does.
func (p *Proxy) newReflectors() []*cache.Reflector {
	client := p.cfg.Client
	type watchSpec struct {
		name    string
		store   *objectStore
		obj     runtime.Object
		options metav1.ListOptions
		list    func(context.Context, metav1.ListOptions) (runtime.Object, error)
		watch   func(context.Context, metav1.ListOptions) (watch.Interface, error)
	}
	services := client.CoreV1().Services(metav1.NamespaceAll)
	slices := client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll)
	cidrs := client.NetworkingV1().ServiceCIDRs()
	nodes := client.CoreV1().Nodes()
	specs := []watchSpec{
		{"kube-proxy node", p.node, &corev1.Node{}, NodeListOptions(p.cfg.NodeName),
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return nodes.List(ctx, o) }, nodes.Watch},
		{"kube-proxy services", p.services, &corev1.Service{}, ServiceListOptions(),
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return services.List(ctx, o) }, services.Watch},
		{"kube-proxy endpointslices", p.slices, &discoveryv1.EndpointSlice{}, EndpointSliceListOptions(),
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return slices.List(ctx, o) }, slices.Watch},
		{"kube-proxy servicecidrs", p.cidrs, &networkingv1.ServiceCIDR{}, ServiceCIDRListOptions(),
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return cidrs.List(ctx, o) }, cidrs.Watch},
	}
	reflectors := make([]*cache.Reflector, 0, len(specs))
	for _, s := range specs {
		// The closures live as long as the proxy: they take what they
		// need, not the spec with its example object.
		label, field, list, watchFn := s.options.LabelSelector, s.options.FieldSelector, s.list, s.watch
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				o.LabelSelector, o.FieldSelector = label, field
				return list(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				o.LabelSelector, o.FieldSelector = label, field
				return watchFn(ctx, o)
			},
		}
		// No resync: upstream's (ConfigSyncPeriod, 15 min) replays the
		// cache to the handlers, which find no change in it, and costs the
		// API server nothing.
		reflectors = append(reflectors, cache.NewReflectorWithOptions(
			cache.ToListWatcherWithWatchListSemantics(lw, client), s.obj, s.store,
			cache.ReflectorOptions{Name: s.name}))
	}
	return reflectors
}

// objectStore is what one watch writes into: a cache.ReflectorStore that
// reduces each object to a record and hands it to the proxy's tracker of
// that kind, keeping nothing else. It also makes the kind's change handler
// for shared informers.
type objectStore struct {
	p    *Proxy
	kind string
	// reduce makes an object's record, and returns a record as is.
	reduce func(obj any) (record, error)
	// apply records an event, p.mu held, and says whether a sync is due.
	apply func(r record, deleted bool) (syncDue bool)
	// keys yields the keys held, p.mu held.
	keys func(yield func(handle) bool)
	// synced, if set, is called, p.mu held, when the kind has listed for
	// the first time; it returns latencies to observe.
	synced func() []time.Duration

	listed atomic.Bool
}

var (
	_ cache.ReflectorStore    = &objectStore{}
	_ cache.TransformingStore = &objectStore{}
)

func (s *objectStore) hasListed() bool { return s.listed.Load() }

// markListed notes the first list, as a Replace does.
func (s *objectStore) markListed() {
	s.p.mu.Lock()
	var latencies []time.Duration
	if !s.listed.Swap(true) && s.synced != nil {
		latencies = s.synced()
	}
	s.p.mu.Unlock()
	s.p.observe(latencies)
}

// keyOnly is the record of an object known by its key only: the object a
// Replace no longer lists.
func (s *objectStore) keyOnly(key handle) record {
	switch s.kind {
	case "Service":
		return &serviceRecord{key: key}
	case "EndpointSlice":
		return &sliceRecord{key: key}
	case "ServiceCIDR":
		return &cidrRecord{key: key}
	default:
		return &nodeRecord{key: key}
	}
}

func (s *objectStore) event(obj any, deleted bool) error {
	r, err := s.reduce(obj)
	if err != nil {
		return err
	}
	s.p.mu.Lock()
	due := s.apply(r, deleted) && s.p.initialized
	s.p.mu.Unlock()
	if due {
		s.p.runner.Run()
	}
	return nil
}

// Add implements cache.ReflectorStore.
func (s *objectStore) Add(obj any) error { return s.event(obj, false) }

// Update implements cache.ReflectorStore.
func (s *objectStore) Update(obj any) error { return s.event(obj, false) }

// Delete implements cache.ReflectorStore.
func (s *objectStore) Delete(obj any) error { return s.event(obj, true) }

// Replace implements cache.ReflectorStore: the objects held and not listed
// are deleted first, then the listed ones added or updated, in the order
// of the informers' RealFIFO (reconcileReplacement in
// client-go/tools/cache/the_real_fifo.go).
func (s *objectStore) Replace(list []any, _ string) error {
	records := make([]record, 0, len(list))
	listed := make(map[handle]struct{}, len(list))
	for _, obj := range list {
		r, err := s.reduce(obj)
		if err != nil {
			return err
		}
		records = append(records, r)
		listed[r.objectKey()] = struct{}{}
	}
	// In key order, so that a first list appends to the proxy's maps.
	slices.SortStableFunc(records, func(a, b record) int { return compareKeys(a.objectKey(), b.objectKey()) })
	p := s.p
	p.mu.Lock()
	var gone []handle
	s.keys(func(key handle) bool {
		if _, ok := listed[key]; !ok {
			gone = append(gone, key)
		}
		return true
	})
	due := false
	for _, key := range gone {
		due = s.apply(s.keyOnly(key), true) || due
	}
	for _, r := range records {
		due = s.apply(r, false) || due
	}
	due = due && p.initialized
	var latencies []time.Duration
	if !s.listed.Swap(true) && s.synced != nil {
		latencies = s.synced()
	}
	p.mu.Unlock()
	p.observe(latencies)
	if due {
		p.runner.Run()
	}
	return nil
}

// Resync implements cache.ReflectorStore: there is nothing to replay.
func (s *objectStore) Resync() error { return nil }

// Transformer implements cache.TransformingStore: a watch-list's
// temporary store holds records, not objects. It goes further than
// kube-proxy's own transform, which strips managed fields.
func (s *objectStore) Transformer() cache.TransformFunc {
	return func(obj any) (any, error) { return s.reduce(obj) }
}

// handler is the kind's change handler for shared informers.
func (s *objectStore) handler() cache.ResourceEventHandler {
	report := func(err error) {
		if err != nil {
			s.p.log().Error(err, "Unexpected object from a shared informer", "kind", s.kind)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { report(s.event(obj, false)) },
		UpdateFunc: func(_, obj any) { report(s.event(obj, false)) },
		DeleteFunc: func(obj any) { report(s.event(obj, true)) },
	}
}
