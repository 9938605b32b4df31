package proxy

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	testingclock "k8s.io/utils/clock/testing"
)

// The cluster of the memory budget: 1,000 Services and a slice each.
const (
	clusterServices = 1000
	// perProxyBudget is the most that each proxy beyond the first, of
	// proxies holding that cluster, may cost; the strings they share are
	// paid once, by the first. It was 400 KiB while each proxy held its own
	// keys and resource versions (it then held 229 KiB); with them
	// interned a proxy held 77 KiB (Go 1.26), nearly all of it the slots
	// of its two Go maps, and with sorted slices for maps (keyed) 37 KiB:
	// 2,000 proxies take some 75 MiB.
	perProxyBudget = 48 << 10
)

// clusterObjects makes the cluster's Services and EndpointSlices with what
// the API server sends: managed fields, owner references, three endpoints a
// slice.
func clusterObjects() []any {
	objs := make([]any, 0, 2*clusterServices)
	managed := []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{}}}`)}}}
	for i := range clusterServices {
		name := fmt.Sprintf("svc-%04d", i)
		ip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "load-test", Name: name, ResourceVersion: fmt.Sprint(100000 + i),
				UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i)), Labels: map[string]string{"app": name},
				ManagedFields: managed},
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
				IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, Selector: map[string]string{"app": name},
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
					{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443}},
			},
		}
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "load-test", Name: name + "-x7k2p", ResourceVersion: fmt.Sprint(200000 + i),
				Labels:      map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"},
				Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: t0.Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano)},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: name, UID: svc.UID,
					Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
				ManagedFields: managed},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)},
				{Name: ptr.To("https"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8443)}},
		}
		for j := range 3 {
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 64+j, i/250, i%250+1)},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
				NodeName:   ptr.To(fmt.Sprintf("node-%d", (i+j)%2000)),
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "load-test", Name: fmt.Sprintf("%s-pod-%d", name, j)},
			})
		}
		objs = append(objs, svc, slice)
	}
	return objs
}

// feedCluster lists the cluster's objects to p, as its watches would:
// Services, then slices.
func feedCluster(t testing.TB, p *Proxy, objs []any) {
	var svcs, slices []any
	for _, o := range objs {
		if _, ok := o.(*corev1.Service); ok {
			svcs = append(svcs, o)
		} else {
			slices = append(slices, o)
		}
	}
	must(t, p.services.Replace(svcs, "300000"))
	must(t, p.slices.Replace(slices, "300000"))
	if s := p.Stats(); s.Services != clusterServices || s.EndpointSlices != clusterServices || s.Syncs != 1 {
		t.Fatalf("after the lists: %+v", s)
	}
}

// proxyHeap is what proxies holding the cluster retain.
type proxyHeap struct {
	// first is the first proxy's heap, the strings it shares with the
	// others included.
	first int64
	// perProxy is the heap of each proxy beyond the first: what one more
	// node costs a process whose proxies hold the same objects.
	perProxy int64
	// total is the heap all the proxies retain once the objects they were
	// fed are gone.
	total int64
}

// heapOfProxies measures n proxies fed the same cluster, as a fleet's
// shared informers feed them: the proxies with their reflectors, not the
// objects.
func heapOfProxies(t testing.TB, n int) proxyHeap {
	client := fake.NewClientset()
	c := testingclock.NewFakeClock(t0)
	heap := func() int64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	objs := clusterObjects()
	withObjects := heap()
	proxies := make([]*Proxy, n)
	var one int64
	for i := range proxies {
		p, err := New(Config{NodeName: fmt.Sprintf("node-%d", i), Client: client, Clock: c})
		if err != nil {
			t.Fatal(err)
		}
		feedCluster(t, p, objs)
		proxies[i] = p
		if i == 0 {
			one = heap()
		}
	}
	all := heap()
	runtime.KeepAlive(objs)
	objs = nil
	h := proxyHeap{first: one - withObjects, total: heap() - before}
	if n > 1 {
		h.perProxy = (all - one) / int64(n-1)
	}
	runtime.KeepAlive(proxies)
	return h
}

func TestMemoryPerProxy(t *testing.T) {
	const n = 20
	h := heapOfProxies(t, n)
	t.Logf("heap of %d proxies holding the same %d Services and %d EndpointSlices: the first %d KiB, each other %d KiB, all %d KiB",
		n, clusterServices, clusterServices, h.first>>10, h.perProxy>>10, h.total>>10)
	if h.perProxy > perProxyBudget {
		t.Errorf("a proxy holds %d KiB, more than its budget of %d KiB", h.perProxy>>10, perProxyBudget>>10)
	}
	// The proxies keep nothing of the objects: once these are gone, what
	// is left is the proxies.
	if held := h.first + (n-1)*h.perProxy; h.total > held+held/10 {
		t.Errorf("the proxies retain %d KiB once their objects are gone, more than the %d KiB they hold", h.total>>10, held>>10)
	}
}

// BenchmarkProxyMemory reports the heap that each proxy beyond the first
// retains, of proxies holding the same cluster, and how long it takes to
// make 20 of them.
func BenchmarkProxyMemory(b *testing.B) {
	b.ReportAllocs()
	var h proxyHeap
	for b.Loop() {
		h = heapOfProxies(b, 20)
	}
	b.ReportMetric(float64(h.perProxy), "heap-bytes/proxy")
	b.ReportMetric(float64(h.first), "heap-bytes/first-proxy")
}
