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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/fleet"
	"github.com/fleetlet/fleetlet/internal/testutil"
	"github.com/fleetlet/fleetlet/loadprofiles"
	"github.com/fleetlet/fleetlet/reports"
)

// shardProcess is one `fleetlet fleet --shard` child process.
type shardProcess struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	// exited is closed once the process has exited, with its error in err.
	exited chan struct{}
	err    error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startShard starts shard ordinal of 20 nodes against kubeconfig.
func startShard(t *testing.T, bin, kubeconfig string, ordinal, port int) *shardProcess {
	t.Helper()
	cmd := exec.Command(bin, "fleet", "--shard", "--shard-ordinal", strconv.Itoa(ordinal),
		"--kubeconfig", kubeconfig, "--nodes", "20", "--node-prefix", "shardtest-",
		"--first-ip", "127.200.0.1", "--shard-port", strconv.Itoa(port), "--start-jitter", "2s")
	p := &shardProcess{cmd: cmd, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stderr, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	return p
}

// stop ends the shard as a pod's deletion does (SIGTERM), and waits.
func (p *shardProcess) stop(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Errorf("shard did not stop within a minute of SIGTERM:\n%s", p.stderr)
	}
}

// writeProfile writes a profile file for the test.
func writeProfile(t *testing.T, path, profile string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(profile), 0o644); err != nil {
		t.Fatal(err)
	}
}

// freePorts finds n consecutive free loopback ports.
func freePorts(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := l.Addr().(*net.TCPAddr).Port
		ok := true
		var held []net.Listener
		for i := 1; i < n; i++ {
			li, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i)))
			if err != nil {
				ok = false
				break
			}
			held = append(held, li)
		}
		_ = l.Close()
		for _, li := range held {
			_ = li.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no consecutive free ports")
	return 0
}

