package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"
	remotecommandserver "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// fakeStreams is the runtime behind a CRI streaming server, the library
// containerd's is built on: exec runs "cat" (stdin to stdout), "fail"
// (exit 3) or echoes its arguments; attach says whether it has a TTY and
// copies stdin; a forwarded port answers with the sandbox and port.
type fakeStreams struct{}

func (fakeStreams) Exec(_ context.Context, containerID string, cmd []string, in io.Reader, out, errOut io.WriteCloser, _ bool, _ <-chan remotecommandserver.TerminalSize) error {
	switch cmd[0] {
	case "cat":
		_, err := io.Copy(out, in)
		return err
	case "fail":
		_, _ = io.WriteString(errOut, "boom\n")
		return utilexec.CodeExitError{Err: errors.New("command 'fail' exited with 3"), Code: 3}
	}
	_, err := fmt.Fprintf(out, "%s in %s\n", strings.Join(cmd[1:], " "), containerID)
	return err
}

func (fakeStreams) Attach(_ context.Context, containerID string, in io.Reader, out, _ io.WriteCloser, tty bool, _ <-chan remotecommandserver.TerminalSize) error {
	if _, err := fmt.Fprintf(out, "attached to %s, tty %v\n", containerID, tty); err != nil {
		return err
	}
	_, err := io.Copy(out, in)
	return err
}

func (fakeStreams) PortForward(_ context.Context, sandboxID string, port int32, stream io.ReadWriteCloser) error {
	defer func() { _ = stream.Close() }()
	_, err := fmt.Fprintf(stream, "pong from %s:%d\n", sandboxID, port)
	return err
}

// streamingBackend is a runtime's streaming server on a loopback port,
// and a StreamURL provider that asks it for URLs as the agent asks CRI,
// recording the requests. Containers' IDs are their names and the
// sandbox's ID is "sandbox-" and the pod's UID.
type streamingBackend struct {
	srv  streaming.Server
	mu   sync.Mutex
	reqs []StreamRequest
}

func newStreamingBackend(t *testing.T) *streamingBackend {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	cfg := streaming.DefaultConfig
	cfg.Addr = ts.Listener.Addr().String()
	srv, err := streaming.NewServer(cfg, fakeStreams{})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = srv
	ts.Start()
	t.Cleanup(ts.Close)
	return &streamingBackend{srv: srv}
}

func (b *streamingBackend) streamURL(_ context.Context, req StreamRequest) (*url.URL, error) {
	b.mu.Lock()
	b.reqs = append(b.reqs, req)
	b.mu.Unlock()
	var raw string
	var err error
	switch req.Kind {
	case StreamExec:
		var resp *runtimeapi.ExecResponse
		resp, err = b.srv.GetExec(&runtimeapi.ExecRequest{ContainerId: req.Container, Cmd: req.Cmd, Tty: req.TTY, Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr})
		raw = resp.GetUrl()
	case StreamAttach:
		var resp *runtimeapi.AttachResponse
		resp, err = b.srv.GetAttach(&runtimeapi.AttachRequest{ContainerId: req.Container, Tty: req.TTY, Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr})
		raw = resp.GetUrl()
	case StreamPortForward:
		var resp *runtimeapi.PortForwardResponse
		resp, err = b.srv.GetPortForward(&runtimeapi.PortForwardRequest{PodSandboxId: "sandbox-" + string(req.UID), Port: req.Ports})
		raw = resp.GetUrl()
	}
	if err != nil {
		return nil, err
	}
	return url.Parse(raw)
}

func (b *streamingBackend) last(t *testing.T) StreamRequest {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.reqs) == 0 {
		t.Fatal("StreamURL was not called")
	}
	return b.reqs[len(b.reqs)-1]
}

// streamingConfig is testConfig with StreamURL from backend, and a
// container "shell" with a TTY in the pod.
func streamingConfig(rec *recorder, backend *streamingBackend) Config {
	cfg := testConfig(rec)
	cfg.Pods = func() []*corev1.Pod {
		p := testPod()
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "shell", Image: "busybox", TTY: true, Stdin: true})
		return []*corev1.Pod{p}
	}
	cfg.StreamURL = backend.streamURL
	return cfg
}

// clientConfig is a client of the kubelet API at base with a token.
func clientConfig(base, token string, caPEM []byte) *rest.Config {
	return &rest.Config{Host: base, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}}
}

