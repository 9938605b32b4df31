// Package server is a node agent's kubelet API: the authenticated HTTPS
// endpoints the API server and its clients call on port 10250 (pods, stats,
// the kubelet's, probe, cAdvisor and resource metrics, container logs,
// run, exec, attach and port-forward),
// served as the kubelet serves them.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/fleetlet/fleetlet/nodeagent/metrics"
)

// Config is what one node's server serves and whom it lets in.
type Config struct {
	// NodeName is the Node this server speaks for; authorization is asked
	// about nodes/<NodeName>.
	NodeName string
	// Pods returns the pods the agent runs (served by /pods, and used to
	// answer 404 for unknown pods and containers). Required.
	Pods func() []*corev1.Pod
	// Summary returns the node's stats summary (/stats/summary and
	// /metrics/resource). Optional: without it those endpoints answer 501.
	Summary func(ctx context.Context) (*statsapi.Summary, error)
	// Logs writes a container's log to w, honouring opts. Optional: without
	// it /containerLogs answers 501.
	Logs func(ctx context.Context, namespace, pod, container string, opts LogOptions, w io.Writer) error
	// Exec runs cmd in a container to completion, as CRI ExecSync does. A
	// command that ran and exited non-zero returns its exitCode and a nil
	// err; err is for a command that could not be run. timeout 0 means none.
	// Optional: without it /run and /exec answer 501.
	Exec func(ctx context.Context, namespace, pod, container string, cmd []string, timeout time.Duration) (stdout, stderr []byte, exitCode int32, err error)
	// StreamURL asks the runtime for the URL of its streaming server that
	// serves req (CRI Exec, Attach or PortForward); the server proxies the
	// client's upgraded connection there, as the kubelet does. An error
	// wrapping ErrStreamingUnsupported means the runtime has no streaming
	// server: exec then runs through Exec, attach and port-forward answer
	// 501. Optional: without it, the same as ErrStreamingUnsupported.
	StreamURL func(ctx context.Context, req StreamRequest) (*url.URL, error)
	// Metrics, ProbeMetrics and CadvisorMetrics build the metric families
	// of /metrics, /metrics/probes and /metrics/cadvisor at each scrape.
	// Optional: without one, its path answers 501.
	Metrics, ProbeMetrics, CadvisorMetrics func(ctx context.Context) metrics.Families
	// Authenticator identifies the caller (client certificate, bearer token).
	// Required: the kubelet port never serves anonymous requests here.
	Authenticator authenticator.Request
	// Authorizer decides on the kubelet's node attributes. Required. An
	// authorizer.Authorizer (as NewDelegatingAuth returns) satisfies it.
	Authorizer authorizer.UnconditionalAuthorizer
	// Clock resolves log sinceSeconds to a time. Defaults to the real clock.
	Clock clock.PassiveClock
}

// Server is one node's kubelet API. It is safe for concurrent use.
type Server struct {
	cfg     Config
	handler http.Handler
}

