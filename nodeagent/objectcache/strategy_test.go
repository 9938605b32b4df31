package objectcache

import (
	"context"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/internal/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestAnUnknownStrategyIsRefused(t *testing.T) {
	cfg := Config{Client: fake.NewClientset(), Strategy: "Poll"}
	want := `objectcache: unknown configMapAndSecretChangeDetectionStrategy "Poll"; use Watch, Cache or Get`
	if err := cfg.Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate = %v, want %q", err, want)
	}
	defer func() {
		if r := recover(); r == nil {
			t.Errorf("New with an unknown strategy did not panic")
		} else if err, ok := r.(error); !ok || err.Error() != want {
			t.Errorf("New panicked with %v, want %q", r, want)
		}
	}()
	New(cfg)
}

func TestTheKnownStrategiesAreValid(t *testing.T) {
	for _, s := range []kubeletconfig.ResourceChangeDetectionStrategy{
		"", kubeletconfig.WatchChangeDetectionStrategy, kubeletconfig.TTLCacheChangeDetectionStrategy, kubeletconfig.GetChangeDetectionStrategy,
	} {
		if err := (Config{Strategy: s}).Validate(); err != nil {
			t.Errorf("Validate of %q: %v", s, err)
		}
	}
}

func TestTheDefaultStrategyIsWatch(t *testing.T) {
	client := fake.NewClientset(configMap("cfg", "v1"))
	watches := trackWatches(client)
	// No Clock either: the real one.
	c := New(Config{Client: client})
	ctx, cancel := context.WithCancel(context.Background())
	done := run(ctx, c)
	defer func() { cancel(); <-done }()

	c.RegisterPod(podWith("a", []string{"cfg"}, nil))
	if got := readConfigMap(t, c, "cfg"); got != "v1" {
		t.Fatalf("ConfigMap = %q, want v1", got)
	}
	testutil.WaitFor(t, "the ConfigMap's watch is open", func() bool { _, open := watches.of("configmaps", "cfg"); return open == 1 })
	if n := requests(client, "get", "configmaps"); n != 0 {
		t.Errorf("%d GETs, want none", n)
	}
}

func TestTheGetStrategyGETsOnEveryRead(t *testing.T) {
	for _, tc := range []struct {
		resource string
		read     func(*Cache) error
	}{
		{"configmaps", func(c *Cache) error { _, err := c.ConfigMap(context.Background(), "ns", "cfg"); return err }},
		{"secrets", func(c *Cache) error { _, err := c.Secret(context.Background(), "ns", "cfg"); return err }},
	} {
		t.Run(tc.resource, func(t *testing.T) {
			client := fake.NewClientset(configMap("cfg", "v1"), secret("cfg", "v1"))
			c := New(Config{Client: client, Clock: clocktesting.NewFakeClock(time.Unix(1000, 0)), Strategy: kubeletconfig.GetChangeDetectionStrategy})
			pod := podWith("a", []string{"cfg"}, []string{"cfg"})
			c.RegisterPod(pod)
			for range 3 {
				if err := tc.read(c); err != nil {
					t.Fatal(err)
				}
			}
			c.UnregisterPod(pod)
			if n := requests(client, "get", tc.resource); n != 3 {
				t.Errorf("%d GETs for 3 reads, want 3", n)
			}
			if n := len(client.Actions()); n != 3 {
				t.Errorf("%d requests, want the 3 GETs only: registration does nothing", n)
			}
		})
	}
}

func TestTheCacheStrategyRefetchesForANewlyRegisteredPod(t *testing.T) {
	ctx := context.Background()
	clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
	client := fake.NewClientset(configMap("cfg", "v1"))
	c := New(Config{Client: client, Clock: clock, Strategy: kubeletconfig.TTLCacheChangeDetectionStrategy})
	gets := func() int { return requests(client, "get", "configmaps") }
	first := podWith("first", []string{"cfg"}, nil)

	for _, tc := range []struct {
		name     string
		update   string // the ConfigMap's value set before the step, if any
		register *corev1.Pod
		want     string
		wantGETs int
	}{
		{name: "first read", want: "v1", wantGETs: 1},
		{name: "update within the TTL", update: "v2", want: "v1", wantGETs: 1},
		{name: "a pod that refers to it registers", register: first, want: "v2", wantGETs: 2},
		{name: "the same pod registers again", update: "v3", register: first, want: "v2", wantGETs: 2},
		{name: "the same pod adds another reference", register: podWith("first", []string{"cfg", "other"}, nil), want: "v2", wantGETs: 2},
		{name: "a pod that does not refer to it registers", register: podWith("unrelated", []string{"other"}, nil), want: "v2", wantGETs: 2},
		{name: "a second pod that refers to it registers", register: podWith("second", []string{"cfg"}, nil), want: "v3", wantGETs: 3},
	} {
		if tc.update != "" {
			updateConfigMap(t, client, configMap("cfg", tc.update))
		}
		if tc.register != nil {
			c.RegisterPod(tc.register)
		}
		cm, err := c.ConfigMap(ctx, "ns", "cfg")
		if err != nil || cm.Data["k"] != tc.want || gets() != tc.wantGETs {
			t.Fatalf("%s: read %v, %v after %d GETs; want %q after %d", tc.name, cm.Data, err, gets(), tc.want, tc.wantGETs)
		}
	}
}

func TestTheCacheStrategyDropsAFetchBegunBeforeARegistration(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(configMap("cfg", "v1"))
	began, release := make(chan struct{}), make(chan struct{})
	stale := true
	client.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !stale {
			return false, nil, nil
		}
		stale = false
		// The API server answers with the object as it was when the
		// request came, after the pod has registered.
		obj, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("configmaps"), "ns", "cfg")
		close(began)
		<-release
		return true, obj, err
	})
	c := New(Config{Client: client, Clock: clocktesting.NewFakeClock(time.Unix(1000, 0)), Strategy: kubeletconfig.TTLCacheChangeDetectionStrategy})

	first := make(chan string)
	go func() {
		cm, _ := c.ConfigMap(ctx, "ns", "cfg")
		first <- cm.Data["k"]
	}()
	<-began
	if err := client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("configmaps"), configMap("cfg", "v2"), "ns"); err != nil {
		t.Fatal(err)
	}
	c.RegisterPod(podWith("a", []string{"cfg"}, nil))
	close(release)
	if got := <-first; got != "v1" {
		t.Fatalf("the read in flight = %q, want v1", got)
	}
	if got := readConfigMap(t, c, "cfg"); got != "v2" {
		t.Errorf("the read after the registration = %q, want v2: what a fetch begun before it brought must not be kept", got)
	}
}
