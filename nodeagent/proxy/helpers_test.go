package proxy

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/internal/testutil"
)

const testNode = "node-1"

// t0 is the fake clock's start: the proxies' start in every test.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// latencies is a LatencyRecorder that keeps what it is given.
type latencies struct {
	mu    sync.Mutex
	nodes []string
	ds    []time.Duration
}

func (l *latencies) ObserveNetworkProgramming(node string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nodes = append(l.nodes, node)
	l.ds = append(l.ds, d)
}

func (l *latencies) get() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.ds...)
}

func service(name, clusterIP string, ports ...int32) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, ResourceVersion: "1"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
		},
	}
	for _, p := range ports {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", p), Protocol: corev1.ProtocolTCP, Port: p})
	}
	return s
}

// endpointSlice is a slice of service named as the EndpointSlice
// controller names them, at resource version rv, with trigger as its
// trigger-time annotation unless trigger is empty.
func endpointSlice(name, svc, rv, trigger string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: name, ResourceVersion: rv,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses: []string{"10.1.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			NodeName: ptr.To("node-2"),
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("p80"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	if trigger != "" {
		s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: trigger}
	}
	return s
}

func at(d time.Duration) string { return t0.Add(d).Format(time.RFC3339Nano) }

func node(name, rv, zone string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
	if zone != "" {
		n.Labels = map[string]string{corev1.LabelTopologyZone: zone}
	}
	return n
}

func serviceCIDR(name, rv string) *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16"}}}
}

// harness is a started proxy on a fake clientset and a fake clock, whose
// watches are fake watchers the test sends events into.
type harness struct {
	client   *fake.Clientset
	clock    *testingclock.FakeClock
	lat      *latencies
	p        *Proxy
	watchers map[string]chan *watch.FakeWatcher
}

var watchedResources = []string{"nodes", "services", "endpointslices", "servicecidrs"}

func newHarness(t *testing.T, mutate func(*Config), objs ...runtime.Object) *harness {
	t.Helper()
	h := &harness{
		client:   fake.NewClientset(objs...),
		clock:    testingclock.NewFakeClock(t0),
		lat:      &latencies{},
		watchers: map[string]chan *watch.FakeWatcher{},
	}
	for _, res := range watchedResources {
		ch := make(chan *watch.FakeWatcher, 10)
		h.watchers[res] = ch
		h.client.PrependWatchReactor(res, func(k8stesting.Action) (bool, watch.Interface, error) {
			w := watch.NewFakeWithChanSize(100, false)
			ch <- w
			return true, w, nil
		})
	}
	cfg := Config{NodeName: testNode, Client: h.client, Clock: h.clock, Latency: h.lat}
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.p = p
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); p.Wait() })
	testutil.WaitFor(t, "the proxy has synced", p.HasSynced)
	testutil.WaitFor(t, "the initial sync", func() bool { return p.Stats().Syncs == 1 })
	return h
}

// watcher is the watch the proxy opened on resource.
func (h *harness) watcher(t *testing.T, resource string) *watch.FakeWatcher {
	t.Helper()
	select {
	case w := <-h.watchers[resource]:
		return w
	case <-time.After(testutil.Patience):
		t.Fatalf("the proxy opened no watch of %s", resource)
		return nil
	}
}

// waitSynced waits for the n-th sync and for the runner to have armed its
// timers after it: the sync loop is then in its cool-down.
func (h *harness) waitSynced(t *testing.T, n int) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("sync %d", n), func() bool { return h.p.Stats().Syncs == n })
	testutil.WaitFor(t, "the runner's timers are armed", func() bool { return h.clock.Waiters() == 2 })
}

// newBareProxy is a proxy that is never started: its stores are fed by the
// test, on the fake clock.
func newBareProxy(t testing.TB, lat LatencyRecorder) (*Proxy, *testingclock.FakeClock) {
	t.Helper()
	c := testingclock.NewFakeClock(t0)
	p, err := New(Config{NodeName: testNode, Client: fake.NewClientset(), Clock: c, Latency: lat})
	if err != nil {
		t.Fatal(err)
	}
	p.trackerStart = t0
	p.logger, _ = ktesting.NewTestContext(t)
	return p, c
}

// heldKeys are the keys of m, sorted.
func heldKeys[V any](m keyed[V]) []string {
	var keys []string
	for k := range m.keys() {
		keys = append(keys, k.Value())
	}
	return keys
}