// streamSPDY runs a remotecommand request at path?query over SPDY, as the
// API server does to the kubelet.
func streamSPDY(t *testing.T, cfg *rest.Config, pathAndQuery string, opts remotecommand.StreamOptions) (stdout, stderr string, err error) {
	t.Helper()
	u, err := url.Parse(cfg.Host + pathAndQuery)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	if err != nil {
		t.Fatal(err)
	}
	r := stream(ex, opts)
	return r.stdout, r.stderr, r.err
}

// stream runs ex with opts' input, collecting stdout and (without a TTY)
// stderr, within 30 s.
func stream(ex remotecommand.Executor, opts remotecommand.StreamOptions) execResult {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	opts.Stdout = &out
	if !opts.Tty {
		opts.Stderr = &errOut
	}
	err := ex.StreamWithContext(ctx, opts)
	return execResult{stdout: out.String(), stderr: errOut.String(), err: err}
}

func TestStreamingExecProxiesToTheRuntime(t *testing.T) {
	backend := newStreamingBackend(t)
	rec := &recorder{}
	base, _, caPEM := serveTLS(t, newTestServer(t, streamingConfig(rec, backend)))
	cfg := clientConfig(base, testToken, caPEM)

	out, errOut, err := streamSPDY(t, cfg, "/exec/default/web/uid-web/app?command=cat&input=1&output=1&error=1",
		remotecommand.StreamOptions{Stdin: strings.NewReader("typed in\n")})
	if err != nil || out != "typed in\n" || errOut != "" {
		t.Errorf("interactive exec cat = %q, %q, %v; want the input back", out, errOut, err)
	}
	want := StreamRequest{Kind: StreamExec, Namespace: "default", Pod: "web", UID: "uid-web", Container: "app", Cmd: []string{"cat"}, Stdin: true, Stdout: true, Stderr: true}
	if got := backend.last(t); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("StreamURL asked for %+v, want %+v", got, want)
	}
	rec.mu.Lock()
	attr := rec.attrs[len(rec.attrs)-1]
	ran := len(rec.execCmds)
	rec.mu.Unlock()
	if attr.GetSubresource() != "proxy" || attr.GetVerb() != "create" || attr.GetName() != testNode {
		t.Errorf("exec authorized as %s nodes/%s %s, want create nodes/proxy %s", attr.GetVerb(), attr.GetSubresource(), attr.GetName(), testNode)
	}
	if ran != 0 {
		t.Errorf("the ExecSync provider ran %d commands, want none when the runtime streams", ran)
	}

	// The UID is the pod's even when the path has none.
	_, errOut, err = streamSPDY(t, cfg, "/exec/default/web/app?command=fail&output=1&error=1", remotecommand.StreamOptions{})
	checkExitCode(t, "exec fail", execResult{err: err}, 3)
	if errOut != "boom\n" || backend.last(t).UID != "uid-web" {
		t.Errorf("exec fail: stderr %q, UID %q; want boom and uid-web", errOut, backend.last(t).UID)
	}

	for _, tc := range []struct{ what, path, wantErr string }{
		{"another UID", "/exec/default/web/uid-other/app?command=ls&output=1", `pod "default/web" does not exist on node "node-1"`},
		{"an unknown container", "/exec/default/web/nope?command=ls&output=1", `container "nope" not found in pod "default/web"`},
		{"no streams", "/exec/default/web/app?command=ls", "you must specify at least 1 of stdin, stdout, stderr"},
	} {
		if _, _, err := streamSPDY(t, cfg, tc.path, remotecommand.StreamOptions{}); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("exec with %s: %v, want an error containing %q", tc.what, err, tc.wantErr)
		}
	}
}

func TestStreamingExecFallsBackToExecSync(t *testing.T) {
	rec := &recorder{}
	cfg := testConfig(rec)
	cfg.StreamURL = func(context.Context, StreamRequest) (*url.URL, error) {
		return nil, fmt.Errorf("%w: %v", ErrStreamingUnsupported, status.Error(codes.Unimplemented, "Exec is not implemented"))
	}
	base, _, caPEM := serveTLS(t, newTestServer(t, cfg))
	client := clientConfig(base, testToken, caPEM)

	out, _, err := streamSPDY(t, client, "/exec/default/web/app?command=echo&command=hi&output=1&error=1", remotecommand.StreamOptions{})
	if err != nil || out != "hi\n" {
		t.Errorf("exec echo hi on a runtime without streaming = %q, %v; want hi from the ExecSync provider", out, err)
	}
	_, _, err = streamSPDY(t, client, "/exec/default/web/app?command=cat&input=1&output=1", remotecommand.StreamOptions{Stdin: strings.NewReader("x")})
	if err == nil || !strings.Contains(err.Error(), "interactive exec (stdin or tty) is not supported") {
		t.Errorf("interactive exec on a runtime without streaming: %v, want it refused", err)
	}
}

