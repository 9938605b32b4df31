package fleet

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/nodeagent"
	"github.com/fleetlet/fleetlet/nodeagent/staticpods"
)

func pools() []NodePool {
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}
	return []NodePool{{Name: "a", Count: 2, Capacity: capacity}, {Name: "b", Count: 3, Capacity: capacity, Labels: map[string]string{"tier": "b"}}}
}

func testConfig() Config {
	return Config{
		Pools:        pools(),
		NamePrefix:   "t-",
		ClientConfig: func(string) (*rest.Config, error) { return &rest.Config{Host: "https://127.0.0.1:1"}, nil },
		NewRuntime: func(string) (Runtime, error) {
			rt := fakeruntime.New(fakeruntime.Config{})
			return Runtime{Runtime: rt, Images: rt}, nil
		},
	}
}

func TestNewNamesAndAddressesNodes(t *testing.T) {
	f, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ name, ip, pool string }{
		{"t-a-0", "127.1.0.1", "a"}, {"t-a-1", "127.1.0.2", "a"},
		{"t-b-0", "127.1.0.3", "b"}, {"t-b-1", "127.1.0.4", "b"}, {"t-b-2", "127.1.0.5", "b"},
	}
	members := f.Members()
	if len(members) != len(want) {
		t.Fatalf("%d members, want %d", len(members), len(want))
	}
	for i, w := range want {
		m := members[i]
		if m.Name != w.name || m.IP.String() != w.ip || m.Pool != w.pool {
			t.Errorf("member %d = %s %s %s, want %s %s %s", i, m.Name, m.IP, m.Pool, w.name, w.ip, w.pool)
		}
	}
	if got := f.NodeNames(); len(got) != 5 || got[4] != "t-b-2" {
		t.Errorf("NodeNames = %v", got)
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"non-loopback first IP", func(c *Config) { c.FirstIP = netip.MustParseAddr("10.0.0.1") }, "not an IPv4 loopback"},
		{"running out of loopback", func(c *Config) { c.FirstIP = netip.MustParseAddr("127.255.255.254") }, "ran out of loopback addresses"},
		{"no runtime", func(c *Config) { c.NewRuntime = nil }, "NewRuntime must be set"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			tc.mutate(&cfg)
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestNewClosesRuntimesOnFailure(t *testing.T) {
	cfg := testConfig()
	var mu sync.Mutex
	opened, closed := 0, 0
	cfg.NewRuntime = func(string) (Runtime, error) {
		mu.Lock()
		defer mu.Unlock()
		opened++
		rt := fakeruntime.New(fakeruntime.Config{})
		return Runtime{Runtime: rt, Images: rt, Close: func() error {
			mu.Lock()
			defer mu.Unlock()
			closed++
			return nil
		}}, nil
	}
	cfg.FirstIP = netip.MustParseAddr("127.255.255.252") // room for 3 of the 5 nodes
	if _, err := New(cfg); err == nil {
		t.Fatal("New succeeded without enough addresses")
	}
	if opened == 0 || opened != closed {
		t.Errorf("opened %d runtimes, closed %d", opened, closed)
	}
}

// TestRunStartsEveryAgentAndStops runs a fleet against an API server that
// fails every request: every agent must start after its jitter and try to
// register, and Run must return once the context ends.
func TestRunStartsEveryAgentAndStops(t *testing.T) {
	registering := map[string]bool{}
	var mu sync.Mutex
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/api/v1/nodes" {
			mu.Lock()
			registering[r.UserAgent()] = true
			mu.Unlock()
		}
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	defer server.Close()
	cfg := testConfig()
	cfg.ClientConfig = func(string) (*rest.Config, error) { return &rest.Config{Host: server.URL}, nil }
	cfg.StartJitter = 50 * time.Millisecond
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(registering) == len(f.NodeNames()), nil
	})
	if err != nil {
		t.Fatalf("only %d of %d agents tried to register: %v", len(registering), len(f.NodeNames()), err)
	}
	if !registering["fleetlet/t-b-2"] {
		t.Errorf("agents do not identify themselves by node: %v", registering)
	}
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "registering node") {
			t.Errorf("Run = %v, want the agents' registration errors", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of its context ending")
	}
}

// TestNewSharesAPoolsStaticPods: a pool with static pods has one source,
// its directory and inline pods, which all its nodes share; a pool
// without has none; a bad inline pod fails the fleet.
func TestNewSharesAPoolsStaticPods(t *testing.T) {
	dir := t.TempDir()
	manifest := "apiVersion: v1\nkind: Pod\nmetadata: {name: etcd, namespace: kube-system}\nspec: {containers: [{name: etcd, image: registry.k8s.io/etcd:3.6.0-0}]}\n"
	if err := os.WriteFile(filepath.Join(dir, "etcd.yaml"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Pools[1].Kubelet = nodeagent.DefaultKubeletConfiguration()
	cfg.Pools[1].Kubelet.StaticPodPath = dir
	cfg.Pools[1].StaticPods = []corev1.Pod{{
		ObjectMeta: metav1.ObjectMeta{Name: "exporter", Namespace: "monitoring"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "e", Image: "registry.k8s.io/pause:3.10"}}},
	}}
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.staticPods) != 1 || f.staticPods[0].Path() != dir {
		t.Fatalf("static pod sources %v, want one, of %s", f.staticPods, dir)
	}
	for _, m := range f.Members() {
		want := f.staticPods[0]
		if m.Pool == "a" {
			want = nil
		}
		if m.staticPods != want {
			t.Errorf("node %s of pool %s: static pod source %p, want %p", m.Name, m.Pool, m.staticPods, want)
		}
	}
	// Running, it holds the directory's manifests and the inline pod.
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.staticPods[0].Run(ctx) }()
	defer func() { stop(); <-done }()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return f.staticPods[0].HasSynced(), nil }); err != nil {
		t.Fatal("the pool's static pod directory was never read")
	}
	var names []string
	cancel := f.staticPods[0].Subscribe(func(ms []*staticpods.Manifest) {
		for _, m := range ms {
			names = append(names, m.Key())
		}
	})
	cancel()
	if want := []string{"kube-system/etcd", "monitoring/exporter"}; !slices.Equal(names, want) {
		t.Errorf("the pool's static pods %v, want %v", names, want)
	}

	cfg.Pools[1].StaticPods[0].Name = ""
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "pool b: staticPods[0]: invalid pod: name is needed") {
		t.Errorf("a static pod without a name: err = %v", err)
	}
}
