package kubemark

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestArgs(t *testing.T) {
	n := Node{Name: "hollow-0", Kubeconfig: "/k/kubelet", ProxyKubeconfig: "/k/proxy", Labels: map[string]string{"b": "2", "a": "1"}}
	kubelet := KubeletArgs(n, 20250)
	for _, want := range []string{"--morph=kubelet", "--name=hollow-0", "--kubeconfig=/k/kubelet", "--kubelet-port=20250", "--kubelet-read-only-port=0", "--use-host-image-service=false", "--kube-api-qps=50", "--kube-api-burst=100", "--node-labels=a=1,b=2"} {
		if !slices.Contains(kubelet, want) {
			t.Errorf("kubelet args %v lack %s", kubelet, want)
		}
	}
	proxy := ProxyArgs(n)
	for _, want := range []string{"--morph=proxy", "--name=hollow-0", "--kubeconfig=/k/proxy", "--kube-api-qps=5", "--kube-api-burst=10"} {
		if !slices.Contains(proxy, want) {
			t.Errorf("proxy args %v lack %s", proxy, want)
		}
	}
	if slices.ContainsFunc(KubeletArgs(Node{Name: "n", Kubeconfig: "k"}, 1), func(a string) bool { return strings.HasPrefix(a, "--node-labels") }) {
		t.Error("--node-labels without labels")
	}
}

func TestChildEnv(t *testing.T) {
	env := childEnv([]string{"HOME=/root", "PATH=/usr/bin:/usr/sbin", "LANG=C"}, "/run/empty")
	if want := []string{"HOME=/root", "LANG=C", "PATH=/run/empty"}; !slices.Equal(env, want) {
		t.Errorf("childEnv = %v, want %v", env, want)
	}
}

func TestConfigValidation(t *testing.T) {
	bin := fakeBinary(t, "exit 0")
	ok := Node{Name: "n", Kubeconfig: "k"}
	for name, cfg := range map[string]Config{
		"no binary":      {Binary: filepath.Join(t.TempDir(), "kubemark"), Dir: t.TempDir(), Nodes: []Node{ok}},
		"no dir":         {Binary: bin, Nodes: []Node{ok}},
		"no nodes":       {Binary: bin, Dir: t.TempDir()},
		"bad name":       {Binary: bin, Dir: t.TempDir(), Nodes: []Node{{Name: "Not_A_Node", Kubeconfig: "k"}}},
		"twice":          {Binary: bin, Dir: t.TempDir(), Nodes: []Node{ok, ok}},
		"no credentials": {Binary: bin, Dir: t.TempDir(), Nodes: []Node{{Name: "n"}}},
	} {
		if _, err := Start(cfg); err == nil {
			t.Errorf("%s: Start succeeded", name)
		}
	}
}