// TestShardedRun runs a fleet as two shard processes on the shared control
// plane, drives one load on both from this process, and checks the merged
// report; then a shard that claims a live shard's ordinal refuses to
// start, and a shard killed without a word comes back under its ordinal
// with the same nodes.
func TestShardedRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	cp := sharedControlPlane(t)
	bin := filepath.Join(testutil.BinDir(t, "fleetlet", "build"), "fleetlet")
	kubeconfig := cp.AdminKubeconfig()
	client, err := kubernetes.NewForConfig(cp.AdminRESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	port := freePorts(t, 2)
	var names []string
	for ord := range 2 {
		for i := range 20 {
			names = append(names, fleet.NodeName(fleet.ShardNamePrefix("shardtest-", ord), "default", i))
		}
	}
	shards := []*shardProcess{startShard(t, bin, kubeconfig, 0, port), startShard(t, bin, kubeconfig, 1, port)}
	t.Cleanup(func() {
		for _, s := range shards {
			s.stop(t)
		}
		removeFleet(context.Background(), t, client, names)
		for ord := range 2 {
			_ = client.CoordinationV1().Leases("kube-node-lease").Delete(context.Background(), shardLeaseName(fleet.ShardNamePrefix("shardtest-", ord)), metav1.DeleteOptions{})
		}
	})

	dir := t.TempDir()
	profilePath := filepath.Join(dir, "sharded.yaml")
	writeProfile(t, profilePath, `name: sharded
nodePools:
  - name: default
    count: 40
phases:
  - create:
      count: 200
      qps: 20
      template:
        spec:
          containers: [{name: app, image: registry.k8s.io/pause:3.10}]
  - waitRunning: {timeout: 3m}
  - delete: {qps: 20}
  - waitGone: {timeout: 3m}
`)
	v := testSettings(t, criInProc)
	v.Set("kubeconfig", kubeconfig)
	v.Set("shards", fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", port, port+1))
	v.Set("profile", profilePath)
	v.Set("out", filepath.Join(dir, "out"))
	runErr := run(ctx, v)
	for i, s := range shards {
		t.Logf("shard %d:\n%s", i, s.stderr)
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
	rep, err := reports.ReadJSON(filepath.Join(dir, "out", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Nodes != 40 {
		t.Errorf("report has %d nodes, want the shards' 40", rep.Nodes)
	}
	if rep.Pods.Created != 200 || rep.Pods.Running != 200 || rep.Pods.Gone != 200 {
		t.Errorf("pods %+v, want 200 created, Running and gone", rep.Pods)
	}
	// Every phase, those inside the driver, inside a shard, and across.
	for _, ph := range rep.Phases {
		if ph.Count != 200 && !strings.Contains(ph.Name, "pull") && !strings.Contains(ph.Name, "image") {
			t.Errorf("phase %s has %d pods, want 200", ph.Name, ph.Count)
		}
	}
	if len(rep.Phases) == 0 {
		t.Error("no phases")
	}
	if len(rep.Shards) != 2 {
		t.Fatalf("report has %d shards, want 2: %+v", len(rep.Shards), rep.Shards)
	}
	pods := 0
	for _, s := range rep.Shards {
		pods += s.Pods
		// Both on this machine's clock: within a few milliseconds.
		for _, m := range []reports.ClockMeasurement{s.Start, s.End} {
			if m.Samples == 0 || m.OffsetSeconds > 0.05 || m.OffsetSeconds < -0.05 {
				t.Errorf("%s clock %+v, want samples and |offset| < 50 ms on one machine", s.Shard, m)
			}
		}
		if s.Nodes != 20 {
			t.Errorf("%s has %d nodes, want 20", s.Shard, s.Nodes)
		}
	}
	if pods != 200 {
		t.Errorf("the shards stamped %d pods, want 200", pods)
	}
	if rep.Heartbeat == nil || rep.Heartbeat.Nodes != 40 {
		t.Errorf("heartbeat %+v, want the shards' 40 nodes", rep.Heartbeat)
	}
	if !slices.ContainsFunc(rep.API, func(a reports.APIStat) bool { return a.Resource == "leases" && a.Count > 0 }) {
		t.Error("the merged report counts no lease request of the shards' agents")
	}
	if rep.Fleet.PeakRSSBytes == 0 {
		t.Error("no fleet cost from the shards")
	}

	// A second process claiming ordinal 0 refuses to start while shard 0
	// renews its lease.
	dup := startShard(t, bin, kubeconfig, 0, freePorts(t, 1))
	select {
	case <-dup.exited:
		if dup.err == nil || !strings.Contains(dup.stderr.String(), "two shards claim one ordinal") {
			t.Errorf("a duplicate ordinal 0: exit %v, output:\n%s", dup.err, dup.stderr)
		}
	case <-time.After(2 * time.Minute):
		dup.stop(t)
		t.Fatalf("a duplicate ordinal 0 did not refuse to start:\n%s", dup.stderr)
	}

	// Shard 1 killed during a load, as a pod whose node died; started
	// again (as its StatefulSet would), it takes its ordinal over once the
	// lease lapses and its 20 nodes are Ready under the same names. The
	// report counts it as a fault.
	faultProfile := filepath.Join(dir, "sharded-fault.yaml")
	writeProfile(t, faultProfile, `name: sharded-fault
nodePools:
  - name: default
    count: 40
phases:
  - create:
      count: 40
      qps: 20
      template:
        spec:
          containers: [{name: app, image: registry.k8s.io/pause:3.10}]
  - waitRunning: {timeout: 3m}
  - sleep: {duration: 100s}
  - delete: {qps: 20}
  - waitGone: {timeout: 3m}
`)
	v.Set("profile", faultProfile)
	v.Set("out", filepath.Join(dir, "out-fault"))
	runDone := make(chan error, 1)
	go func() { runDone <- run(ctx, v) }()
	err = wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods(loadprofiles.DefaultNamespace).List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Running"})
		return err == nil && len(pods.Items) == 40, nil
	})
	if err != nil {
		t.Fatalf("the second load's 40 pods never ran: %v", err)
	}
	_ = shards[1].cmd.Process.Kill()
	<-shards[1].exited
	killed := time.Now()
	shards[1] = startShard(t, bin, kubeconfig, 1, port)
	err = wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		lease, err := client.CoordinationV1().Leases("kube-node-lease").Get(ctx, shardLeaseName(fleet.ShardNamePrefix("shardtest-", 1)), metav1.GetOptions{})
		return err == nil && ptr.Deref(lease.Spec.LeaseTransitions, 0) >= 2, nil
	})
	if err != nil {
		t.Fatalf("the restarted shard 1 did not take its lease over: %v\n%s", err, shards[1].stderr)
	}
	if err := fleet.WaitForNodesReady(ctx, client, names[20:], 3*time.Minute); err != nil {
		t.Fatalf("shard 1's nodes not Ready again: %v\n%s", err, shards[1].stderr)
	}
	t.Logf("shard 1 killed and back, 20 nodes Ready, after %v", time.Since(killed).Round(time.Millisecond))
	if err := <-runDone; err != nil {
		t.Fatalf("the load across a shard's failure: %v\nshard 1:\n%s", err, shards[1].stderr)
	}
	rep, err = reports.ReadJSON(filepath.Join(dir, "out-fault", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var down []reports.Fault
	for _, f := range rep.Faults {
		if f.Kind == shardDownKind {
			down = append(down, f)
		}
	}
	if len(down) != 1 {
		t.Fatalf("faults %+v, want one shardDown", rep.Faults)
	}
	f := down[0]
	if f.Nodes != 20 || f.End.IsZero() || f.Seconds < 30 || !strings.Contains(strings.Join(f.Notes, " "), "replaced") {
		t.Errorf("shard fault %+v, want its 20 nodes, ended after the lease's 40 s, noted as replaced", f)
	}
	if f.NotReadyAtReport != 0 {
		t.Errorf("%d of the shard's nodes not Ready at the report", f.NotReadyAtReport)
	}
	// The pods the new process took over keep the driver's milestones;
	// none is stamped a second time out of order.
	for _, ph := range append(rep.Phases, rep.SLIs...) {
		if ph.Anomalies > 0 {
			t.Errorf("phase %s: %d pods stamped their end before their start", ph.Name, ph.Anomalies)
		}
	}
	if rep.Pods.Gone != 40 {
		t.Errorf("pods %+v, want the 40 gone at the end across the shard's failure", rep.Pods)
	}
	t.Logf("shard fault: %.1f s down, NotReady %+v, ready again %+v, restarts %d", f.Seconds, f.NotReady, f.ReadyAgain, f.ContainerRestarts)
}
