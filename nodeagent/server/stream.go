package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/proxy"
	translator "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// StreamKind is the CRI streaming call a request needs.
type StreamKind string

// The kinds of streaming requests, named after their kubelet paths.
const (
	StreamExec        StreamKind = "exec"
	StreamAttach      StreamKind = "attach"
	StreamPortForward StreamKind = "portForward"
)

// StreamRequest is what the runtime's streaming server is asked to serve:
// the fields of CRI ExecRequest, AttachRequest or PortForwardRequest, with
// the pod and container named as the kubelet API names them.
type StreamRequest struct {
	Kind      StreamKind
	Namespace string
	Pod       string
	// UID is the pod's UID.
	UID types.UID
	// Container is the container of an exec or attach.
	Container string
	// Cmd is the command of an exec.
	Cmd []string
	// Stdin, Stdout, Stderr and TTY are the streams of an exec or attach.
	// An attach's TTY is the container spec's, as the process already runs
	// with or without one.
	Stdin, Stdout, Stderr, TTY bool
	// Ports are a port-forward's ports when the client names them up front
	// (websockets); SPDY clients name a port per stream instead.
	Ports []int32
}

// ErrStreamingUnsupported is what a StreamURL provider returns (wrapped)
// when the node's runtime has no streaming server, as the fake runtime
// answers CRI Exec, Attach and PortForward with Unimplemented.
var ErrStreamingUnsupported = errors.New("the container runtime has no streaming server")

// streamExec serves /exec as the kubelet does, by proxying the client's
// upgraded connection to the runtime's streaming server. When the runtime
// has none, the ExecSync-based exec serves it instead.
func (s *Server) streamExec(w http.ResponseWriter, r *http.Request) {
	if s.cfg.StreamURL == nil {
		s.exec(w, r)
		return
	}
	namespace, name, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	pod, ok := s.lookupStreamTarget(w, namespace, name, types.UID(r.PathValue("uid")), container)
	if !ok {
		return
	}
	u, err := s.cfg.StreamURL(r.Context(), StreamRequest{
		Kind: StreamExec, Namespace: namespace, Pod: name, UID: pod.UID, Container: container,
		Cmd: r.URL.Query()["command"], Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr, TTY: opts.TTY,
	})
	if errors.Is(err, ErrStreamingUnsupported) {
		s.exec(w, r)
		return
	}
	s.proxyStream(w, r, u, err, streamTranslation(r, opts))
}

