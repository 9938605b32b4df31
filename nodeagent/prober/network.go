package prober

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilio "k8s.io/utils/io"
)

// UserAgent is the User-Agent of HTTP and gRPC probes: the kubelet's
// "kube-probe/<major>.<minor>" for the release the agent emulates.
const UserAgent = "kube-probe/1.37"

// maxRedirects is where the kubelet's probe client gives up following
// same-host redirects, as net/http's default.
const maxRedirects = 10

// HTTPRunner runs httpGet, tcpSocket and grpc probes over the network, as
// the kubelet's probers do with its default feature gates: HTTP/1.1 (HTTPS
// without verifying the certificate), no proxy, no keep-alive, no
// compression; redirects followed only to the same host; gRPC in plaintext.
// It is the NetworkRunner of a physical node, and safe for concurrent use by
// many managers.
type HTTPRunner struct {
	podIP     func(*corev1.Pod) string
	transport *http.Transport
}

// NewHTTPRunner returns an HTTPRunner. podIP gives the address of a probe
// that names no host; nil means pod.Status.PodIP. An agent passes the IP
// its runtime reported for the pod's sandbox, which it knows before the
// API server's copy of the pod does.
func NewHTTPRunner(podIP func(*corev1.Pod) string) *HTTPRunner {
	if podIP == nil {
		podIP = func(pod *corev1.Pod) string { return pod.Status.PodIP }
	}
	return &HTTPRunner{
		podIP: podIP,
		transport: &http.Transport{
			// The probe talks to the pod, never through the node's proxy.
			Proxy: nil,
			// As the kubelet's: a probe checks that the container answers, not who it is.
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
			// A new connection per probe, as the kubelet's, so a probe tests
			// that the container accepts connections; lingering sockets are
			// reset on close so TIME_WAIT does not pile up at scale.
			DisableKeepAlives:   true,
			DisableCompression:  true,
			DialContext:         probeDialer().DialContext,
			TLSHandshakeTimeout: 10 * time.Second,
		},
	}
}

// Network runs the probe's httpGet, tcpSocket or grpc action.
func (r *HTTPRunner) Network(ctx context.Context, _ Kind, pod *corev1.Pod, container *corev1.Container, _ string, probe *corev1.Probe) (Result, string, error) {
	timeout := paramsOf(probe).timeout
	switch {
	case probe.HTTPGet != nil:
		return r.httpGet(ctx, probe.HTTPGet, pod, container, timeout)
	case probe.TCPSocket != nil:
		port, err := resolvePort(probe.TCPSocket.Port, container)
		if err != nil {
			return Unknown, "", err
		}
		host := probe.TCPSocket.Host
		if host == "" {
			host = r.podIP(pod)
		}
		return tcpProbe(ctx, net.JoinHostPort(host, strconv.Itoa(port)), timeout)
	case probe.GRPC != nil:
		service := ""
		if probe.GRPC.Service != nil {
			service = *probe.GRPC.Service
		}
		return grpcProbe(ctx, net.JoinHostPort(r.podIP(pod), strconv.Itoa(int(probe.GRPC.Port))), service, timeout)
	}
	return Unknown, "", fmt.Errorf("pod %s/%s container %s: the probe has no httpGet, tcpSocket or grpc action", pod.Namespace, pod.Name, container.Name)
}