func TestAttachUsesTheContainersTTY(t *testing.T) {
	backend := newStreamingBackend(t)
	base, _, caPEM := serveTLS(t, newTestServer(t, streamingConfig(&recorder{}, backend)))
	cfg := clientConfig(base, testToken, caPEM)

	out, _, err := streamSPDY(t, cfg, "/attach/default/web/shell?input=1&output=1&tty=1", remotecommand.StreamOptions{Stdin: strings.NewReader("ls\n"), Tty: true})
	if want := "attached to shell, tty true\nls\n"; err != nil || out != want {
		t.Errorf("attach to a TTY container = %q, %v; want %q", out, err, want)
	}
	out, _, err = streamSPDY(t, cfg, "/attach/default/web/uid-web/app?input=1&output=1&error=1", remotecommand.StreamOptions{Stdin: strings.NewReader("x\n")})
	if want := "attached to app, tty false\nx\n"; err != nil || out != want {
		t.Errorf("attach to a container without a TTY = %q, %v; want %q", out, err, want)
	}
	if got := backend.last(t); got.Kind != StreamAttach || got.TTY || !got.Stdin || got.UID != "uid-web" {
		t.Errorf("StreamURL asked for %+v, want an attach to app without a TTY", got)
	}
}

// forward port-forwards to remote port 8080 of pod web through the
// kubelet API at cfg, over SPDY as the API server does, and returns what
// the pod answered.
func forward(t *testing.T, cfg *rest.Config, path string) (string, error) {
	t.Helper()
	u, err := url.Parse(cfg.Host + path)
	if err != nil {
		t.Fatal(err)
	}
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return forwardThrough(t, spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u))
}

// forwardThrough is forward with the client's dialer.
func forwardThrough(t *testing.T, dialer httpstream.Dialer) (string, error) {
	t.Helper()
	stop, ready := make(chan struct{}), make(chan struct{})
	var errOut bytes.Buffer
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:8080"}, stop, ready, io.Discard, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	defer func() {
		close(stop)
		<-done
	}()
	select {
	case <-ready:
	case err := <-done:
		done <- err
		return "", fmt.Errorf("port-forward ended: %w", err)
	case <-time.After(30 * time.Second):
		t.Fatal("port-forward not ready within 30s")
	}
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	b, err := io.ReadAll(conn)
	return string(b), err
}

func TestPortForwardProxiesToTheRuntime(t *testing.T) {
	backend := newStreamingBackend(t)
	rec := &recorder{}
	base, _, caPEM := serveTLS(t, newTestServer(t, streamingConfig(rec, backend)))
	cfg := clientConfig(base, testToken, caPEM)

	for _, path := range []string{"/portForward/default/web", "/portForward/default/web/uid-web"} {
		got, err := forward(t, cfg, path)
		if want := "pong from sandbox-uid-web:8080\n"; err != nil || got != want {
			t.Errorf("port-forward through %s read %q, %v; want %q", path, got, err, want)
		}
	}
	if got := backend.last(t); got.Kind != StreamPortForward || got.UID != "uid-web" || got.Namespace != "default" || got.Pod != "web" {
		t.Errorf("StreamURL asked for %+v, want a port-forward to default/web", got)
	}
	rec.mu.Lock()
	attr := rec.attrs[len(rec.attrs)-1]
	rec.mu.Unlock()
	if attr.GetSubresource() != "proxy" || attr.GetVerb() != "create" {
		t.Errorf("port-forward authorized as %s nodes/%s, want create nodes/proxy", attr.GetVerb(), attr.GetSubresource())
	}
	if _, err := forward(t, cfg, "/portForward/default/nope"); err == nil {
		t.Error("port-forward to an unknown pod succeeded")
	}
}