// attach serves /attach by proxying to the runtime's streaming server; a
// runtime without one cannot attach.
func (s *Server) attach(w http.ResponseWriter, r *http.Request) {
	namespace, name, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	if s.cfg.StreamURL == nil {
		s.notProvided(w, "attach")
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	pod, ok := s.lookupStreamTarget(w, namespace, name, types.UID(r.PathValue("uid")), container)
	if !ok {
		return
	}
	u, err := s.cfg.StreamURL(r.Context(), StreamRequest{
		Kind: StreamAttach, Namespace: namespace, Pod: name, UID: pod.UID, Container: container,
		Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr, TTY: containerTTY(pod, container),
	})
	if errors.Is(err, ErrStreamingUnsupported) {
		writeError(w, http.StatusNotImplemented, fmt.Sprintf("node %q cannot attach to container %q of pod %q: %v; attach needs a real runtime such as containerd", s.cfg.NodeName, container, namespace+"/"+name, err))
		return
	}
	s.proxyStream(w, r, u, err, streamTranslation(r, opts))
}

// portForward serves /portForward by proxying to the runtime's streaming
// server, which dials the ports inside the pod's network namespace.
func (s *Server) portForward(w http.ResponseWriter, r *http.Request) {
	namespace, name := r.PathValue("namespace"), r.PathValue("pod")
	if s.cfg.StreamURL == nil {
		s.notProvided(w, "port-forward")
		return
	}
	// A websocket tunneling SPDY names its ports per stream, as SPDY
	// does, so it has no options to parse (the kubelet's getPortForward).
	tunnel := wsstream.IsWebSocketRequestWithTunnelingProtocol(r)
	opts := &portforward.V4Options{}
	if !tunnel {
		var err error
		if opts, err = portforward.NewV4Options(r); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	pod, ok := s.lookupStreamTarget(w, namespace, name, types.UID(r.PathValue("uid")), "")
	if !ok {
		return
	}
	u, err := s.cfg.StreamURL(r.Context(), StreamRequest{
		Kind: StreamPortForward, Namespace: namespace, Pod: name, UID: pod.UID, Ports: opts.Ports,
	})
	if errors.Is(err, ErrStreamingUnsupported) {
		writeError(w, http.StatusNotImplemented, fmt.Sprintf("node %q cannot port-forward to pod %q: %v; nothing listens in an emulated pod, port-forward needs a real runtime such as containerd", s.cfg.NodeName, namespace+"/"+name, err))
		return
	}
	var translate func(*url.URL) http.Handler
	if tunnel {
		translate = func(u *url.URL) http.Handler {
			return translator.NewTunnelingHandler(s.upgradeProxy(u))
		}
	}
	s.proxyStream(w, r, u, err, translate)
}

// lookupStreamTarget finds the pod (with the UID, when the path has one)
// and, unless container is empty, its container; it writes the 404 itself
// when either is not on this node.
func (s *Server) lookupStreamTarget(w http.ResponseWriter, namespace, name string, uid types.UID, container string) (*corev1.Pod, bool) {
	pod, ok := s.findPod(namespace, name)
	if !ok || (uid != "" && pod.UID != uid) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("pod %q does not exist on node %q", namespace+"/"+name, s.cfg.NodeName))
		return nil, false
	}
	if container != "" && !hasContainer(pod, container) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("container %q not found in pod %q on node %q", container, namespace+"/"+name, s.cfg.NodeName))
		return nil, false
	}
	return pod, true
}

// containerTTY is whether the container's spec asks for a TTY.
func containerTTY(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return c.TTY
		}
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return c.TTY
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return c.TTY
		}
	}
	return false
}

// proxyStream answers with the error of asking the runtime for a streaming
// URL, if any, else proxies the upgraded connection to u (the kubelet's
// proxyStream), through translate's handler when it is not nil. A
// runtime's gRPC status chooses the HTTP status, as the kubelet's
// streaming.WriteError does.
func (s *Server) proxyStream(w http.ResponseWriter, r *http.Request, u *url.URL, err error, translate func(*url.URL) http.Handler) {
	if err != nil {
		_ = streaming.WriteError(fmt.Errorf("node %q: %w", s.cfg.NodeName, err), w)
		return
	}
	handler := s.upgradeProxy(u)
	if translate != nil {
		handler = translate(u)
	}
	handler.ServeHTTP(&hijackClosedOnDone{ResponseWriter: w, ctx: r.Context()}, r)
}

// upgradeProxy proxies an upgraded connection to the runtime's streaming
// server at u.
func (s *Server) upgradeProxy(u *url.URL) http.Handler {
	return proxy.NewUpgradeAwareHandler(u, nil, false, true, &streamResponder{node: s.cfg.NodeName})
}

// streamResponder answers the errors of the proxy before the connection is
// upgraded.
type streamResponder struct{ node string }

func (p *streamResponder) Error(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code = int(status.Status().Code)
	}
	klog.FromContext(r.Context()).V(2).Info("Proxying a stream to the container runtime failed", "path", r.URL.Path, "err", err)
	writeError(w, code, fmt.Sprintf("node %q: proxying %s to the container runtime's streaming server: %v", p.node, r.URL.Path, err))
}

// hijackClosedOnDone closes the hijacked client connection when the
// request's context ends: http.Server.Close leaves hijacked connections
// open, and Serve promises that streams end with its context. The context
// also ends when the handler returns, after the proxy has closed the
// connection itself.
type hijackClosedOnDone struct {
	http.ResponseWriter
	ctx context.Context
}

func (h *hijackClosedOnDone) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err == nil {
		context.AfterFunc(h.ctx, func() { _ = conn.Close() })
	}
	return conn, rw, err
}
