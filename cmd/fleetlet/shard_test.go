package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/loadprofiles"
	"github.com/fleetlet/fleetlet/reports"
)

func shardSettings(kv map[string]any) *viper.Viper {
	v := viper.New()
	v.Set("shard-port", defaultShardPort)
	for k, val := range kv {
		v.Set(k, val)
	}
	return v
}

func TestShardIdentity(t *testing.T) {
	host := func(name string) func() (string, error) { return func() (string, error) { return name, nil } }
	noHost := func() (string, error) { return "", errors.New("no uts") }
	for _, tc := range []struct {
		name     string
		settings map[string]any
		hostname func() (string, error)
		ordinal  int
		addr     string
	}{
		{"from the hostname", nil, host("fleetlet-shard-3"), 3, "127.0.0.1:7073"},
		{"pod name before hostname", map[string]any{"pod-name": "fleetlet-shard-5"}, host("node-a"), 5, "127.0.0.1:7075"},
		{"flag before both", map[string]any{"shard-ordinal": "7", "pod-name": "fleetlet-shard-5"}, host("x-1"), 7, "127.0.0.1:7077"},
		{"in a pod: its IP, the port as is", map[string]any{"shard-ordinal": "2", "pod-ip": "10.244.0.9"}, noHost, 2, "10.244.0.9:7070"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := shardIdentityFrom(shardSettings(tc.settings), tc.hostname)
			if err != nil {
				t.Fatal(err)
			}
			if id.Ordinal != tc.ordinal || id.Addr != tc.addr {
				t.Errorf("ordinal %d at %s, want %d at %s", id.Ordinal, id.Addr, tc.ordinal, tc.addr)
			}
			if id.Holder == "" {
				t.Error("no lease holder identity")
			}
		})
	}
	// Every process is a holder of its own, even under one hostname.
	a, _ := shardIdentityFrom(shardSettings(nil), host("s-0"))
	b, _ := shardIdentityFrom(shardSettings(nil), host("s-0"))
	if a.Holder == b.Holder {
		t.Errorf("two processes share holder %q", a.Holder)
	}

	for _, tc := range []struct {
		name     string
		settings map[string]any
		hostname func() (string, error)
		want     string
	}{
		{"hostname without ordinal", nil, host("laptop"), "--shard-ordinal"},
		{"no hostname", nil, noHost, "--shard-ordinal"},
		{"bad pod name", map[string]any{"pod-name": "shard"}, host("x-1"), "--pod-name"},
		{"negative ordinal", map[string]any{"shard-ordinal": "-2"}, host("x-1"), "non-negative"},
		{"ordinal not a number", map[string]any{"shard-ordinal": "one"}, host("x-1"), "non-negative"},
		{"bad pod IP", map[string]any{"shard-ordinal": "0", "pod-ip": "pod"}, host("x-1"), "--pod-ip"},
		{"bad port", map[string]any{"shard-ordinal": "0", "shard-port": 0}, host("x-1"), "--shard-port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := shardIdentityFrom(shardSettings(tc.settings), tc.hostname)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %v, want one line naming %s", err, tc.want)
			}
		})
	}
}

func TestShardAddrsFromStatefulSet(t *testing.T) {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "fleetlet-shard", Namespace: "fleetlet", UID: "sts-uid"}}
	owner := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID, Controller: ptr.To(true)}}
	pod := func(name, ip string, hostNet bool, phase corev1.PodPhase) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "fleetlet", OwnerReferences: owner},
			Spec: corev1.PodSpec{HostNetwork: hostNet, Containers: []corev1.Container{{
				Name: "fleetlet", Ports: []corev1.ContainerPort{{Name: "shard", ContainerPort: 7080}},
			}}},
			Status: corev1.PodStatus{PodIP: ip, Phase: phase},
		}
	}
	stranger := pod("fleetlet-shard-9", "10.0.0.9", false, corev1.PodRunning)
	stranger.OwnerReferences = nil
	got := shardAddrs(sts, []corev1.Pod{
		pod("fleetlet-shard-1", "10.0.0.2", false, corev1.PodRunning),
		pod("fleetlet-shard-0", "10.0.0.1", false, corev1.PodRunning),
		pod("fleetlet-shard-2", "", false, corev1.PodPending),
		stranger,
	})
	if want := []string{"10.0.0.1:7080", "10.0.0.2:7080"}; !equalStrings(got, want) {
		t.Errorf("pod network: %v, want %v", got, want)
	}
	// Host networking: one address for the node's shards, the port plus
	// the ordinal, as they listen.
	got = shardAddrs(sts, []corev1.Pod{
		pod("fleetlet-shard-0", "127.0.0.1", true, corev1.PodRunning),
		pod("fleetlet-shard-1", "127.0.0.1", true, corev1.PodRunning),
	})
	if want := []string{"127.0.0.1:7080", "127.0.0.1:7081"}; !equalStrings(got, want) {
		t.Errorf("host network: %v, want %v", got, want)
	}
}

