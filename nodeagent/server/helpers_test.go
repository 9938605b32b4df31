package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const (
	testNode  = "node-1"
	testToken = "good-token"
)

var testNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func testPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-web"},
		Spec: corev1.PodSpec{
			NodeName:            testNode,
			InitContainers:      []corev1.Container{{Name: "init", Image: "busybox"}},
			Containers:          []corev1.Container{{Name: "app", Image: "nginx"}},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}},
		},
	}
}

// testSummary has every kind of stat, so trimming can be checked.
func testSummary() *statsapi.Summary {
	t := metav1.NewTime(testNow.Add(-10 * time.Second))
	start := metav1.NewTime(testNow.Add(-time.Hour))
	fs := &statsapi.FsStats{Time: t, UsedBytes: ptr.To[uint64](100)}
	return &statsapi.Summary{
		Node: statsapi.NodeStats{
			NodeName:  testNode,
			StartTime: start,
			CPU:       &statsapi.CPUStats{Time: t, UsageNanoCores: ptr.To[uint64](5e8), UsageCoreNanoSeconds: ptr.To[uint64](12_500_000_000)},
			Memory:    &statsapi.MemoryStats{Time: t, WorkingSetBytes: ptr.To[uint64](1 << 30)},
			Network:   &statsapi.NetworkStats{Time: t, InterfaceStats: statsapi.InterfaceStats{Name: "eth0", RxBytes: ptr.To[uint64](7)}},
			Fs:        fs,
			Runtime:   &statsapi.RuntimeStats{ImageFs: fs},
			Rlimit:    &statsapi.RlimitStats{Time: t, MaxPID: ptr.To[int64](4096)},
			SystemContainers: []statsapi.ContainerStats{{
				Name: statsapi.SystemContainerKubelet, StartTime: start,
				CPU:    &statsapi.CPUStats{Time: t, UsageCoreNanoSeconds: ptr.To[uint64](1e9)},
				Memory: &statsapi.MemoryStats{Time: t, WorkingSetBytes: ptr.To[uint64](1 << 20)},
				Rootfs: fs,
			}},
		},
		Pods: []statsapi.PodStats{{
			PodRef:    statsapi.PodReference{Name: "web", Namespace: "default", UID: "uid-web"},
			StartTime: start,
			CPU:       &statsapi.CPUStats{Time: t, UsageCoreNanoSeconds: ptr.To[uint64](3_000_000_000)},
			Memory:    &statsapi.MemoryStats{Time: t, WorkingSetBytes: ptr.To[uint64](64 << 20)},
			Network:   &statsapi.NetworkStats{Time: t},
			VolumeStats: []statsapi.VolumeStats{{
				Name: "data", FsStats: *fs,
			}},
			EphemeralStorage: fs,
			Containers: []statsapi.ContainerStats{{
				Name:      "app",
				StartTime: start,
				CPU:       &statsapi.CPUStats{Time: t, UsageCoreNanoSeconds: ptr.To[uint64](2_500_000_000)},
				Memory:    &statsapi.MemoryStats{Time: t, WorkingSetBytes: ptr.To[uint64](60 << 20)},
				Swap:      &statsapi.SwapStats{Time: t, SwapUsageBytes: ptr.To[uint64](10), SwapAvailableBytes: ptr.To[uint64](90)},
				Rootfs:    fs,
				Logs:      fs,
			}},
		}},
	}
}

// recorder keeps what the providers were called with.
type recorder struct {
	mu       sync.Mutex
	logOpts  []LogOptions
	execCmds [][]string
	attrs    []authorizer.Attributes
}

func (r *recorder) lastLogOpts(t *testing.T) LogOptions {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.logOpts) == 0 {
		t.Fatal("Logs was not called")
	}
	return r.logOpts[len(r.logOpts)-1]
}

// authenticatorFunc authenticates as the user f names, if any.
func authenticatorFunc(f func(*http.Request) (string, bool)) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		name, ok := f(req)
		if !ok {
			return nil, false, nil
		}
		return &authenticator.Response{User: &user.DefaultInfo{Name: name}}, true, nil
	})
}

// tokenAuthenticator accepts only testToken, as user alice.
func tokenAuthenticator() authenticator.Request {
	return authenticatorFunc(func(req *http.Request) (string, bool) {
		return "alice", req.Header.Get("Authorization") == "Bearer "+testToken
	})
}

// testConfig is a node with one pod; its providers record their calls.
func testConfig(rec *recorder) Config {
	return Config{
		NodeName: testNode,
		Pods:     func() []*corev1.Pod { return []*corev1.Pod{testPod()} },
		Summary:  func(context.Context) (*statsapi.Summary, error) { return testSummary(), nil },
		Logs: func(_ context.Context, namespace, pod, container string, opts LogOptions, w io.Writer) error {
			rec.mu.Lock()
			rec.logOpts = append(rec.logOpts, opts)
			rec.mu.Unlock()
			_, err := fmt.Fprintf(w, "log of %s/%s/%s\n", namespace, pod, container)
			return err
		},
		Exec: func(_ context.Context, namespace, pod, container string, cmd []string, _ time.Duration) ([]byte, []byte, int32, error) {
			rec.mu.Lock()
			rec.execCmds = append(rec.execCmds, cmd)
			rec.mu.Unlock()
			switch cmd[0] {
			case "echo":
				return []byte(strings.Join(cmd[1:], " ") + "\n"), nil, 0, nil
			case "fail":
				return []byte("partial\n"), []byte("boom\n"), 3, nil
			case "both":
				return []byte("out\n"), []byte("err\n"), 0, nil
			}
			return nil, nil, 0, errors.New("container is not running")
		},
		Authenticator: tokenAuthenticator(),
		Authorizer: authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			rec.mu.Lock()
			rec.attrs = append(rec.attrs, a)
			rec.mu.Unlock()
			return authorizer.DecisionAllow, "", nil
		}),
		Clock: clocktesting.NewFakePassiveClock(testNow),
	}
}

// serveTLS runs s.Serve on a loopback port with a self-signed certificate
// until the test ends, and returns its base URL and the certificate, as a
// pool and as PEM.
func serveTLS(t *testing.T, s *Server) (string, *x509.CertPool, []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := SelfSignedCert([]net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, cert) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve returned %v after its context ended, want nil", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return within 30s of its context ending")
		}
	})
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	return "https://" + ln.Addr().String(), pool, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Leaf.Raw})
}

// tlsClient trusts the server's certificate and presents clientCert if any.
func tlsClient(pool *x509.CertPool, clientCert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: pool}
	if clientCert != nil {
		cfg.Certificates = []tls.Certificate{*clientCert}
	}
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// send sends a request with the token (none if empty) and returns the status
// and body.
func send(t *testing.T, c *http.Client, method, url, token string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return resp.StatusCode, string(body), resp.Header
}

func newTestServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
