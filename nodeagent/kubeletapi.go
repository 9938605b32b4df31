package nodeagent

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crilogs "k8s.io/cri-client/pkg/logs"
	"k8s.io/klog/v2"
	utilexec "k8s.io/utils/exec"

	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
	"github.com/fleetlet/fleetlet/nodeagent/metrics"
	"github.com/fleetlet/fleetlet/nodeagent/server"
	"github.com/fleetlet/fleetlet/nodeagent/stats"
)

// ServingConfig is how an agent serves the kubelet API. The certificate and
// the authenticator and authorizer are built once and shared by a fleet.
type ServingConfig struct {
	// Port is the port on the node's IP; 0 takes any free port. The port is
	// advertised in the Node's daemonEndpoints, so the API server finds it.
	Port          int
	Cert          *tls.Certificate
	Authenticator authenticator.Request
	Authorizer    authorizer.UnconditionalAuthorizer
}

// LogReader writes a container's log to w as the kubelet's /containerLogs
// serves it, honouring opts.
type LogReader func(ctx context.Context, containerID string, opts server.LogOptions, w io.Writer) error

// newKubeletServer builds the kubelet API's server; Run listens and serves.
func (a *Agent) newKubeletServer() (*server.Server, error) {
	return server.New(server.Config{
		NodeName: a.cfg.NodeName, Pods: a.podList, Summary: a.stats.Summary, Logs: a.containerLogs, Exec: a.exec, StreamURL: a.streamURL,
		Metrics: a.kubeletMetrics, ProbeMetrics: a.probeMetrics, CadvisorMetrics: a.cadvisorMetrics,
		Authenticator: a.cfg.Serving.Authenticator, Authorizer: a.cfg.Serving.Authorizer, Clock: a.cfg.Clock,
	})
}

// kubeletMetrics is /metrics: what the agent recorded, and the pods with
// a ready sandbox, read from the runtime now (the kubelet's PLEG counts
// them at each relist, from its list of sandboxes, which the agent's PLEG
// does not make).
func (a *Agent) kubeletMetrics(ctx context.Context) metrics.Families {
	var rt metrics.Runtime
	sandboxes, err := a.cri.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	})
	switch {
	case err != nil:
		klog.FromContext(ctx).V(2).Info("Listing the runtime's sandboxes for /metrics failed", "node", a.cfg.NodeName, "err", err)
		rt.Failed = true
	case len(sandboxes) > 1:
		// A pod has one ready sandbox, but for a moment while it is replaced.
		uids := make(map[string]struct{}, len(sandboxes))
		for _, sb := range sandboxes {
			uids[sb.GetMetadata().GetUid()] = struct{}{}
		}
		rt.RunningPods = len(uids)
	default:
		rt.RunningPods = len(sandboxes)
	}
	return a.metrics.Gather(rt)
}

// probeMetrics is /metrics/probes: the prober's series and the kubelet's
// start time.
func (a *Agent) probeMetrics(context.Context) metrics.Families {
	return metrics.Gather(append(a.probes.Gather(), a.metrics.ProcessStartTime())...)
}

// cadvisorMetrics is /metrics/cadvisor, from the stats provider's reading
// of the runtime; the machine is the one the Node reports.
func (a *Agent) cadvisorMetrics(ctx context.Context) metrics.Families {
	var machine *stats.Machine
	if node, err := a.getNode(); err == nil {
		info := node.Status.NodeInfo
		machine = &stats.Machine{MachineID: info.MachineID, SystemUUID: info.SystemUUID, BootID: info.BootID}
	}
	return a.stats.Cadvisor(ctx, machine, a.podQOS)
}

// podQOS is the QoS class the API server gave a pod the agent runs.
func (a *Agent) podQOS(uid types.UID) corev1.PodQOSClass {
	if p := a.pod(uid); p != nil {
		return p.Status.QOSClass
	}
	return ""
}

// listenKubeletAPI opens the kubelet port on the node's IP, before the node
// registers with the port it took; the server answers on it once the
// agent's other parts have started.
func (a *Agent) listenKubeletAPI(context.Context) error {
	addr := net.JoinHostPort(a.cfg.NodeIP.String(), strconv.Itoa(a.cfg.Serving.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("node %s: cannot serve the kubelet API on %s: %w; free the port or choose another with --kubelet-port", a.cfg.NodeName, addr, err)
	}
	a.kubeletListener = ln
	a.nodeStatus.SetKubeletPort(int32(ln.Addr().(*net.TCPAddr).Port))
	return nil
}

func (a *Agent) closeKubeletAPI() { _ = a.kubeletListener.Close() }

func (a *Agent) serveKubeletAPI(ctx context.Context) {
	if err := a.kubeletServer.Serve(ctx, a.kubeletListener, a.cfg.Serving.Cert); err != nil {
		klog.FromContext(ctx).Error(err, "Kubelet API stopped")
	}
}

// podList is the kubelet's /pods: the pods bound to the node that it knows.
func (a *Agent) podList() []*corev1.Pod {
	a.mu.Lock()
	defer a.mu.Unlock()
	pods := make([]*corev1.Pod, 0, len(a.pods))
	for _, p := range a.pods {
		pods = append(pods, p)
	}
	slices.SortFunc(pods, func(x, y *corev1.Pod) int {
		return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name))
	})
	return pods
}

