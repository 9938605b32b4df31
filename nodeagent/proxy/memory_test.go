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
	// perProxyBudget is the most a proxy holding that cluster may cost:
	// 2,000 of them in one process then take well under a GiB.
	perProxyBudget = 400 << 10
)

// clusterObjects makes the cluster's Services and EndpointSlices afresh,
// as each proxy's own watch decodes its own copies, with what the API
// server sends: managed fields, owner references, three endpoints a slice.
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

// feedCluster lists the cluster to p, as its watches would: Services, then
// slices, from objects made for it alone and dropped after.
func feedCluster(t testing.TB, p *Proxy) {
	objs := clusterObjects()
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

// heapPerProxy is the heap that n proxies holding the cluster retain, per
// proxy: the proxies with their reflectors, not the objects they were fed.
func heapPerProxy(t testing.TB, n int) uint64 {
	client := fake.NewClientset()
	c := testingclock.NewFakeClock(t0)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	proxies := make([]*Proxy, n)
	for i := range proxies {
		p, err := New(Config{NodeName: fmt.Sprintf("node-%d", i), Client: client, Clock: c})
		if err != nil {
			t.Fatal(err)
		}
		feedCluster(t, p)
		proxies[i] = p
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(proxies)
	return (after.HeapAlloc - before.HeapAlloc) / uint64(n)
}

func TestMemoryPerProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("makes 40,000 objects")
	}
	per := heapPerProxy(t, 20)
	t.Logf("heap per proxy holding %d Services and %d EndpointSlices: %d KiB", clusterServices, clusterServices, per>>10)
	if per > perProxyBudget {
		t.Errorf("a proxy holds %d KiB, more than its budget of %d KiB", per>>10, perProxyBudget>>10)
	}
}

// BenchmarkProxyMemory reports the heap a proxy holding the cluster
// retains, and how long its initial lists take.
func BenchmarkProxyMemory(b *testing.B) {
	b.ReportAllocs()
	var per uint64
	for b.Loop() {
		per = heapPerProxy(b, 1)
	}
	b.ReportMetric(float64(per), "heap-bytes/proxy")
}
