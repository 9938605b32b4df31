//go:build integration

package controlplane

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// binDir is where `make controlplane` puts the binaries: FLEETLET_BIN_DIR,
// else the repository's bin/. Missing binaries fail the test rather than skip
// it, since the Makefile builds them before running tests.
func binDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FLEETLET_BIN_DIR")
	if dir == "" {
		abs, err := filepath.Abs(filepath.Join("..", "bin"))
		if err != nil {
			t.Fatal(err)
		}
		dir = abs
	}
	if err := checkBinaries(dir); err != nil {
		t.Fatalf("%v\n(this test needs the real binaries: run `make controlplane`, or set FLEETLET_BIN_DIR)", err)
	}
	return dir
}

func TestControlPlane(t *testing.T) {
	ctx := testContext(t)
	begin := time.Now()
	auditLog := filepath.Join(t.TempDir(), "audit", "audit.log")
	cp, err := Start(ctx, Config{BinDir: binDir(t), Dir: t.TempDir(), AuditLogPath: auditLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("control plane started in %s", time.Since(begin).Round(time.Millisecond))
	stopped := false
	defer func() {
		if !stopped {
			cp.Stop()
		}
	}()

	admin, err := kubernetes.NewForConfig(cp.AdminRESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	namespaces, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list namespaces as admin: %v", err)
	}
	if !hasNamespace(namespaces.Items, "kube-system") {
		t.Errorf("kube-system missing from namespaces %v", namespaces.Items)
	}

	n1Config, err := cp.NodeRESTConfig("n1")
	if err != nil {
		t.Fatal(err)
	}
	n1, err := kubernetes.NewForConfig(n1Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n1.CoreV1().Nodes().Create(ctx, node("n1"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("node n1 registering itself: %v", err)
	}
	if _, err := n1.CoreV1().Nodes().Create(ctx, node("n2"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node n1 creating node n2: got %v, want Forbidden", err)
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, node("n2"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("admin creating node n2: %v", err)
	}
	patch := []byte(`{"metadata":{"labels":{"hijacked":"true"}}}`)
	if _, err := n1.CoreV1().Nodes().Patch(ctx, "n2", types.MergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node n1 patching node n2: got %v, want Forbidden", err)
	}
	if _, err := n1.CoreV1().Nodes().Patch(ctx, "n1", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("node n1 patching itself: %v", err)
	}

	// The kubelet's watches beside its pods and Node, under its own
	// identity, as the Node authorizer allows them.
	for what, list := range map[string]func() error{
		"services": func() error {
			_, err := n1.CoreV1().Services("").List(ctx, metav1.ListOptions{FieldSelector: "spec.clusterIP!=None"})
			return err
		},
		"runtimeclasses": func() error { _, err := n1.NodeV1().RuntimeClasses().List(ctx, metav1.ListOptions{}); return err },
		"csidrivers":     func() error { _, err := n1.StorageV1().CSIDrivers().List(ctx, metav1.ListOptions{}); return err },
		"its podcertificaterequests": func() error {
			_, err := n1.CertificatesV1().PodCertificateRequests("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"})
			return err
		},
	} {
		if err := list(); err != nil {
			t.Errorf("node n1 listing %s: %v", what, err)
		}
	}
	// kube-proxy's four watches, under its identity.
	proxy, err := kubernetes.NewForConfig(cp.ProxyRESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	for what, list := range map[string]func() error{
		"services": func() error { _, err := proxy.CoreV1().Services("").List(ctx, metav1.ListOptions{}); return err },
		"endpointslices": func() error {
			_, err := proxy.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
			return err
		},
		"servicecidrs": func() error {
			_, err := proxy.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
			return err
		},
		"nodes": func() error {
			_, err := proxy.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=n1"})
			return err
		},
	} {
		if err := list(); err != nil {
			t.Errorf("kube-proxy listing %s: %v", what, err)
		}
	}
	if _, err := proxy.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("kube-proxy listing secrets: got %v, want Forbidden", err)
	}

	var podCIDR string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := admin.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		podCIDR = n.Spec.PodCIDR
		return podCIDR != "", nil
	})
	if err != nil {
		t.Fatalf("node n1 never got a spec.podCIDR from node IPAM: %v", err)
	}
	if !strings.HasPrefix(podCIDR, "10.") || !strings.HasSuffix(podCIDR, "/24") {
		t.Errorf("n1 podCIDR %q is not a /24 of %s", podCIDR, DefaultClusterCIDR)
	}

	// A kubeconfig written for another identity authenticates as it, and
	// the audit log names that identity on each of its requests.
	n3Kubeconfig := filepath.Join(t.TempDir(), "n3.kubeconfig")
	if err := cp.WriteKubeconfig(n3Kubeconfig, "system:node:n3", "system:nodes"); err != nil {
		t.Fatal(err)
	}
	n3Config, err := clientcmd.BuildConfigFromFlags("", n3Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	n3Config.UserAgent = "controlplane-test/n3"
	n3, err := kubernetes.NewForConfig(n3Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n3.CoreV1().Nodes().Create(ctx, node("n3"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("node n3 registering itself with a written kubeconfig: %v", err)
	}
	if cp.AuditLogPath() != auditLog {
		t.Errorf("AuditLogPath() = %q, want %q", cp.AuditLogPath(), auditLog)
	}
	checkAuditLog(t, auditLog, "system:node:n3", "controlplane-test/n3", "create", "nodes")

	urls := cp.MetricsURLs()
	for component, want := range map[string]string{
		ComponentAPIServer:         "apiserver_request_total",
		ComponentScheduler:         "scheduler_",
		ComponentControllerManager: "workqueue_",
	} {
		body := getWithConfig(t, cp.AdminRESTConfig(), urls[component])
		if !strings.Contains(body, want) {
			t.Errorf("%s metrics at %s lack %q", component, urls[component], want)
		}
	}
	if _, err := os.Stat(cp.AdminKubeconfig()); err != nil {
		t.Errorf("admin kubeconfig: %v", err)
	}

	// The API server crashes and is started again on the same port: what
	// was written survives, and clients made before go on working.
	if err := cp.Kill(ComponentAPIServer); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); err == nil {
		t.Error("the API server answered after it was killed")
	}
	if err := cp.Restart(ctx, ComponentAPIServer); err != nil {
		t.Fatalf("restarting the API server: %v", err)
	}
	if _, err := admin.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); err != nil {
		t.Errorf("node n1 after the API server's restart: %v", err)
	}
	if err := cp.Kill("no-such-component"); err == nil {
		t.Error("Kill of an unknown component succeeded")
	}

	var pids []int
	for _, p := range cp.procs {
		pids = append(pids, p.pid())
	}
	if len(pids) != 4 {
		t.Errorf("%d children, want 4", len(pids))
	}
	begin = time.Now()
	if err := cp.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	stopped = true
	t.Logf("control plane stopped in %s", time.Since(begin).Round(time.Millisecond))
	for _, pid := range pids {
		assertGone(t, pid)
	}
	if err := cp.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func hasNamespace(items []corev1.Namespace, name string) bool {
	for _, ns := range items {
		if ns.Name == name {
			return true
		}
	}
	return false
}

func node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func getWithConfig(t *testing.T, cfg *rest.Config, url string) string {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body)
}

// checkAuditLog finds in the audit log at path a ResponseComplete event of
// user's verb on resource with userAgent, and no RequestReceived event.
func checkAuditLog(t *testing.T, path, user, userAgent, verb, resource string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	found, events := false, 0
	for sc.Scan() {
		var e struct {
			Level, Stage, Verb, UserAgent string
			User                          struct{ Username string }
			ObjectRef                     *struct{ Resource string }
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit log line %d is not JSON: %v", events+1, err)
		}
		events++
		if e.Stage == "RequestReceived" || e.Level != "Metadata" {
			t.Errorf("audit event at stage %s, level %s: the policy omits RequestReceived and logs Metadata", e.Stage, e.Level)
		}
		if e.Stage == "ResponseComplete" && e.User.Username == user && e.UserAgent == userAgent && e.Verb == verb && e.ObjectRef != nil && e.ObjectRef.Resource == resource {
			found = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Errorf("no %s %s by %s (%s) among the %d events of the audit log", verb, resource, user, userAgent, events)
	}
}
