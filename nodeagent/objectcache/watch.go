package objectcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

const (
	// minIdleTime is the shortest time a watch may go unread before the
	// recycler closes it, whatever the sync frequency.
	minIdleTime = time.Minute
	// syncTimeout is how long a read waits for a watch that has not yet
	// listed its object: the kubelet's second, after which the pod's sync
	// fails and is retried. It is real time, not the Clock's: it bounds the
	// API server's latency, which emulated time does not slow.
	syncTimeout = time.Second
	// syncPoll is how often such a read looks again.
	syncPoll = 10 * time.Millisecond
)

// errSyncTimeout is the end of the kubelet's message for a watch that has
// not listed in time: failed to sync configmap cache: timed out waiting for
// the condition.
var errSyncTimeout = errors.New("timed out waiting for the condition")

// objectWatches is the Watch strategy's objects of one kind: a reflector
// per referenced object, each on its own single-object watch, kept while a
// registered pod refers to the object. It mirrors objectCache in
// pkg/kubelet/util/manager/watch_based_manager.go.
type objectWatches struct {
	groupResource schema.GroupResource
	newObject     func() runtime.Object
	isImmutable   func(runtime.Object) bool
	list          func(ctx context.Context, namespace string, o metav1.ListOptions) (runtime.Object, error)
	watch         func(ctx context.Context, namespace string, o metav1.ListOptions) (watch.Interface, error)
	client        kubernetes.Interface
	clock         clock.PassiveClock
	maxIdleTime   time.Duration
	// syncTimeout is the package's, but for tests that wait less.
	syncTimeout time.Duration
	// reflectors is the Cache's count of running reflector goroutines.
	reflectors *sync.WaitGroup

	// mu guards items and stopped; a reflector goroutine is only started
	// with it held and stopped unset, so that once shutdown has set it no
	// goroutine is added to those Run waits for.
	mu      sync.RWMutex
	items   map[key]*watchedObject
	stopped bool
}

// newWatches returns the Cache's watches of one kind.
func (c *Cache) newWatches(gr schema.GroupResource, newObject func() runtime.Object, isImmutable func(runtime.Object) bool,
	list func(context.Context, string, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, string, metav1.ListOptions) (watch.Interface, error)) *objectWatches {
	// The kubelet closes the watches no read has used for five sync periods
	// (NewWatchBasedManager): a volume's objects are read on every sync.
	return &objectWatches{
		groupResource: gr,
		newObject:     newObject,
		isImmutable:   isImmutable,
		list:          list,
		watch:         watchFn,
		client:        c.cfg.Client,
		clock:         c.cfg.Clock,
		maxIdleTime:   max(5*c.cfg.SyncFrequency, minIdleTime),
		syncTimeout:   syncTimeout,
		reflectors:    &c.reflectors,
		items:         map[key]*watchedObject{},
	}
}

// watchedObject is one object's reflector, its store, and the pods that
// refer to it. It mirrors objectCacheItem in watch_based_manager.go.
type watchedObject struct {
	refs      map[types.UID]int
	store     *syncedStore
	reflector *cache.Reflector
	// running is held while the reflector runs, so that one restarted
	// after idling does not run before the stopped run has returned.
	running sync.Mutex

	// mu guards the fields below, and that stopCh is closed once.
	mu         sync.Mutex
	lastAccess time.Time
	stopped    bool
	immutable  bool
	stopCh     chan struct{}
}

// syncedStore is a reflector's store that says whether it has listed since
// the reflector last started: a read waits for that rather than serve what
// a stopped watch last saw.
type syncedStore struct {
	cache.Store
	mu          sync.Mutex
	initialized bool
}

// Replace implements cache.Store; a reflector calls it once it has listed.
func (s *syncedStore) Replace(list []any, resourceVersion string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.Store.Replace(list, resourceVersion); err != nil {
		return err
	}
	s.initialized = true
	return nil
}

func (s *syncedStore) hasSynced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.initialized
}

func (s *syncedStore) unsetInitialized() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initialized = false
}

// stop closes the object's watch, and reports whether it was open. The
// store of an immutable object stays synced: its last copy is final.
func (o *watchedObject) stop() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stopLocked()
}

func (o *watchedObject) stopLocked() bool {
	if o.stopped {
		return false
	}
	o.stopped = true
	close(o.stopCh)
	if !o.immutable {
		o.store.unsetInitialized()
	}
	return true
}

func (o *watchedObject) setLastAccess(t time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lastAccess = t
}

func (o *watchedObject) setImmutable() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.immutable = true
}

// stopIfIdle closes the watch if no read has used it for maxIdleTime. A
// watch that has not listed yet is left alone: against an overloaded API
// server, its list may be under way, and would have to start over.
func (o *watchedObject) stopIfIdle(now time.Time, maxIdleTime time.Duration) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.stopped && o.store.hasSynced() && now.After(o.lastAccess.Add(maxIdleTime)) {
		return o.stopLocked()
	}
	return false
}

// restartIfNeeded reopens a watch the recycler closed; an immutable
// object's stays closed. w.mu is held, for reading at least, and w.stopped
// unset.
func (w *objectWatches) restartIfNeeded(o *watchedObject) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.immutable || !o.stopped {
		return
	}
	o.stopCh = make(chan struct{})
	o.stopped = false
	w.startLocked(o, o.stopCh)
}

