package fleet

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/internal/testutil"
	"github.com/fleetlet/fleetlet/nodeagent/proxy"
)

type observed struct {
	mu    sync.Mutex
	nodes map[string]int
}

func (o *observed) ObserveNetworkProgramming(node string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.nodes[node]++
}

func (o *observed) count(node string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.nodes[node]
}

// TestSharedProxyInformersFeedEveryProxy runs two kube-proxies on the
// fleet's shared informers: each hears of a Service and its EndpointSlice
// created after they started, and measures the slice's programming.
func TestSharedProxyInformersFeedEveryProxy(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	nodes := NewSharedInformers(client)
	shared := newSharedProxyInformers(client, nodes)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); nodes.Run(ctx) }()
		go func() { defer wg.Done(); shared.Run(ctx) }()
		wg.Wait()
	}()
	testutil.WaitFor(t, "the shared informers list", shared.HasSynced)

	start := time.Now()
	clk := clocktesting.NewFakeClock(start)
	lat := &observed{nodes: map[string]int{}}
	var proxies []*proxy.Proxy
	for _, node := range []string{"n1", "n2"} {
		p, err := proxy.New(proxy.Config{NodeName: node, Client: client, Clock: clk, Latency: lat, Shared: shared})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		proxies = append(proxies, p)
	}
	for _, p := range proxies {
		testutil.WaitFor(t, "the proxies sync", p.HasSynced)
	}

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", ResourceVersion: "1"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.10", ClusterIPs: []string{"10.0.0.10"}, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := client.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	trigger := start.Add(time.Second).UTC().Format(time.RFC3339Nano)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-abc", ResourceVersion: "1",
			Labels:      map[string]string{discoveryv1.LabelServiceName: "web"},
			Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: trigger}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.64.0.5"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if _, err := client.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "both proxies hear of the slice", func() bool {
		for _, p := range proxies {
			if p.Stats().EndpointSlices != 1 {
				return false
			}
		}
		return true
	})
	testutil.WaitFor(t, "both proxies program the slice", func() bool {
		clk.Step(2 * time.Second)
		return lat.count("n1") == 1 && lat.count("n2") == 1
	})
	cancel()
	for _, p := range proxies {
		p.Wait()
	}
	<-done
	// The fake clientset's watches of the three resources are the fleet's
	// only ones: the proxies opened none.
	watches := map[string]int{}
	for _, a := range client.Actions() {
		if a.GetVerb() == "watch" {
			watches[a.GetResource().Resource]++
		}
	}
	for _, res := range []string{"services", "endpointslices", "servicecidrs"} {
		if watches[res] != 1 {
			t.Errorf("%d watches of %s, want the fleet's one", watches[res], res)
		}
	}
}
