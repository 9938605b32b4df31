// Package objectcache is the kubelet's ConfigMap and Secret managers, with
// the three change-detection strategies its
// configMapAndSecretChangeDetectionStrategy chooses between:
//
//   - Watch, the kubelet's default: each object a registered pod refers to
//     is watched on its own (one single-object watch per object per node,
//     shared by the node's pods) and read from what the watch brought, so
//     that an update reaches the node without a request;
//   - Cache: an object is fetched from the API server and reused until it is
//     older than a TTL, or until a pod that refers to it is registered;
//   - Get: every read is a GET.
//
// Watch costs the API server long-lived watches, Cache and Get cost it
// requests; a fleet of emulated nodes multiplies either by its size (the
// kube-root-ca.crt ConfigMap of every namespace above all), which is why the
// strategy is the node's to choose, as it is the kubelet's.
package objectcache

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
)

// DefaultTTL is how long the kubelet reuses a fetched object when its Node
// carries no node.alpha.kubernetes.io/ttl annotation.
const DefaultTTL = time.Minute

// DefaultSyncFrequency is the kubelet's default syncFrequency, from which
// the Watch strategy derives how long a watch may go unread.
const DefaultSyncFrequency = time.Minute

// ErrNotRegistered is the error, with the Watch strategy, of a read of an
// object that no registered pod refers to: the kubelet's watch-based
// managers refuse such reads rather than open a watch for an object no pod
// will release. Errors wrapping it read as the kubelet's do:
// object "ns"/"name" not registered.
var ErrNotRegistered = errors.New("not registered")

// Config wires a Cache.
type Config struct {
	Client kubernetes.Interface
	// Clock is the node's clock: the Cache strategy's TTL and the Watch
	// strategy's idle time are measured on it, and the Watch strategy's
	// recycler of idle watches ticks on it. nil means the real clock.
	Clock clock.WithTicker
	// Strategy is the kubelet's configMapAndSecretChangeDetectionStrategy.
	// Empty means Watch, the kubelet's default.
	Strategy kubeletconfig.ResourceChangeDetectionStrategy
	// TTL is how long the Cache strategy reuses a fetched object; 0 means
	// DefaultTTL.
	TTL time.Duration
	// SyncFrequency is the kubelet's syncFrequency; 0 means
	// DefaultSyncFrequency. The Watch strategy closes a watch that no read
	// has used for five sync periods (and never sooner than a minute), as
	// the kubelet does: a volume's objects are read on every sync of its pod,
	// so only the watches of objects read once, for environment variables,
	// are closed, and the next read reopens them.
	SyncFrequency time.Duration
}

// Validate reports a strategy the kubelet would refuse.
func (cfg Config) Validate() error {
	switch cfg.Strategy {
	case "", kubeletconfig.WatchChangeDetectionStrategy, kubeletconfig.TTLCacheChangeDetectionStrategy, kubeletconfig.GetChangeDetectionStrategy:
		return nil
	}
	return fmt.Errorf("objectcache: unknown configMapAndSecretChangeDetectionStrategy %q; use Watch, Cache or Get", cfg.Strategy)
}

type key struct{ namespace, name string }

// podKey is how registered pods are told apart, as the kubelet's
// cacheBasedManager keys them: a pod deleted and recreated under its name is
// another pod.
type podKey struct {
	namespace, name string
	uid             types.UID
}

type entry[T any] struct {
	object  T
	fetched time.Time
}

// store is one kind's entries. Failed fetches are not kept, so an object
// created after a pod that needs it is seen on the pod's next sync.
type store[T any] struct {
	mu      sync.Mutex
	entries map[key]entry[T]
	// pruneAt is the size at which expired entries are swept, so that the
	// map does not keep every name ever asked for.
	pruneAt int
	// epoch counts invalidations. A fetch begun before one does not keep
	// what it fetched, and a read after one does not join it, so that a pod
	// registered since reads the object as it is now.
	epoch uint64
}

// references is where a strategy keeps the references of registered pods
// to one kind's objects, as the kubelet's manager.Store interface does.
type references interface {
	AddReference(namespace, name string, from types.UID)
	DeleteReference(namespace, name string, from types.UID)
}

// Cache serves one node's ConfigMaps and Secrets with the strategy its
// Config names.
type Cache struct {
	cfg Config

	// The Cache strategy's entries.
	inflight   singleflight.Group
	configMaps store[*corev1.ConfigMap]
	secrets    store[*corev1.Secret]

	// The Watch strategy's watches, and the goroutines their reflectors
	// run in, which Run waits for.
	watchedConfigMaps *objectWatches
	watchedSecrets    *objectWatches
	reflectors        sync.WaitGroup

	// Registered pods, and where their references are kept; nil with the
	// Get strategy, which keeps none.
	configMapRefs, secretRefs references
	podsMu                    sync.Mutex
	pods                      map[podKey]*corev1.Pod
}

