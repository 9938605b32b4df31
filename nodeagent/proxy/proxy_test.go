package proxy

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/internal/testutil"
)

func TestNewValidates(t *testing.T) {
	client := fake.NewClientset()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no node", Config{Client: client}, "node name is required"},
		{"no client", Config{NodeName: testNode}, "node-1: a client"},
		{"min above max", Config{NodeName: testNode, Client: client, MinSyncPeriod: time.Minute, MaxSyncPeriod: time.Second}, "MaxSyncPeriod"},
		{"negative", Config{NodeName: testNode, Client: client, SyncPeriod: -time.Second}, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("New: %v, want one line containing %q", err, tc.want)
			}
		})
	}
	p, err := New(Config{NodeName: testNode, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	if r := p.runner; r.minInterval != time.Second || r.retryInterval != 30*time.Second || r.maxInterval != time.Hour {
		t.Errorf("default periods: min %v, retry %v, max %v; want 1s, 30s, 1h", r.minInterval, r.retryInterval, r.maxInterval)
	}
}

// The four watches open with kube-proxy's identity's selectors, one list and
// one watch each, and nothing else is asked of the API server but the
// event of the start.
func TestWatchesUseKubeProxySelectors(t *testing.T) {
	h := newHarness(t, nil)
	for _, res := range watchedResources {
		h.watcher(t, res)
	}
	want := map[string]struct {
		gv             schema.GroupVersion
		labels, fields string
	}{
		"nodes":          {corev1.SchemeGroupVersion, "", "metadata.name=" + testNode},
		"services":       {corev1.SchemeGroupVersion, "!service.kubernetes.io/service-proxy-name", "spec.clusterIP!=None"},
		"endpointslices": {schema.GroupVersion{Group: "discovery.k8s.io", Version: "v1"}, "!service.kubernetes.io/headless", ""},
		"servicecidrs":   {schema.GroupVersion{Group: "networking.k8s.io", Version: "v1"}, "", ""},
	}
	testutil.WaitFor(t, "the start's event", func() bool { return len(events(t, h)) == 1 })
	lists, watches := map[string]int{}, map[string]int{}
	for _, a := range h.client.Actions() {
		res := a.GetResource()
		if res.Resource == "events" && a.GetVerb() == "list" {
			continue // the test's own
		}
		var labels, fields string
		switch a := a.(type) {
		case k8stesting.ListAction:
			lists[res.Resource]++
			labels, fields = a.GetListRestrictions().Labels.String(), a.GetListRestrictions().Fields.String()
		case k8stesting.WatchAction:
			watches[res.Resource]++
			labels, fields = a.GetWatchRestrictions().Labels.String(), a.GetWatchRestrictions().Fields.String()
		case k8stesting.CreateAction:
			if res.Resource == "events" && res.Group == "events.k8s.io" && a.GetNamespace() == metav1.NamespaceDefault {
				continue
			}
			t.Errorf("unexpected create of %v", res)
			continue
		default:
			t.Errorf("unexpected %s of %v", a.GetVerb(), res)
			continue
		}
		w, ok := want[res.Resource]
		if !ok {
			t.Errorf("unexpected %s of %v", a.GetVerb(), res)
			continue
		}
		if res.GroupVersion() != w.gv || labels != w.labels || fields != w.fields {
			t.Errorf("%s of %v with labels %q, fields %q; want %v with labels %q, fields %q",
				a.GetVerb(), res, labels, fields, w.gv, w.labels, w.fields)
		}
	}
	for res := range want {
		if lists[res] != 1 || watches[res] != 1 {
			t.Errorf("%s: %d lists and %d watches, want one each", res, lists[res], watches[res])
		}
	}
}

func events(t *testing.T, h *harness) []eventsv1.Event {
	t.Helper()
	l, err := h.client.EventsV1().Events(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func TestBirthCry(t *testing.T) {
	h := newHarness(t, nil)
	testutil.WaitFor(t, "the start's event", func() bool { return len(events(t, h)) == 1 })
	ev := events(t, h)[0]
	want := eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: "default", Name: ev.Name},
		EventTime:           metav1.NewMicroTime(t0),
		ReportingController: "kube-proxy",
		ReportingInstance:   "kube-proxy-" + testNode,
		Action:              "StartKubeProxy",
		Reason:              "Starting",
		Regarding:           corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: testNode},
		Type:                corev1.EventTypeNormal,
	}
	ev.ResourceVersion, ev.ManagedFields = "", nil
	if !ev.EventTime.Equal(&want.EventTime) {
		t.Errorf("eventTime %v, want %v", ev.EventTime, want.EventTime)
	}
	ev.EventTime = want.EventTime
	if !strings.HasPrefix(ev.Name, testNode+".") {
		t.Errorf("event name %q, want the recorder's %s.<unix nanoseconds in hex>", ev.Name, testNode)
	}
	if d := cmpEvent(ev, want); d != "" {
		t.Errorf("event: %s", d)
	}
}

