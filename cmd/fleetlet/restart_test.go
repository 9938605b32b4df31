//go:build integration

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// fleetletProcess is the fleetlet command run by this test binary in a
// process of its own, so that it can be killed as a user's would be.
type fleetletProcess struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	// exited is closed once the process has been waited for.
	exited chan struct{}
}

func startFleetlet(t *testing.T, args ...string) *fleetletProcess {
	t.Helper()
	p := &fleetletProcess{cmd: exec.Command(os.Args[0], args...), exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), runAsFleetlet+"=1")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.stderr.Write(b)
	})
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.kill(syscall.SIGTERM) })
	return p
}

// kill signals the process's group and waits for it, escalating to
// SIGKILL after 30 s.
func (p *fleetletProcess) kill(sig syscall.Signal) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
}

func (p *fleetletProcess) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestFleetRestart kills a `fleetlet fleet` with SIGKILL while its nodes
// run pods and starts it again 20 s later with the same names, as #20 asks,
// once per runtime:
//
//   - with the fake runtimes served by a separate `fleetlet fakeruntime
//     serve`, which survives: the restarted agents re-adopt their
//     containers from CRI, as a restarted kubelet does containerd's: same
//     container IDs, same restart counts, nothing re-created;
//   - with the in-process runtime, which dies with the fleet: each node
//     comes back as a rebooted one, with no containers; the agents run the
//     pods' containers again in new sandboxes, counting one restart each,
//     as a rebooted kubelet counts on from the log files it left.
//
// Either way no pod is lost, the Nodes and Leases are the ones registered
// before, and every node and pod is Ready again within 2 minutes.
func TestFleetRestart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		external bool
	}{{"socket runtime survives", true}, {"in-process runtime reboots", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
			defer cancel()
			const nodes, pods = 3, 6
			var opts sessionOptions
			sharedFleet(t, &opts, "restart")
			kubeconfig := opts.ControlPlane.AdminKubeconfig()
			client, err := kubernetes.NewForConfig(opts.ControlPlane.AdminRESTConfig())
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for i := range nodes {
				names = append(names, fmt.Sprintf("%sdefault-%d", opts.NodePrefix, i))
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				removeFleet(ctx, t, client, names)
			})
			args := []string{"fleet", "--nodes", fmt.Sprint(nodes), "--node-prefix", opts.NodePrefix, "--first-ip", opts.FirstIP.String(),
				"--kubeconfig", kubeconfig, "--start-jitter", "1s"}
			if tc.external {
				// Short: unix socket paths hold 108 bytes.
				sockets, err := os.MkdirTemp("", "fl-rs-")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = os.RemoveAll(sockets) })
				serve := startFleetlet(t, "fakeruntime", "serve", "--dir", sockets, "--nodes", fmt.Sprint(nodes), "--node-prefix", opts.NodePrefix)
				waitFor(ctx, t, "the fake runtimes' sockets", time.Minute, func() bool {
					_, err := os.Stat(filepath.Join(sockets, names[nodes-1]+".sock"))
					return err == nil
				}, serve.log)
				args = append(args, "--cri", criFakeSocket, "--cri-socket-dir", sockets)
			}
			first := startFleetlet(t, append(args, "--dir", t.TempDir())...)
			waitNodesReady(ctx, t, client, names, first.log)

			ns := "default"
			for i := range pods {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%sapp-%d", opts.NodePrefix, i), Labels: map[string]string{"fleetlet.io/test": "restart"}},
					Spec: corev1.PodSpec{
						NodeName:   names[i%nodes],
						Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
					},
				}
				if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() {
				_ = client.CoreV1().Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: new(int64)},
					metav1.ListOptions{LabelSelector: "fleetlet.io/test=restart"})
			})
			type seen struct {
				uid, node, container string
				restarts             int32
			}
			snapshot := func() map[string]seen {
				list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "fleetlet.io/test=restart"})
				if err != nil {
					return nil
				}
				out := map[string]seen{}
				for _, p := range list.Items {
					if p.Status.Phase != corev1.PodRunning || condition(p.Status.Conditions, corev1.PodReady) != corev1.ConditionTrue || len(p.Status.ContainerStatuses) != 1 {
						continue
					}
					cs := p.Status.ContainerStatuses[0]
					out[p.Name] = seen{uid: string(p.UID), node: p.Spec.NodeName, container: cs.ContainerID, restarts: cs.RestartCount}
				}
				return out
			}
			var before map[string]seen
			waitFor(ctx, t, "every pod Ready", 3*time.Minute, func() bool {
				before = snapshot()
				return len(before) == pods
			}, first.log)
			// uids are each node's Node and Lease UIDs.
			uids := func() map[string][2]string {
				out := map[string][2]string{}
				for _, n := range names {
					node, err := client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					lease, err := client.CoordinationV1().Leases("kube-node-lease").Get(ctx, n, metav1.GetOptions{})
					if err != nil {
						t.Fatal(err)
					}
					out[n] = [2]string{string(node.UID), string(lease.UID)}
				}
				return out
			}
			registered := uids()

			killed := time.Now()
			first.kill(syscall.SIGKILL)
			if err := sleepCtx(ctx, 20*time.Second); err != nil {
				t.Fatal(err)
			}
			restarted := time.Now()
			second := startFleetlet(t, append(args, "--dir", t.TempDir())...)
			waitNodesReady(ctx, t, client, names, second.log)
			var after map[string]seen
			waitFor(ctx, t, "every pod Ready again", 2*time.Minute, func() bool {
				after = snapshot()
				if len(after) != pods {
					return false
				}
				for name, b := range before {
					// In-process: the pod is Ready again once its new
					// container runs.
					if a := after[name]; !tc.external && a.container == b.container {
						return false
					}
				}
				return true
			}, second.log)
			t.Logf("killed at 0 s, started again at %.1f s; every node and pod Ready at %.1f s",
				restarted.Sub(killed).Seconds(), time.Since(killed).Seconds())

			for name, b := range before {
				a := after[name]
				switch {
				case a.uid != b.uid || a.node != b.node:
					t.Errorf("pod %s: %+v before, %+v after; want the same pod on the same node", name, b, a)
				case tc.external && (a.container != b.container || a.restarts != b.restarts):
					t.Errorf("pod %s: container %s (restarts %d) before, %s (%d) after; want it re-adopted", name, b.container, b.restarts, a.container, a.restarts)
				case !tc.external && (a.container == b.container || a.restarts != b.restarts+1):
					t.Errorf("pod %s: container %s (restarts %d) before, %s (%d) after; want a new one, one restart more", name, b.container, b.restarts, a.container, a.restarts)
				}
			}
			for n, u := range uids() {
				if u != registered[n] {
					t.Errorf("node %s: Node and Lease UIDs %v before the restart, %v after; want them re-adopted", n, registered[n], u)
				}
			}
			if log := second.log(); strings.Contains(log, "Node agent failed") || strings.Contains(log, "already exists") {
				t.Errorf("the restarted fleet logged errors:\n%s", lastLines(log, 40))
			}
		})
	}
}

// waitNodesReady waits until every named node is Ready and its kubelet has
// posted since now.
func waitNodesReady(ctx context.Context, t *testing.T, client kubernetes.Interface, names []string, log func() string) {
	t.Helper()
	since := metav1.NewMicroTime(time.Now())
	waitFor(ctx, t, "every node Ready", 3*time.Minute, func() bool {
		for _, n := range names {
			node, err := client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				if !apierrors.IsNotFound(err) {
					t.Logf("node %s: %v", n, err)
				}
				return false
			}
			if nodeReady(node) != corev1.ConditionTrue {
				return false
			}
			lease, err := client.CoordinationV1().Leases("kube-node-lease").Get(ctx, n, metav1.GetOptions{})
			if err != nil || lease.Spec.RenewTime == nil || lease.Spec.RenewTime.Before(&since) {
				return false
			}
		}
		return true
	}, log)
}

func waitFor(ctx context.Context, t *testing.T, what string, timeout time.Duration, cond func() bool, log func() string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v; the command's log ends:\n%s", what, err, lastLines(log(), 30))
	}
}

func lastLines(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
