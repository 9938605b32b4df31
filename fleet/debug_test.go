package fleet

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestListenDebugRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:6060", "10.0.0.1:6060", "nohost"} {
		if lis, err := ListenDebug(addr); err == nil {
			lis.Close()
			t.Errorf("ListenDebug(%q) accepted an address off loopback", addr)
		}
	}
}

func TestServeDebug(t *testing.T) {
	lis, err := ListenDebug("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	m.agents.Set(3)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeDebug(ctx, lis, m) }()
	base := "http://" + lis.Addr().String()
	for path, want := range map[string]string{
		"/metrics":                       "fleetlet_agents 3",
		"/debug/pprof/goroutine?debug=1": "goroutine profile",
	} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), want) {
			t.Errorf("%s does not contain %q", path, want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ServeDebug: %v", err)
	}
}