func cmpEvent(got, want eventsv1.Event) string {
	if got.Namespace != want.Namespace || got.ReportingController != want.ReportingController ||
		got.ReportingInstance != want.ReportingInstance || got.Action != want.Action || got.Reason != want.Reason ||
		got.Regarding != want.Regarding || got.Type != want.Type || got.Note != "" || got.Related != nil || got.Series != nil {
		return "got " + got.String() + ", want " + want.String()
	}
	return ""
}

// A failed event is logged, not fatal: the proxy syncs all the same.
func TestBirthCryFailureIsNotFatal(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, context.DeadlineExceeded
	})
	p, err := New(Config{NodeName: testNode, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); p.Wait() }()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the initial sync", func() bool { return p.Stats().Syncs == 1 })
}

// A slice change with a trigger time is observed by the next sync as the
// time from the trigger to that sync's end; changes within the cool-down
// after it make one sync, which observes each.
func TestNetworkProgrammingLatency(t *testing.T) {
	h := newHarness(t, nil)
	slicesWatch := h.watcher(t, "endpointslices")

	h.clock.Step(3 * time.Second)
	slicesWatch.Add(endpointSlice("web-abcde", "web", "10", at(time.Second)))
	h.waitSynced(t, 2)
	if got := h.lat.get(); !slices.Equal(got, []time.Duration{2 * time.Second}) {
		t.Fatalf("latencies %v, want [2s]", got)
	}
	if h.lat.nodes[0] != testNode {
		t.Errorf("latency observed for node %q, want %q", h.lat.nodes[0], testNode)
	}

	// In the cool-down: two changes, one of them to another Service.
	slicesWatch.Add(endpointSlice("db-fghij", "db", "11", at(2*time.Second)))
	slicesWatch.Modify(endpointSlice("web-abcde", "web", "12", at(2500*time.Millisecond)))
	testutil.WaitFor(t, "both changes are recorded", func() bool { return h.p.Stats().EndpointSliceChanges == 3 })
	if s := h.p.Stats(); s.Syncs != 2 {
		t.Fatalf("%d syncs within MinSyncPeriod of the last, want none", s.Syncs-2)
	}
	h.clock.Step(time.Second)
	h.waitSynced(t, 3)
	got := h.lat.get()
	slices.Sort(got)
	if want := []time.Duration{1500 * time.Millisecond, 2 * time.Second, 2 * time.Second}; !slices.Equal(got, want) {
		t.Fatalf("latencies %v, want %v", got, want)
	}
	if s := h.p.Stats(); s.Syncs != 3 || s.Latencies != 3 || s.EndpointSlices != 2 {
		t.Errorf("stats %+v, want 3 syncs, 3 latencies, 2 slices", s)
	}
}

// With nothing changing, the runner syncs once per MaxSyncPeriod: an hour
// by default, as 1.37's proxiers, or SyncPeriod for older ones.
func TestNoChangeForcesSyncAfterMaxSyncPeriod(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		period time.Duration
	}{
		{"1.37", nil, time.Hour},
		{"max is SyncPeriod", func(c *Config) { c.SyncPeriod, c.MaxSyncPeriod = 30*time.Second, 30*time.Second }, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.mutate)
			// The loop has made its timers.
			testutil.WaitFor(t, "the runner's timers", func() bool { return h.clock.Waiters() == 2 })
			h.clock.Step(tc.period - time.Nanosecond)
			// Only the cool-down timer fired, which the idle loop does not
			// wait on: nothing runs.
			if n := h.clock.Waiters(); n != 1 {
				t.Fatalf("%d timers armed, want the max-interval one", n)
			}
			if s := h.p.Stats(); s.Syncs != 1 {
				t.Fatalf("%d syncs before MaxSyncPeriod, want none but the initial one", s.Syncs-1)
			}
			h.clock.Step(time.Nanosecond)
			h.waitSynced(t, 2)
			if s := h.p.Stats(); !s.LastSync.Equal(t0.Add(tc.period)) {
				t.Errorf("forced sync at %v, want %v", s.LastSync.Sub(t0), tc.period)
			}
		})
	}
}

