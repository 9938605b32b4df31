package fleet

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetlet/fleetlet/nodeagent"
)

// Watch modes: how agents learn of their pods and their Node.
const (
	// WatchPerNode gives every agent its own pod and node watches, as
	// kubelets have: what a real fleet costs the API server.
	WatchPerNode = "per-node"
	// WatchShared serves every agent from one pod and one node informer of
	// the fleet's, fanned out by node name: two watches for the whole fleet.
	WatchShared = "shared"
)

// nodeNameIndex indexes pods by the node they are bound to.
const nodeNameIndex = "spec.nodeName"

// SharedInformers is one pod informer (every bound pod) and one node
// informer whose events are dispatched to the agent of the node they
// concern. A single dispatching handler rather than one handler per agent:
// client-go gives each handler a goroutine and delivers every event to every
// handler, which for thousands of agents costs more than it saves.
type SharedInformers struct {
	pods  cache.SharedIndexInformer
	nodes cache.SharedIndexInformer

	podHandlers  dispatcher
	nodeHandlers dispatcher
}

// NewSharedInformers returns informers over client; Run starts them.
func NewSharedInformers(client kubernetes.Interface) *SharedInformers {
	s := &SharedInformers{
		podHandlers:  dispatcher{handlers: map[string]*cache.ResourceEventHandler{}},
		nodeHandlers: dispatcher{handlers: map[string]*cache.ResourceEventHandler{}},
	}
	pods := client.CoreV1().Pods(metav1.NamespaceAll)
	s.pods = nodeagent.NewInformer(client, fields.OneTermNotEqualSelector("spec.nodeName", ""), &corev1.Pod{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) }, pods.Watch,
		cache.Indexers{nodeNameIndex: func(obj any) ([]string, error) { return []string{obj.(*corev1.Pod).Spec.NodeName}, nil }})
	nodes := client.CoreV1().Nodes()
	s.nodes = nodeagent.NewInformer(client, fields.Everything(), &corev1.Node{},
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return nodes.List(ctx, o) }, nodes.Watch, cache.Indexers{})
	_, _ = s.pods.AddEventHandler(s.podHandlers.handler(func(obj any) string { return obj.(*corev1.Pod).Spec.NodeName }))
	_, _ = s.nodes.AddEventHandler(s.nodeHandlers.handler(func(obj any) string { return obj.(*corev1.Node).Name }))
	return s
}

// Run runs both informers until ctx ends.
func (s *SharedInformers) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.pods.RunWithContext(ctx) }()
	go func() { defer wg.Done(); s.nodes.RunWithContext(ctx) }()
	wg.Wait()
}

// Nodes implements nodeagent.SharedInformers.
func (s *SharedInformers) Nodes() cache.Indexer { return s.nodes.GetIndexer() }

// HasSynced implements nodeagent.SharedInformers.
func (s *SharedInformers) HasSynced() bool { return s.pods.HasSynced() && s.nodes.HasSynced() }

// AddPodHandler implements nodeagent.SharedInformers.
func (s *SharedInformers) AddPodHandler(nodeName string, h cache.ResourceEventHandler) func() {
	return s.podHandlers.add(nodeName, h, func() []any {
		objs, _ := s.pods.GetIndexer().ByIndex(nodeNameIndex, nodeName)
		return objs
	})
}

// AddNodeHandler implements nodeagent.SharedInformers.
func (s *SharedInformers) AddNodeHandler(nodeName string, h cache.ResourceEventHandler) func() {
	return s.nodeHandlers.add(nodeName, h, func() []any {
		obj, ok, _ := s.nodes.GetIndexer().GetByKey(nodeName)
		if !ok {
			return nil
		}
		return []any{obj}
	})
}

// dispatcher routes an informer's events to the handler of the node each
// object belongs to.
type dispatcher struct {
	mu sync.RWMutex
	// handlers are pointers so that a removal can tell its own
	// registration from a newer one for the same node.
	handlers map[string]*cache.ResourceEventHandler
}

// add registers h for nodeName and replays the objects already known as
// adds, holding off events meanwhile so that h misses none. An event still
// in flight for a replayed object then arrives as an update with the same
// state, which agents ignore.
func (d *dispatcher) add(nodeName string, h cache.ResourceEventHandler, existing func() []any) func() {
	d.mu.Lock()
	reg := &h
	d.handlers[nodeName] = reg
	for _, obj := range existing() {
		h.OnAdd(obj, true)
	}
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.handlers[nodeName] == reg {
			delete(d.handlers, nodeName)
		}
	}
}

func (d *dispatcher) get(nodeName string) cache.ResourceEventHandler {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if reg := d.handlers[nodeName]; reg != nil {
		return *reg
	}
	return nil
}

func (d *dispatcher) handler(nodeOf func(obj any) string) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if h := d.get(nodeOf(obj)); h != nil {
				h.OnAdd(obj, initial)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			if h := d.get(nodeOf(obj)); h != nil {
				h.OnUpdate(oldObj, obj)
			}
		},
		DeleteFunc: func(obj any) {
			target := obj
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				target = tomb.Obj
			}
			if h := d.get(nodeOf(target)); h != nil {
				h.OnDelete(obj)
			}
		},
	}
}
