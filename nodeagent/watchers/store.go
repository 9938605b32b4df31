package watchers

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

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
//
// The objects are held in a slice sorted by namespace and name, not a map:
// they are interned, so each carries its own key, and a slot is the 8 bytes
// of its pointer where a map of 1,000 keyed by 8-byte handles took some
// 40 KiB (its groups' slots, control words and load factor) for every node.
// A lookup is a binary search; an add or a delete moves the slots after it,
// a few microseconds at 10,000 objects, and watch events of these kinds are
// rare next to the reads of the whole set that service links make.
type Store[E any, P Object[E]] struct {
	interner *Interner[E, P]

	mu     sync.RWMutex
	items  []P
	synced atomic.Bool
}

// NewStore returns an empty store whose objects are interned by interner;
// nil gives the store an interner of its own.
func NewStore[E any, P Object[E]](interner *Interner[E, P]) *Store[E, P] {
	if interner == nil {
		interner = &Interner[E, P]{}
	}
	return &Store[E, P]{interner: interner}
}

func keyOf(obj metav1.Object) string {
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + obj.GetName()
	}
	return obj.GetName()
}

// splitKey is keyOf undone: "name" is a cluster-scoped object's key.
func splitKey(key string) (namespace, name string) {
	if ns, n, ok := strings.Cut(key, "/"); ok {
		return ns, n
	}
	return "", key
}

// compareTo orders an object against a namespace and name: the store's
// order.
func compareTo(obj metav1.Object, namespace, name string) int {
	return cmp.Or(strings.Compare(obj.GetNamespace(), namespace), strings.Compare(obj.GetName(), name))
}

// find is where the object namespace/name is, or would be, in s.items, and
// whether it is there; s.mu held.
func (s *Store[E, P]) find(namespace, name string) (int, bool) {
	return slices.BinarySearchFunc(s.items, [2]string{namespace, name}, func(p P, key [2]string) int {
		return compareTo(p, key[0], key[1])
	})
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
	p = s.interner.Intern(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.find(p.GetNamespace(), p.GetName()); ok {
		s.items[i] = p
	} else {
		s.items = slices.Insert(s.items, i, p)
	}
	return nil
}

// Delete implements cache.ReflectorStore.
func (s *Store[E, P]) Delete(obj any) error {
	p, err := s.object(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.find(p.GetNamespace(), p.GetName()); ok {
		s.items = slices.Delete(s.items, i, i+1)
	}
	return nil
}

// Replace implements cache.ReflectorStore: the reflector's list, or the end
// of a watch-list's initial events, is the whole set. Should the list name
// an object twice, the later copy is kept, as a map keyed by it would.
func (s *Store[E, P]) Replace(list []any, _ string) error {
	items := make([]P, 0, len(list))
	for _, obj := range list {
		p, err := s.object(obj)
		if err != nil {
			return err
		}
		items = append(items, s.interner.Intern(p))
	}
	slices.SortStableFunc(items, func(a, b P) int { return compareTo(a, b.GetNamespace(), b.GetName()) })
	kept := items[:0]
	for i, p := range items {
		if i+1 < len(items) && compareTo(items[i+1], p.GetNamespace(), p.GetName()) == 0 {
			continue
		}
		kept = append(kept, p)
	}
	items = kept
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
	namespace, name := splitKey(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if i, ok := s.find(namespace, name); ok {
		return s.items[i]
	}
	return nil
}

// List returns every object held, ordered by namespace and name. The
// objects are shared: do not change them.
func (s *Store[E, P]) List() []P {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.items)
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