// fakeBinary is a kubemark that runs script; PATH is empty for it, so
// commands need absolute paths.
func fakeBinary(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubemark")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitForLog waits until the log at path holds want.
func waitForLog(t *testing.T, path, want string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		data, _ := os.ReadFile(path)
		if strings.Contains(string(data), want) {
			return string(data)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never held %q: %q", path, want, data)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive tells whether pid is a live process, not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	rest := stat[strings.LastIndexByte(string(stat), ')')+1:]
	return !strings.HasPrefix(strings.TrimSpace(string(rest)), "Z")
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("pid %d outlived Close", pid)
	}
}

// TestCloseLeavesNothing runs a kubemark that ignores SIGTERM and forks a
// child, as a kubelet might fork a helper, and logs a root directory as
// kubemark does: Close must kill both, and remove the directory.
func TestCloseLeavesNothing(t *testing.T) {
	rootDir, err := os.MkdirTemp("/tmp", "hollow-kubelet.")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(rootDir)
	// MkdirTemp's suffix is digits, as kubemark's is.
	bin := fakeBinary(t, `trap "" TERM
echo "I0101 hollow_kubelet.go:153] Using `+rootDir+` as root dir for hollow-kubelet"
echo "path=$PATH args=$*"
/bin/sleep 600 & echo "child $!"
echo ready
wait`)
	dir := t.TempDir()
	h, err := Start(Config{Binary: bin, Dir: dir, StopTimeout: 200 * time.Millisecond, Nodes: []Node{
		{Name: "hollow-0", Kubeconfig: "/k/0", ProxyKubeconfig: "/k/proxy"},
		{Name: "hollow-1", Kubeconfig: "/k/1"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var children []int
	for _, log := range []string{"hollow-0.kubelet.log", "hollow-0.proxy.log", "hollow-1.kubelet.log"} {
		data := waitForLog(t, filepath.Join(dir, log), "ready")
		var child int
		if _, err := fmt.Sscanf(data[strings.Index(data, "child "):], "child %d", &child); err != nil {
			t.Fatalf("%s: %v", log, err)
		}
		children = append(children, child)
		if !strings.Contains(data, "path="+filepath.Join(dir, "empty-path")+" ") {
			t.Errorf("%s: PATH is not the empty directory: %s", log, data)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "hollow-1.proxy.log")); err == nil {
		t.Error("a proxy started for a node without a proxy kubeconfig")
	}
	pids := h.PIDs()
	if len(pids) != 3 {
		t.Fatalf("%d processes, want 3", len(pids))
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range append(pids, children...) {
		waitGone(t, pid)
	}
	if _, err := os.Stat(rootDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("root directory %s still there after Close: %v", rootDir, err)
	}
	if err := h.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestRootDirFromLog(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]string{
		"I1201 15:07:36.107324   13271 hollow_kubelet.go:153] Using /tmp/hollow-kubelet.1458796191 as root dir for hollow-kubelet\n": "/tmp/hollow-kubelet.1458796191",
		"Using /etc as root dir for hollow-kubelet\n":                            "",
		"Using /tmp/hollow-kubelet.1/../../etc as root dir for hollow-kubelet\n": "",
		"": "",
	} {
		path := filepath.Join(dir, "log")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := rootDirFromLog(path); got != want {
			t.Errorf("rootDirFromLog(%q) = %q, want %q", content, got, want)
		}
	}
}

func TestWaitReady(t *testing.T) {
	ctx := context.Background()
	ready := func(name string, status corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "KubeletReady"}}}}
	}
	start := func(t *testing.T, script string) *Hollow {
		h, err := Start(Config{Binary: fakeBinary(t, script), Dir: t.TempDir(), Nodes: []Node{{Name: "a", Kubeconfig: "k"}, {Name: "b", Kubeconfig: "k"}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}

	t.Run("ready", func(t *testing.T) {
		h := start(t, "exec /bin/sleep 600")
		if err := h.WaitReady(ctx, fake.NewClientset(ready("a", corev1.ConditionTrue), ready("b", corev1.ConditionTrue)), time.Minute); err != nil {
			t.Error(err)
		}
	})
	t.Run("not ready by the deadline", func(t *testing.T) {
		h := start(t, "echo still starting; exec /bin/sleep 600")
		err := h.WaitReady(ctx, fake.NewClientset(ready("a", corev1.ConditionFalse)), time.Second)
		for _, want := range []string{"not Ready after 1s", "a Ready=False (KubeletReady", "b not registered", "still starting"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v does not say %q", err, want)
			}
		}
	})
	t.Run("a kubelet exits", func(t *testing.T) {
		h := start(t, `echo "F0101 failed to listen on 0.0.0.0:10250: address already in use"; exit 3`)
		err := h.WaitReady(ctx, fake.NewClientset(), time.Minute)
		for _, want := range []string{"exited", "exit status 3", "address already in use", ".kubelet.log"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v does not say %q", err, want)
			}
		}
	})
}

// TestChildrenDieWithUs checks Pdeathsig: a helper (this test binary
// again) starts a hollow node and is SIGKILLed, so it cannot Close; the
// node's process must die too.
func TestChildrenDieWithUs(t *testing.T) {
	if dir := os.Getenv("FLEETLET_KUBEMARK_HELPER"); dir != "" {
		h, err := Start(Config{Binary: os.Getenv("FLEETLET_KUBEMARK_BINARY"), Dir: dir, Nodes: []Node{{Name: "orphan", Kubeconfig: "k"}}})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Printf("child %d\n", h.PIDs()[0])
		select {}
	}
	helper := exec.Command(os.Args[0], "-test.run=^TestChildrenDieWithUs$")
	helper.Env = append(os.Environ(), "FLEETLET_KUBEMARK_HELPER="+t.TempDir(), "FLEETLET_KUBEMARK_BINARY="+fakeBinary(t, "exec /bin/sleep 600"))
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	var child int
	if _, err := fmt.Fscanf(out, "child %d\n", &child); err != nil {
		helper.Process.Kill()
		helper.Wait()
		t.Fatalf("helper did not report its child: %v", err)
	}
	if !alive(child) {
		t.Fatalf("child %d not running before its parent died", child)
	}
	helper.Process.Kill()
	helper.Wait()
	waitGone(t, child)
}