func equalStrings(a, b []string) bool {
	return strings.Join(a, ",") == strings.Join(b, ",")
}

func TestShardsFlagsBadInput(t *testing.T) {
	faulty := &loadprofiles.Profile{Name: "f", Phases: []loadprofiles.Phase{{Fault: &loadprofiles.FaultPhase{Kind: "nodeDown"}}}}
	plain := &loadprofiles.Profile{Name: "p"}
	for _, tc := range []struct {
		name     string
		settings map[string]any
		profile  *loadprofiles.Profile
		want     string
	}{
		{"both", map[string]any{"shards": "a:1", "shards-from": "ns/s", "kubeconfig": "k"}, plain, "give one"},
		{"no kubeconfig", map[string]any{"shards": "a:1"}, plain, "--kubeconfig"},
		{"faults", map[string]any{"shards": "a:1", "kubeconfig": "k"}, faulty, "fault phases"},
		{"no port", map[string]any{"shards": "a", "kubeconfig": "k"}, plain, "host:port"},
		{"twice", map[string]any{"shards": "a:1,a:1", "kubeconfig": "k"}, plain, "twice"},
		{"empty", map[string]any{"shards": ",", "kubeconfig": "k"}, plain, "empty"},
		{"host kubeconfig alone", map[string]any{"shards-kubeconfig": "h"}, plain, "--shards-from"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := viper.New()
			for k, val := range tc.settings {
				v.Set(k, val)
			}
			t.Setenv("KUBECONFIG", "")
			_, err := shardsFrom(v, tc.profile)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
	if _, err := newStatefulSetShards(fake.NewClientset(), "fleetlet"); err == nil || !strings.Contains(err.Error(), "<namespace>/<statefulset>") {
		t.Errorf("--shards-from without a namespace: %v", err)
	}
}

// fakeShard serves a shard's endpoint from a Collector of its own, whose
// clock runs offset ahead of the driver's.
func fakeShard(t *testing.T, c *reports.Collector, offset time.Duration, info shardInfo, rep *reports.Report) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+shardInfoPath, func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, info) })
	mux.HandleFunc("GET "+shardClockPath, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, shardClock{Now: c.Now().Add(offset)})
	})
	mux.HandleFunc("GET "+shardStampsPath, func(w http.ResponseWriter, _ *http.Request) {
		s := c.Export()
		s.Base = s.Base.Add(offset)
		writeJSON(w, s)
	})
	mux.HandleFunc("GET "+shardReportPath, func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, rep) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// TestShardSetMergesAcrossProcesses drives the driver's side against two
