package watchers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/internal/testutil"
)

func service(ns, name, uid, rv string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID(uid), ResourceVersion: rv,
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.1"},
	}
}

func TestStoresShareOneCopyOfEachVersion(t *testing.T) {
	var in Interner[corev1.Service, *corev1.Service]
	a, b := NewStore(&in), NewStore(&in)
	// Two watch streams decode the same version into two objects.
	if err := a.Add(service("ns", "web", "u1", "5")); err != nil {
		t.Fatal(err)
	}
	if err := b.Add(service("ns", "web", "u1", "5")); err != nil {
		t.Fatal(err)
	}
	if a.Get("ns/web") != b.Get("ns/web") {
		t.Fatal("two stores of the same version hold two copies")
	}
	if got := a.Get("ns/web").ManagedFields; got != nil {
		t.Errorf("managedFields kept: %v", got)
	}
	// A new version in one store is a new object, not shared with the
	// store that still holds the old one.
	if err := a.Update(service("ns", "web", "u1", "6")); err != nil {
		t.Fatal(err)
	}
	if a.Get("ns/web").ResourceVersion != "6" || b.Get("ns/web").ResourceVersion != "5" {
		t.Fatalf("versions: a %s, b %s", a.Get("ns/web").ResourceVersion, b.Get("ns/web").ResourceVersion)
	}
	if in.Len() != 2 {
		t.Errorf("interner holds %d versions, want 2", in.Len())
	}
}