// New returns an empty Cache. It panics on a Config that Validate refuses:
// the caller validates its configuration first, as the node agent's does.
func New(cfg Config) *Cache {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	if cfg.Strategy == "" {
		cfg.Strategy = kubeletconfig.WatchChangeDetectionStrategy
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.SyncFrequency == 0 {
		cfg.SyncFrequency = DefaultSyncFrequency
	}
	c := &Cache{cfg: cfg, pods: map[podKey]*corev1.Pod{}}
	switch cfg.Strategy {
	case kubeletconfig.WatchChangeDetectionStrategy:
		c.watchedConfigMaps = c.newWatches(schema.GroupResource{Resource: "configmap"},
			func() runtime.Object { return &corev1.ConfigMap{} },
			func(o runtime.Object) bool {
				cm, ok := o.(*corev1.ConfigMap)
				return ok && cm.Immutable != nil && *cm.Immutable
			},
			func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
				return cfg.Client.CoreV1().ConfigMaps(ns).List(ctx, o)
			},
			func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
				return cfg.Client.CoreV1().ConfigMaps(ns).Watch(ctx, o)
			})
		c.watchedSecrets = c.newWatches(schema.GroupResource{Resource: "secret"},
			func() runtime.Object { return &corev1.Secret{} },
			func(o runtime.Object) bool {
				s, ok := o.(*corev1.Secret)
				return ok && s.Immutable != nil && *s.Immutable
			},
			func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
				return cfg.Client.CoreV1().Secrets(ns).List(ctx, o)
			},
			func(ctx context.Context, ns string, o metav1.ListOptions) (watch.Interface, error) {
				return cfg.Client.CoreV1().Secrets(ns).Watch(ctx, o)
			})
		c.configMapRefs, c.secretRefs = c.watchedConfigMaps, c.watchedSecrets
	case kubeletconfig.TTLCacheChangeDetectionStrategy:
		c.configMapRefs, c.secretRefs = invalidator[*corev1.ConfigMap]{&c.configMaps}, invalidator[*corev1.Secret]{&c.secrets}
	}
	return c
}

// Run runs the Watch strategy's recycler of idle watches, once a minute on
// the Clock as the kubelet's does, until ctx ends; it then stops every
// watch, and returns once every reflector goroutine has ended. The node
// agent runs it for its lifetime. With the Cache and Get strategies there is
// nothing to run, and Run just waits for ctx. Watches are opened by
// RegisterPod whether or not Run has begun; after Run has returned, none is
// opened again, and reads of the objects of pods registered since fail, as
// the kubelet's do once it is shutting down. Run is called once.
func (c *Cache) Run(ctx context.Context) {
	if c.watchedConfigMaps == nil {
		<-ctx.Done()
		return
	}
	ticker := c.cfg.Clock.NewTicker(time.Minute)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-ticker.C():
			c.watchedConfigMaps.recycleIdle(ctx)
			c.watchedSecrets.recycleIdle(ctx)
		}
	}
	ticker.Stop()
	c.watchedConfigMaps.shutdown()
	c.watchedSecrets.shutdown()
	c.reflectors.Wait()
}

// RegisterPod records the ConfigMaps and Secrets pod refers to, as the
// kubelet does for every pod it is given, before the pod's first sync reads
// them. With Watch it opens the watches of the objects no other registered
// pod refers to; with Cache it drops the cached copies, so that a new pod
// starts from the objects as they are now; with Get it does nothing.
// Registering a pod again (an update) applies only the change of its
// references, adding the new ones before dropping the old ones, so that an
// object it still refers to keeps its watch. RegisterPod does no I/O.
//
// It mirrors cacheBasedManager.RegisterPod in
// pkg/kubelet/util/manager/cache_based_manager.go.
func (c *Cache) RegisterPod(pod *corev1.Pod) {
	if c.configMapRefs == nil {
		return
	}
	configMaps, secrets := configMapNames(pod), secretNames(pod)
	c.podsMu.Lock()
	defer c.podsMu.Unlock()
	k := podKey{pod.Namespace, pod.Name, pod.UID}
	prev := c.pods[k]
	c.pods[k] = pod
	var prevConfigMaps, prevSecrets sets.Set[string]
	if prev != nil {
		prevConfigMaps, prevSecrets = configMapNames(prev), secretNames(prev)
	}
	moveReferences(c.configMapRefs, pod, configMaps, prevConfigMaps)
	moveReferences(c.secretRefs, pod, secrets, prevSecrets)
}

// moveReferences adds the references of names that prev (nil on the pod's
// first registration) lacked, then deletes those of prev that names lacks.
func moveReferences(refs references, pod *corev1.Pod, names, prev sets.Set[string]) {
	for name := range names {
		if !prev.Has(name) {
			refs.AddReference(pod.Namespace, name, pod.UID)
		}
	}
	for name := range prev {
		if !names.Has(name) {
			refs.DeleteReference(pod.Namespace, name, pod.UID)
		}
	}
}