// New validates cfg and builds the server's handler.
func New(cfg Config) (*Server, error) {
	var missing []string
	if cfg.NodeName == "" {
		missing = append(missing, "NodeName")
	}
	if cfg.Pods == nil {
		missing = append(missing, "Pods")
	}
	if cfg.Authenticator == nil {
		missing = append(missing, "Authenticator")
	}
	if cfg.Authorizer == nil {
		missing = append(missing, "Authorizer")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("kubelet server for node %q: config is missing %v; set them (NewDelegatingAuth builds Authenticator and Authorizer)", cfg.NodeName, missing)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	s := &Server{cfg: cfg}
	s.handler = s.withAuth(s.routes())
	return s, nil
}

// Handler is the authenticated kubelet API, for tests or a caller that runs
// its own http.Server.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve answers HTTPS (HTTP/1.1 and h2) on ln with cert until ctx ends, then
// closes ln and the open connections and returns nil. Requests' contexts
// derive from ctx, so followed logs and running execs end with it too.
// Client certificates are requested but not verified by TLS: the
// Authenticator verifies them against its client CA, as the kubelet does.
func (s *Server) Serve(ctx context.Context, ln net.Listener, cert *tls.Certificate) error {
	if cert == nil {
		return fmt.Errorf("kubelet server for node %q: no serving certificate; pass one from SelfSignedCert", s.cfg.NodeName)
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "node", s.cfg.NodeName)
	base := klog.NewContext(ctx, logger)
	srv := &http.Server{
		Handler: s.handler,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{*cert},
			ClientAuth:   tls.RequestClientCert,
			MinVersion:   tls.VersionTLS12,
		},
		BaseContext: func(net.Listener) context.Context { return base },
		// The kubelet's own limits (pkg/kubelet/server ListenAndServeKubeletServer).
		IdleTimeout:    90 * time.Second,
		ReadTimeout:    4 * 60 * time.Minute,
		WriteTimeout:   4 * 60 * time.Minute,
		MaxHeaderBytes: 1 << 20,
	}
	// AfterFunc instead of a waiting goroutine: a fleet runs thousands of
	// these servers and an idle goroutine each buys nothing.
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	logger.V(2).Info("Serving kubelet API", "address", ln.Addr().String())
	err := srv.ServeTLS(ln, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("kubelet server for node %q on %s: %w", s.cfg.NodeName, ln.Addr(), err)
}

// routes maps the kubelet's paths to handlers. The pod UID variants exist
// because the API server sends them for exec, attach, port-forward and run
// when it knows the UID.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /pods", s.pods)
	mux.HandleFunc("GET /stats/summary", s.statsSummary)
	mux.HandleFunc("POST /stats/summary", s.statsSummary)
	mux.HandleFunc("GET /metrics", s.families("/metrics", s.cfg.Metrics))
	mux.HandleFunc("GET /metrics/probes", s.families("/metrics/probes", s.cfg.ProbeMetrics))
	mux.HandleFunc("GET /metrics/cadvisor", s.families("/metrics/cadvisor", s.cfg.CadvisorMetrics))
	mux.HandleFunc("GET /metrics/resource", s.resourceMetrics)
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.containerLogs)
	mux.HandleFunc("POST /run/{namespace}/{pod}/{container}", s.run)
	mux.HandleFunc("POST /run/{namespace}/{pod}/{uid}/{container}", s.run)
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		mux.HandleFunc(method+" /exec/{namespace}/{pod}/{container}", s.streamExec)
		mux.HandleFunc(method+" /exec/{namespace}/{pod}/{uid}/{container}", s.streamExec)
		mux.HandleFunc(method+" /attach/{namespace}/{pod}/{container}", s.attach)
		mux.HandleFunc(method+" /attach/{namespace}/{pod}/{uid}/{container}", s.attach)
		mux.HandleFunc(method+" /portForward/{namespace}/{pod}", s.portForward)
		mux.HandleFunc(method+" /portForward/{namespace}/{pod}/{uid}", s.portForward)
	}
	return mux
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = io.WriteString(w, "ok")
}

// findPod returns the pod the agent runs by namespace and name.
func (s *Server) findPod(namespace, name string) (*corev1.Pod, bool) {
	for _, p := range s.cfg.Pods() {
		if p.Namespace == namespace && p.Name == name {
			return p, true
		}
	}
	return nil, false
}

// hasContainer reports whether the pod's spec names the container, among
// its init, regular and ephemeral containers, as the kubelet's
// GetContainerSpec looks.
func hasContainer(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return true
		}
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// lookupContainer writes the 404 itself when the pod or container is not
// on this node.
func (s *Server) lookupContainer(w http.ResponseWriter, namespace, pod, container string) bool {
	p, ok := s.findPod(namespace, pod)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("pod %q does not exist on node %q", namespace+"/"+pod, s.cfg.NodeName))
		return false
	}
	if !hasContainer(p, container) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("container %q not found in pod %q on node %q", container, namespace+"/"+pod, s.cfg.NodeName))
		return false
	}
	return true
}

// writeError answers with a plain-text message, the shape of the kubelet's
// restful WriteErrorString.
func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg)
}

func (s *Server) notProvided(w http.ResponseWriter, what string) {
	writeError(w, http.StatusNotImplemented, fmt.Sprintf("node %q does not serve %s: the node agent was started without a provider for it", s.cfg.NodeName, what))
}
