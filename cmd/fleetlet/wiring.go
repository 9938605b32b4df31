package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	remote "k8s.io/cri-client/pkg"

	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/fleet"
	"github.com/fleetlet/fleetlet/loadprofiles"
	"github.com/fleetlet/fleetlet/nodeagent"
	"github.com/fleetlet/fleetlet/nodeagent/nodestatus"
	"github.com/fleetlet/fleetlet/nodeagent/prober"
	"github.com/fleetlet/fleetlet/nodeagent/server"
)

// CRI endpoint modes for emulated nodes.
const (
	criInProc     = "inproc"
	criFakeSocket = "fake-socket"
)

func fleetFlags(fs *pflag.FlagSet) {
	fs.String("cri", criInProc, "CRI endpoint of each emulated node: inproc (the fake runtime called directly) or fake-socket (the same fake behind a gRPC unix socket)")
	fs.String("cri-socket-dir", "", "with --cri fake-socket: connect each node to <dir>/<node>.sock, served by fleetlet fakeruntime serve --dir <dir>, a process that outlives the fleet's restarts")
	fs.String("node-prefix", "fleetlet-", "prefix of every node name; give each shard of a fleet its own")
	fs.String("first-ip", "127.1.0.1", "InternalIP of the first node; the next nodes take the next loopback addresses")
	fs.Duration("start-jitter", 5*time.Second, "spread agent starts over this window so the fleet does not heartbeat in lockstep")
	fs.Uint64("seed", 1, "seed of every random choice (start jitter), so that a run can be replayed")
	fs.Int("kubelet-port", nodestatus.KubeletPort, "port of each agent's kubelet API on its own IP; 0 takes any free port, advertised in the Node's daemonEndpoints")
	fs.String("watch-mode", "", "how agents watch their pods and Node: per-node (each its own watches, as kubelets; the default) or shared (one informer fanned out by node; two watches for the fleet); overrides the profile's watchMode")
	fs.String("debug-addr", "", "serve pprof and the fleet's Prometheus metrics on this loopback address, such as 127.0.0.1:6060")
	fs.String("bootstrap-kubeconfig", "", "with --kubeconfig: each node gets a client certificate of its own (system:node:<name>) by the kubelet's TLS bootstrap with this kubeconfig's bootstrap token, instead of the kubeconfig's credentials; needs --cert-dir (the embedded control plane always bootstraps its nodes)")
	fs.String("cert-dir", "", "directory of the nodes' client certificates, one subdirectory per node, as the kubelet's --cert-dir: a restart with the same names reuses them (default on the embedded control plane: node-certs in its directory)")
}

// defaultEphemeralStorage is each emulated node's root filesystem size when
// its pool does not say.
var defaultEphemeralStorage = resource.MustParse("100Gi")

// fleetPools turns a profile's node pools into the fleet's, stating the
// kubelet settings that differ from the defaults.
func fleetPools(p *loadprofiles.Profile) (pools []fleet.NodePool, settings map[string]string, err error) {
	settings = map[string]string{}
	for _, pool := range p.NodePools {
		kc := nodeagent.DefaultKubeletConfiguration()
		kc.MaxPods = int32(pool.Pods)
		if kc.MaxPods != nodeagent.DefaultKubeletConfiguration().MaxPods {
			settings[pool.Name+".maxPods"] = strconv.Itoa(pool.Pods)
		}
		if pool.Kubelet != nil {
			overrides, err := overlayKubelet(kc, pool.Kubelet)
			if err != nil {
				return nil, nil, fmt.Errorf("node pool %s: kubelet settings: %w", pool.Name, err)
			}
			for k, v := range overrides {
				settings[pool.Name+".kubelet."+k] = v
			}
		}
		storage := defaultEphemeralStorage
		if !pool.EphemeralStorage.IsZero() {
			storage = pool.EphemeralStorage
		}
		pools = append(pools, fleet.NodePool{
			Name:  pool.Name,
			Count: pool.Count,
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:              pool.CPU,
				corev1.ResourceMemory:           pool.Memory,
				corev1.ResourcePods:             *resource.NewQuantity(int64(pool.Pods), resource.DecimalSI),
				corev1.ResourceEphemeralStorage: storage,
			},
			Labels:      pool.Labels,
			Taints:      pool.Taints,
			Kubelet:     kc,
			StaticPods:  pool.StaticPods,
			KubeProxy:   kubeProxyOf(pool, settings),
			SystemUsage: systemUsageOf(pool, settings),
		})
		if n := len(pool.StaticPods); n > 0 {
			settings[pool.Name+".staticPods"] = strconv.Itoa(n)
		}
	}
	return pools, settings, nil
}

