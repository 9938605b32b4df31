//go:build integration

package kubemark

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	"github.com/fleetlet/fleetlet/controlplane"
	"github.com/fleetlet/fleetlet/internal/testutil"
)

// binDir holds the control plane's binaries and kubemark.
func binDir(t *testing.T) string { return testutil.BinDir(t, "kubemark", "kubemark") }

// TestHollowNode runs one hollow kubelet and kube-proxy against the real
// control plane: the Node registers and becomes Ready, and Close leaves no
// process, root directory or socket behind.
func TestHollowNode(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	bin := binDir(t)
	cp, err := controlplane.Start(ctx, controlplane.Config{BinDir: bin, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	dir := t.TempDir()
	nodes, err := NodesWithCredentials(cp, filepath.Join(dir, "credentials"), []string{"hollow-0"}, true, map[string]string{"fleetlet.io/oracle": "hollow"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := Start(Config{Binary: filepath.Join(bin, "kubemark"), Dir: dir, Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	admin, err := kubernetes.NewForConfig(cp.AdminRESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.WaitReady(ctx, admin, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	node, err := admin.CoreV1().Nodes().Get(ctx, "hollow-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels["fleetlet.io/oracle"] != "hollow" {
		t.Errorf("node labels %v lack the one given", node.Labels)
	}
	kubeletLog := filepath.Join(dir, "hollow-0.kubelet.log")
	root := rootDirFromLog(kubeletLog)
	if root == "" {
		t.Fatalf("the kubelet's log does not name its root directory:\n%s", logTail(kubeletLog, 20))
	}
	// The host's iptables are left alone.
	if data, _ := os.ReadFile(kubeletLog); !strings.Contains(string(data), "No iptables support") {
		t.Errorf("the hollow kubelet may have programmed the host's iptables:\n%s", logTail(kubeletLog, 20))
	}
	pids := h.PIDs()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		waitGone(t, pid)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("root directory %s left after Close: %v", root, err)
	}
	// A new socket no one listens on is ours, left behind; a live one is
	// another run's.
	for p := range fakeSockets() {
		if h.socketsBefore[p] {
			continue
		}
		if conn, err := net.DialTimeout("unix", p, time.Second); err == nil {
			conn.Close()
			continue
		}
		t.Errorf("stale socket %s left after Close", p)
	}
}
