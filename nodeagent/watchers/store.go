package watchers

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Store is one node's copy of one watched set of objects, keyed as informer
// caches are ("namespace/name", or "name" for cluster-scoped objects). It is
// the ReflectorStore of the node's Watch: a reflector alone, not a shared
// informer, because the API server's cost is the same list and watch, and a
// fleet of thousands of nodes need not pay each informer's queue, processor
// and listeners for objects that only a lister reads.
type Store[E any, P Object[E]] struct {
	interner *Interner[E, P]

	mu sync.RWMutex
	// items are keyed by unique handles: 8 bytes each, and one copy of
	// each key string for the whole fleet, which a string interned by
	// value alone would not stay once the last handle was collected.
	items  map[unique.Handle[string]]P
	synced atomic.Bool
}

// NewStore returns an empty store whose objects are interned by interner;
// nil gives the store an interner of its own.
func NewStore[E any, P Object[E]](interner *Interner[E, P]) *Store[E, P] {
	if interner == nil {
		interner = &Interner[E, P]{}
	}
	return &Store[E, P]{interner: interner, items: map[unique.Handle[string]]P{}}
}

func keyOf(obj metav1.Object) string {
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + obj.GetName()
	}
	return obj.GetName()
}

func (s *Store[E, P]) object(obj any) (P, error) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	p, ok := obj.(P)
	if !ok {
		return nil, fmt.Errorf("watchers: store of %T got a %T", P(nil), obj)
	}
	return p, nil
}

// Add implements cache.ReflectorStore.
func (s *Store[E, P]) Add(obj any) error { return s.put(obj) }

// Update implements cache.ReflectorStore.
func (s *Store[E, P]) Update(obj any) error { return s.put(obj) }

func (s *Store[E, P]) put(obj any) error {
	p, err := s.object(obj)
	if err != nil {
		return err
	}
	key := unique.Make(keyOf(p))
	p = s.interner.Intern(p)
	s.mu.Lock()
	s.items[key] = p
	s.mu.Unlock()
	return nil
}

// Delete implements cache.ReflectorStore.
func (s *Store[E, P]) Delete(obj any) error {
	p, err := s.object(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.items, unique.Make(keyOf(p)))
	s.mu.Unlock()
	return nil
}

// Replace implements cache.ReflectorStore: the reflector's list, or the end
// of a watch-list's initial events, is the whole set.
func (s *Store[E, P]) Replace(list []any, _ string) error {
	items := make(map[unique.Handle[string]]P, len(list))
	for _, obj := range list {
		p, err := s.object(obj)
		if err != nil {
			return err
		}
		items[unique.Make(keyOf(p))] = s.interner.Intern(p)
	}
	s.mu.Lock()
	s.items = items
	s.mu.Unlock()
	s.synced.Store(true)
	return nil
}

// Resync implements cache.ReflectorStore; a store has nothing to resync.
func (s *Store[E, P]) Resync() error { return nil }

// HasSynced reports whether the store has held the whole set once.
func (s *Store[E, P]) HasSynced() bool { return s.synced.Load() }

// Get returns the object with the given key, or nil.
func (s *Store[E, P]) Get(key string) P {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.items[unique.Make(key)]
}

// List returns every object held, in no order. The objects are shared: do
// not change them.
func (s *Store[E, P]) List() []P {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]P, 0, len(s.items))
	for _, p := range s.items {
		out = append(out, p)
	}
	return out
}

// Len is the number of objects held.
func (s *Store[E, P]) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.items)
}

// Selectors are a watch's list options, as the kubelet's informer factories
// tweak them.
type Selectors struct {
	Field fields.Selector
	Label labels.Selector
}

func (sel Selectors) apply(o *metav1.ListOptions) {
	if sel.Field != nil && !sel.Field.Empty() {
		o.FieldSelector = sel.Field.String()
	}
	if sel.Label != nil && !sel.Label.Empty() {
		o.LabelSelector = sel.Label.String()
	}
}

// ListWatch is a ListerWatcher with sel applied to every request. It
// carries client, so that clients without watch-list streaming (the fake
// clientset in tests) fall back to list and watch, as informers do.
func ListWatch(client kubernetes.Interface, sel Selectors,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.ListerWatcher {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			sel.apply(&o)
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			sel.apply(&o)
			return watchFn(ctx, o)
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, client)
}

// Watch is one list and watch of the node's, filling a Store: a reflector
// running from Start until its context ends. It is one of the agent's
// runnables.
type Watch[E any, P Object[E]] struct {
	Store     *Store[E, P]
	reflector *cache.Reflector
	done      chan struct{}
}

// NewWatch returns a watch of lw's objects into a new store that interns
// through interner (nil: an interner of its own). name names the reflector
// in logs ("node-1/services").
func NewWatch[E any, P Object[E]](name string, lw cache.ListerWatcher, interner *Interner[E, P], clk clock.Clock) *Watch[E, P] {
	store := NewStore(interner)
	var zero E
	r := cache.NewReflectorWithOptions(lw, P(&zero), store, cache.ReflectorOptions{Name: name, Clock: clk})
	return &Watch[E, P]{Store: store, reflector: r, done: make(chan struct{})}
}

// Start runs the reflector in a goroutine until ctx ends: it lists, watches,
// and relists with the reflector's back-off after errors, as an informer's
// reflector does.
func (w *Watch[E, P]) Start(ctx context.Context) error {
	go func() {
		defer close(w.done)
		w.reflector.RunWithContext(ctx)
	}()
	return nil
}

// Wait returns once the reflector has stopped.
func (w *Watch[E, P]) Wait() { <-w.done }

// HasSynced reports whether the watch has listed once.
func (w *Watch[E, P]) HasSynced() bool { return w.Store.HasSynced() }