// systemUsageOf is a pool's usage outside pods: the default, with what the
// pool sets over it (in settings).
func systemUsageOf(pool loadprofiles.NodePool, settings map[string]string) corev1.ResourceList {
	usage := loadprofiles.DefaultSystemUsage()
	for name, q := range pool.SystemUsage {
		usage[name] = q
		settings[pool.Name+".systemUsage."+string(name)] = q.String()
	}
	return usage
}

// kubeProxyOf is a pool's kube-proxy for the fleet, nil for the defaults;
// settings gets what differs from them.
func kubeProxyOf(pool loadprofiles.NodePool, settings map[string]string) *fleet.KubeProxy {
	kp := pool.KubeProxy
	if kp == nil {
		return nil
	}
	out := &fleet.KubeProxy{MinSyncPeriod: kp.MinSyncPeriod.Duration}
	if kp.Enabled != nil && !*kp.Enabled {
		out.Disabled = true
		settings[pool.Name+".kubeProxy.enabled"] = "false"
	}
	if d := kp.MinSyncPeriod.Duration; d != 0 {
		settings[pool.Name+".kubeProxy.minSyncPeriod"] = d.String()
	}
	return out
}

// overlayKubelet sets on kc the pool's kubelet settings, and returns the
// fields that now differ from kc's previous values, for the report.
func overlayKubelet(kc *kubeletconfig.KubeletConfiguration, overrides *loadprofiles.KubeletOverrides) (map[string]string, error) {
	before, err := jsonFields(kc)
	if err != nil {
		return nil, err
	}
	if err := overrides.ApplyTo(kc); err != nil {
		return nil, err
	}
	after, err := jsonFields(kc)
	if err != nil {
		return nil, err
	}
	changed := map[string]string{}
	for k, v := range after {
		if string(before[k]) != string(v) {
			changed[k] = string(v)
		}
	}
	return changed, nil
}

func jsonFields(v any) (map[string]json.RawMessage, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	return fields, json.Unmarshal(raw, &fields)
}

func behaviour(rb loadprofiles.RuntimeBehaviour) fakeruntime.Behaviour {
	return fakeruntime.Behaviour{
		PullLatency:            rb.PullLatency.Duration,
		SandboxStartLatency:    rb.SandboxStartLatency.Duration,
		ContainerCreateLatency: rb.ContainerCreateLatency.Duration,
		ContainerStartLatency:  rb.ContainerStartLatency.Duration,
		StopLatency:            rb.StopLatency.Duration,
	}
}

// runtimeFactory returns how each emulated node gets its CRI endpoint.
//
// With socketDir set (fake-socket only), the fake runtimes live in another
// process, `fleetlet fakeruntime serve --dir socketDir`, one socket per node
// named after it, and survive a restart of the fleet: the agents then
// re-adopt their containers from CRI, as a restarted kubelet does.
func runtimeFactory(ctx context.Context, mode, socketDir string, b fakeruntime.Behaviour) (func(string) (fleet.Runtime, error), func(), error) {
	if socketDir != "" {
		if mode != criFakeSocket {
			return nil, nil, fmt.Errorf("--cri-socket-dir %s needs --cri %s: the in-process runtime has no socket", socketDir, criFakeSocket)
		}
		return func(node string) (fleet.Runtime, error) {
			return dialFakeSocket(ctx, filepath.Join(socketDir, node+".sock"))
		}, func() {}, nil
	}
	switch mode {
	case criInProc:
		return func(string) (fleet.Runtime, error) {
			rt := fakeruntime.New(fakeruntime.Config{Behaviour: b})
			m := inProcModel{rt}
			return fleet.Runtime{Runtime: rt, Images: rt, Prober: fakeProber{m}, Logs: fakeLogs(m), Faults: rt}, nil
		}, func() {}, nil
	case criFakeSocket:
		// Unix socket paths are limited to 108 bytes, so the sockets live in a
		// short temporary directory rather than under the run's output.
		dir, err := os.MkdirTemp("", "fleetlet-cri-")
		if err != nil {
			return nil, nil, fmt.Errorf("creating a directory for CRI sockets: %w", err)
		}
		var n atomic.Int64
		return func(node string) (fleet.Runtime, error) {
			return serveFakeSocket(ctx, filepath.Join(dir, strconv.FormatInt(n.Add(1), 10)+".sock"), b)
		}, func() { _ = os.RemoveAll(dir) }, nil
	default:
		return nil, nil, fmt.Errorf("unknown --cri %q: use %s or %s", mode, criInProc, criFakeSocket)
	}
}

