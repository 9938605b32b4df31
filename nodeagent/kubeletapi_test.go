package nodeagent

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/nodeagent/server"
)

// withKubeletAPI serves the harness agent's kubelet API on a free port,
// letting every request with a bearer token in.
func withKubeletAPI(t testing.TB) func(*Config) {
	cert, err := server.SelfSignedCert(nil, []string{"test-kubelet"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	authn := authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		if req.Header.Get("Authorization") == "" {
			return nil, false, nil
		}
		return &authenticator.Response{User: &user.DefaultInfo{Name: "tester"}}, true, nil
	})
	authz := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionAllow, "", nil
	})
	return func(c *Config) {
		c.Serving = &ServingConfig{Port: 0, Cert: cert, Authenticator: authn, Authorizer: authz}
	}
}

// TestKubeletAPIOnAnEmulatedNode execs a command in an emulated container
// through the agent's kubelet API, as the API server relays kubectl exec,
// and asks for a port-forward, which an emulated node cannot give.
func TestKubeletAPIOnAnEmulatedNode(t *testing.T) {
	h := startAgent(t, withKubeletAPI(t))
	ctx := context.Background()
	h.allocatePodCIDR(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web", Annotations: map[string]string{
			fakeruntime.AnnotationBehaviour: `{"app": {"exec": [{"command": "cat /etc/hostname", "stdout": "web\n"}]}}`,
		}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "app", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent}}},
	}
	if _, err := h.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "the pod runs", func() bool {
		p := h.pod(t, "web")
		return p != nil && p.Status.Phase == corev1.PodRunning
	})
	node := h.node(t)
	port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
	if port == 0 || port == 10250 {
		t.Fatalf("advertised kubelet port %d, want the free port the agent took", port)
	}
	base := "https://" + net.JoinHostPort("127.1.0.1", strconv.Itoa(int(port)))
	cfg := &rest.Config{Host: base, BearerToken: "t", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}

	execURL, _ := url.Parse(base + "/exec/default/web/app?command=cat&command=/etc/hostname&output=1&error=1")
	exec, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, execURL)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		t.Fatalf("exec: %v (stderr %q)", err, stderr.String())
	}
	if stdout.String() != "web\n" {
		t.Errorf("exec stdout = %q, want %q", stdout.String(), "web\n")
	}

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: mustTLS(t, cfg)}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/portForward/default/web", nil)
	req.Header.Set("Authorization", "Bearer t")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("port-forward on an emulated node: %s, want 501", resp.Status)
	}

	anonymous, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/pods", nil)
	if resp, err = client.Do(anonymous); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous /pods: %s, want 401", resp.Status)
	}
}

func mustTLS(t *testing.T, cfg *rest.Config) *tls.Config {
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tlsCfg
}