// UnregisterPod drops the references of a pod registered before; with Watch
// it closes the watches that no other registered pod needs. Unregistering a
// pod that is not registered does nothing.
//
// It mirrors cacheBasedManager.UnregisterPod in
// pkg/kubelet/util/manager/cache_based_manager.go.
func (c *Cache) UnregisterPod(pod *corev1.Pod) {
	if c.configMapRefs == nil {
		return
	}
	c.podsMu.Lock()
	defer c.podsMu.Unlock()
	k := podKey{pod.Namespace, pod.Name, pod.UID}
	prev := c.pods[k]
	if prev == nil {
		return
	}
	delete(c.pods, k)
	moveReferences(c.configMapRefs, prev, nil, configMapNames(prev))
	moveReferences(c.secretRefs, prev, nil, secretNames(prev))
}

// ConfigMap returns the named ConfigMap by the Cache's strategy: from its
// watch (Watch), from the cache while it is fresh (Cache), or from a GET
// (Get). Errors are the API server's, so callers can tell NotFound apart.
// With Watch, a read whose watch has not yet listed waits for it for up to
// a second, as the kubelet's does, and an object no registered pod refers
// to is an error wrapping ErrNotRegistered, as it is the kubelet's: its
// watch-based managers serve only the objects of registered pods.
func (c *Cache) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	fetch := func(ctx context.Context) (*corev1.ConfigMap, error) {
		cm, err := c.cfg.Client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		return cm, notFound(err, "configmap", name)
	}
	switch c.cfg.Strategy {
	case kubeletconfig.WatchChangeDetectionStrategy:
		return watched[*corev1.ConfigMap](ctx, c.watchedConfigMaps, namespace, name)
	case kubeletconfig.GetChangeDetectionStrategy:
		return fetch(ctx)
	}
	return get(ctx, c, &c.configMaps, "configmap", key{namespace, name}, fetch)
}

// Secret returns the named Secret, as ConfigMap does a ConfigMap.
func (c *Cache) Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	fetch := func(ctx context.Context) (*corev1.Secret, error) {
		s, err := c.cfg.Client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		return s, notFound(err, "secret", name)
	}
	switch c.cfg.Strategy {
	case kubeletconfig.WatchChangeDetectionStrategy:
		return watched[*corev1.Secret](ctx, c.watchedSecrets, namespace, name)
	case kubeletconfig.GetChangeDetectionStrategy:
		return fetch(ctx)
	}
	return get(ctx, c, &c.secrets, "secret", key{namespace, name}, fetch)
}

// watched is w's copy of an object, of the type its reflector stores.
func watched[T runtime.Object](ctx context.Context, w *objectWatches, namespace, name string) (T, error) {
	var zero T
	obj, err := w.get(ctx, namespace, name)
	if err != nil {
		return zero, err
	}
	t, ok := obj.(T)
	if !ok {
		return zero, fmt.Errorf("unexpected object type: %v", obj)
	}
	return t, nil
}

// notFound restates a NotFound with the singular resource name the
// kubelet's managers use, so that FailedMount events and
// CreateContainerConfigError messages read as the kubelet's do:
// configmap "app-config" not found.
func notFound(err error, resource, name string) error {
	if apierrors.IsNotFound(err) {
		return apierrors.NewNotFound(schema.GroupResource{Resource: resource}, name)
	}
	return err
}

func get[T any](ctx context.Context, c *Cache, s *store[T], kind string, k key, fetch func(context.Context) (T, error)) (T, error) {
	now := c.cfg.Clock.Now()
	s.mu.Lock()
	e, ok := s.entries[k]
	epoch := s.epoch
	s.mu.Unlock()
	if ok && now.Sub(e.fetched) < c.cfg.TTL {
		return e.object, nil
	}
	// Pods created together ask for the same objects together; one GET
	// answers them all.
	v, err, _ := c.inflight.Do(kind+"/"+k.namespace+"/"+k.name+"/"+strconv.FormatUint(epoch, 10), func() (any, error) {
		obj, err := fetch(ctx)
		if err != nil {
			return obj, err
		}
		s.put(k, entry[T]{object: obj, fetched: c.cfg.Clock.Now()}, c.cfg.TTL, epoch)
		return obj, nil
	})
	return v.(T), err
}

// put keeps e unless an invalidation has come since its fetch began at
// epoch.
func (s *store[T]) put(k key, e entry[T], ttl time.Duration, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch != epoch {
		return
	}
	if s.entries == nil {
		s.entries = map[key]entry[T]{}
	}
	s.entries[k] = e
	if len(s.entries) < s.pruneAt {
		return
	}
	for k, old := range s.entries {
		if e.fetched.Sub(old.fetched) >= ttl {
			delete(s.entries, k)
		}
	}
	s.pruneAt = max(2*len(s.entries), 64)
}

// invalidator is the Cache strategy's references: a pod's registration
// drops the cached copies of the objects it newly refers to, as the
// kubelet's objectStore.AddReference does
// (pkg/kubelet/util/manager/cache_based_manager.go). Unlike the kubelet's,
// the store does not count references: it serves any object asked for, and
// sweeps entries by their age instead.
type invalidator[T any] struct{ s *store[T] }

func (i invalidator[T]) AddReference(namespace, name string, _ types.UID) {
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	delete(i.s.entries, key{namespace, name})
	i.s.epoch++
}

func (invalidator[T]) DeleteReference(string, string, types.UID) {}