// fake shards whose clocks run 2 s ahead and 3 s behind: the phases that
// cross processes come out as they happened, the offsets are measured,
// and the shards' counts are in the one report.
func TestShardSetMergesAcrossProcesses(t *testing.T) {
	driver := reports.NewCollector()
	var srvs []*httptest.Server
	var shardReps []*reports.Report
	for i, offset := range []time.Duration{2 * time.Second, -3 * time.Second} {
		c := reports.NewCollector()
		uid := types.UID("pod-" + string(rune('a'+i)))
		now := driver.Now()
		// The driver saw the pod scheduled; the agent, 40 ms later on
		// the driver's clock, took it; Running reported 300 ms after.
		driver.Mark(uid, reports.Created, now.Add(-time.Second))
		driver.Mark(uid, reports.Scheduled, now)
		// The shard's Collector stamps on its own clock: this process's
		// clock here, which the fake shard shifts by offset on the wire.
		c.Mark(uid, reports.AgentObserved, now.Add(40*time.Millisecond))
		c.Mark(uid, reports.RunningReported, now.Add(340*time.Millisecond))
		driver.Mark(uid, reports.RunningObserved, now.Add(400*time.Millisecond))
		rep := &reports.Report{Nodes: 3, API: leaseUpdates(t, 10)}
		shardReps = append(shardReps, rep)
		srvs = append(srvs, fakeShard(t, c, offset, shardInfo{Ordinal: i, Ready: true, Nodes: []string{"n", "m", "o"}, Holder: "h"}, rep))
	}
	list := strings.TrimPrefix(srvs[0].URL, "http://") + "," + strings.TrimPrefix(srvs[1].URL, "http://")
	set, err := newShardSet(list)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	names, err := set.wait(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 6 {
		t.Errorf("nodes %v, want the shards' 6", names)
	}
	if err := set.measureStart(ctx, driver.Now); err != nil {
		t.Fatal(err)
	}
	got, clocks, errs := set.collect(ctx, driver)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if len(got) != 2 || len(clocks) != 2 {
		t.Fatalf("%d reports and %d clocks, want 2 each", len(got), len(clocks))
	}
	for i, want := range []float64{2, -3} {
		for _, m := range []reports.ClockMeasurement{clocks[i].Start, clocks[i].End} {
			if d := m.OffsetSeconds - want; d > 0.01 || d < -0.01 {
				t.Errorf("shard %d offset %.6f s, want %.0f s", i, m.OffsetSeconds, want)
			}
		}
		if clocks[i].Pods != 1 || clocks[i].Nodes != 3 {
			t.Errorf("shard %d clock %+v, want 1 pod and 3 nodes", i, clocks[i])
		}
	}
	phases := map[string]reports.PhaseSummary{}
	for _, p := range reports.Summaries(driver.Phases(reports.DefaultPhases)) {
		phases[p.Name] = p
	}
	// 40 ms across processes, within what the offset's uncertainty allows
	// (a loopback round trip).
	if p := phases["scheduled_to_agent_observed"]; p.Count != 2 || p.MaxMs < 30 || p.MaxMs > 50 {
		t.Errorf("scheduled_to_agent_observed %+v, want 2 pods at about 40 ms", p)
	}
	if p := phases["agent_observed_to_running_reported"]; p.Count != 2 || p.MaxMs < 299 || p.MaxMs > 301 {
		t.Errorf("agent_observed_to_running_reported %+v, want 300 ms exactly (one process)", p)
	}

	driverRep := &reports.Report{Profile: "p", Nodes: 6, Fleet: reports.FleetStats{PeakRSSBytes: 1}}
	driverRep.EvaluateSLOs(reports.SLOThresholds{})
	merged := mergeShardReports(driverRep, got, clocks, []error{errors.New("shard x: gone")})
	if merged.Nodes != 6 || len(merged.Shards) != 2 {
		t.Errorf("merged %d nodes, %d shards; want 6 and 2", merged.Nodes, len(merged.Shards))
	}
	var leases int64
	for _, a := range merged.API {
		if a.Resource == "leases" {
			leases += a.Count
		}
	}
	if leases != 20 {
		t.Errorf("merged lease updates %d, want the shards' 20", leases)
	}
	if !strings.Contains(strings.Join(merged.Errors, "\n"), "shard x: gone") {
		t.Errorf("errors %v, want the unreadable shard's", merged.Errors)
	}
	if merged.Fleet.PeakRSSBytes != 0 {
		t.Errorf("fleet RSS %d, want only the shards' (0 here), not the driver's", merged.Fleet.PeakRSSBytes)
	}
}

// leaseUpdates are an APICounter's stats of n lease updates.
func leaseUpdates(t *testing.T, n int) []reports.APIStat {
	t.Helper()
	counter := reports.NewAPICounter()
	rt := counter.Wrap(roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}}, nil
	}))
	for range n {
		req, _ := http.NewRequest(http.MethodPut, "https://apiserver/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n", http.NoBody)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	return counter.Snapshot()
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestMergeNetworkProgrammingNodes(t *testing.T) {
	rep := func(n int, med, max float64, worst string) *reports.Report {
		return &reports.Report{NetworkProgrammingNodes: &reports.NetworkProgrammingNodes{Nodes: n, P99MedianMs: med, P99MaxMs: max, WorstNode: worst}}
	}
	got := mergeNetworkProgrammingNodes([]*reports.Report{rep(10, 100, 300, "a"), rep(30, 200, 900, "b"), {}})
	if got == nil || got.Nodes != 40 || got.P99MaxMs != 900 || got.WorstNode != "b" || got.P99MedianMs != 200 {
		t.Errorf("merged %+v, want 40 nodes, worst b at 900 ms, median 200 ms", got)
	}
	if mergeNetworkProgrammingNodes([]*reports.Report{{}}) != nil {
		t.Error("no kube-proxy, yet a per-node summary")
	}
}