func TestStreamingWithoutARuntimeStreamingServer(t *testing.T) {
	unsupported := testConfig(&recorder{})
	unsupported.StreamURL = func(_ context.Context, req StreamRequest) (*url.URL, error) {
		return nil, fmt.Errorf("%w: %v", ErrStreamingUnsupported, status.Errorf(codes.Unimplemented, "%s is not implemented by the fake runtime", req.Kind))
	}
	notFound := testConfig(&recorder{})
	notFound.StreamURL = func(context.Context, StreamRequest) (*url.URL, error) {
		return nil, fmt.Errorf("CRI exec for pod default/web: %w", status.Error(codes.NotFound, "container gone"))
	}
	down := testConfig(&recorder{})
	down.StreamURL = func(context.Context, StreamRequest) (*url.URL, error) {
		// A port nothing listens on: a streaming server that went away.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		return url.Parse("http://" + addr + "/exec/token")
	}
	upgrade := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}, "X-Stream-Protocol-Version": {"v4.channel.k8s.io"}}
	for _, tc := range []struct {
		what     string
		cfg      Config
		path     string
		header   http.Header
		wantCode int
		wantBody string
	}{
		{"attach on an emulated node", unsupported, "/attach/default/web/app?output=1", nil, http.StatusNotImplemented,
			`node "node-1" cannot attach to container "app" of pod "default/web": the container runtime has no streaming server: rpc error: code = Unimplemented desc = attach is not implemented by the fake runtime; attach needs a real runtime such as containerd`},
		{"port-forward on an emulated node", unsupported, "/portForward/default/web", nil, http.StatusNotImplemented,
			`node "node-1" cannot port-forward to pod "default/web": the container runtime has no streaming server: rpc error: code = Unimplemented desc = portForward is not implemented by the fake runtime; nothing listens in an emulated pod, port-forward needs a real runtime such as containerd`},
		{"port-forward without a provider", testConfig(&recorder{}), "/portForward/default/web", nil, http.StatusNotImplemented,
			`node "node-1" does not serve port-forward: the node agent was started without a provider for it`},
		{"attach without a provider", testConfig(&recorder{}), "/attach/default/web/app?output=1", nil, http.StatusNotImplemented,
			`node "node-1" does not serve attach: the node agent was started without a provider for it`},
		{"a container the runtime lost", notFound, "/exec/default/web/app?command=ls&output=1", nil, http.StatusNotFound,
			`node "node-1": CRI exec for pod default/web: rpc error: code = NotFound desc = container gone`},
		{"a request that is not an upgrade", down, "/exec/default/web/app?command=ls&output=1", nil, http.StatusBadRequest,
			`node "node-1": proxying /exec/default/web/app to the container runtime's streaming server: Upgrade request required`},
		{"a streaming server that is gone", down, "/exec/default/web/app?command=ls&output=1", upgrade, http.StatusInternalServerError,
			`node "node-1": proxying /exec/default/web/app to the container runtime's streaming server: error dialing backend: dial tcp`},
	} {
		h := newTestServer(t, tc.cfg).Handler()
		req := httptest.NewRequest(http.MethodPost, tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		for k, v := range tc.header {
			req.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != tc.wantCode || !strings.HasPrefix(w.Body.String(), tc.wantBody) {
			t.Errorf("%s: %d %q, want %d %q", tc.what, w.Code, w.Body.String(), tc.wantCode, tc.wantBody)
		}
	}
}

// TestServeEndsProxiedStreams: a running exec ends when the server's
// context does, though http.Server.Close leaves hijacked connections open.
func TestServeEndsProxiedStreams(t *testing.T) {
	backend := newStreamingBackend(t)
	s := newTestServer(t, streamingConfig(&recorder{}, backend))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := SelfSignedCert([]net.IP{net.ParseIP("127.0.0.1")}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, cert) }()

	cfg := &rest.Config{Host: "https://" + ln.Addr().String(), BearerToken: testToken, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	u, err := url.Parse(cfg.Host + "/exec/default/web/app?command=cat&input=1&output=1")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	if err != nil {
		t.Fatal(err)
	}
	stdin, stdinW := io.Pipe()
	defer func() { _ = stdinW.Close() }()
	stdoutR, stdout := io.Pipe()
	streamed := make(chan error, 1)
	go func() {
		streamCtx, streamCancel := context.WithTimeout(context.Background(), time.Minute)
		defer streamCancel()
		streamed <- ex.StreamWithContext(streamCtx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout})
		_ = stdout.Close()
	}()
	// The line coming back shows the stream open end to end.
	go func() { _, _ = stdinW.Write([]byte("still open\n")) }()
	echoed := make(chan string, 1)
	go func() {
		b := make([]byte, len("still open\n"))
		_, _ = io.ReadFull(stdoutR, b)
		echoed <- string(b)
		_, _ = io.Copy(io.Discard, stdoutR)
	}()
	select {
	case line := <-echoed:
		if line != "still open\n" {
			t.Fatalf("cat echoed %q", line)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no echo through the proxied exec within 30s")
	}
	cancel()
	select {
	case err := <-streamed:
		// SPDY clients see a closed connection as the end of the
		// streams, so the error says little: the end is what matters.
		t.Logf("the exec ended with the server: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the proxied exec still runs 30s after the server's context ended")
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
