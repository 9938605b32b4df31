package fleet

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/nodeagent"
)

func TestShardNaming(t *testing.T) {
	if got := NodeName(ShardNamePrefix("fleetlet-", 3), "default", 17); got != "fleetlet-3-default-17" {
		t.Errorf("node name %q, want fleetlet-3-default-17", got)
	}
	// Names of different shards never collide, whatever the pools: the
	// ordinal is followed by a dash, so shard 1's pool "1-a" cannot make
	// shard 11's names.
	seen := map[string]int{}
	for ord := range 12 {
		for _, pool := range []string{"a", "1-a", "b"} {
			for i := range 12 {
				name := NodeName(ShardNamePrefix("f-", ord), pool, i)
				if prev, ok := seen[name]; ok && prev != ord {
					t.Fatalf("shards %d and %d both make %s", prev, ord, name)
				}
				seen[name] = ord
			}
		}
	}
}

func TestOrdinalFromName(t *testing.T) {
	for name, want := range map[string]int{"fleetlet-shard-0": 0, "fleetlet-shard-12": 12, "web-3": 3} {
		if got, err := OrdinalFromName(name); err != nil || got != want {
			t.Errorf("OrdinalFromName(%q) = %d, %v; want %d", name, got, err, want)
		}
	}
	for _, name := range []string{"", "fleetlet", "fleetlet-", "fleetlet-x", "fleetlet-01", "fleetlet-1a", "fleetlet-+1"} {
		if _, err := OrdinalFromName(name); err == nil {
			t.Errorf("OrdinalFromName(%q) took it", name)
		}
	}
}

func TestShardFirstIP(t *testing.T) {
	first := netip.MustParseAddr("127.1.0.1")
	for ord, want := range map[int]string{0: "127.1.0.1", 1: "127.3.0.1", 2: "127.5.0.1", MaxLoopbackShards - 1: "127.253.0.1"} {
		got, err := ShardFirstIP(first, ord)
		if err != nil || got.String() != want {
			t.Errorf("ShardFirstIP(%s, %d) = %s, %v; want %s", first, ord, got, err, want)
		}
	}
	// Each range holds more addresses than one process has nodes, and
	// none overlaps the next.
	if shardAddresses < 100_000 {
		t.Errorf("a shard's range holds %d addresses, fewer than one process's 100,000 nodes", shardAddresses)
	}
	if _, err := ShardFirstIP(first, MaxLoopbackShards); err == nil || !strings.Contains(err.Error(), "--pod-ip") {
		t.Errorf("shard %d on loopback: %v, want an error naming --pod-ip", MaxLoopbackShards, err)
	}
	if _, err := ShardFirstIP(netip.MustParseAddr("10.0.0.1"), 0); err == nil {
		t.Error("a first IP off loopback was taken")
	}
}

func TestPodIPModeGivesEachNodeItsPort(t *testing.T) {
	cfg := Config{PodIP: netip.MustParseAddr("10.244.1.7"), KubeletAPI: &KubeletAPIConfig{Port: 10250}, Pools: []NodePool{{Name: "a", Count: 3}}}
	if err := checkAddresses(cfg); err != nil {
		t.Fatal(err)
	}
	f := &Fleet{cfg: cfg}
	f.serving = nil
	if s := f.servingOf(&Member{index: 2}); s != nil {
		t.Errorf("no kubelet API, yet serving %+v", s)
	}
	f.serving = &nodeagent.ServingConfig{Port: 10250}
	for i, want := range []int{10250, 10251, 10252} {
		if got := f.servingOf(&Member{index: i}).Port; got != want {
			t.Errorf("node %d serves on port %d, want %d", i, got, want)
		}
	}
	// On loopback every node has its own address and the same port.
	f.cfg.PodIP = netip.Addr{}
	if got := f.servingOf(&Member{index: 2}).Port; got != 10250 {
		t.Errorf("loopback node 2 serves on %d, want 10250", got)
	}

	cfg.Pools[0].Count = 60000
	if err := checkAddresses(cfg); err == nil || !strings.Contains(err.Error(), "--kubelet-port") {
		t.Errorf("60,000 ports from 10250: %v, want an error naming --kubelet-port", err)
	}
	cfg.PodIP = netip.MustParseAddr("0.0.0.0")
	if err := checkAddresses(cfg); err == nil {
		t.Error("pod IP 0.0.0.0 was taken")
	}
}