func TestInternerForgetsVersionsNoStoreHolds(t *testing.T) {
	var in Interner[corev1.Service, *corev1.Service]
	s := NewStore(&in)
	for i := range 100 {
		if err := s.Add(service("ns", fmt.Sprint("svc-", i), fmt.Sprint("u", i), "1")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Replace(nil, "2"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the interner drops the versions no store holds", func() bool {
		runtime.GC()
		return in.Len() == 0
	})
}

func TestReplaceIsTheWholeSet(t *testing.T) {
	s := NewStore[corev1.Service](nil)
	for _, name := range []string{"a", "b", "c"} {
		if err := s.Add(service("ns", name, "u-"+name, "1")); err != nil {
			t.Fatal(err)
		}
	}
	if s.HasSynced() {
		t.Fatal("synced before any list")
	}
	if err := s.Replace([]any{service("ns", "b", "u-b", "2"), service("other", "d", "u-d", "2")}, "2"); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, p := range s.List() {
		keys = append(keys, keyOf(p))
	}
	sort.Strings(keys)
	if fmt.Sprint(keys) != "[ns/b other/d]" || !s.HasSynced() {
		t.Fatalf("after Replace: %v, synced %v", keys, s.HasSynced())
	}
	if err := s.Delete(service("other", "d", "u-d", "3")); err != nil {
		t.Fatal(err)
	}
	if s.Get("other/d") != nil || s.Len() != 1 {
		t.Errorf("delete left %d objects", s.Len())
	}
}

// TestStoreAgreesWithAMap applies a seeded run of adds, updates and deletes
// of namespaced and cluster-scoped keys to a store and to a map keyed as an
// informer's cache is, and holds the store to the map after every step:
// the same objects under the same keys, listed in the store's order.
func TestStoreAgreesWithAMap(t *testing.T) {
	s := NewStore[corev1.Service](nil)
	want := map[string]*corev1.Service{}
	rng := rand.New(rand.NewPCG(1, 2))
	namespaces := []string{"", "a", "a-b", "b", "kube-system"}
	for step := range 2000 {
		ns := namespaces[rng.IntN(len(namespaces))]
		name := fmt.Sprint("svc-", rng.IntN(40))
		obj := service(ns, name, "u-"+ns+"-"+name, fmt.Sprint(step+1))
		key := keyOf(obj)
		var err error
		switch op := rng.IntN(10); {
		case op < 6:
			err = s.Add(obj)
			want[key] = obj
		case op < 8:
			err = s.Update(obj)
			want[key] = obj
		case op < 9:
			err = s.Delete(cache.DeletedFinalStateUnknown{Key: key, Obj: obj})
			delete(want, key)
		default:
			// A relist: the map's objects in no order, and one of
			// them again at the end, newer (the later copy wins).
			list := []any{}
			for _, o := range want {
				list = append(list, o)
			}
			rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
			if len(list) > 0 {
				again := list[0].(*corev1.Service).DeepCopy()
				again.ResourceVersion = fmt.Sprint("relisted-", step)
				list = append(list, again)
				want[keyOf(again)] = again
			}
			err = s.Replace(list, "")
		}
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if s.Len() != len(want) {
			t.Fatalf("step %d: %d objects held, want %d", step, s.Len(), len(want))
		}
		for k, o := range want {
			if got := s.Get(k); got == nil || got.ResourceVersion != o.ResourceVersion {
				t.Fatalf("step %d: Get(%q) = %v, want resourceVersion %s", step, k, got, o.ResourceVersion)
			}
		}
		listed := s.List()
		if !slices.IsSortedFunc(listed, func(a, b *corev1.Service) int { return compareTo(a, b.Namespace, b.Name) }) {
			t.Fatalf("step %d: List is out of order", step)
		}
	}
	if s.Get("a/none") != nil || s.Get("none") != nil {
		t.Error("Get of a key never added found an object")
	}
}

// TestKubeletWatchesWithTheKubeletsSelectors opens a node's four watches on
// the fake clientset and checks each list's selectors, as the API server
// would see them.
func TestKubeletWatchesWithTheKubeletsSelectors(t *testing.T) {
	client := fake.NewClientset(
		service("default", "kubernetes", "u-k", "1"),
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor", UID: "u-rc", ResourceVersion: "1"}, Handler: "runsc"},
		&certificatesv1.PodCertificateRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pcr", UID: "u-p", ResourceVersion: "1"}},
	)
	k := NewKubelet(Config{NodeName: "node-1", Client: client})
	ctx, cancel := context.WithCancel(context.Background())
	if err := k.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the four watches list", k.HasSynced)
	cancel()
	k.Wait()

	want := map[string]string{
		"services":               "spec.clusterIP!=None",
		"runtimeclasses":         "",
		"csidrivers":             "",
		"podcertificaterequests": "spec.nodeName=node-1",
	}
	got := map[string]string{}
	for _, a := range client.Actions() {
		if l, ok := a.(k8stesting.ListAction); ok && a.GetVerb() == "list" {
			got[a.GetResource().Resource] = l.GetListRestrictions().Fields.String()
		}
	}
	for res, sel := range want {
		if s, ok := got[res]; !ok || s != sel {
			t.Errorf("list of %s: field selector %q (listed: %v), want %q", res, s, ok, sel)
		}
	}

	if services := k.Services.Store.List(); len(services) != 1 {
		t.Fatalf("%d Services held, want 1", len(services))
	}
	if h, err := k.RuntimeHandler(ptr.To("gvisor")); h != "runsc" || err != nil {
		t.Errorf("RuntimeHandler(gvisor) = %q, %v", h, err)
	}
	if h, err := k.RuntimeHandler(nil); h != "" || err != nil {
		t.Errorf("RuntimeHandler(nil) = %q, %v", h, err)
	}
	if _, err := k.RuntimeHandler(ptr.To("kata")); !apierrors.IsNotFound(err) {
		t.Errorf("RuntimeHandler(kata): %v, want NotFound", err)
	}
}

// BenchmarkStoreOfAThousandServices is the heap a node pays for its copy of
// 1,000 Services another node already holds: its map and nothing else.
func BenchmarkStoreOfAThousandServices(b *testing.B) {
	var in Interner[corev1.Service, *corev1.Service]
	first := NewStore(&in)
	for i := range 1000 {
		_ = first.Add(service("ns", fmt.Sprint("svc-", i), fmt.Sprint("u", i), "1"))
	}
	var stores []*Store[corev1.Service, *corev1.Service]
	b.ResetTimer()
	for range b.N {
		s := NewStore(&in)
		objs := make([]any, 0, 1000)
		for i := range 1000 {
			objs = append(objs, service("ns", fmt.Sprint("svc-", i), fmt.Sprint("u", i), "1"))
		}
		_ = s.Replace(objs, "1")
		stores = append(stores, s)
	}
	b.StopTimer()
	runtime.KeepAlive(stores)
}

func TestStoreHeapPerNode(t *testing.T) {
	var in Interner[corev1.Service, *corev1.Service]
	first := NewStore(&in)
	for i := range 1000 {
		_ = first.Add(service("ns", fmt.Sprint("svc-", i), fmt.Sprint("u", i), "1"))
	}
	const nodes = 50
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	stores := make([]*Store[corev1.Service, *corev1.Service], nodes)
	for n := range stores {
		s := NewStore(&in)
		objs := make([]any, 0, 1000)
		for i := range 1000 {
			objs = append(objs, service("ns", fmt.Sprint("svc-", i), fmt.Sprint("u", i), "1"))
		}
		_ = s.Replace(objs, "1")
		stores[n] = s
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perNode := (after.HeapAlloc - before.HeapAlloc) / nodes
	t.Logf("heap per node for 1,000 shared Services: %d KiB", perNode/1024)
	// The sorted slice of 1,000 pointers is 8 KiB; the map it replaced was
	// about 40 KiB, and an unshared copy of the Services would be several
	// hundred.
	if perNode > 12*1024 {
		t.Errorf("a node's store of 1,000 shared Services costs %d KiB of heap, want under 12", perNode/1024)
	}
	runtime.KeepAlive(stores)
	runtime.KeepAlive(first)
}
