package server

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
)

// v5 runs a remotecommand request at path?query over v5 websockets, as
// kubectl 1.30 and later do and as the API server passes them on to a
// Node that declares ExtendWebSocketsToKubelet.
func v5(t *testing.T, base, token string, caPEM []byte, pathAndQuery string, opts remotecommand.StreamOptions) execResult {
	t.Helper()
	ex, err := remotecommand.NewWebSocketExecutor(clientConfig(base, token, caPEM), http.MethodGet, base+pathAndQuery)
	if err != nil {
		t.Fatal(err)
	}
	return stream(ex, opts)
}

// TestExecOverV5WebSockets: on a runtime without a streaming server, a v5
// exec runs through ExecSync and answers as the API server's translator
// would have: output, then the exit code.
func TestExecOverV5WebSockets(t *testing.T) {
	rec := &recorder{}
	base, _, caPEM := serveTLS(t, newTestServer(t, testConfig(rec)))

	r := v5(t, base, testToken, caPEM, "/exec/default/web/app?command=echo&command=hi&output=1&error=1", remotecommand.StreamOptions{})
	if r.err != nil || r.stdout != "hi\n" || r.stderr != "" {
		t.Errorf("v5 exec echo hi = %+v, want stdout \"hi\\n\"", r)
	}
	r = v5(t, base, testToken, caPEM, "/exec/default/web/uid-web/app?command=fail&output=1&error=1", remotecommand.StreamOptions{})
	checkExitCode(t, "v5 exec fail", r, 3)
	if r.stdout != "partial\n" || r.stderr != "boom\n" {
		t.Errorf("v5 exec fail output = %q / %q, want both streams", r.stdout, r.stderr)
	}
	rec.mu.Lock()
	attr := rec.attrs[len(rec.attrs)-1]
	rec.mu.Unlock()
	if attr.GetSubresource() != "proxy" || attr.GetVerb() != "get" {
		t.Errorf("v5 exec authorized as %s nodes/%s, want get nodes/proxy (a websocket GET)", attr.GetVerb(), attr.GetSubresource())
	}

	for _, tc := range []struct{ what, token, path, wantErr string }{
		{"a command that cannot run", testToken, "/exec/default/web/app?command=broken&output=1&error=1", "container is not running"},
		{"an unknown container", testToken, "/exec/default/web/nope?command=ls&output=1", `container "nope" not found in pod "default/web"`},
		{"stdin", testToken, "/exec/default/web/app?command=cat&input=1&output=1", "interactive exec (stdin or tty) is not supported"},
		{"no credentials", "", "/exec/default/web/app?command=ls&output=1", "Unauthorized"},
	} {
		r := v5(t, base, tc.token, caPEM, tc.path, remotecommand.StreamOptions{})
		if r.err == nil || !strings.Contains(r.err.Error(), tc.wantErr) {
			t.Errorf("v5 exec with %s: error %v, want one containing %q", tc.what, r.err, tc.wantErr)
		}
	}
}

// TestStreamingOverV5WebSockets: with a runtime streaming server, v5
// exec and attach are translated to SPDY towards it, and a websocket
// port-forward tunnels SPDY to it, as the kubelet does.
func TestStreamingOverV5WebSockets(t *testing.T) {
	backend := newStreamingBackend(t)
	base, _, caPEM := serveTLS(t, newTestServer(t, streamingConfig(&recorder{}, backend)))

	r := v5(t, base, testToken, caPEM, "/exec/default/web/uid-web/app?command=cat&input=1&output=1&error=1",
		remotecommand.StreamOptions{Stdin: strings.NewReader("typed in\n")})
	if r.err != nil || r.stdout != "typed in\n" {
		t.Errorf("v5 interactive exec cat = %+v, want the input back", r)
	}
	if got := backend.last(t); got.Kind != StreamExec || !got.Stdin || got.Cmd[0] != "cat" {
		t.Errorf("StreamURL asked for %+v, want an exec of cat with stdin", got)
	}
	r = v5(t, base, testToken, caPEM, "/exec/default/web/app?command=fail&output=1&error=1", remotecommand.StreamOptions{})
	checkExitCode(t, "v5 exec fail through the runtime", r, 3)
	if r.stderr != "boom\n" {
		t.Errorf("v5 exec fail through the runtime: stderr %q, want boom", r.stderr)
	}

	r = v5(t, base, testToken, caPEM, "/attach/default/web/shell?input=1&output=1&tty=1",
		remotecommand.StreamOptions{Stdin: strings.NewReader("ls\n"), Tty: true})
	if want := "attached to shell, tty true\nls\n"; r.err != nil || r.stdout != want {
		t.Errorf("v5 attach to a TTY container = %+v, want %q", r, want)
	}

	u, err := url.Parse(base + "/portForward/default/web")
	if err != nil {
		t.Fatal(err)
	}
	dialer, err := portforward.NewSPDYOverWebsocketDialer(u, clientConfig(base, testToken, caPEM))
	if err != nil {
		t.Fatal(err)
	}
	got, err := forwardThrough(t, dialer)
	if want := "pong from sandbox-uid-web:8080\n"; err != nil || got != want {
		t.Errorf("port-forward over a websocket tunnel read %q, %v; want %q", got, err, want)
	}
	if got := backend.last(t); got.Kind != StreamPortForward || got.UID != "uid-web" {
		t.Errorf("StreamURL asked for %+v, want a port-forward to default/web", got)
	}
}
