package nodeagent

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestKubeletClients: the main, event and heartbeat clients share one
// connection, as the kubelet's do, and the heartbeat client gives up on an
// API server that does not answer after its timeout.
func TestKubeletClients(t *testing.T) {
	var conns atomic.Int32
	release := make(chan struct{})
	var once sync.Once
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/leases/") {
			<-release // an API server that accepted and went quiet
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"n"}}`))
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()
	defer once.Do(func() { close(release) })

	kc := DefaultKubeletConfiguration()
	kc.NodeStatusUpdateFrequency = metav1.Duration{Duration: 300 * time.Millisecond}
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	c, err := NewKubeletClients(cfg, kc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, get := range []func() error{
		func() error { _, err := c.Main.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{}); return err },
		func() error { _, err := c.Heartbeat.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{}); return err },
		func() error { _, err := c.Events.Nodes().Get(ctx, "n", metav1.GetOptions{}); return err },
	} {
		if err := get(); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("the three clients opened %d connections, want 1", n)
	}

	start := time.Now()
	_, err = c.Heartbeat.CoordinationV1().Leases("kube-node-lease").Get(ctx, "n", metav1.GetOptions{})
	if err == nil {
		t.Fatal("a lease GET to a silent API server succeeded")
	}
	// The timeout is 300 ms; a loaded machine may take longer to notice,
	// never as long as a request without a timeout would wait (forever).
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the heartbeat client waited %v, want about its 300 ms timeout", took)
	}
	if c.Heartbeat.CoreV1() == c.Main.CoreV1() {
		t.Fatal("the heartbeat client's CoreV1 is the main client's")
	}
	c.CloseIdle()
	once.Do(func() { close(release) })
}

func TestHeartbeatTimeout(t *testing.T) {
	kc := DefaultKubeletConfiguration()
	if got := heartbeatTimeout(kc); got != 10*time.Second {
		t.Fatalf("default: %v, want 10s (nodeStatusUpdateFrequency)", got)
	}
	kc.NodeStatusUpdateFrequency = metav1.Duration{Duration: time.Minute}
	if got := heartbeatTimeout(kc); got != 40*time.Second {
		t.Fatalf("update every minute: %v, want 40s (the lease duration)", got)
	}
}