// serveFakeSocket serves a fresh fake runtime on socket and connects to it
// through k8s.io/cri-client, as the agent would connect to containerd.
func serveFakeSocket(ctx context.Context, socket string, b fakeruntime.Behaviour) (fleet.Runtime, error) {
	ctx, cancel := context.WithCancel(ctx)
	rt := fakeruntime.New(fakeruntime.Config{Behaviour: b})
	// Listening before the client dials, rather than polling for the
	// socket's file: the file exists from the bind, a moment before the
	// listen, and a dial in between is refused.
	lis, _, err := fakeruntime.Listen(socket)
	if err != nil {
		cancel()
		return fleet.Runtime{}, err
	}
	served := make(chan error, 1)
	go func() { served <- fakeruntime.ServeListener(ctx, lis, rt) }()
	fail := func(err error) (fleet.Runtime, error) {
		cancel()
		<-served
		return fleet.Runtime{}, fmt.Errorf("fake runtime on %s: %w", socket, err)
	}
	endpoint := "unix://" + socket
	runtimeService, err := remote.NewRemoteRuntimeService(ctx, endpoint, 2*time.Minute, nil, false)
	if err != nil {
		return fail(err)
	}
	imageService, err := remote.NewRemoteImageService(ctx, endpoint, 2*time.Minute, nil, false)
	if err != nil {
		return fail(err)
	}
	m := inProcModel{rt}
	return fleet.Runtime{Runtime: runtimeService, Images: imageService, Prober: fakeProber{m}, Logs: fakeLogs(m), Faults: rt, Close: func() error {
		_ = runtimeService.Close(context.Background())
		_ = imageService.Close(context.Background())
		cancel()
		return <-served
	}}, nil
}

// dialFakeSocket connects to a fake runtime served by another process.
func dialFakeSocket(ctx context.Context, socket string) (fleet.Runtime, error) {
	if fi, err := os.Stat(socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
		return fleet.Runtime{}, fmt.Errorf("no fake runtime socket at %s; start `fleetlet fakeruntime serve --dir %s` with the fleet's --profile (or --nodes) and --node-prefix first", socket, filepath.Dir(socket))
	}
	endpoint := "unix://" + socket
	runtimeService, err := remote.NewRemoteRuntimeService(ctx, endpoint, 2*time.Minute, nil, false)
	if err != nil {
		return fleet.Runtime{}, fmt.Errorf("fake runtime on %s: %w", socket, err)
	}
	imageService, err := remote.NewRemoteImageService(ctx, endpoint, 2*time.Minute, nil, false)
	if err != nil {
		_ = runtimeService.Close(context.Background())
		return fleet.Runtime{}, fmt.Errorf("fake runtime on %s: %w", socket, err)
	}
	m := execModel{runtimeService.ExecSync}
	return fleet.Runtime{Runtime: runtimeService, Images: imageService, Prober: fakeProber{m}, Logs: fakeLogs(m), Close: func() error {
		return errors.Join(runtimeService.Close(context.Background()), imageService.Close(context.Background()))
	}}, nil
}

// fakeModel is what the agents read of the fake runtime's behaviour model
// beyond CRI: network probes' outcomes and computed logs. In the same
// process it is the runtime; in `fleetlet fakeruntime serve`, it is asked
// through CRI's ExecSync (see fakeruntime.ProbeCommand).
type fakeModel interface {
	ProbeNetwork(ctx context.Context, containerID string, kind fakeruntime.ProbeKind) (bool, error)
	ContainerLogs(ctx context.Context, containerID string, since time.Time, tail int) ([]fakeruntime.LogLine, error)
}

// inProcModel is the model of a fake runtime in this process.
type inProcModel struct{ rt *fakeruntime.Runtime }

func (m inProcModel) ProbeNetwork(_ context.Context, id string, kind fakeruntime.ProbeKind) (bool, error) {
	return m.rt.ProbeNetwork(id, kind)
}

func (m inProcModel) ContainerLogs(_ context.Context, id string, since time.Time, tail int) ([]fakeruntime.LogLine, error) {
	return m.rt.ContainerLogs(id, since, tail)
}

// execModel is the model of a fake runtime in another process, asked
// through exec.
type execModel struct{ exec fakeruntime.ExecProber }

func (m execModel) ProbeNetwork(ctx context.Context, id string, kind fakeruntime.ProbeKind) (bool, error) {
	return fakeruntime.ProbeNetworkOver(ctx, m.exec, id, kind)
}

func (m execModel) ContainerLogs(ctx context.Context, id string, since time.Time, tail int) ([]fakeruntime.LogLine, error) {
	return fakeruntime.ContainerLogsOver(ctx, m.exec, id, since, tail)
}

