package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/exec"
)

func TestRun(t *testing.T) {
	rec := &recorder{}
	base, pool, _ := serveTLS(t, newTestServer(t, testConfig(rec)))
	c := tlsClient(pool, nil)

	code, body, hdr := send(t, c, http.MethodPost, base+"/run/default/web/app?cmd=echo+hello+world", testToken)
	if code != http.StatusOK || body != "hello world\n" || hdr.Get("Content-Type") != "application/json" {
		t.Errorf("POST /run echo = %d %q (%s), want 200 \"hello world\\n\" as the kubelet's application/json", code, body, hdr.Get("Content-Type"))
	}
	rec.mu.Lock()
	gotCmd := rec.execCmds[len(rec.execCmds)-1]
	rec.mu.Unlock()
	if want := []string{"echo", "hello", "world"}; !reflect.DeepEqual(gotCmd, want) {
		t.Errorf("Exec got cmd %q, want %q (split on spaces)", gotCmd, want)
	}

	for _, tc := range []struct {
		method, path string
		wantCode     int
		wantBody     string
	}{
		{http.MethodPost, "/run/default/web/uid-web/app?cmd=both", http.StatusOK, "out\nerr\n"},
		{http.MethodPost, "/run/default/web/app?cmd=fail", http.StatusInternalServerError, "command 'fail' exited with 3: boom\n"},
		{http.MethodPost, "/run/default/web/app?cmd=broken", http.StatusInternalServerError, `running "broken" in container "app" of pod "default/web" on node "node-1": container is not running`},
		{http.MethodPost, "/run/default/nope/app?cmd=ls", http.StatusNotFound, `pod "default/nope" does not exist on node "node-1"`},
		{http.MethodGet, "/run/default/web/app?cmd=ls", http.StatusMethodNotAllowed, "Method Not Allowed\n"},
	} {
		code, body, _ := send(t, c, tc.method, base+tc.path, testToken)
		if code != tc.wantCode || body != tc.wantBody {
			t.Errorf("%s %s = %d %q, want %d %q", tc.method, tc.path, code, body, tc.wantCode, tc.wantBody)
		}
	}
}

// execResult is what a remotecommand client saw.
type execResult struct {
	stdout, stderr string
	err            error
}

func streamExec(t *testing.T, ex remotecommand.Executor) execResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	return execResult{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

func checkExitCode(t *testing.T, what string, r execResult, code int) {
	t.Helper()
	var exitErr exec.CodeExitError
	if !errors.As(r.err, &exitErr) || exitErr.Code != code {
		t.Errorf("%s: error %v (%T), want an exit code %d", what, r.err, r.err, code)
	}
}

func TestExecOverSPDY(t *testing.T) {
	base, _, caPEM := serveTLS(t, newTestServer(t, testConfig(&recorder{})))
	executor := func(token, path, query string) remotecommand.Executor {
		t.Helper()
		u, err := url.Parse(base + path + "?" + query)
		if err != nil {
			t.Fatal(err)
		}
		ex, err := remotecommand.NewSPDYExecutor(&rest.Config{Host: base, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}}, http.MethodPost, u)
		if err != nil {
			t.Fatal(err)
		}
		return ex
	}

	r := streamExec(t, executor(testToken, "/exec/default/web/app", "command=echo&command=hi&output=1&error=1"))
	if r.err != nil || r.stdout != "hi\n" || r.stderr != "" {
		t.Errorf("exec echo hi = %+v, want stdout \"hi\\n\"", r)
	}

	r = streamExec(t, executor(testToken, "/exec/default/web/uid-web/app", "command=fail&output=1&error=1"))
	checkExitCode(t, "exec fail", r, 3)
	if r.stdout != "partial\n" || r.stderr != "boom\n" {
		t.Errorf("exec fail output = %q / %q, want both streams", r.stdout, r.stderr)
	}

	for _, tc := range []struct {
		what, token, path, query, wantErr string
	}{
		{"a command that cannot run", testToken, "/exec/default/web/app", "command=broken&output=1&error=1", "container is not running"},
		{"an unknown container", testToken, "/exec/default/web/nope", "command=ls&output=1", `container "nope" not found in pod "default/web"`},
		{"stdin", testToken, "/exec/default/web/app", "command=cat&input=1&output=1", "interactive exec (stdin or tty) is not supported"},
		{"no credentials", "", "/exec/default/web/app", "command=ls&output=1", "Unauthorized"},
	} {
		r := streamExec(t, executor(tc.token, tc.path, tc.query))
		if r.err == nil || !strings.Contains(r.err.Error(), tc.wantErr) {
			t.Errorf("exec with %s: error %v, want one containing %q", tc.what, r.err, tc.wantErr)
		}
	}
}

// TestExecThroughAPIServerTranslation is kubectl exec as of 1.30 against a
// 1.37 API server and a node that does not declare ExtendWebSocketsToKubelet:
// the client speaks v5 websockets to the API server, whose stream translator
// speaks SPDY to the kubelet with its kubelet-client certificate.
func TestExecThroughAPIServerTranslation(t *testing.T) {
	ca := newTestCA(t)
	authn, _, err := NewDelegatingAuth((&fakeReviews{}).clientset(t), ca.pem)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(&recorder{})
	cfg.Authenticator = authn
	base, pool, _ := serveTLS(t, newTestServer(t, cfg))

	apiserverCert := ca.issueClient(t, "kube-apiserver-kubelet-client")
	kubeletTransport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{*apiserverCert}}}
	const query = "command=fail&output=1&error=1"
	location, err := url.Parse(base + "/exec/default/web/app?" + query)
	if err != nil {
		t.Fatal(err)
	}
	apiserver := httptest.NewServer(proxy.NewStreamTranslatorHandler(location, kubeletTransport, 0, proxy.Options{Stdout: true, Stderr: true}))
	defer apiserver.Close()

	ex, err := remotecommand.NewWebSocketExecutor(&rest.Config{Host: apiserver.URL}, http.MethodGet, apiserver.URL+"?"+query)
	if err != nil {
		t.Fatal(err)
	}
	r := streamExec(t, ex)
	checkExitCode(t, "exec fail through the API server", r, 3)
	if r.stdout != "partial\n" || r.stderr != "boom\n" {
		t.Errorf("output through the API server = %q / %q, want both streams", r.stdout, r.stderr)
	}
}