// Trigger times before the proxy started are not observed, in the initial
// list or after.
func TestTriggerTimeBeforeStartIgnored(t *testing.T) {
	h := newHarness(t, nil,
		service("old", "10.96.0.10", 80),
		endpointSlice("old-abcde", "old", "5", at(-time.Minute)))
	if s := h.p.Stats(); s.EndpointSlices != 1 || s.Services != 1 || s.Latencies != 0 {
		t.Fatalf("after the initial sync: %+v, want one Service and slice, no latency", s)
	}
	slicesWatch := h.watcher(t, "endpointslices")
	slicesWatch.Modify(endpointSlice("old-abcde", "old", "6", at(-time.Second)))
	h.waitSynced(t, 2)
	// A trigger time equal to the start is not after it either.
	slicesWatch.Add(endpointSlice("new-abcde", "new", "7", at(0)))
	testutil.WaitFor(t, "the second change", func() bool { return h.p.Stats().EndpointSliceChanges == 3 })
	h.clock.Step(time.Second)
	h.waitSynced(t, 3)
	if s := h.p.Stats(); s.EndpointSliceChanges != 3 || s.Latencies != 0 {
		t.Errorf("stats %+v, want 3 slice changes, no latency", s)
	}
}

func TestBadInputCountedOnce(t *testing.T) {
	p, _ := newBareProxy(t, nil)
	for _, s := range []any{
		endpointSlice("web-abcde", "web", "1", "yesterday"),
		endpointSlice("web-abcde", "web", "2", "yesterday"),
		endpointSlice("web-abcde", "web", "3", "also not a time"),
	} {
		if err := p.slices.Update(s); err != nil {
			t.Fatal(err)
		}
	}
	// A slice without its Service's label, twice.
	unnamed := endpointSlice("orphan", "", "1", "")
	for range 2 {
		if err := p.slices.Add(unnamed); err != nil {
			t.Fatal(err)
		}
	}
	// A Service whose ClientIP affinity has no timeout (which would panic
	// upstream's newBaseServiceInfo).
	sticky := service("sticky", "10.96.0.11", 80)
	sticky.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	for range 2 {
		if err := p.services.Add(sticky); err != nil {
			t.Fatal(err)
		}
	}
	s := p.Stats()
	// The unreadable annotation is still a change, as upstream's; the
	// unnamed slice is not tracked at all.
	if s.BadObjects != 3 || s.EndpointSliceChanges != 3 || s.EndpointSlices != 1 || s.Services != 1 {
		t.Errorf("stats %+v, want 3 bad objects, 3 slice changes, 1 slice, 1 Service", s)
	}
	// Deleted and made again, an object is reported again.
	if err := p.slices.Delete(endpointSlice("web-abcde", "web", "3", "")); err != nil {
		t.Fatal(err)
	}
	if err := p.slices.Add(endpointSlice("web-abcde", "web", "4", "nope")); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.BadObjects != 4 {
		t.Errorf("%d bad objects after the slice was made again, want 4", s.BadObjects)
	}
}

func TestWrongTypeIsAnError(t *testing.T) {
	p, _ := newBareProxy(t, nil)
	if err := p.slices.Add(service("web", "10.96.0.10", 80)); err == nil {
		t.Error("a Service added to the EndpointSlice store: no error")
	}
	if err := p.services.Replace([]any{node("n", "1", "")}, "1"); err == nil {
		t.Error("a Node in a Service list: no error")
	}
}