// startLocked runs o's reflector until stopCh closes; w.mu is held, for
// reading at least, and w.stopped unset.
func (w *objectWatches) startLocked(o *watchedObject, stopCh <-chan struct{}) {
	w.reflectors.Add(1)
	go func() {
		defer w.reflectors.Done()
		o.running.Lock()
		defer o.running.Unlock()
		o.reflector.Run(stopCh)
	}()
}

// newObjectLocked is the watch of one object: a reflector on a list and
// watch of its namespace that the field selector metadata.name=<name>
// narrows to it, through the watch-list wrapper the agent's informers use.
// It is started unless the Cache has shut down. w.mu is held.
func (w *objectWatches) newObjectLocked(namespace, name string) *watchedObject {
	selector := fields.Set{metav1.ObjectNameField: name}.AsSelector().String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return w.list(ctx, namespace, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return w.watch(ctx, namespace, o)
		},
	}
	store := &syncedStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	reflector := cache.NewReflectorWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, w.client), w.newObject(), store,
		cache.ReflectorOptions{
			Name: fmt.Sprintf("object-%q/%q", namespace, name),
			// As the kubelet does, above the default 5 min, so that
			// thousands of single-object watches are not renewed as often.
			MinWatchTimeout: 30 * time.Minute,
		})
	o := &watchedObject{
		refs:      map[types.UID]int{},
		store:     store,
		reflector: reflector,
		stopCh:    make(chan struct{}),
	}
	if !w.stopped {
		w.startLocked(o, o.stopCh)
	}
	return o
}

// AddReference implements references: the first reference to an object
// opens its watch. It does not wait for the watch to list; the first read
// does.
func (w *objectWatches) AddReference(namespace, name string, from types.UID) {
	k := key{namespace, name}
	w.mu.Lock()
	defer w.mu.Unlock()
	o, ok := w.items[k]
	if !ok {
		o = w.newObjectLocked(namespace, name)
		w.items[k] = o
	}
	o.refs[from]++
}

// DeleteReference implements references: the last reference to an object
// closes its watch.
func (w *objectWatches) DeleteReference(namespace, name string, from types.UID) {
	k := key{namespace, name}
	w.mu.Lock()
	defer w.mu.Unlock()
	o, ok := w.items[k]
	if !ok {
		return
	}
	if o.refs[from]--; o.refs[from] <= 0 {
		delete(o.refs, from)
	}
	if len(o.refs) == 0 {
		o.stop()
		delete(w.items, k)
	}
}

// get is the object as its watch last saw it. A read of an object whose
// watch has not listed waits for it, up to syncTimeout, as the kubelet's
// does; a read of an object its watch has seen immutable closes the watch
// and keeps serving that copy. It mirrors objectCache.Get in
// watch_based_manager.go.
func (w *objectWatches) get(ctx context.Context, namespace, name string) (runtime.Object, error) {
	k := key{namespace, name}
	w.mu.RLock()
	o, ok := w.items[k]
	w.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("object %q/%q %w", namespace, name, ErrNotRegistered)
	}
	// Recorded whether or not the read succeeds, so that the recycler does
	// not close a watch a read is waiting on.
	o.setLastAccess(w.clock.Now())
	w.mu.RLock()
	if !w.stopped {
		w.restartIfNeeded(o)
	}
	w.mu.RUnlock()

	err := wait.PollUntilContextTimeout(ctx, syncPoll, w.syncTimeout, true, func(context.Context) (bool, error) {
		return o.store.hasSynced(), nil
	})
	if err != nil {
		if ctx.Err() == nil {
			err = errSyncTimeout
		}
		return nil, fmt.Errorf("failed to sync %s cache: %w", w.groupResource, err)
	}
	item, exists, err := o.store.GetByKey(cacheKey(namespace, name))
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, apierrors.NewNotFound(w.groupResource, name)
	}
	obj, ok := item.(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("unexpected object type: %v", item)
	}
	// The kubelet starts the watch of an object immutable from the start
	// too, and closes it here: an object may become immutable later, and a
	// watch that lists once costs little more than a GET.
	if w.isImmutable(obj) {
		o.setImmutable()
		if o.stop() {
			klog.FromContext(ctx).V(4).Info("Stopped watching for changes - object is immutable", "obj", klog.KRef(namespace, name))
		}
	}
	return obj, nil
}

// cacheKey is the store key of an object, as cache.MetaNamespaceKeyFunc
// makes it.
func cacheKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// recycleIdle closes the watches no read has used for maxIdleTime. It
// mirrors objectCache.startRecycleIdleWatch in watch_based_manager.go.
func (w *objectWatches) recycleIdle(ctx context.Context) {
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, o := range w.items {
		if o.stopIfIdle(now, w.maxIdleTime) {
			klog.FromContext(ctx).V(4).Info("Not acquired for long time, Stopped watching for changes",
				"objectKey", klog.KRef(k.namespace, k.name), "maxIdleTime", w.maxIdleTime)
		}
	}
}

// shutdown closes every watch, and keeps any from opening again. It
// mirrors objectCache.shutdownWhenStopped in watch_based_manager.go.
func (w *objectWatches) shutdown() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	for _, o := range w.items {
		o.stop()
	}
}
