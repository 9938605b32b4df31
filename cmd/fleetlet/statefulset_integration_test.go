//go:build integration

package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/fleetlet/fleetlet/fleet"
	"github.com/fleetlet/fleetlet/internal/testutil"
	"github.com/fleetlet/fleetlet/reports"
)

// The StatefulSet test's fleet: deploy/shards' names, 2 shards of 20 nodes
// each, on loopback addresses from 127.220.0.1 (shard 1 from 127.222.0.1),
// a range no other test uses.
const (
	stsNamespace     = "fleetlet"
	stsName          = "fleetlet-shard"
	stsShards        = 2
	stsNodesPerShard = 20
	stsFirstIP       = "127.220.0.1"
)

// TestShardsAsStatefulSet runs the fleet as deploy/ describes it: the
// shards are the pods of deploy/shards' StatefulSet, running the image of
// `make image`, on a real node: `fleetlet agent` on a local containerd,
// registered with the embedded control plane, which is both the host and
// the target cluster. deploy/target's RBAC gives the shards their identity
// (the kubeconfig in the Secret is its ServiceAccount's token). An overlay
// written here, over the real bases, puts the shards on the host's network
// (so that they reach the API server on loopback), on the real node, with
// loopback node addresses and 20 nodes each. The test waits for the 40
// nodes, checks that `--shards-from` finds each shard on its host-network
// port, drives 200 pods on them with `fleetlet run --shards-from` and
// checks the merged report, then deletes a shard's pod: the StatefulSet
// makes another, which takes its ordinal and its 20 nodes back under the
// same names.
func TestShardsAsStatefulSet(t *testing.T) {
	if reason := realRuntimeUnavailable(); reason != "" {
		t.Skip(reason)
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bins := binDir(t)
	kubectlBin := filepath.Join(testutil.BinDir(t, "kubectl", "controlplane"), "kubectl")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// With host networking every shard listens on 127.0.0.1:7070+ordinal.
	for ord := range stsShards {
		addr := fmt.Sprintf("127.0.0.1:%d", defaultShardPort+ord)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the shards listen on %s with host networking, and it is taken: %v; stop what holds it", addr, err)
		}
		_ = l.Close()
	}

	// The image, as a user builds it; make and Go rebuild only what is
	// stale.
	imageTar := buildShardImage(t, root)
	setupBegan := time.Now()

	// containerd under a short directory: socket paths are limited to 108
	// bytes.
	dir, err := os.MkdirTemp("", "fltsts-")
	if err != nil {
		t.Fatal(err)
	}
	var cgroupRoot string
	var sandboxIDs []string
	t.Cleanup(func() {
		if _, err := hackScript(t, "down.sh", dir); err != nil {
			t.Errorf("down.sh: %v", err)
		}
		if left := leftovers(dir, cgroupRoot, sandboxIDs); len(left) > 0 {
			t.Errorf("down.sh left behind:\n%s", strings.Join(left, "\n"))
		}
		// The shards' processes are not named by dir: their command line
		// and their ports tell whether any survived.
		if left := shardUIDs(t); len(left) > 0 {
			t.Errorf("%d shard processes (/fleetlet fleet --shard) left after the cleanup", len(left))
		}
		for ord := range stsShards {
			addr := fmt.Sprintf("127.0.0.1:%d", defaultShardPort+ord)
			if l, err := net.Listen("tcp", addr); err != nil {
				t.Errorf("a shard still listens on %s after the cleanup: %v", addr, err)
			} else {
				_ = l.Close()
			}
		}
		_ = os.RemoveAll(dir)
		t.Logf("TestShardsAsStatefulSet: wall time %v", time.Since(began).Round(time.Second))
	})
	socket, err := hackScript(t, "up.sh", dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup-root"))
	if err != nil {
		t.Fatal(err)
	}
	cgroupRoot = strings.TrimSpace(string(b))
	importStart := time.Now()
	if out, err := exec.CommandContext(ctx, "ctr", "-a", socket, "-n", "k8s.io", "images", "import", imageTar).CombinedOutput(); err != nil {
		t.Fatalf("ctr images import %s: %v\n%s", imageTar, err, out)
	}
	out, err := exec.CommandContext(ctx, "ctr", "-a", socket, "-n", "k8s.io", "images", "ls").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("fleetlet.io/fleetlet:latest")) {
		t.Fatalf("ctr images ls after the import: %v\n%s", err, out)
	}
	t.Logf("image imported into containerd in %v", time.Since(importStart).Round(time.Millisecond))

	// The embedded control plane: the host cluster and the target.
	cl, err := openCluster(ctx, "", bins, filepath.Join(t.TempDir(), "controlplane"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Stop() })
	client, err := kubernetes.NewForConfig(cl.admin)
	if err != nil {
		t.Fatal(err)
	}

	// The real node: `fleetlet agent` on containerd, at 127.0.0.1 so that
	// its pods on the host's network (the shards) have that address.
	v := viper.New()
	if err := viperFromAgentFlags(v); err != nil {
		t.Fatal(err)
	}
	podLogs := filepath.Join(dir, "pod-logs")
	v.Set("cri-endpoint", "unix://"+socket)
	v.Set("kubeconfig", cl.kubeconfig)
	v.Set("root-dir", filepath.Join(dir, "kubelet"))
	v.Set("pod-logs-dir", podLogs)
	v.Set("cgroup-root", cgroupRoot)
	v.Set("kubelet-port", 0)
	v.Set("node-ip", "127.0.0.1")
	opts, err := agentOptionsFrom(v)
	if err != nil {
		t.Fatal(err)
	}
	cri, err := dialCRI(ctx, opts.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cri.Close() })
	nodeCfg, err := cl.nodeConfig(opts.NodeName)
	if err != nil {
		t.Fatal(err)
	}
	agentCtx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan error, 1)
	go func() { agentDone <- runAgent(agentCtx, opts, cri, nodeCfg, reports.Discard{}) }()
	t.Cleanup(func() {
		stopAgent()
		if err := <-agentDone; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, opts.NodeName, metav1.GetOptions{})
		return err == nil && nodeReady(n) == corev1.ConditionTrue, nil
	})
	if err != nil {
		t.Fatalf("the real node %s not Ready: %v", opts.NodeName, err)
	}
	t.Logf("real node %s Ready; containerd, control plane and agent up %v after the image", opts.NodeName, time.Since(setupBegan).Round(time.Millisecond))

	// What the test leaves on containerd is the shards' pods: they are
	// deleted while the agent still runs (t.Cleanup runs in reverse), so
	// that their containers stop as a node's do.
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer ccancel()
		if sbs, err := cri.Runtime.ListPodSandbox(cctx, nil); err == nil {
			for _, sb := range sbs {
				sandboxIDs = append(sandboxIDs, sb.Id)
			}
		}
		kubectl(t, kubectlBin, cl.kubeconfig, "-n", stsNamespace, "delete", "statefulset", stsName, "--ignore-not-found", "--wait=false")
		err := wait.PollUntilContextTimeout(cctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			pods, err := client.CoreV1().Pods(stsNamespace).List(ctx, metav1.ListOptions{})
			if err != nil || len(pods.Items) > 0 {
				return false, nil
			}
			sbs, err := cri.Runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}})
			return err == nil && len(sbs) == 0, nil
		})
		if err != nil {
			t.Errorf("the shards' pods or sandboxes were left 2 minutes after the StatefulSet's deletion: %v", err)
		}
	})

	// The target's RBAC, and the shards' kubeconfig from its
	// ServiceAccount's token, as deploy/target/kustomization.yaml says.
	kubectl(t, kubectlBin, cl.kubeconfig, "apply", "-k", filepath.Join(root, "deploy", "target"))
	overlay := t.TempDir()
	writeTargetKubeconfig(ctx, t, client, cl.admin.Host, filepath.Join(overlay, "target.kubeconfig"))
	writeShardsOverlay(t, overlay, filepath.Join(root, "deploy", "shards"), opts.NodeName)
	applied := time.Now()
	kubectl(t, kubectlBin, cl.kubeconfig, "apply", "-k", overlay)

	var names []string
	for ord := range stsShards {
		for i := range stsNodesPerShard {
			names = append(names, fleet.NodeName(fleet.ShardNamePrefix("fleetlet-", ord), "default", i))
		}
	}
	shardLogs := func() string { return tailShardLogs(podLogs) }
	if err := fleet.WaitForNodesReady(ctx, client, names, 4*time.Minute); err != nil {
		describeShardPods(ctx, t, client)
		t.Fatalf("the shards' %d nodes: %v\n%s", len(names), err, shardLogs())
	}
	readyAfter := time.Since(applied)
	t.Logf("all %d emulated nodes Ready %v after kubectl apply -k (pods scheduled, images present, shards started and registered)", len(names), readyAfter.Round(time.Millisecond))

	// Each shard's nodes have loopback addresses of their own range, with
	// the kubelet's port; the shards run as the image's non-root user.
	for i, n := range names {
		node, err := client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var ip string
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ip = a.Address
			}
		}
		prefix := fmt.Sprintf("127.%d.", 220+2*(i/stsNodesPerShard))
		if !strings.HasPrefix(ip, prefix) || node.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
			t.Errorf("node %s at %s:%d, want an address in %s0.0/15 (its shard's range) and port 10250", n, ip, node.Status.DaemonEndpoints.KubeletEndpoint.Port, prefix)
		}
	}
	if uids := shardUIDs(t); len(uids) != stsShards || slices.ContainsFunc(uids, func(u string) bool { return u != "65532" }) {
		t.Errorf("the shards' processes run as users %v, want %d processes as the image's 65532", uids, stsShards)
	}

	// The shards are on the real node, on its network, and --shards-from
	// finds each at 127.0.0.1:7070+ordinal, where each answers with its
	// ordinal and its nodes.
	pods, err := client.CoreV1().Pods(stsNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != opts.NodeName || !p.Spec.HostNetwork || p.Status.PodIP != "127.0.0.1" {
			t.Errorf("shard pod %s on node %q, host network %v, IP %q: want the real node %s, its network, 127.0.0.1", p.Name, p.Spec.NodeName, p.Spec.HostNetwork, p.Status.PodIP, opts.NodeName)
		}
	}
	set, err := newStatefulSetShards(client, stsNamespace+"/"+stsName)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := set.find(ctx)
	want := []string{"127.0.0.1:7070", "127.0.0.1:7071"}
	if err != nil || !slices.Equal(addrs, want) {
		t.Fatalf("--shards-from %s/%s finds %v, %v; want %v", stsNamespace, stsName, addrs, err, want)
	}
	// A shard says it is ready once its own wait for its nodes is over,
	// which may be a moment after the API server shows them Ready.
	holders := map[int]string{}
	for ord, a := range addrs {
		var info shardInfo
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			err := set.get(ctx, a, shardInfoPath, &info)
			return err == nil && info.Ready, nil
		})
		if err != nil || info.Ordinal != ord || !slices.Equal(sorted(info.Nodes), sorted(names[ord*stsNodesPerShard:(ord+1)*stsNodesPerShard])) {
			t.Errorf("shard at %s says ordinal %d, ready %v, nodes %v (%v); want ordinal %d, ready, its 20 nodes", a, info.Ordinal, info.Ready, info.Nodes, err, ord)
		}
		holders[ord] = info.Holder
	}

	// One load on the shards' nodes, one merged report.
	runDir := t.TempDir()
	profilePath := filepath.Join(runDir, "statefulset.yaml")
	writeProfile(t, profilePath, `name: statefulset
nodePools:
  - name: default
    count: 40
# The SLOs' verdicts are not what this test checks, and a busy machine
# fails them: the figures are logged.
slos:
  podStartupP99: 5m
  mutatingAPICallP99: 5m
  readOnlyResourceAPICallP99: 5m
  readOnlyNamespaceAPICallP99: 5m
  readOnlyClusterAPICallP99: 5m
phases:
  - create:
      count: 200
      qps: 20
      template:
        spec:
          # The emulated nodes only: the real node has no such image.
          nodeSelector: {fleetlet.io/pool: default}
          containers: [{name: app, image: registry.k8s.io/pause:3.10}]
  - waitRunning: {timeout: 3m}
  - delete: {qps: 20}
  - waitGone: {timeout: 3m}
`)
	rv := testSettings(t, criInProc)
	rv.Set("kubeconfig", cl.kubeconfig)
	rv.Set("shards-from", stsNamespace+"/"+stsName)
	rv.Set("profile", profilePath)
	rv.Set("out", filepath.Join(runDir, "out"))
	runStart := time.Now()
	if err := run(ctx, rv); err != nil {
		t.Fatalf("fleetlet run --shards-from: %v\n%s", err, shardLogs())
	}
	runTook := time.Since(runStart)
	t.Logf("fleetlet run --shards-from: %v", runTook.Round(time.Millisecond))
	rep, err := reports.ReadJSON(filepath.Join(runDir, "out", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Nodes != len(names) {
		t.Errorf("report has %d nodes, want the shards' %d", rep.Nodes, len(names))
	}
	if rep.Pods.Created != 200 || rep.Pods.Running != 200 || rep.Pods.Gone != 200 {
		t.Errorf("pods %+v, want 200 created, Running and gone", rep.Pods)
	}
	if len(rep.Phases) == 0 {
		t.Error("no phases")
	}
	for _, ph := range rep.Phases {
		if ph.Count != 200 && !strings.Contains(ph.Name, "pull") && !strings.Contains(ph.Name, "image") {
			t.Errorf("phase %s has %d pods, want 200", ph.Name, ph.Count)
		}
	}
	if len(rep.Shards) != stsShards {
		t.Fatalf("report has %d shards, want %d: %+v", len(rep.Shards), stsShards, rep.Shards)
	}
	stamped := 0
	for _, s := range rep.Shards {
		stamped += s.Pods
		if s.Nodes != stsNodesPerShard {
			t.Errorf("%s has %d nodes, want %d", s.Shard, s.Nodes, stsNodesPerShard)
		}
		if !strings.Contains(s.Shard, "(127.0.0.1:707") {
			t.Errorf("report's shard %q, want it reached at 127.0.0.1:7070+ordinal", s.Shard)
		}
		// One machine's clock, through containers.
		for _, m := range []reports.ClockMeasurement{s.Start, s.End} {
			if m.Samples == 0 || m.OffsetSeconds > 0.05 || m.OffsetSeconds < -0.05 {
				t.Errorf("%s clock %+v, want samples and |offset| < 50 ms on one machine", s.Shard, m)
			}
		}
	}
	if stamped != 200 {
		t.Errorf("the shards stamped %d pods, want 200", stamped)
	}
	if rep.Heartbeat == nil || rep.Heartbeat.Nodes != len(names) {
		t.Errorf("heartbeat %+v, want the shards' %d nodes", rep.Heartbeat, len(names))
	}
	if rep.Fleet.PeakRSSBytes == 0 {
		t.Error("no fleet cost from the shards")
	}
	for _, s := range rep.SLIs {
		if s.Name == "pod_startup" {
			t.Logf("merged report: pod_startup p50 %.0f ms, p99 %.0f ms over %d pods", s.P50Ms, s.P99Ms, s.Count)
		}
	}
	for _, s := range rep.Shards {
		t.Logf("merged report: %s: %d nodes, %d pods, clock offset %+.3f ms at start, %+.3f ms at end", s.Shard, s.Nodes, s.Pods, s.Start.OffsetSeconds*1e3, s.End.OffsetSeconds*1e3)
	}
	t.Logf("merged report: fleet peak RSS %.0f MiB over both shards", float64(rep.Fleet.PeakRSSBytes)/(1<<20))

	// Shard 1's pod deleted: the StatefulSet makes another on the real
	// node, which takes ordinal 1 over (its predecessor gave its lease up
	// on SIGTERM) and adopts the same 20 nodes: the same Node objects,
	// Ready, their leases renewed by the new process.
	shard1 := names[stsNodesPerShard:]
	uids := map[string]types.UID{}
	for _, n := range shard1 {
		node, err := client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[n] = node.UID
	}
	old, err := client.CoreV1().Pods(stsNamespace).Get(ctx, stsName+"-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	kubectl(t, kubectlBin, cl.kubeconfig, "-n", stsNamespace, "delete", "pod", stsName+"-1", "--wait=false")
	var recreated, answered time.Duration
	var successor *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if successor == nil {
			p, err := client.CoreV1().Pods(stsNamespace).Get(ctx, stsName+"-1", metav1.GetOptions{})
			if err != nil || p.UID == old.UID {
				return false, nil
			}
			successor, recreated = p, time.Since(deleted)
		}
		if answered == 0 {
			var info shardInfo
			if err := set.get(ctx, want[1], shardInfoPath, &info); err != nil || info.Holder == holders[1] || !info.Ready {
				return false, nil
			}
			if info.Ordinal != 1 || !slices.Equal(sorted(info.Nodes), sorted(shard1)) {
				return false, fmt.Errorf("the new shard 1 says ordinal %d, nodes %v; want 1 and %v", info.Ordinal, info.Nodes, shard1)
			}
			answered = time.Since(deleted)
		}
		for _, n := range shard1 {
			node, err := client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil || nodeReady(node) != corev1.ConditionTrue {
				return false, nil
			}
			if node.UID != uids[n] {
				return false, fmt.Errorf("node %s was made again (UID %s, was %s): the new shard should adopt it", n, node.UID, uids[n])
			}
			// Renewed after the new process answered, so by it: the
			// old one was gone before the StatefulSet made its
			// successor.
			lease, err := client.CoordinationV1().Leases("kube-node-lease").Get(ctx, n, metav1.GetOptions{})
			if err != nil || lease.Spec.RenewTime == nil || !lease.Spec.RenewTime.Time.After(deleted.Add(answered)) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		describeShardPods(ctx, t, client)
		t.Fatalf("shard 1 after its pod's deletion: %v (successor made after %v, answered after %v)\n%s", err, recreated, answered, shardLogs())
	}
	t.Logf("shard 1's pod deleted: its successor made after %v, answering as a new process with its 20 nodes Ready after %v, every one of them Ready under the same name and UID with its lease renewed by the new process after %v",
		recreated.Round(time.Millisecond), answered.Round(time.Millisecond), time.Since(deleted).Round(time.Millisecond))
	if successor.Spec.NodeName != "" && successor.Spec.NodeName != opts.NodeName {
		t.Errorf("the successor landed on %s, want the real node %s", successor.Spec.NodeName, opts.NodeName)
	}
	if addrs, err := set.find(ctx); err != nil || !slices.Equal(addrs, want) {
		t.Errorf("after the replacement --shards-from finds %v, %v; want %v", addrs, err, want)
	}
	t.Logf("summary: nodes Ready %v after apply; run %v; shard 1 back %v after its deletion; wall time so far %v",
		readyAfter.Round(time.Second), runTook.Round(time.Second), time.Since(deleted).Round(time.Second), time.Since(began).Round(time.Second))
}

// buildShardImage runs `make image` at root (make and Go rebuild only what
// is stale) and returns the archive's path.
func buildShardImage(t *testing.T, root string) string {
	t.Helper()
	start := time.Now()
	cmd := exec.Command("make", "--no-print-directory", "-C", root, "image")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	tar := filepath.Join(root, "bin", "fleetlet-image.tar")
	if _, err := os.Stat(tar); err != nil {
		t.Fatalf("make image wrote no %s: %v\n%s", tar, err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Logf("make image in %v: %s", time.Since(start).Round(time.Millisecond), strings.Join(lines[max(0, len(lines)-3):], "; "))
	return tar
}

// kubectl runs bin/kubectl against kubeconfig and fails the test if it
// fails.
func kubectl(t *testing.T, bin, kubeconfig string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("kubectl %s:\n%s", strings.Join(args, " "), strings.TrimSpace(string(out)))
	return string(out)
}

// writeTargetKubeconfig writes the shards' kubeconfig for the target at
// server from the token that the token controller puts in deploy/target's
// Secret, as deploy/target/kustomization.yaml's commands do.
func writeTargetKubeconfig(ctx context.Context, t *testing.T, client kubernetes.Interface, server, path string) {
	t.Helper()
	var token, ca []byte
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s, err := client.CoreV1().Secrets(stsNamespace).Get(ctx, "fleetlet-shard-token", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		token, ca = s.Data["token"], s.Data["ca.crt"]
		return len(token) > 0 && len(ca) > 0, nil
	})
	if err != nil {
		t.Fatalf("the token controller did not fill the Secret fleetlet-shard-token: %v", err)
	}
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"target": {Server: server, CertificateAuthorityData: ca}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"fleetlet-shard": {Token: string(token)}},
		Contexts:       map[string]*clientcmdapi.Context{"target": {Cluster: "target", AuthInfo: "fleetlet-shard"}},
		CurrentContext: "target",
	}
	if err := clientcmd.WriteToFile(cfg, path); err != nil {
		t.Fatal(err)
	}
}

// writeShardsOverlay writes in dir a kustomization over deploy/shards
// (base) for shards that run on one real node of a cluster that is also
// their target, on loopback:
//   - host networking, so that they reach the API server at 127.0.0.1 (the
//     namespace then cannot enforce the restricted Pod Security Standard);
//   - a nodeSelector on the real node: the emulated nodes are nodes of the
//     same cluster, and a shard must not land on one;
//   - no FLEETLET_POD_IP: each shard's nodes take loopback addresses, one
//     range per ordinal from stsFirstIP, each with port 10250, rather than
//     all sharing 127.0.0.1 with ports from 10250 up;
//   - no container port: on the host's network it would be a host port,
//     and two shards on one node could not both hold 7070. Each listens on
//     7070 plus its ordinal instead, where --shards-from looks for shards
//     on the host's network; the readiness probe on the named port goes
//     with it;
//   - the Secret fleetlet-target from target.kubeconfig, in dir;
//   - a profile of 20 nodes per shard, 2 replicas.
func writeShardsOverlay(t *testing.T, dir, base, node string) {
	t.Helper()
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"kustomization.yaml": fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: %[1]s
resources:
  - %[2]s
replicas:
  - name: %[3]s
    count: %[4]d
configMapGenerator:
  - name: fleetlet-profile
    behavior: replace
    files:
      - profile.yaml
secretGenerator:
  - name: fleetlet-target
    files:
      - kubeconfig=target.kubeconfig
patches:
  - path: statefulset.yaml
  - target: {kind: StatefulSet, name: %[3]s}
    patch: |-
      - op: remove
        path: /spec/template/spec/containers/0/ports
      - op: remove
        path: /spec/template/spec/containers/0/readinessProbe
  - target: {kind: Namespace, name: %[1]s}
    patch: |-
      - op: replace
        path: /metadata/labels/pod-security.kubernetes.io~1enforce
        value: privileged
`, stsNamespace, rel, stsName, stsShards),
		"statefulset.yaml": fmt.Sprintf(`apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: %s
spec:
  template:
    spec:
      hostNetwork: true
      nodeSelector:
        kubernetes.io/hostname: %q
      containers:
        - name: fleetlet
          env:
            - name: FLEETLET_POD_IP
              $patch: delete
            - name: FLEETLET_FIRST_IP
              value: %q
`, stsName, node, stsFirstIP),
		"profile.yaml": fmt.Sprintf(`name: shard
description: One shard of TestShardsAsStatefulSet; %[1]d nodes.
nodePools:
  - name: default
    count: %[1]d
    cpu: "8"
    memory: 32Gi
    pods: 110
runtime:
  pullLatency: 200ms
  sandboxStartLatency: 100ms
  containerCreateLatency: 20ms
  containerStartLatency: 50ms
  stopLatency: 10ms
phases:
  - name: host
    sleep: {duration: 1m}
`, stsNodesPerShard),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// tailShardLogs is the end of every shard container's log the agent
// kept, for a failure's message.
func tailShardLogs(podLogs string) string {
	logs, _ := filepath.Glob(filepath.Join(podLogs, stsNamespace+"_"+stsName+"-*", "fleetlet", "*.log"))
	var b strings.Builder
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		if len(data) > 4000 {
			data = data[len(data)-4000:]
		}
		fmt.Fprintf(&b, "--- %s:\n%s\n", l, data)
	}
	if b.Len() == 0 {
		return "(no shard container logs under " + podLogs + ")"
	}
	return b.String()
}

// describeShardPods logs the shards' pods' phases and container states.
func describeShardPods(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	pods, err := client.CoreV1().Pods(stsNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing the shards' pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		t.Logf("pod %s: node %q, phase %s, IP %q, conditions %v, containers %v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP, p.Status.Conditions, p.Status.ContainerStatuses)
	}
	events, err := client.CoreV1().Events(stsNamespace).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, e := range events.Items {
			t.Logf("event %s %s: %s %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
}

// shardUIDs are the effective user IDs of this machine's `fleetlet fleet
// --shard` processes, as the image starts them (/fleetlet).
func shardUIDs(t *testing.T) []string {
	t.Helper()
	var uids []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.HasPrefix(b, []byte("/fleetlet\x00fleet\x00--shard\x00")) {
			continue
		}
		st, err := os.ReadFile(filepath.Join(filepath.Dir(p), "status"))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(st)) {
			if f := strings.Fields(line); len(f) > 2 && f[0] == "Uid:" {
				uids = append(uids, f[2])
			}
		}
	}
	return uids
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