// fakeProber answers an emulated node's httpGet, tcpSocket and grpc probes
// from the fake runtime's behaviour model: there is no process to connect
// to. Failures read like the kubelet's own probe messages.
type fakeProber struct{ rt fakeModel }

func (f fakeProber) Network(ctx context.Context, kind prober.Kind, _ *corev1.Pod, _ *corev1.Container, containerID string, p *corev1.Probe) (prober.Result, string, error) {
	kinds := map[prober.Kind]fakeruntime.ProbeKind{
		prober.Liveness: fakeruntime.Liveness, prober.Readiness: fakeruntime.Readiness, prober.Startup: fakeruntime.Startup,
	}
	ok, err := f.rt.ProbeNetwork(ctx, containerID, kinds[kind])
	switch {
	case err != nil:
		return prober.Failure, err.Error(), nil
	case ok:
		return prober.Success, "", nil
	case p.GRPC != nil:
		return prober.Failure, `service unhealthy (responded with "NOT_SERVING")`, nil
	case p.TCPSocket != nil:
		return prober.Failure, "connect: connection refused", nil
	default:
		return prober.Failure, "HTTP probe failed with statuscode: 500", nil
	}
}

// fakeLogs serves an emulated container's log from the fake runtime's
// behaviour model: there is no log file to read. Lines are formatted as the
// kubelet's log reader writes them.
func fakeLogs(rt fakeModel) nodeagent.LogReader {
	return func(ctx context.Context, containerID string, opts server.LogOptions, w io.Writer) error {
		var since time.Time
		if opts.SinceTime != nil {
			since = *opts.SinceTime
		}
		tail := -1
		if opts.TailLines != nil {
			tail = int(*opts.TailLines)
		}
		limit := int64(-1)
		if opts.LimitBytes != nil {
			limit = *opts.LimitBytes
		}
		for {
			lines, err := rt.ContainerLogs(ctx, containerID, since, tail)
			if err != nil {
				return err
			}
			for _, l := range lines {
				text := l.Text + "\n"
				if opts.Timestamps {
					text = l.Time.Format(time.RFC3339Nano) + " " + text
				}
				if limit >= 0 && int64(len(text)) > limit {
					text = text[:limit]
				}
				if _, err := io.WriteString(w, text); err != nil {
					return err
				}
				if limit -= int64(len(text)); limit == 0 {
					return nil
				}
				since = l.Time.Add(time.Nanosecond)
			}
			if !opts.Follow {
				return nil
			}
			if f, ok := w.(interface{ Flush() }); ok {
				f.Flush()
			}
			// Following polls the model: its lines are computed, not written.
			tail = -1
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
	}
}

// checkFleetFlags rejects bad fleet flags before anything starts: a typo
// must not cost a control plane start.
func checkFleetFlags(v *viper.Viper) error {
	if mode := v.GetString("cri"); mode != criInProc && mode != criFakeSocket {
		return fmt.Errorf("unknown --cri %q: use %s or %s", mode, criInProc, criFakeSocket)
	}
	if dir := v.GetString("cri-socket-dir"); dir != "" {
		if mode := v.GetString("cri"); mode != criFakeSocket {
			return fmt.Errorf("--cri-socket-dir %s needs --cri %s: the in-process runtime has no socket", dir, criFakeSocket)
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("--cri-socket-dir %s: no such directory; start `fleetlet fakeruntime serve --dir %s` first", dir, dir)
		}
	}
	if _, err := parseLoopback(v.GetString("first-ip")); err != nil {
		return err
	}
	if port := v.GetInt("kubelet-port"); port < 0 || port > 65535 {
		return fmt.Errorf("--kubelet-port %d is not a port; use 0 to 65535 (0: any free port)", port)
	}
	if mode := v.GetString("watch-mode"); mode != "" && mode != fleet.WatchPerNode && mode != fleet.WatchShared {
		return fmt.Errorf("unknown --watch-mode %q: use %s or %s", mode, fleet.WatchPerNode, fleet.WatchShared)
	}
	if err := checkBootstrapFlags(v); err != nil {
		return err
	}
	if addr := v.GetString("debug-addr"); addr != "" {
		host, _, err := net.SplitHostPort(addr)
		if ip := net.ParseIP(host); err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
			return fmt.Errorf("--debug-addr %q: want a loopback host:port such as 127.0.0.1:6060", addr)
		}
	}
	return nil
}

func parseLoopback(s string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(s)
	if err != nil || !ip.Is4() || !ip.IsLoopback() {
		return netip.Addr{}, fmt.Errorf("--first-ip %q is not an IPv4 loopback address; use one in 127.0.0.0/8 such as 127.1.0.1", s)
	}
	return ip, nil
}
