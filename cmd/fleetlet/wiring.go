package main

import (
	"context"
	"fmt"
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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/transport"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/fleet"
	"github.com/fleetlet/fleetlet/loadprofiles"
	"github.com/fleetlet/fleetlet/nodeagent"
	"github.com/fleetlet/fleetlet/nodeagent/prober"
	"github.com/fleetlet/fleetlet/reports"
)

// CRI endpoint modes for emulated nodes.
const (
	criInProc     = "inproc"
	criFakeSocket = "fake-socket"
)

func fleetFlags(fs *pflag.FlagSet) {
	fs.String("cri", criInProc, "CRI endpoint of each emulated node: inproc (the fake runtime called directly) or fake-socket (the same fake behind a gRPC unix socket)")
	fs.String("node-prefix", "fleetlet-", "prefix of every node name; give each shard of a fleet its own")
	fs.String("first-ip", "127.1.0.1", "InternalIP of the first node; the next nodes take the next loopback addresses")
	fs.Duration("start-jitter", 5*time.Second, "spread agent starts over this window so the fleet does not heartbeat in lockstep")
	fs.Uint64("seed", 1, "seed of every random choice (start jitter), so that a run can be replayed")
	fs.String("debug-addr", "", "serve pprof and the fleet's Prometheus metrics on this loopback address, such as 127.0.0.1:6060")
}

// defaultEphemeralStorage is each emulated node's root filesystem size until
// node pools can set it (issue 4, node-pressure eviction).
var defaultEphemeralStorage = resource.MustParse("100Gi")

// fleetPools turns a profile's node pools into the fleet's, stating the
// kubelet settings that differ from the defaults.
func fleetPools(p *loadprofiles.Profile) (pools []fleet.NodePool, settings map[string]string) {
	settings = map[string]string{}
	for _, pool := range p.NodePools {
		kc := nodeagent.DefaultKubeletConfiguration()
		kc.MaxPods = int32(pool.Pods)
		if kc.MaxPods != nodeagent.DefaultKubeletConfiguration().MaxPods {
			settings[pool.Name+".maxPods"] = strconv.Itoa(pool.Pods)
		}
		pools = append(pools, fleet.NodePool{
			Name:  pool.Name,
			Count: pool.Count,
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:              pool.CPU,
				corev1.ResourceMemory:           pool.Memory,
				corev1.ResourcePods:             *resource.NewQuantity(int64(pool.Pods), resource.DecimalSI),
				corev1.ResourceEphemeralStorage: defaultEphemeralStorage,
			},
			Labels:  pool.Labels,
			Taints:  pool.Taints,
			Kubelet: kc,
		})
	}
	return pools, settings
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
func runtimeFactory(ctx context.Context, mode string, b fakeruntime.Behaviour) (func(string) (fleet.Runtime, error), func(), error) {
	switch mode {
	case criInProc:
		return func(string) (fleet.Runtime, error) {
			rt := fakeruntime.New(fakeruntime.Config{Behaviour: b})
			return fleet.Runtime{Runtime: rt, Images: rt, Prober: fakeProber{rt}}, nil
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
	served := make(chan error, 1)
	go func() { served <- fakeruntime.Serve(ctx, socket, rt) }()
	fail := func(err error) (fleet.Runtime, error) {
		cancel()
		return fleet.Runtime{}, fmt.Errorf("fake runtime on %s: %w", socket, err)
	}
	// The client fails its first call if the socket is not listening yet.
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-served:
			return false, fmt.Errorf("server stopped: %w", err)
		default:
		}
		_, err := os.Stat(socket)
		return err == nil, nil
	})
	if err != nil {
		return fail(err)
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
	return fleet.Runtime{Runtime: runtimeService, Images: imageService, Prober: fakeProber{rt}, Close: func() error {
		_ = runtimeService.Close(context.Background())
		_ = imageService.Close(context.Background())
		cancel()
		return <-served
	}}, nil
}

// fakeProber answers an emulated node's httpGet, tcpSocket and grpc probes
// from the fake runtime's behaviour model: there is no process to connect
// to. Failures read like the kubelet's own probe messages.
type fakeProber struct{ rt *fakeruntime.Runtime }

func (f fakeProber) Network(_ context.Context, kind prober.Kind, _ *corev1.Pod, _ *corev1.Container, containerID string, p *corev1.Probe) (prober.Result, string, error) {
	kinds := map[prober.Kind]fakeruntime.ProbeKind{
		prober.Liveness: fakeruntime.Liveness, prober.Readiness: fakeruntime.Readiness, prober.Startup: fakeruntime.Startup,
	}
	ok, err := f.rt.ProbeNetwork(containerID, kinds[kind])
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

// newFleet builds the fleet of a profile on a cluster.
func newFleet(ctx context.Context, v *viper.Viper, p *loadprofiles.Profile, cl *cluster, rec reports.Recorder, wrap transport.WrapperFunc) (*fleet.Fleet, map[string]string, func(), error) {
	pools, settings := fleetPools(p)
	newRuntime, cleanup, err := runtimeFactory(ctx, v.GetString("cri"), behaviour(p.Runtime))
	if err != nil {
		return nil, nil, nil, err
	}
	firstIP, err := parseLoopback(v.GetString("first-ip"))
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	var metrics *fleet.Metrics
	if addr := v.GetString("debug-addr"); addr != "" {
		lis, err := fleet.ListenDebug(addr)
		if err != nil {
			cleanup()
			return nil, nil, nil, err
		}
		metrics = fleet.NewMetrics()
		debugCtx, stopDebug := context.WithCancel(ctx)
		go func() {
			if err := fleet.ServeDebug(debugCtx, lis, metrics); err != nil {
				klog.FromContext(ctx).Error(err, "Debug endpoint failed")
			}
		}()
		stopRuntimes := cleanup
		cleanup = func() { stopDebug(); stopRuntimes() }
	}
	f, err := fleet.New(fleet.Config{
		Pools:         pools,
		NamePrefix:    v.GetString("node-prefix"),
		FirstIP:       firstIP,
		ClientConfig:  cl.nodeConfig,
		NewRuntime:    newRuntime,
		WrapTransport: wrap,
		Recorder:      rec,
		StartJitter:   v.GetDuration("start-jitter"),
		Seed:          v.GetUint64("seed"),
		Metrics:       metrics,
	})
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	if mode := v.GetString("cri"); mode != criInProc {
		settings["cri"] = mode
	}
	return f, settings, cleanup, nil
}

// checkFleetFlags rejects bad fleet flags before anything starts: a typo
// must not cost a control plane start.
func checkFleetFlags(v *viper.Viper) error {
	if mode := v.GetString("cri"); mode != criInProc && mode != criFakeSocket {
		return fmt.Errorf("unknown --cri %q: use %s or %s", mode, criInProc, criFakeSocket)
	}
	if _, err := parseLoopback(v.GetString("first-ip")); err != nil {
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