// Replace deletes what it no longer lists, with its pending trigger times,
// and is no change when it lists what is held.
func TestReplaceRemovesKeys(t *testing.T) {
	lat := &latencies{}
	p, c := newBareProxy(t, lat)
	c.Step(10 * time.Second)
	if err := p.services.Replace([]any{service("a", "10.96.0.1", 80), service("b", "10.96.0.2", 80), service("c", "10.96.0.3", 80)}, "1"); err != nil {
		t.Fatal(err)
	}
	a, b, c2 := endpointSlice("a-1", "a", "1", at(time.Second)), endpointSlice("b-1", "b", "1", at(2*time.Second)), endpointSlice("c-1", "c", "1", "")
	if err := p.slices.Replace([]any{a, b, c2}, "1"); err != nil {
		t.Fatal(err)
	}
	// Both kinds have listed: the initial sync observed a and b.
	if s := p.Stats(); s.Syncs != 1 || s.Latencies != 2 || s.EndpointSlices != 3 || s.Services != 3 {
		t.Fatalf("after the initial lists: %+v", s)
	}

	// b changes, then a relist finds b and c gone: b's pending trigger time
	// goes with it.
	if err := p.slices.Update(endpointSlice("b-1", "b", "2", at(5*time.Second))); err != nil {
		t.Fatal(err)
	}
	if err := p.slices.Replace([]any{a}, "3"); err != nil {
		t.Fatal(err)
	}
	if err := p.services.Replace([]any{service("a", "10.96.0.1", 80)}, "3"); err != nil {
		t.Fatal(err)
	}
	if got := heldKeys(p.sliceEntries); !slices.Equal(got, []string{"default/a-1"}) {
		t.Errorf("slices held %v, want [default/a-1]", got)
	}
	if got := heldKeys(p.serviceFingerprints); !slices.Equal(got, []string{"default/a"}) {
		t.Errorf("Services held %v, want [default/a]", got)
	}
	if len(p.triggerTimes) != 0 {
		t.Errorf("pending trigger times %v, want none: deletion drops its Service's", p.triggerTimes)
	}
	s := p.Stats()
	if s.EndpointSliceChanges != 3+1+2 || s.ServiceChanges != 3+2 {
		t.Errorf("stats %+v, want 6 slice changes and 5 Service changes", s)
	}
	// Listing the same again is no change.
	if err := p.slices.Replace([]any{endpointSlice("a-1", "a", "1", at(time.Second))}, "4"); err != nil {
		t.Fatal(err)
	}
	if got := p.Stats(); got.EndpointSliceChanges != s.EndpointSliceChanges {
		t.Errorf("a relist of what is held made %d changes", got.EndpointSliceChanges-s.EndpointSliceChanges)
	}
	p.syncProxyRules()
	if got := lat.get(); len(got) != 2 {
		t.Errorf("latencies %v, want only the initial sync's two", got)
	}
}

// Replace's records may come from a watch-list's temporary store, made by
// the store's Transformer.
func TestReplaceTakesTransformedRecords(t *testing.T) {
	p, _ := newBareProxy(t, nil)
	tf := p.slices.Transformer()
	rec, err := tf(endpointSlice("a-1", "a", "1", ""))
	if err != nil {
		t.Fatal(err)
	}
	tomb, err := tf(cache.DeletedFinalStateUnknown{Key: "default/b-1", Obj: endpointSlice("b-1", "b", "1", "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.slices.Replace([]any{rec, tomb}, "1"); err != nil {
		t.Fatal(err)
	}
	if got := heldKeys(p.sliceEntries); !slices.Equal(got, []string{"default/a-1", "default/b-1"}) {
		t.Errorf("slices held %v", got)
	}
}

// The Service tracker sees a change only where the proxier's
// ServicePortMap would change, and drops one undone before the sync.
func TestServiceChanges(t *testing.T) {
	p, _ := newBareProxy(t, nil)
	markInitialized(t, p)
	web := service("web", "10.96.0.10", 80, 443)
	must(t, p.services.Add(web))
	// Status, annotations and the order of ports are no change.
	web2 := web.DeepCopy()
	web2.ResourceVersion = "2"
	web2.Annotations = map[string]string{"a": "b"}
	web2.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "lb.example"}}
	slices.Reverse(web2.Spec.Ports)
	must(t, p.services.Update(web2))
	if s := p.Stats(); s.ServiceChanges != 1 || len(p.serviceChanges) != 1 {
		t.Fatalf("stats %+v, pending %v; want one change", s, p.serviceChanges)
	}
	p.syncProxyRules()
	// A port changed and changed back before the sync: nothing pending.
	web3 := web2.DeepCopy()
	web3.Spec.Ports[0].Port = 8443
	must(t, p.services.Update(web3))
	if len(p.serviceChanges) != 1 {
		t.Fatalf("pending %v after a port change, want it", p.serviceChanges)
	}
	must(t, p.services.Update(web2))
	if len(p.serviceChanges) != 0 {
		t.Errorf("pending %v after the change was undone, want none", p.serviceChanges)
	}
	// A Service claimed by another proxy leaves the tracker.
	other := web2.DeepCopy()
	other.Labels = map[string]string{LabelServiceProxyName: "other"}
	must(t, p.services.Update(other))
	if s := p.Stats(); s.Services != 0 || s.ServiceChanges != 4 {
		t.Errorf("stats %+v, want no Service and 4 changes", s)
	}
}