// claimOnFakeClock runs ClaimShard on a fake clock, stepping it by a second each
// time the claim waits, and calls during before each step.
func claimOnFakeClock(t *testing.T, cfg ShardLeaseConfig, during func(step int)) (*ShardLease, error) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
	cfg.Clock = clk
	type result struct {
		l   *ShardLease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := ClaimShard(context.Background(), cfg)
		done <- result{l, err}
	}()
	deadline := time.After(30 * time.Second)
	for step := 0; ; {
		select {
		case r := <-done:
			return r.l, r.err
		case <-deadline:
			t.Fatal("ClaimShard did not return")
		default:
		}
		if clk.HasWaiters() {
			if during != nil {
				during(step)
			}
			step++
			clk.Step(time.Second)
		}
		time.Sleep(time.Millisecond)
	}
}

func heldLease(holder string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "fleetlet-shard-fleetlet-0", Namespace: "kube-node-lease"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(40)),
			RenewTime: &metav1.MicroTime{Time: renewed},
		},
	}
}

func TestClaimShard(t *testing.T) {
	cfg := func(client *fake.Clientset, holder string) ShardLeaseConfig {
		return ShardLeaseConfig{Client: client, Namespace: "kube-node-lease", Name: "fleetlet-shard-fleetlet-0", Holder: holder}
	}
	t.Run("free", func(t *testing.T) {
		client := fake.NewClientset()
		l, err := claimOnFakeClock(t, cfg(client, "me"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := ptr.Deref(l.lease.Spec.HolderIdentity, ""); got != "me" {
			t.Errorf("holder %q, want me", got)
		}
	})
	t.Run("released", func(t *testing.T) {
		old := heldLease("", time.Now())
		old.Spec.HolderIdentity = nil
		client := fake.NewClientset(old)
		if _, err := claimOnFakeClock(t, cfg(client, "me"), func(int) { t.Error("waited for a released lease") }); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("live duplicate refused", func(t *testing.T) {
		client := fake.NewClientset(heldLease("other", time.Now()))
		_, err := claimOnFakeClock(t, cfg(client, "me"), func(step int) {
			if step == 3 {
				// The other holder renews, as a live shard does.
				_, err := client.CoordinationV1().Leases("kube-node-lease").Update(context.Background(), heldLease("other", time.Now().Add(time.Minute)), metav1.UpdateOptions{})
				if err != nil {
					t.Error(err)
				}
			}
		})
		if !errors.Is(err, ErrShardClaimed) || !strings.Contains(err.Error(), "other") {
			t.Fatalf("claim beside a live holder: %v, want ErrShardClaimed naming it", err)
		}
	})
	t.Run("dead holder replaced", func(t *testing.T) {
		client := fake.NewClientset(heldLease("dead", time.Now()))
		steps := 0
		l, err := claimOnFakeClock(t, cfg(client, "me"), func(int) { steps++ })
		if err != nil {
			t.Fatal(err)
		}
		if steps < 40 || steps > 42 {
			t.Errorf("took the lease after %d s, want its 40 s duration", steps)
		}
		if got := ptr.Deref(l.lease.Spec.LeaseTransitions, 0); got != 1 {
			t.Errorf("lease transitions %d, want 1", got)
		}
	})
}

func TestShardLeaseRunReleasesAndNoticesATakeover(t *testing.T) {
	client := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Now())
	l, err := ClaimShard(context.Background(), ShardLeaseConfig{Client: client, Namespace: "kube-node-lease", Name: "s", Holder: "me", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got, _ := client.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), "s", metav1.GetOptions{})
	if got.Spec.HolderIdentity != nil {
		t.Errorf("stopped shard left holder %q", *got.Spec.HolderIdentity)
	}

	// Claimed again, then taken by another process: Run says so. On a
	// clock of its own: the fake clock's Ticker.Stop is a no-op, so the
	// first Run's ticker would still count as a waiter, and the step below
	// could come before the second Run's ticker exists.
	clk = clocktesting.NewFakeClock(clk.Now())
	if l, err = ClaimShard(context.Background(), ShardLeaseConfig{Client: client, Namespace: "kube-node-lease", Name: "s", Holder: "me", Clock: clk}); err != nil {
		t.Fatal(err)
	}
	go func() { done <- l.Run(context.Background()) }()
	taken := heldLease("thief", clk.Now())
	taken.Name = "s"
	if _, err := client.CoordinationV1().Leases("kube-node-lease").Update(context.Background(), taken, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(DefaultShardLeaseDuration / 4)
	select {
	case err := <-done:
		if !errors.Is(err, ErrShardClaimed) || !strings.Contains(err.Error(), "thief") {
			t.Errorf("Run after a takeover: %v, want ErrShardClaimed naming the thief", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not notice the takeover")
	}
}
