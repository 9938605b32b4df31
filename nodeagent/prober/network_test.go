package prober

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func loopbackPod() *corev1.Pod {
	p := newPod("u1", corev1.Container{})
	p.Status.PodIP = "127.0.0.1"
	return p
}

func hostPort(t *testing.T, addr string) (string, int) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	return host, n
}

func TestHTTPGet(t *testing.T) {
	var seen http.Header
	var seenHost string
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		seen, seenHost = r.Header.Clone(), r.Host
		_, _ = w.Write([]byte("fine"))
	})
	mux.HandleFunc("/created", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })
	mux.HandleFunc("/same-host", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(strings.Repeat("b", 20<<10))) })
	mux.HandleFunc("/missing", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "secret detail", http.StatusNotFound) })
	mux.HandleFunc("/broken", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "secret detail", http.StatusInternalServerError)
	})
	mux.HandleFunc("/slow", func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	_, port := hostPort(t, srv.Listener.Addr().String())
	// Another host: the same server by name, which the prober does not follow.
	mux.HandleFunc("/other-host", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://localhost:"+strconv.Itoa(port)+"/ok", http.StatusMovedPermanently)
	})

	container := &corev1.Container{Name: "c0", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}
	cases := []struct {
		name    string
		path    string
		port    intstr.IntOrString
		headers []corev1.HTTPHeader
		ctxTime time.Duration
		want    Result
		wantOut string
		wantErr bool
	}{
		{name: "200", path: "/ok", want: Success, wantOut: "fine"},
		{name: "201", path: "/created", want: Success},
		{name: "a port by name", path: "/ok", port: intstr.FromString("http"), want: Success, wantOut: "fine"},
		{name: "a redirect to the same host is followed", path: "/same-host", want: Success, wantOut: "fine"},
		{name: "a redirect to another host is a warning", path: "/other-host", want: Warning, wantOut: "Probe terminated redirects, Response body: "},
		{name: "endless redirects fail", path: "/loop", want: Failure, wantOut: "stopped after 10 redirects"},
		{name: "404", path: "/missing", want: Failure, wantOut: "HTTP probe failed with statuscode: 404"},
		{name: "500", path: "/broken", want: Failure, wantOut: "HTTP probe failed with statuscode: 500"},
		{name: "a timeout fails", path: "/slow", ctxTime: 50 * time.Millisecond, want: Failure, wantOut: "context deadline exceeded"},
		{name: "an unknown port name cannot run", path: "/ok", port: intstr.FromString("nope"), want: Unknown, wantErr: true},
		{name: "headers", path: "/ok", want: Success, wantOut: "fine",
			headers: []corev1.HTTPHeader{{Name: "X-Probe", Value: "1"}, {Name: "Host", Value: "example.test"}, {Name: "Accept", Value: ""}}},
	}
	r := NewHTTPRunner(nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seen = nil
			p := tc.port
			if p == (intstr.IntOrString{}) {
				p = intstr.FromInt32(int32(port))
			}
			probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: tc.path, Port: p, HTTPHeaders: tc.headers}}, TimeoutSeconds: 5}
			ctx := context.Background()
			if tc.ctxTime > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctxTime)
				defer cancel()
			}
			res, out, err := r.Network(ctx, Readiness, loopbackPod(), container, "cid", probe)
			if res != tc.want || !strings.Contains(out, tc.wantOut) || (err != nil) != tc.wantErr {
				t.Errorf("Network = (%v, %q, %v), want (%v, containing %q, error %v)", res, out, err, tc.want, tc.wantOut, tc.wantErr)
			}
			if strings.Contains(out, "secret") {
				t.Errorf("a failure's message holds the body: %q", out)
			}
		})
	}

	t.Run("the kubelet's request headers", func(t *testing.T) {
		probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(port))}}}
		if res, _, _ := r.Network(context.Background(), Liveness, loopbackPod(), container, "cid", probe); res != Success {
			t.Fatalf("probe failed")
		}
		if seen.Get("User-Agent") != "kube-probe/1.37" || seen.Get("Accept") != "*/*" || seen.Get("Accept-Encoding") != "" {
			t.Errorf("headers = %v, want the kubelet's", seen)
		}
	})
	t.Run("probe headers override", func(t *testing.T) {
		probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/ok", Port: intstr.FromInt32(int32(port)),
			HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "1"}, {Name: "Host", Value: "example.test"}, {Name: "Accept", Value: ""}, {Name: "User-Agent", Value: "mine"}},
		}}}
		if res, _, _ := r.Network(context.Background(), Liveness, loopbackPod(), container, "cid", probe); res != Success {
			t.Fatalf("probe failed")
		}
		if seen.Get("X-Probe") != "1" || seenHost != "example.test" || seen.Get("User-Agent") != "mine" || len(seen.Values("Accept")) != 0 {
			t.Errorf("headers = %v host %q, want the probe's", seen, seenHost)
		}
	})
	t.Run("the body is cut at 10 KiB", func(t *testing.T) {
		probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/big", Port: intstr.FromInt32(int32(port))}}}
		if res, out, _ := r.Network(context.Background(), Readiness, loopbackPod(), container, "cid", probe); res != Success || len(out) != maxOutput {
			t.Errorf("Network = (%v, %d bytes), want Success with %d", res, len(out), maxOutput)
		}
	})
	t.Run("host from podIP, or the probe", func(t *testing.T) {
		asked := 0
		byIP := NewHTTPRunner(func(*corev1.Pod) string { asked++; return "127.0.0.1" })
		pod := newPod("u2", corev1.Container{}) // no status IP
		probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(port))}}}
		if res, _, _ := byIP.Network(context.Background(), Readiness, pod, container, "cid", probe); res != Success || asked != 1 {
			t.Errorf("probe through podIP: %v, asked %d", res, asked)
		}
		probe.HTTPGet.Host = "127.0.0.1"
		if res, _, _ := r.Network(context.Background(), Readiness, pod, container, "cid", probe); res != Success {
			t.Errorf("probe to the probe's host: %v", res)
		}
	})
}