func TestServiceFingerprint(t *testing.T) {
	base := service("web", "10.96.0.10", 80)
	fp := func(mutate func(*corev1.Service)) uint64 {
		s := base.DeepCopy()
		mutate(s)
		f, err := serviceFingerprint(s)
		if err != nil {
			t.Fatalf("fingerprint: %v", err)
		}
		return f
	}
	same := fp(func(*corev1.Service) {})
	if same == 0 {
		t.Fatal("a ClusterIP Service has no fingerprint")
	}
	for _, tc := range []struct {
		name   string
		mutate func(*corev1.Service)
		want   string // "same", "other" or "none"
	}{
		{"labels", func(s *corev1.Service) { s.Labels = map[string]string{"x": "y"} }, "same"},
		{"load balancer hostname", func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "h"}}
		}, "same"},
		{"IPv6 external IP", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"fd00::1"} }, "same"},
		{"port", func(s *corev1.Service) { s.Spec.Ports[0].Port = 81 }, "other"},
		{"node port", func(s *corev1.Service) { s.Spec.Type, s.Spec.Ports[0].NodePort = corev1.ServiceTypeNodePort, 30080 }, "other"},
		{"external IP", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.1"} }, "other"},
		{"affinity", func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
		}, "other"},
		{"internal policy", func(s *corev1.Service) {
			s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
		}, "other"},
		{"load balancer VIP", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.9"}}
		}, "other"},
		{"headless", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ClusterIPNone, nil }, "none"},
		{"external name", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }, "none"},
		{"IPv6 only", func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies = "fd00::10", []string{"fd00::10"}, []corev1.IPFamily{corev1.IPv6Protocol}
		}, "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fp(tc.mutate)
			switch {
			case tc.want == "same" && got != same,
				tc.want == "other" && (got == same || got == 0),
				tc.want == "none" && got != 0:
				t.Errorf("fingerprint %x (base %x), want %s", got, same, tc.want)
			}
		})
	}
}

// The Node's zone label is all the proxier reads of it: a change asks for
// a full sync. Other Nodes are ignored.
func TestNodeTopology(t *testing.T) {
	p, _ := newBareProxy(t, nil)
	markInitialized(t, p)
	p.syncProxyRules()
	must(t, p.node.Add(node("other", "1", "z1")))
	must(t, p.node.Add(node(testNode, "1", "")))
	if p.needFullSync {
		t.Error("a Node without a zone asked for a full sync")
	}
	must(t, p.node.Update(node(testNode, "2", "z1")))
	if !p.needFullSync {
		t.Error("the zone changed, and no full sync is due")
	}
	if len(p.runner.run) != 1 {
		t.Error("the zone changed, and no sync was asked for")
	}
	p.syncProxyRules()
	if s := p.Stats(); s.Syncs != 3 || s.FullSyncs != 2 || s.NodeChanges != 2 {
		t.Errorf("stats %+v, want 3 syncs, 2 of them full (the initial one, the zone's), and 2 Node changes", s)
	}
	must(t, p.node.Replace(nil, "3"))
	if p.hasNode {
		t.Error("the Node is still held after a list without it")
	}
}

func TestServiceCIDRsAskNoSync(t *testing.T) {
	p, _ := newBareProxy(t, nil)
	markInitialized(t, p)
	must(t, p.cidrs.Replace([]any{serviceCIDR("kubernetes", "1")}, "1"))
	must(t, p.cidrs.Update(serviceCIDR("kubernetes", "2")))
	if s := p.Stats(); s.ServiceCIDRChanges != 2 || s.ServiceCIDRs != 1 || len(p.runner.run) != 0 {
		t.Errorf("stats %+v, sync asked %d; want 2 CIDR changes, 1 held, no sync", s, len(p.runner.run))
	}
}