// containerID finds the container a request names: its newest instance, or
// with previous the one before, as the kubelet's validateContainerLogStatus.
func (a *Agent) containerID(ctx context.Context, namespace, name, container string, previous bool) (string, error) {
	pod, err := a.podByName(namespace, name)
	if err != nil {
		return "", err
	}
	rs, err := a.podRuntime.GetPodStatus(ctx, pod.UID)
	if err != nil {
		return "", err
	}
	var instances []kuberuntime.ContainerStatus
	for _, c := range rs.Containers {
		if c.Name == container {
			instances = append(instances, *c)
		}
	}
	slices.SortFunc(instances, func(x, y kuberuntime.ContainerStatus) int { return y.CreatedAt.Compare(x.CreatedAt) })
	switch {
	case len(instances) == 0:
		return "", fmt.Errorf("container %q in pod %q is waiting to start", container, name)
	case previous && len(instances) < 2:
		return "", fmt.Errorf("previous terminated container %q in pod %q not found", container, name)
	case previous:
		return instances[1].ID, nil
	}
	return instances[0].ID, nil
}

// podByName finds a pod the agent runs by namespace and name.
func (a *Agent) podByName(namespace, name string) (*corev1.Pod, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.pods {
		if p.Namespace == namespace && p.Name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s not found on node %s", namespace, name, a.cfg.NodeName)
}

func (a *Agent) containerLogs(ctx context.Context, namespace, name, container string, opts server.LogOptions, w io.Writer) error {
	id, err := a.containerID(ctx, namespace, name, container, opts.Previous)
	if err != nil {
		return err
	}
	if a.cfg.Logs != nil {
		return a.cfg.Logs(ctx, id, opts, w)
	}
	return a.readLogFile(ctx, id, opts, w)
}

// readLogFile reads the CRI log file a real runtime writes, with the
// kubelet's own reader from k8s.io/cri-client.
func (a *Agent) readLogFile(ctx context.Context, id string, opts server.LogOptions, w io.Writer) error {
	resp, err := a.cri.ContainerStatus(ctx, id, false)
	if err != nil {
		return err
	}
	readOpts := &crilogs.LogOptions{TailLines: opts.TailLines, LimitBytes: opts.LimitBytes, Follow: opts.Follow, Timestamp: opts.Timestamps}
	if opts.SinceTime != nil {
		readOpts.Since = *opts.SinceTime
	}
	return crilogs.ReadLogs(ctx, resp.GetStatus().GetLogPath(), id, readOpts, a.cri, w, w)
}

// exec runs a command through CRI ExecSync, turning a non-zero exit into an
// exit code as the kubelet API's contract wants.
func (a *Agent) exec(ctx context.Context, namespace, name, container string, cmd []string, timeout time.Duration) ([]byte, []byte, int32, error) {
	id, err := a.containerID(ctx, namespace, name, container, false)
	if err != nil {
		return nil, nil, 0, err
	}
	stdout, stderr, err := a.cri.ExecSync(ctx, id, cmd, timeout)
	var exit utilexec.ExitError
	if errors.As(err, &exit) {
		return stdout, stderr, int32(exit.ExitStatus()), nil
	}
	return stdout, stderr, 0, err
}

// streamURL asks the runtime for its streaming server's URL for req, as the
// kubelet's GetExec, GetAttach and GetPortForward do: exec and attach on the
// newest instance of the container, port-forward on the newest sandbox. A
// runtime that answers Unimplemented (the fake one) has no streaming server.
func (a *Agent) streamURL(ctx context.Context, req server.StreamRequest) (*url.URL, error) {
	var rawURL string
	var err error
	switch req.Kind {
	case server.StreamExec, server.StreamAttach:
		var id string
		if id, err = a.containerID(ctx, req.Namespace, req.Pod, req.Container, false); err != nil {
			return nil, err
		}
		if req.Kind == server.StreamExec {
			var resp *runtimeapi.ExecResponse
			resp, err = a.cri.Exec(ctx, &runtimeapi.ExecRequest{
				ContainerId: id, Cmd: req.Cmd, Tty: req.TTY, Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr,
			})
			rawURL = resp.GetUrl()
		} else {
			var resp *runtimeapi.AttachResponse
			resp, err = a.cri.Attach(ctx, &runtimeapi.AttachRequest{
				ContainerId: id, Tty: req.TTY, Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr,
			})
			rawURL = resp.GetUrl()
		}
	case server.StreamPortForward:
		var rs *kuberuntime.PodStatus
		if rs, err = a.podRuntime.GetPodStatus(ctx, req.UID); err != nil {
			return nil, err
		}
		if len(rs.Sandboxes) == 0 {
			return nil, fmt.Errorf("pod %s/%s has no sandbox to port-forward to yet; retry once it runs", req.Namespace, req.Pod)
		}
		var resp *runtimeapi.PortForwardResponse
		resp, err = a.cri.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: rs.Sandboxes[0].Id, Port: req.Ports})
		rawURL = resp.GetUrl()
	default:
		return nil, fmt.Errorf("unknown streaming request %q for pod %s/%s", req.Kind, req.Namespace, req.Pod)
	}
	if grpcstatus.Code(err) == codes.Unimplemented {
		return nil, fmt.Errorf("%w: %v", server.ErrStreamingUnsupported, err)
	}
	if err != nil {
		return nil, fmt.Errorf("CRI %s for pod %s/%s: %w", req.Kind, req.Namespace, req.Pod, err)
	}
	return url.Parse(rawURL)
}