func (r *HTTPRunner) httpGet(ctx context.Context, action *corev1.HTTPGetAction, pod *corev1.Pod, container *corev1.Container, timeout time.Duration) (Result, string, error) {
	req, err := newHTTPRequest(ctx, action, container, r.podIP(pod))
	if err != nil {
		return Unknown, "", err
	}
	client := &http.Client{Transport: r.transport, Timeout: timeout, CheckRedirect: sameHostRedirects}
	resp, err := client.Do(req)
	if err != nil {
		// Refused, reset, timed out: the container did not answer, a Failure.
		return Failure, err.Error(), nil
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := utilio.ReadAtMost(resp.Body, maxOutput)
	if err != nil && !errors.Is(err, utilio.ErrLimitReached) {
		return Failure, "", fmt.Errorf("reading the body of %s: %w", req.URL, err)
	}
	switch code := resp.StatusCode; {
	case code >= http.StatusOK && code < http.StatusMultipleChoices:
		return Success, string(body), nil
	case code >= http.StatusMultipleChoices && code < http.StatusBadRequest:
		// A redirect not followed (to another host): the kubelet counts it
		// as a success with a warning.
		return Warning, fmt.Sprintf("Probe terminated redirects, Response body: %v", string(body)), nil
	default:
		// The kubelet leaves the body out of the message on purpose
		// (kubernetes#99425): it may hold what must not reach an event.
		return Failure, fmt.Sprintf("HTTP probe failed with statuscode: %d", code), nil
	}
}

// newHTTPRequest builds the kubelet's probe request: scheme (default http),
// host (default the pod IP), port by number or by the container port's name,
// path, and headers, with the kube-probe User-Agent and Accept */* unless the
// probe sets them (an empty Accept removes it), and Host from a Host header.
func newHTTPRequest(ctx context.Context, action *corev1.HTTPGetAction, container *corev1.Container, podIP string) (*http.Request, error) {
	scheme := strings.ToLower(string(action.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	host := action.Host
	if host == "" {
		host = podIP
	}
	port, err := resolvePort(action.Port, container)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(action.Path)
	if err != nil {
		// A path that does not parse is passed as it is, as the kubelet does.
		u = &url.URL{Path: action.Path}
	}
	u.Scheme = scheme
	u.Host = net.JoinHostPort(host, strconv.Itoa(port))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	headers := make(http.Header, len(action.HTTPHeaders)+2)
	for _, h := range action.HTTPHeaders {
		headers.Add(h.Name, h.Value)
	}
	if _, ok := headers["User-Agent"]; !ok {
		headers.Set("User-Agent", UserAgent)
	}
	if _, ok := headers["Accept"]; !ok {
		headers.Set("Accept", "*/*")
	} else if headers.Get("Accept") == "" {
		headers.Del("Accept")
	}
	req.Header = headers
	req.Host = headers.Get("Host")
	return req, nil
}

// sameHostRedirects follows redirects to the probed host only; a redirect
// elsewhere ends with the 3xx response (a Warning).
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	return nil
}

// resolvePort returns a probe's port: a number, or the name of one of the
// container's ports.
func resolvePort(p intstr.IntOrString, container *corev1.Container) (int, error) {
	port := -1
	switch p.Type {
	case intstr.Int:
		port = p.IntValue()
	case intstr.String:
		found := false
		for _, cp := range container.Ports {
			if cp.Name == p.StrVal {
				port, found = int(cp.ContainerPort), true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("container %s: port %q not found", container.Name, p.StrVal)
		}
	}
	if port <= 0 || port > 65535 {
		return port, fmt.Errorf("container %s: invalid port number: %v", container.Name, port)
	}
	return port, nil
}

func tcpProbe(ctx context.Context, addr string, timeout time.Duration) (Result, string, error) {
	d := probeDialer()
	d.Timeout = timeout
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return Failure, err.Error(), nil
	}
	_ = conn.Close()
	return Success, "", nil
}

// grpcProbe calls grpc.health.v1.Health/Check, with the kubelet's messages.
func grpcProbe(ctx context.Context, addr, service string, timeout time.Duration) (Result, string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// passthrough: the address is an IP and port, no resolver needed.
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent(UserAgent),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return probeDialer().DialContext(ctx, "tcp", a)
		}),
	)
	if err != nil {
		return Failure, fmt.Sprintf("error: failed to connect service at %q: %+v", addr, err), nil
	}
	defer func() { _ = conn.Close() }()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		st, _ := status.FromError(err)
		switch st.Code() {
		case codes.Unimplemented:
			return Failure, fmt.Sprintf("error: this server does not implement the grpc health protocol (grpc.health.v1.Health): %s", st.Message()), nil
		case codes.DeadlineExceeded:
			return Failure, fmt.Sprintf("timeout: health rpc did not complete within %v", timeout), nil
		case codes.Unavailable:
			return Failure, fmt.Sprintf("error: failed to connect service at %q: %+v", addr, err), nil
		}
		return Failure, fmt.Sprintf("error: health rpc probe failed: %+v", err), nil
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return Failure, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus().String()), nil
	}
	return Success, "service healthy", nil
}
