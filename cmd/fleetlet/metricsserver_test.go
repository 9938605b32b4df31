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
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleetlet/fleetlet/internal/testutil"
	"github.com/fleetlet/fleetlet/loadprofiles"
)

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// TestMetricsServer runs the real metrics-server (sigs.k8s.io/metrics-server,
// `make metrics-server`) against a fleet of 20 nodes and 200 pods, as a
// process beside the control plane registered as the metrics.k8s.io
// APIService, and checks that `kubectl top nodes` and `kubectl top pods`
// answer for the emulated nodes and their pods. metrics-server reads each
// node's /metrics/resource at its InternalIP and kubelet port directly, so
// it works where the API server's node proxy refuses loopback addresses.
// Every address it dials is on loopback.
func TestMetricsServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	msBin := filepath.Join(testutil.BinDir(t, "metrics-server", "metrics-server"), "metrics-server")
	kubectl := filepath.Join(binDir(t), "kubectl")

	profile, err := loadprofiles.Load("smoke")
	if err != nil {
		t.Fatal(err)
	}
	var phases []loadprofiles.Phase
	for _, ph := range profile.Phases {
		if ph.Create != nil {
			// metrics-server leaves out a node or container whose CPU or
			// memory reads zero ("Failed getting complete ... metric"),
			// and a fake container uses nothing unless told to.
			ph.Create.Template.Annotations = map[string]string{
				"fleetlet.io/behaviour": `"*": {cpu: {start: 5m}, memory: {start: 8Mi}}`,
			}
		}
		if ph.Create != nil || ph.WaitRunning != nil {
			phases = append(phases, ph)
		}
	}
	profile.Phases = phases
	s := startProfileSession(ctx, t, profile, "metrics")
	if err := s.drive(ctx); err != nil {
		t.Fatal(err)
	}
	kubeconfig := s.cluster.kubeconfig

	port := freeLoopbackPort(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "metrics-server.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	ms := exec.Command(msBin,
		"--kubeconfig="+kubeconfig,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port), "--cert-dir="+dir,
		// The agents' serving certificates are self-signed, as a kubelet's
		// are without serverTLSBootstrap: kind's metrics-server runs so too.
		"--kubelet-insecure-tls",
		"--kubelet-preferred-address-types=InternalIP",
		// Each agent's port is in its Node's daemonEndpoints.
		"--kubelet-use-node-status-port",
		// kind's resolution; it must exceed the kubelet request timeout
		// (10 s).
		"--metric-resolution=15s",
	)
	ms.Stdout, ms.Stderr = logFile, logFile
	if err := ms.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- ms.Wait() }()
	// Cleanups run last-in first-out: the APIService goes before the
	// process, and both before the session removes the fleet, so that no
	// later test on the shared control plane meets an unavailable
	// aggregated API (which would stall namespace deletion and discovery).
	t.Cleanup(func() {
		_ = ms.Process.Kill()
		<-exited
		if t.Failed() {
			if out, err := os.ReadFile(logPath); err == nil {
				t.Logf("metrics-server's log:\n%s", tail(out, 40))
			}
		}
	})
	registerMetricsServer(ctx, t, s.admin, kubeconfig, port)

	nodes := map[string]bool{}
	if s.fleet != nil {
		for _, n := range s.fleet.NodeNames() {
			nodes[n] = true
		}
	}
	// metrics-server reports a node or pod once it has two scrapes of it
	// (a CPU rate needs two samples), so the answer comes after about two
	// resolutions; wait on the condition, not on a time. A metrics-server
	// that exits (a bad flag) ends the wait at once.
	running := func() error {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			return fmt.Errorf("metrics-server exited: %v", err)
		default:
			return nil
		}
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := running(); err != nil {
			return false, err
		}
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "top", "nodes", "--no-headers").CombinedOutput()
		last = string(out)
		if err != nil {
			return false, nil
		}
		// kubectl lists every Node, with <unknown> for one metrics-server
		// has no complete reading of yet.
		seen := topRows(out, 0)
		for n := range nodes {
			if cols, ok := seen[n]; !ok || len(cols) < 2 || cols[1] == "<unknown>" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("kubectl top nodes never listed the fleet's %d nodes: %v; last answer:\n%s", len(nodes), err, last)
	}
	for n, cols := range topRows([]byte(last), 0) {
		if !nodes[n] {
			continue
		}
		// NAME CPU(cores) CPU(%) MEMORY(bytes) MEMORY(%)
		if len(cols) < 4 || !strings.HasSuffix(cols[1], "m") || !strings.HasSuffix(cols[3], "Mi") {
			t.Errorf("kubectl top nodes, node %s: %q; want its CPU in millicores and memory in Mi", n, cols)
		}
	}

	pods, err := s.admin.CoreV1().Pods(loadprofiles.DefaultNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := running(); err != nil {
			return false, err
		}
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "top", "pods", "-n", loadprofiles.DefaultNamespace, "--no-headers").CombinedOutput()
		last = string(out)
		if err != nil {
			return false, nil
		}
		seen := topRows(out, 0)
		for _, p := range pods.Items {
			if _, ok := seen[p.Name]; !ok {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("kubectl top pods never listed the %d pods: %v; last answer:\n%s", len(pods.Items), err, tail([]byte(last), 10))
	}
}

// registerMetricsServer makes metrics-server on 127.0.0.1:port the
// metrics.k8s.io API: an ExternalName Service naming localhost (the API
// server resolves an APIService's Service by its type, and an ExternalName
// one to that name and the APIService's port; a Service's endpoints may not
// be loopback addresses), and the APIService, its certificate not verified
// (metrics-server's is self-signed). Both are removed when the test ends.
func registerMetricsServer(ctx context.Context, t *testing.T, client kubernetes.Interface, kubeconfig string, port int) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "metrics-server", Namespace: metav1.NamespaceSystem},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"},
	}
	if _, err := client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": "v1beta1.metrics.k8s.io"},
		"spec": map[string]any{
			"group": "metrics.k8s.io", "version": "v1beta1",
			"service":               map[string]any{"namespace": svc.Namespace, "name": svc.Name, "port": int64(port)},
			"insecureSkipTLSVerify": true,
			"groupPriorityMinimum":  int64(100), "versionPriority": int64(100),
		},
	}}
	if _, err := dyn.Resource(apiServiceGVR).Create(ctx, apiService, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dyn.Resource(apiServiceGVR).Delete(ctx, apiService.GetName(), metav1.DeleteOptions{}); err != nil {
			t.Errorf("removing the metrics.k8s.io APIService: %v", err)
		}
		if err := client.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("removing the metrics-server Service: %v", err)
		}
	})
}

// topRows indexes kubectl top's rows by their column key.
func topRows(out []byte, key int) map[string][]string {
	rows := map[string][]string{}
	for _, line := range strings.Split(string(out), "\n") {
		cols := strings.Fields(line)
		if len(cols) > key {
			rows[cols[key]] = cols
		}
	}
	return rows
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// tail is the last n lines of out.
func tail(out []byte, n int) string {
	lines := bytes.Split(bytes.TrimRight(out, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
