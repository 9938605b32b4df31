package fleet

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/internal/testutil"
)

// TestLinkCut: a cut link drops everything as a partitioned network does:
// a request waits, and goes out when the link is restored or fails as a
// dial timeout; what a watch is sent during the cut arrives when the link
// is restored; a cut outlasting the connection timeout fails the watch as
// a dead connection.
func TestLinkCut(t *testing.T) {
	send := make(chan string)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/watch" {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			for {
				select {
				case <-r.Context().Done():
					return
				case msg := <-send:
					_, _ = io.WriteString(w, msg)
					w.(http.Flusher).Flush()
				}
			}
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer server.Close()
	l := &link{dialTimeout: 300 * time.Millisecond, connTimeout: time.Hour}
	client := &http.Client{Transport: l.wrap(server.Client().Transport)}
	get := func(path string) (*http.Response, error) { return client.Get(server.URL + path) }
	ok := func(what string) {
		t.Helper()
		resp, err := get("/")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		_ = resp.Body.Close()
	}
	ok("before the cut")

	watch, err := get("/watch")
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Body.Close()
	read := make(chan string, 1)
	readNext := func() {
		go func() {
			b := make([]byte, 16)
			n, err := watch.Body.Read(b)
			if err != nil {
				read <- "error: " + err.Error()
				return
			}
			read <- string(b[:n])
		}()
	}

	// A request waits out the dial timeout and fails as a dial that timed out.
	l.setCut(true)
	_, err = get("/")
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Errorf("a request during the cut failed with %v, want a dial timeout", err)
	}
	// A request that is still waiting when the link is restored goes out.
	l.dialTimeout = time.Hour
	answered := make(chan error, 1)
	go func() {
		resp, err := get("/")
		if err == nil {
			_ = resp.Body.Close()
		}
		answered <- err
	}()
	// The watch is sent an event during the cut: it is held.
	readNext()
	send <- "event-1"
	select {
	case got := <-read:
		t.Fatalf("the watch read %q during the cut", got)
	case err := <-answered:
		t.Fatalf("a request was answered during the cut (%v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	l.setCut(false)
	if err := <-answered; err != nil {
		t.Errorf("the request that waited through the cut: %v", err)
	}
	if got := <-read; got != "event-1" {
		t.Errorf("after the cut the watch read %q, want the event sent during it", got)
	}

	// A cut that outlasts the connection timeout kills the watch for good.
	l.connTimeout = 200 * time.Millisecond
	readNext()
	l.setCut(true)
	if got := <-read; got != "error: "+errConnLost.Error() {
		t.Errorf("the watch read %q when the cut outlasted the connection timeout, want the connection lost", got)
	}
	l.setCut(false)
	if _, err := watch.Body.Read(make([]byte, 1)); !errors.Is(err, errConnLost) {
		t.Errorf("a dead connection read %v after the cut, want it still lost", err)
	}
	ok("after the cut")
	l.mu.Lock()
	open := len(l.open)
	l.mu.Unlock()
	if open != 0 {
		t.Errorf("%d bodies still tracked after every response was closed or broken", open)
	}
}

// requestsBy counts the requests a test API server saw, by user agent.
type requestsBy struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *requestsBy) count(agent string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[agent]
}