func TestHTTPSIsNotVerified(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("tls")) }))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Scheme: corev1.URISchemeHTTPS, Port: intstr.FromInt32(int32(port))}}}
	if res, out, err := NewHTTPRunner(nil).Network(context.Background(), Readiness, loopbackPod(), &corev1.Container{}, "cid", probe); res != Success || out != "tls" {
		t.Errorf("HTTPS probe = (%v, %q, %v), want Success", res, out, err)
	}
}

func TestTCPSocket(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	_, port := hostPort(t, l.Addr().String())
	container := &corev1.Container{Name: "c0", Ports: []corev1.ContainerPort{{Name: "db", ContainerPort: int32(port)}}}
	r := NewHTTPRunner(nil)
	tcp := func(p intstr.IntOrString, host string) (Result, string, error) {
		probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: p, Host: host}}}
		return r.Network(context.Background(), Liveness, loopbackPod(), container, "cid", probe)
	}
	if res, out, err := tcp(intstr.FromInt32(int32(port)), ""); res != Success || err != nil {
		t.Errorf("open port: (%v, %q, %v)", res, out, err)
	}
	if res, _, err := tcp(intstr.FromString("db"), "127.0.0.1"); res != Success || err != nil {
		t.Errorf("named port: (%v, %v)", res, err)
	}
	if res, _, err := tcp(intstr.FromInt32(0), ""); res != Unknown || err == nil {
		t.Errorf("port 0: (%v, %v), want an error", res, err)
	}
	_ = l.Close()
	if res, out, err := tcp(intstr.FromInt32(int32(port)), ""); res != Failure || !strings.Contains(out, "connection refused") || err != nil {
		t.Errorf("closed port: (%v, %q, %v), want a refused Failure", res, out, err)
	}
}

func TestGRPC(t *testing.T) {
	serve := func(t *testing.T, withHealth bool) (int, *health.Server) {
		t.Helper()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		hs := health.NewServer()
		if withHealth {
			healthpb.RegisterHealthServer(s, hs)
		}
		go func() { _ = s.Serve(l) }()
		t.Cleanup(s.Stop)
		_, port := hostPort(t, l.Addr().String())
		return port, hs
	}
	port, hs := serve(t, true)
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_NOT_SERVING)
	bare, _ := serve(t, false)
	closed := func() int {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		_, p := hostPort(t, l.Addr().String())
		_ = l.Close()
		return p
	}()

	cases := []struct {
		name    string
		port    int
		service *string
		want    Result
		wantOut string
	}{
		{"serving", port, nil, Success, "service healthy"},
		{"not serving", port, ptr.To("db"), Failure, `service unhealthy (responded with "NOT_SERVING")`},
		{"an unknown service", port, ptr.To("nope"), Failure, "error: health rpc probe failed: rpc error: code = NotFound"},
		{"no health service", bare, nil, Failure, "error: this server does not implement the grpc health protocol (grpc.health.v1.Health)"},
		{"nothing listening", closed, nil, Failure, "error: failed to connect service at"},
	}
	r := NewHTTPRunner(nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: int32(tc.port), Service: tc.service}}, TimeoutSeconds: 5}
			res, out, err := r.Network(context.Background(), Readiness, loopbackPod(), &corev1.Container{}, "cid", probe)
			if res != tc.want || !strings.Contains(out, tc.wantOut) || err != nil {
				t.Errorf("Network = (%v, %q, %v), want (%v, containing %q)", res, out, err, tc.want, tc.wantOut)
			}
		})
	}
	t.Run("a timeout", func(t *testing.T) {
		// A listener that accepts and never speaks: the RPC cannot finish.
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		defer func() { _ = l.Close() }()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer func() { _ = c.Close() }()
			}
		}()
		_, p := hostPort(t, l.Addr().String())
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: int32(p)}}, TimeoutSeconds: 5}
		res, out, err := r.Network(ctx, Readiness, loopbackPod(), &corev1.Container{}, "cid", probe)
		if res != Failure || err != nil || !strings.Contains(out, "timeout") && !strings.Contains(out, "failed to connect") {
			t.Errorf("Network = (%v, %q, %v), want a Failure", res, out, err)
		}
	})
}

func TestNetworkWithoutAction(t *testing.T) {
	res, _, err := NewHTTPRunner(nil).Network(context.Background(), Readiness, loopbackPod(), &corev1.Container{Name: "c0"}, "cid", &corev1.Probe{})
	if res != Unknown || err == nil {
		t.Errorf("a probe without an action = (%v, %v), want an error", res, err)
	}
	// Through the manager, a probe with no handler at all errors too.
	h := newHarness(t, 1)
	pod := newPod("u1", corev1.Container{ReadinessProbe: &corev1.Probe{}})
	h.m.ContainerStarted(pod, "c0", "cid", t0)
	h.settle()
	if ev := h.drainEvents(); len(ev) != 1 || !strings.Contains(ev[0], "missing probe handler for ns/pod-u1:c0") {
		t.Errorf("events = %q", ev)
	}
}
