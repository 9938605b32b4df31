// Package watchers is one node's watches of the objects a kubelet keeps
// beside its pods and its Node: Services for service links, RuntimeClasses,
// CSIDrivers and the node's PodCertificateRequests. Each is a watch stream of
// the node's own, with the kubelet's selectors, because the streams are what
// the API server pays for; the objects the streams deliver are interned
// fleet-wide, so that 2,000 nodes watching 1,000 Services hold 1,000 decoded
// Services, not 2,000,000.
package watchers

import (
	"runtime"
	"strings"
	"sync"
	"weak"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Object is the pointer type of an API object: *corev1.Service for E =
// corev1.Service.
type Object[E any] interface {
	*E
	metav1.Object
}

// ident is one version of one object: the same UID at the same
// resourceVersion is the same content, whichever watch stream brought it.
type ident struct {
	uid types.UID
	rv  string
}

// An Interner hands out one copy of each version of an object to every store
// that holds it. It keeps no object alive: its entries are weak, and an entry
// is dropped once no store holds its object any more. The zero value is
// ready to use; an Interner is safe for concurrent use.
//
// Interned objects are shared and must not be changed, which is the rule for
// informer caches already.
type Interner[E any, P Object[E]] struct {
	mu sync.Mutex
	m  map[ident]weak.Pointer[E]
}

// Intern returns the copy of obj's version already held by some store, or
// obj itself, made the held copy. Objects without a UID or resourceVersion
// (none that the API server sends) are returned as they are. managedFields
// are dropped from every held copy, as kube-proxy's informers drop them: no
// part of an agent reads them, and they are often the larger part of a small
// object.
func (in *Interner[E, P]) Intern(obj P) P {
	uid, rv := obj.GetUID(), obj.GetResourceVersion()
	if uid == "" || rv == "" {
		return obj
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.m == nil {
		in.m = map[ident]weak.Pointer[E]{}
	}
	// The key is copied, so that the cleanup below holds nothing that
	// points into the object it waits for.
	k := ident{uid: types.UID(strings.Clone(string(uid))), rv: strings.Clone(rv)}
	if held := in.m[k].Value(); held != nil {
		return P(held)
	}
	obj.SetManagedFields(nil)
	in.m[k] = weak.Make((*E)(obj))
	runtime.AddCleanup((*E)(obj), in.forget, k)
	return obj
}

// forget drops k's entry once its object is gone. A later version of the
// same ident (the object collected, then delivered again) has its own live
// entry, which stays.
func (in *Interner[E, P]) forget(k ident) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.m[k].Value() == nil {
		delete(in.m, k)
	}
}

// Len is the number of versions held by some store.
func (in *Interner[E, P]) Len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.m)
}