// TestPowerCycle: a node powered off stops its agent and sends nothing;
// powered on, it boots a new agent over a rebooted runtime, which holds
// none of its containers but its images, and registers again.
func TestPowerCycle(t *testing.T) {
	seen := &requestsBy{n: map[string]int{}}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.mu.Lock()
		seen.n[r.UserAgent()]++
		seen.mu.Unlock()
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	defer server.Close()
	cfg := testConfig()
	cfg.ClientConfig = func(string) (*rest.Config, error) { return &rest.Config{Host: server.URL}, nil }
	runtimes := map[string]*fakeruntime.Runtime{}
	var mu sync.Mutex
	cfg.NewRuntime = func(name string) (Runtime, error) {
		rt := fakeruntime.New(fakeruntime.Config{})
		mu.Lock()
		runtimes[name] = rt
		mu.Unlock()
		return Runtime{Runtime: rt, Images: rt, Faults: rt}, nil
	}
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	const node = "t-a-1"
	agent := "fleetlet/" + node
	testutil.WaitFor(t, "the node to try to register", func() bool { return seen.count(agent) > 0 })

	rt := runtimes[node]
	sandbox, err := rt.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns", Uid: "u1"},
		Linux:    &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}},
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.UpdateRuntimeFault(node, func(rf *fakeruntime.Fault) { rf.PullError = fakeruntime.PullErrorNotFound }); err != nil {
		t.Fatal(err)
	}

	m, _ := f.member(node)
	m.mu.Lock()
	before := m.agent
	m.mu.Unlock()
	if err := f.PowerOff(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := f.PowerOff(ctx, node); err != nil {
		t.Errorf("a second power cut: %v, want none", err)
	}
	// Another node's retries show time passing while this one is silent;
	// the first two let a request sent before the cut reach the server.
	other := seen.count("fleetlet/t-b-0")
	testutil.WaitFor(t, "another node to retry twice", func() bool { return seen.count("fleetlet/t-b-0") >= other+2 })
	off := seen.count(agent)
	testutil.WaitFor(t, "another node to retry twice more", func() bool { return seen.count("fleetlet/t-b-0") >= other+4 })
	if got := seen.count(agent); got != off {
		t.Errorf("a powered-off node sent %d requests", got-off)
	}
	if sandboxes, _ := rt.ListPodSandbox(ctx, nil); len(sandboxes) != 1 || sandboxes[0].Id != sandbox {
		t.Errorf("powered off, the runtime holds %v, want its sandbox kept until the boot", sandboxes)
	}

	if err := f.PowerOn(node); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	after := m.agent
	m.mu.Unlock()
	if after == before {
		t.Error("the node booted its old agent, want a new one")
	}
	if sandboxes, _ := rt.ListPodSandbox(ctx, nil); len(sandboxes) != 0 {
		t.Errorf("after the boot the runtime holds %d sandboxes, want none", len(sandboxes))
	}
	if rt.Fault() != (fakeruntime.Fault{}) {
		t.Errorf("after the boot the runtime's fault is %+v, want none", rt.Fault())
	}
	testutil.WaitFor(t, "the booted node to try to register", func() bool { return seen.count(agent) > off })

	if err := f.PowerOff(ctx, "t-x-9"); err == nil {
		t.Error("PowerOff of a node the fleet does not have succeeded")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of its context ending")
	}
}

// TestRuntimeFaultsAddUp: two runtime faults on one node are both in
// place, and ending one leaves the other.
func TestRuntimeFaultsAddUp(t *testing.T) {
	cfg := testConfig()
	var rt *fakeruntime.Runtime
	cfg.Pools = pools()[:1]
	cfg.Pools[0].Count = 1
	cfg.NewRuntime = func(string) (Runtime, error) {
		rt = fakeruntime.New(fakeruntime.Config{})
		return Runtime{Runtime: rt, Images: rt, Faults: rt}, nil
	}
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer stopUnstarted(f.probes)
	node := f.NodeNames()[0]
	_ = f.UpdateRuntimeFault(node, func(rf *fakeruntime.Fault) { rf.CNIMissing = true })
	_ = f.UpdateRuntimeFault(node, func(rf *fakeruntime.Fault) { rf.PullError = fakeruntime.PullErrorUnauthorized })
	if got := rt.Fault(); !got.CNIMissing || got.PullError != fakeruntime.PullErrorUnauthorized {
		t.Fatalf("fault = %+v, want both", got)
	}
	_ = f.UpdateRuntimeFault(node, func(rf *fakeruntime.Fault) { rf.CNIMissing = false })
	if got := rt.Fault(); got.CNIMissing || got.PullError != fakeruntime.PullErrorUnauthorized {
		t.Fatalf("fault = %+v, want only the pull error", got)
	}

	cfg.NewRuntime = func(string) (Runtime, error) {
		rt := fakeruntime.New(fakeruntime.Config{})
		return Runtime{Runtime: rt, Images: rt}, nil
	}
	real, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer stopUnstarted(real.probes)
	if err := real.UpdateRuntimeFault(real.NodeNames()[0], func(*fakeruntime.Fault) {}); !errors.Is(err, errNoRuntimeFaults) {
		t.Errorf("a runtime fault on a runtime without switches: %v, want errNoRuntimeFaults", err)
	}
}

func TestRetransmitAfter(t *testing.T) {
	for _, tc := range []struct{ elapsed, want time.Duration }{
		{0, time.Second}, // the first retransmission, 1 s in
		{500 * time.Millisecond, 500 * time.Millisecond},
		{time.Second, 0},
		{2 * time.Second, time.Second},       // at 3 s
		{10 * time.Second, 5 * time.Second},  // at 15 s
		{20 * time.Second, 11 * time.Second}, // at 31 s
	} {
		if got := retransmitAfter(tc.elapsed, synRTO); got != tc.want {
			t.Errorf("retransmitAfter(%v) = %v, want %v", tc.elapsed, got, tc.want)
		}
	}
}
