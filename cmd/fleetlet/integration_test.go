//go:build integration

package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/fleetlet/fleetlet/internal/testutil"
	"github.com/fleetlet/fleetlet/loadprofiles"
	"github.com/fleetlet/fleetlet/reports"
)

// binDir finds the control plane binaries that `make controlplane` builds.
func binDir(t *testing.T) string { return testutil.BinDir(t, "kube-apiserver", "controlplane") }

// startTestSession loads a built-in profile, keeps only the phases keep
// accepts (the tests delete pods themselves, to look at them first), and
// starts its fleet on the shared control plane; the session closes with
// the test, which then removes the fleet's nodes and pods.
func startTestSession(ctx context.Context, t *testing.T, name string, keep func(loadprofiles.Phase) bool) *profileRun {
	t.Helper()
	profile, err := loadprofiles.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	var phases []loadprofiles.Phase
	for _, ph := range profile.Phases {
		if keep(ph) {
			phases = append(phases, ph)
		}
	}
	profile.Phases = phases
	return startProfileSession(ctx, t, profile, name)
}

// startProfileSession starts profile's fleet on the shared control plane,
// with node names made from name; the session closes with the test, which
// then removes the fleet's nodes and pods.
func startProfileSession(ctx context.Context, t *testing.T, profile *loadprofiles.Profile, name string) *profileRun {
	t.Helper()
	opts, err := optionsFrom(testSettings(t, criInProc), profile, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	opts.Schedulable = true
	sharedFleet(t, &opts, name)
	r, err := startRun(ctx, opts)
	if r != nil {
		t.Cleanup(func() {
			var nodes []string
			if r.fleet != nil {
				nodes = r.fleet.NodeNames()
			}
			if err := r.Close(); err != nil {
				t.Errorf("closing the session: %v", err)
			}
			if r.client != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				removeFleet(ctx, t, r.client, nodes)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// testSettings are fleetSettings with the control plane's binaries.
func testSettings(t *testing.T, cri string) *viper.Viper {
	v := fleetSettings(cri)
	v.Set("bin-dir", binDir(t))
	return v
}

func condition(conds []corev1.PodCondition, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range conds {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// TestFleetAgainstRealControlPlane runs the smoke profile's 20 nodes and
// 200 pods against the real kube-apiserver, kube-scheduler and
// kube-controller-manager, and checks what the agents did through the API:
// nodes Ready with pod CIDRs, leases renewed, pods Running with the kubelet's
// conditions and events, graceful deletion finished by the agents, and a
// report whose counts add up.
func TestFleetAgainstRealControlPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	const nodes, pods = 20, 200
	s := startTestSession(ctx, t, "smoke", func(ph loadprofiles.Phase) bool { return ph.Create != nil || ph.WaitRunning != nil })
	if err := s.drive(ctx); err != nil {
		t.Fatal(err)
	}
	client := s.client

	nodeList, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeList.Items = ownNodes(s, nodeList.Items)
	if len(nodeList.Items) != nodes {
		t.Fatalf("%d nodes registered, want %d", len(nodeList.Items), nodes)
	}
	podList, err := client.CoreV1().Pods(loadprofiles.DefaultNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(podList.Items) != pods {
		t.Fatalf("%d pods, want %d", len(podList.Items), pods)
	}
	// Each concern is a subtest of its own, so that one failure does not
	// hide the others; the graceful deletion and the report come last, as
	// they change and then sum up what the others look at.
	podCIDRs := map[string]*net.IPNet{}
	nodeIPs := map[string]string{}
	t.Run("nodes Ready with pod CIDRs and addresses of their own", func(t *testing.T) {
		for _, n := range nodeList.Items {
			if nodeReady(&n) != corev1.ConditionTrue {
				t.Errorf("node %s is not Ready: %v", n.Name, n.Status.Conditions)
			}
			_, cidr, err := net.ParseCIDR(n.Spec.PodCIDR)
			if err != nil {
				t.Errorf("node %s has no pod CIDR from the controller-manager: %q", n.Name, n.Spec.PodCIDR)
				continue
			}
			podCIDRs[n.Name] = cidr
			ip := n.Status.Addresses[0].Address
			if !net.ParseIP(ip).IsLoopback() || nodeIPs[ip] != "" {
				t.Errorf("node %s InternalIP %s: want a loopback address of its own", n.Name, ip)
			}
			nodeIPs[ip] = n.Name
		}
	})

	t.Run("pods Running with the kubelet's conditions and status", func(t *testing.T) {
		for _, p := range podList.Items {
			if p.Status.Phase != corev1.PodRunning {
				t.Errorf("pod %s is %s", p.Name, p.Status.Phase)
			}
			for _, c := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
				if condition(p.Status.Conditions, c) != corev1.ConditionTrue {
					t.Errorf("pod %s condition %s = %q, want True", p.Name, c, condition(p.Status.Conditions, c))
				}
			}
			if cidr := podCIDRs[p.Spec.NodeName]; cidr == nil || !cidr.Contains(net.ParseIP(p.Status.PodIP)) {
				t.Errorf("pod %s IP %s is not in node %s's pod CIDR %v", p.Name, p.Status.PodIP, p.Spec.NodeName, cidr)
			}
			if nodeIPs[p.Status.HostIP] != p.Spec.NodeName {
				t.Errorf("pod %s hostIP %s is not its node %s's", p.Name, p.Status.HostIP, p.Spec.NodeName)
			}
			if p.Status.StartTime == nil || len(p.Status.ContainerStatuses) != 1 {
				t.Errorf("pod %s: startTime %v, %d container statuses", p.Name, p.Status.StartTime, len(p.Status.ContainerStatuses))
				continue
			}
			cs := p.Status.ContainerStatuses[0]
			if cs.State.Running == nil || !cs.Ready || !strings.HasPrefix(cs.ContainerID, "fleetlet-fake://") || cs.ImageID == "" {
				t.Errorf("pod %s container status %+v", p.Name, cs)
			}
		}
	})

	first := podList.Items[0]
	t.Run("the kubelet's events", func(t *testing.T) {
		events, err := client.CoreV1().Events(first.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + first.Name})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range events.Items {
			if e.Source.Component == "kubelet" && e.Source.Host == first.Spec.NodeName {
				seen[e.Reason] = true
			}
		}
		for _, reason := range []string{"Pulled", "Created", "Started"} {
			if !seen[reason] {
				t.Errorf("pod %s: no %s event from its node's kubelet (got %v)", first.Name, reason, seen)
			}
		}
	})

	t.Run("the kubelet API", func(t *testing.T) {
		checkKubeletAPI(ctx, t, s, &first, nodeList)
	})

	t.Run("one lease per node, renewed", func(t *testing.T) {
		leases, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		names := s.fleet.NodeNames()
		leases.Items = slices.DeleteFunc(leases.Items, func(l coordinationv1.Lease) bool { return !slices.Contains(names, l.Name) })
		if len(leases.Items) != nodes {
			t.Fatalf("%d leases, want %d", len(leases.Items), nodes)
		}
		firstRenew := map[string]time.Time{}
		for _, l := range leases.Items {
			firstRenew[l.Name] = l.Spec.RenewTime.Time
		}
		err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, false, func(ctx context.Context) (bool, error) {
			leases, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, l := range leases.Items {
				if first, ok := firstRenew[l.Name]; ok && !l.Spec.RenewTime.Time.After(first) {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Errorf("not every lease was renewed within 2 minutes: %v", err)
		}
	})

	t.Run("graceful deletion finished by the agents", func(t *testing.T) {
		// Graceful deletion: the API server marks the pods, the agents stop the
		// containers and delete the objects with grace 0.
		if err := client.CoreV1().Pods(loadprofiles.DefaultNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			left, err := client.CoreV1().Pods(loadprofiles.DefaultNamespace).List(ctx, metav1.ListOptions{})
			return err == nil && len(left.Items) == 0, nil
		})
		if err != nil {
			t.Errorf("pods still present 3 minutes after their deletion: the agents did not finish it")
		}
	})

	t.Run("the report's counts", func(t *testing.T) {
		rep := s.report(nil, nil)
		if rep.Nodes != nodes || rep.Pods.Created != pods || rep.Pods.Running != pods {
			t.Errorf("report: %d nodes, %d pods created, %d running; want %d, %d, %d", rep.Nodes, rep.Pods.Created, rep.Pods.Running, nodes, pods, pods)
		}
		for _, ph := range rep.Phases {
			want := pods
			if ph.Name == "delete_to_gone" {
				want = 0 // the driver did not delete: the test did
			}
			if ph.Count != want || ph.Anomalies != 0 {
				t.Errorf("phase %s: %d pods, %d anomalies; want %d and none", ph.Name, ph.Count, ph.Anomalies, want)
			}
			if want > 0 && (ph.P99Ms <= 0 && ph.Name != "running_reported_to_ready_reported" || ph.MaxMs > 120_000) {
				t.Errorf("phase %s: p99 %.1f ms, max %.1f ms: implausible", ph.Name, ph.P99Ms, ph.MaxMs)
			}
		}
		apiCount := map[string]int64{}
		for _, a := range rep.API {
			apiCount[a.Verb+" "+a.Label()] += a.Count
		}
		// What each agent must have sent, at the least: its Node created
		// once and its status patched; every lease renewed (the subtest
		// above waited for that); each pod's status patched to Running and
		// the pod deleted once the agent finished its graceful deletion;
		// a pod watch per agent (per-node watch mode).
		for key, want := range map[string]int64{
			"create nodes": nodes, "patch nodes/status": nodes, "update leases.coordination.k8s.io": nodes,
			"patch pods/status": pods, "watch pods": nodes, "delete pods": pods,
		} {
			if got := apiCount[key]; got < want {
				t.Errorf("report counts %d %q requests from the fleet, want at least %d", got, key, want)
			}
		}
	})
}

// checkKubeletAPI reads a pod's logs through the API server, as kubectl
// logs does, and a node's /stats/summary directly with the admin's client
// certificate, as metrics-server does (the API server's node proxy refuses
// loopback node addresses); the same request without credentials is
// refused.
func checkKubeletAPI(ctx context.Context, t *testing.T, s *profileRun, pod *corev1.Pod, nodes *corev1.NodeList) {
	t.Helper()
	logs, err := s.client.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || len(logs) == 0 {
		t.Errorf("logs of pod %s: %q, %v", pod.Name, logs, err)
	}
	var node *corev1.Node
	for i := range nodes.Items {
		if nodes.Items[i].Name == pod.Spec.NodeName {
			node = &nodes.Items[i]
		}
	}
	url := "https://" + net.JoinHostPort(node.Status.Addresses[0].Address, strconv.Itoa(int(node.Status.DaemonEndpoints.KubeletEndpoint.Port))) + "/stats/summary"

	tlsCfg, err := rest.TLSConfigFor(s.cluster.admin)
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet's serving certificate is self-signed, as a kubelet's is
	// by default.
	tlsCfg.RootCAs, tlsCfg.InsecureSkipVerify = nil, true
	authorized := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	resp, err := authorized.Get(url)
	if err != nil {
		t.Fatalf("GET %s with the admin's certificate: %v", url, err)
	}
	var summary statsapi.Summary
	err = json.NewDecoder(resp.Body).Decode(&summary)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err != nil || summary.Node.NodeName != pod.Spec.NodeName || len(summary.Pods) == 0 {
		t.Errorf("GET %s: %s, node %q with %d pods, decode error %v", url, resp.Status, summary.Node.NodeName, len(summary.Pods), err)
	}

	anonymous := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if resp, err = anonymous.Get(url); err != nil {
		t.Fatalf("anonymous GET %s: %v", url, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous GET %s: %s, want 401", url, resp.Status)
	}
}

// runProfileYAML writes profile to a file of a temporary directory, runs
// it with `fleetlet run` on a control plane of its own and the cri
// runtime, and returns its report and the directory (its out/ holds the
// run's files).
func runProfileYAML(ctx context.Context, t *testing.T, cri, profile string) (*reports.Report, string) {
	t.Helper()
	dir := t.TempDir()
	profilePath := filepath.Join(dir, "profile.yaml")
	if err := os.WriteFile(profilePath, []byte(profile), 0o644); err != nil {
		t.Fatal(err)
	}
	v := testSettings(t, cri)
	v.Set("profile", profilePath)
	v.Set("out", filepath.Join(dir, "out"))
	if err := run(ctx, v); err != nil {
		t.Fatal(err)
	}
	rep, err := reports.ReadJSON(filepath.Join(dir, "out", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	return rep, dir
}

// TestRunWritesReport runs the whole `fleetlet run` path with a profile file
// and the fake runtime behind unix sockets, and checks report.json.
func TestRunWritesReport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, dir := runProfileYAML(ctx, t, criFakeSocket, `name: tiny
watchMode: shared
nodePools:
  - name: pool
    count: 3
runtime:
  pullLatency: 50ms
  sandboxStartLatency: 20ms
phases:
  - create:
      count: 12
      qps: 20
      template:
        spec:
          containers: [{name: app, image: registry.k8s.io/pause:3.10}]
  - waitRunning: {timeout: 2m}
  - delete: {qps: 20}
  - waitGone: {timeout: 2m}
`)
	if rep.Profile != "tiny" || rep.Nodes != 3 || rep.Pods != (reports.PodCounts{Created: 12, Running: 12, Deleted: 12, Gone: 12}) {
		t.Errorf("report: profile %s, %d nodes, pods %+v", rep.Profile, rep.Nodes, rep.Pods)
	}
	if rep.Settings["cri"] != criFakeSocket || rep.Settings["watch-mode"] != "shared" {
		t.Errorf("settings %v do not say the CRI endpoint and the watch mode differ from the defaults", rep.Settings)
	}
	if len(rep.Errors) != 0 {
		t.Errorf("errors: %v", rep.Errors)
	}
	if len(rep.SLIs) == 0 || rep.SLIs[len(rep.SLIs)-1].Count == 0 {
		t.Errorf("SLIs not measured: %+v", rep.SLIs)
	}
	if len(rep.APIServerLatency) == 0 || len(rep.SLOs) == 0 || rep.Failed() {
		t.Errorf("apiserver latency rows %d, SLO results %v", len(rep.APIServerLatency), rep.SLOs)
	}
	if rep.Scheduling.SchedulerScheduled < 12 || rep.Scheduling.Pods != 12 {
		t.Errorf("scheduling: %+v, want the scheduler's and our count of 12 bindings", rep.Scheduling)
	}
	// A run this short ends before most first lease updates (10 s after the
	// lease is created); renewal lateness is checked by the bench test. The
	// shared watch mode serves the 3 agents from the fleet's nine watches,
	// whatever its size: pods, Nodes, and the kubelets' Services,
	// RuntimeClasses, CSIDrivers and PodCertificateRequests; the
	// kube-proxies' Services, EndpointSlices and ServiceCIDRs. ConfigMaps
	// are read with the Cache strategy there, so none is watched.
	if hb := rep.Heartbeat; hb == nil || hb.NodeStatusPatchesPerSecond <= 0 || hb.OpenWatches != 9 || hb.BytesReceivedPerSecond <= 0 {
		t.Errorf("heartbeats: %+v, want node status patches and the shared informers' 9 watches", rep.Heartbeat)
	}
	if rep.Series.Pods.Running == nil || len(rep.Series.API.Verbs) == 0 {
		t.Errorf("series not filled: %+v", rep.Series)
	}
	if rep.Fleet.PeakRSSBytes <= 0 || rep.Fleet.CPUSeconds <= 0 {
		t.Errorf("fleet stats: %+v", rep.Fleet)
	}
	for _, name := range []string{"report.md", "report.html"} {
		if fi, err := os.Stat(filepath.Join(dir, "out", name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s not written: %v", name, err)
		}
	}
}

// TestRunFailsItsSLOsWithTheReportOnDisk gives a run an SLO no run can meet:
// it must exit with an error naming the SLO, after writing its report. It
// runs on the shared control plane as on any existing cluster, through
// --kubeconfig.
func TestRunFailsItsSLOsWithTheReportOnDisk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	profilePath := filepath.Join(dir, "strict.yaml")
	if err := os.WriteFile(profilePath, []byte(`name: strict
nodePools: [{name: pool, count: 2}]
slos: {podStartupP99: 1us}
phases:
  - create: {count: 4, qps: 20, template: {spec: {containers: [{name: app, image: registry.k8s.io/pause:3.10}]}}}
  - waitRunning: {timeout: 2m}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	v, opts := sharedFleetSettings(t, "strict")
	v.Set("profile", profilePath)
	v.Set("out", filepath.Join(dir, "out"))
	err := run(ctx, v)
	t.Cleanup(func() {
		client, err := kubernetes.NewForConfig(opts.ControlPlane.AdminRESTConfig())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		removeFleet(ctx, t, client, []string{opts.NodePrefix + "pool-0", opts.NodePrefix + "pool-1"})
	})
	if err == nil || !strings.Contains(err.Error(), "SLO") {
		t.Fatalf("err = %v, want the run to fail its SLOs", err)
	}
	rep, rerr := reports.ReadJSON(filepath.Join(dir, "out", "report.json"))
	if rerr != nil {
		t.Fatalf("no report after a failed SLO: %v", rerr)
	}
	if !rep.Failed() || rep.Pods.Running != 4 {
		t.Errorf("report: failed %v, %d running", rep.Failed(), rep.Pods.Running)
	}
}

func TestRunRejectsUnreachableCluster(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	v := testSettings(t, criInProc)
	v.Set("kubeconfig", kubeconfig)
	v.Set("profile", "smoke")
	v.Set("out", filepath.Join(dir, "out"))
	err := run(context.Background(), v)
	if err == nil || !strings.Contains(err.Error(), "unreachable") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err = %v, want one line saying the API server is unreachable", err)
	}
}

func nodeReady(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}
