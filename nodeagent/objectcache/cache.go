// Package objectcache is the kubelet's ConfigMap and Secret managers with
// its cache-based change-detection strategy: an object a pod refers to is
// fetched from the API server and reused until it is older than a TTL.
//
// The kubelet's default strategy is Watch (one single-object watch per
// referenced object). The cache-based strategy is the kubelet's other
// supported mode; it costs the API server GETs instead of long-lived watches,
// which keeps thousands of emulated nodes from multiplying watches that the
// pods' objects (kube-root-ca.crt above all) would otherwise each open.
package objectcache

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// DefaultTTL is how long the kubelet reuses a fetched object when its Node
// carries no node.alpha.kubernetes.io/ttl annotation.
const DefaultTTL = time.Minute

// Config wires a Cache.
type Config struct {
	Client kubernetes.Interface
	Clock  clock.PassiveClock
	// TTL is how long a fetched object is reused; 0 means DefaultTTL.
	TTL time.Duration
}

type key struct{ namespace, name string }

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
}

// Cache serves one node's ConfigMaps and Secrets.
type Cache struct {
	cfg        Config
	inflight   singleflight.Group
	configMaps store[*corev1.ConfigMap]
	secrets    store[*corev1.Secret]
}

// New returns an empty Cache.
func New(cfg Config) *Cache {
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	return &Cache{cfg: cfg}
}

// ConfigMap returns the named ConfigMap, from the cache while it is fresh.
// Errors are the API server's, so callers can tell NotFound apart.
func (c *Cache) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	return get(ctx, c, &c.configMaps, "configmap", key{namespace, name}, func(ctx context.Context) (*corev1.ConfigMap, error) {
		cm, err := c.cfg.Client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		return cm, notFound(err, "configmap", name)
	})
}

// Secret returns the named Secret, from the cache while it is fresh.
func (c *Cache) Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	return get(ctx, c, &c.secrets, "secret", key{namespace, name}, func(ctx context.Context) (*corev1.Secret, error) {
		s, err := c.cfg.Client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		return s, notFound(err, "secret", name)
	})
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
	s.mu.Unlock()
	if ok && now.Sub(e.fetched) < c.cfg.TTL {
		return e.object, nil
	}
	// Pods created together ask for the same objects together; one GET
	// answers them all.
	v, err, _ := c.inflight.Do(kind+"/"+k.namespace+"/"+k.name, func() (any, error) {
		obj, err := fetch(ctx)
		if err != nil {
			return obj, err
		}
		s.put(k, entry[T]{object: obj, fetched: c.cfg.Clock.Now()}, c.cfg.TTL)
		return obj, nil
	})
	return v.(T), err
}

func (s *store[T]) put(k key, e entry[T], ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
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