func markInitialized(t *testing.T, p *Proxy) {
	t.Helper()
	must(t, p.services.Replace(nil, "1"))
	must(t, p.slices.Replace(nil, "1"))
	if !p.initialized {
		t.Fatal("not initialized after Services and EndpointSlices listed")
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fakeShared is a SharedSources that replays its objects to the handlers.
type fakeShared struct {
	objs     []runtime.Object
	handlers chan Handlers
	removed  chan struct{}
}

func (f *fakeShared) HasSynced() bool { return true }

func (f *fakeShared) AddProxyHandlers(_ string, h Handlers) func() {
	for _, o := range f.objs {
		switch o.(type) {
		case *corev1.Service:
			h.Services.OnAdd(o, true)
		case *corev1.Node:
			h.Node.OnAdd(o, true)
		default:
			h.EndpointSlices.OnAdd(o, true)
		}
	}
	f.handlers <- h
	return func() { close(f.removed) }
}

func TestSharedSourcesOpenNoWatches(t *testing.T) {
	shared := &fakeShared{
		objs: []runtime.Object{service("web", "10.96.0.10", 80), endpointSlice("web-abcde", "web", "1", ""),
			node(testNode, "1", "z1"), node("other", "1", "")},
		handlers: make(chan Handlers, 1), removed: make(chan struct{}),
	}
	h := newHarness(t, func(c *Config) { c.Shared = shared })
	hs := <-shared.handlers
	if s := h.p.Stats(); s.Services != 1 || s.EndpointSlices != 1 || s.NodeChanges != 1 {
		t.Fatalf("after the replay: %+v", s)
	}
	for _, a := range h.client.Actions() {
		if a.GetVerb() != "create" {
			t.Errorf("%s of %v in shared mode", a.GetVerb(), a.GetResource())
		}
	}
	h.clock.Step(2 * time.Second)
	hs.EndpointSlices.OnUpdate(endpointSlice("web-abcde", "web", "1", ""), endpointSlice("web-abcde", "web", "2", at(time.Second)))
	h.waitSynced(t, 2)
	if got := h.lat.get(); !slices.Equal(got, []time.Duration{time.Second}) {
		t.Errorf("latencies %v, want [1s]", got)
	}
	hs.EndpointSlices.OnDelete(cache.DeletedFinalStateUnknown{Key: "default/web-abcde", Obj: endpointSlice("web-abcde", "web", "2", "")})
	testutil.WaitFor(t, "the slice's deletion", func() bool { return h.p.Stats().EndpointSlices == 0 })
}

func TestSharedStartEndsWithContext(t *testing.T) {
	p, err := New(Config{NodeName: testNode, Client: fake.NewClientset(), Shared: neverSynced{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Start(ctx); err == nil || !strings.Contains(err.Error(), "shared informers had not listed") {
		t.Errorf("Start: %v", err)
	}
}

type neverSynced struct{}

func (neverSynced) HasSynced() bool                              { return false }
func (neverSynced) AddProxyHandlers(string, Handlers) (r func()) { panic("registered before the sync") }

func TestStartWaitLeavesNoGoroutines(t *testing.T) {
	before := testutil.SettledGoroutines()
	client := fake.NewClientset(service("web", "10.96.0.10", 80))
	p, err := New(Config{NodeName: testNode, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err == nil {
		t.Error("a second Start: no error")
	}
	testutil.WaitFor(t, "the proxy has synced", p.HasSynced)
	t.Logf("goroutines of a running proxy (fake clientset): %d", testutil.SettledGoroutines()-before)
	cancel()
	p.Wait()
	testutil.WaitFor(t, "the proxy's goroutines have ended", func() bool { return testutil.SettledGoroutines() <= before })
}

// With watch-list streaming (the API server's and client-go's default in
// 1.37), the reflector's temporary store holds the records the store's
// Transformer makes, and hands them to Replace.
func TestWatchListFeedsRecords(t *testing.T) {
	p, _ := newBareProxy(t, nil)
	streams := make(chan metav1.ListOptions, 10)
	w := watch.NewFakeWithChanSize(10, false)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return nil, errors.New("a list, where a watch-list was expected")
		},
		WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
			streams <- o
			return w, nil
		},
	}
	w.Add(endpointSlice("a-1", "a", "3", ""))
	w.Add(endpointSlice("b-1", "b", "4", ""))
	w.Action(watch.Bookmark, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "5",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}})
	r := cache.NewReflectorWithOptions(lw, &discoveryv1.EndpointSlice{}, p.slices, cache.ReflectorOptions{Name: "test"})
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.RunWithContext(ctx) }()
	defer func() { cancel(); <-done }()

	testutil.WaitFor(t, "the watch-list's initial events", p.slices.hasListed)
	if o := <-streams; o.SendInitialEvents == nil || !*o.SendInitialEvents {
		t.Fatalf("watch options %+v, want a watch-list", o)
	}
	if got := heldKeys(p.sliceEntries); !slices.Equal(got, []string{"default/a-1", "default/b-1"}) {
		t.Errorf("slices held %v", got)
	}
	// The stream goes on as the watch.
	w.Delete(endpointSlice("a-1", "a", "6", ""))
	testutil.WaitFor(t, "the deletion", func() bool { return p.Stats().EndpointSlices == 1 })
}
