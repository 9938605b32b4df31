package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// Metrics are the fleet's own Prometheus metrics: how many agents it hosts
// and runs, beside the Go runtime and process collectors, so that RSS and
// goroutines per node can be watched while a fleet runs.
type Metrics struct {
	Registry *prometheus.Registry
	agents   prometheus.Gauge
	running  prometheus.Gauge
}

// NewMetrics registers the fleet's metrics in a registry of their own: no
// package-level state, so several fleets can live in one test binary.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		agents:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetlet_agents", Help: "Node agents this fleet hosts."}),
		running:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetlet_agents_running", Help: "Node agents started and not yet stopped."}),
	}
	m.Registry.MustRegister(m.agents, m.running, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ListenDebug opens the debug endpoint's listener. addr must be a loopback
// address: profiles and metrics are not for the network.
func ListenDebug(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("debug address %q: %w; use host:port such as 127.0.0.1:6060", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("debug address %q is not a loopback address; use one such as 127.0.0.1:6060", addr)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("debug endpoint: %w", err)
	}
	return lis, nil
}

// ServeDebug serves /metrics and /debug/pprof/ on lis until ctx ends.
func ServeDebug(ctx context.Context, lis net.Listener, m *Metrics) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	klog.FromContext(ctx).Info("Serving pprof and metrics", "address", "http://"+lis.Addr().String())
	if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
