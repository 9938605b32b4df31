package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/fleetlet/fleetlet/fleet"
	"github.com/fleetlet/fleetlet/reports"
)

// A shard is `fleetlet fleet --shard`: one process of a fleet spread over
// several, normally a pod of a StatefulSet (deploy/shards). It hosts its
// agents against the target cluster of --kubeconfig and serves what they
// measured to the one `fleetlet run --shards…` that drives the load.

// The shard endpoint's paths. They serve the run's driver, over the pod
// network; they hold pod UIDs, timings and request counts, nothing a
// node's kubelet API does not already show, and no profiles (pprof stays
// on the loopback-only --debug-addr).
const (
	shardInfoPath   = "/fleetlet/v1/shard"
	shardClockPath  = "/fleetlet/v1/clock"
	shardStampsPath = "/fleetlet/v1/stamps"
	shardReportPath = "/fleetlet/v1/report"
	shardHealthPath = "/healthz"
)

// defaultShardPort is the shard endpoint's port in a pod (deploy/shards
// names it "shard").
const defaultShardPort = 7070

func shardFlags(fs *pflag.FlagSet) {
	fs.Bool("shard", false, "run as one shard of a fleet spread over several processes (a StatefulSet's pods): node names <node-prefix><ordinal>-<pool>-<index>, a claim on the ordinal, and the shard endpoint that fleetlet run --shards reads; needs --kubeconfig")
	fs.String("shard-ordinal", "", "with --shard: this shard's ordinal (default: from --pod-name, else the hostname, <statefulset>-<ordinal>)")
	fs.String("pod-name", "", "with --shard: the shard's pod name (from the downward API), read for its ordinal")
	fs.String("pod-ip", "", "with --shard: the pod's IP (from the downward API): every node advertises it, each with its own kubelet port from --kubelet-port up; default: each node its own loopback address, one range per shard")
	fs.Int("shard-port", defaultShardPort, "with --shard: the shard endpoint's port, on --pod-ip; on loopback, 127.0.0.1 and this port plus the ordinal, so that shards on one machine never share it")
}

// shardIdentity is who a shard is, from its flags and where it runs.
type shardIdentity struct {
	Ordinal int
	// PodIP is every node's address in a pod; invalid on loopback.
	PodIP netip.Addr
	// Addr is where the shard endpoint listens.
	Addr string
	// Holder names this process in its shard lease.
	Holder string
}

// shardIdentityFrom reads a shard's identity: the ordinal from
// --shard-ordinal, --pod-name or the hostname, in that order.
func shardIdentityFrom(v *viper.Viper, hostname func() (string, error)) (shardIdentity, error) {
	var id shardIdentity
	host, hostErr := hostname()
	switch s := strings.TrimSpace(v.GetString("shard-ordinal")); {
	case s != "":
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return id, fmt.Errorf("--shard-ordinal %q is not a non-negative integer; give the shard's index (a StatefulSet's pod-index label)", s)
		}
		id.Ordinal = n
	case v.GetString("pod-name") != "":
		n, err := fleet.OrdinalFromName(v.GetString("pod-name"))
		if err != nil {
			return id, fmt.Errorf("cannot read the shard's ordinal from --pod-name: %w; set --shard-ordinal (FLEETLET_SHARD_ORDINAL)", err)
		}
		id.Ordinal = n
	default:
		if hostErr != nil {
			return id, fmt.Errorf("cannot read the shard's ordinal: the hostname is unknown (%v); set --shard-ordinal (FLEETLET_SHARD_ORDINAL)", hostErr)
		}
		n, err := fleet.OrdinalFromName(host)
		if err != nil {
			return id, fmt.Errorf("cannot read the shard's ordinal from the hostname: %w; set --shard-ordinal (FLEETLET_SHARD_ORDINAL), or run the shard in a StatefulSet", err)
		}
		id.Ordinal = n
	}
	port := v.GetInt("shard-port")
	if port <= 0 || port > 65535 {
		return id, fmt.Errorf("--shard-port %d is not a port; use one such as %d", port, defaultShardPort)
	}
	if s := v.GetString("pod-ip"); s != "" {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return id, fmt.Errorf("--pod-ip %q is not an IP address; give the pod's status.podIP", s)
		}
		id.PodIP = ip
		id.Addr = net.JoinHostPort(ip.String(), strconv.Itoa(port))
	} else {
		if port+id.Ordinal > 65535 {
			return id, fmt.Errorf("--shard-port %d plus ordinal %d is past 65535; use a lower --shard-port", port, id.Ordinal)
		}
		id.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port+id.Ordinal))
	}
	// A holder of its own for every process, as leader election's
	// candidates: a pod replaced under the same name is another process.
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id.Holder = cmp.Or(host, "fleetlet") + "_" + hex.EncodeToString(b)
	return id, nil
}

// withTimeout is cfg with each request bounded by d.
func withTimeout(cfg *rest.Config, d time.Duration) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Timeout = d
	return c
}

// shardLeaseName is the name of the Lease by which a shard with node name
// prefix holds its ordinal.
func shardLeaseName(prefix string) string {
	return "fleetlet-shard-" + strings.TrimSuffix(prefix, "-")
}

// runShard hosts one shard until ctx ends or another process takes its
// ordinal.
func runShard(ctx context.Context, v *viper.Viper) error {
	id, err := shardIdentityFrom(v, os.Hostname)
	if err != nil {
		return err
	}
	kubeconfig := kubeconfigPath(v)
	if kubeconfig == "" {
		return errors.New("--shard joins a target cluster: give its kubeconfig with --kubeconfig (or KUBECONFIG)")
	}
	profile, err := fleetProfile(v.GetString("profile"), v.GetInt("nodes"))
	if err != nil {
		return err
	}
	// A shard hosts nodes; the load is the driver's.
	profile.Phases = nil
	if err := preflight(v, profile.TotalNodes(), true); err != nil {
		return err
	}
	cfg, err := loadKubeconfig(kubeconfig)
	if err != nil {
		return err
	}
	probe, err := kubernetes.NewForConfig(withTimeout(cfg, 10*time.Second))
	if err != nil {
		return err
	}
	if _, err := probe.Discovery().ServerVersion(); err != nil {
		return fmt.Errorf("shard %d cannot reach the target API server %s: %v; check the kubeconfig %s (in a pod, the Secret fleetlet-target) and that its server is reachable from where the shard runs", id.Ordinal, cfg.Host, err, kubeconfig)
	}
	// No scratch directory: a shard joins an existing cluster, so nothing
	// of it goes in --dir (an embedded control plane's), and with the
	// in-process runtimes it writes no file at all. In a pod it runs as
	// a non-root user on a read-only root filesystem: the empty temporary
	// directory it used to make, and never used, failed where /tmp was
	// not its own to write.
	opts, err := optionsFrom(v, profile, v.GetString("dir"))
	if err != nil {
		return err
	}
	opts.NodePrefix = fleet.ShardNamePrefix(opts.NodePrefix, id.Ordinal)
	if id.PodIP.IsValid() {
		opts.PodIP = id.PodIP
	} else if opts.FirstIP, err = fleet.ShardFirstIP(opts.FirstIP, id.Ordinal); err != nil {
		return err
	}

	// The ordinal first: a duplicate must not touch the other's nodes.
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	lease, err := fleet.ClaimShard(ctx, fleet.ShardLeaseConfig{
		Client: admin, Namespace: "kube-node-lease", Name: shardLeaseName(opts.NodePrefix), Holder: id.Holder,
	})
	if err != nil {
		return fmt.Errorf("shard %d: %w", id.Ordinal, err)
	}
	lis, err := net.Listen("tcp", id.Addr)
	if err != nil {
		return fmt.Errorf("shard %d: the shard endpoint cannot listen on %s: %w; give another --shard-port", id.Ordinal, id.Addr, err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	leaseDone := make(chan error, 1)
	go func() {
		err := lease.Run(ctx)
		if err != nil {
			cancel(err)
		}
		leaseDone <- err
	}()

	srv := &shardServer{ordinal: id.Ordinal, lease: id.Holder}
	httpSrv := &http.Server{Handler: srv.handler(), ReadHeaderTimeout: 10 * time.Second}
	serveDone := make(chan error, 1)
	go func() { serveDone <- httpSrv.Serve(lis) }()
	fmt.Fprintf(os.Stderr, "fleetlet: shard %d: %d nodes %s*; shard endpoint http://%s\n", id.Ordinal, profile.TotalNodes(), opts.NodePrefix, id.Addr)

	r, startErr := startRun(ctx, opts)
	if r != nil && r.fleetRunning() {
		srv.run.Store(r)
	}
	switch {
	case r == nil || !r.fleetRunning():
	case startErr == nil:
		srv.ready.Store(true)
		fmt.Fprintf(os.Stderr, "fleetlet: shard %d: %d nodes Ready after %v\n", id.Ordinal, len(r.fleet.NodeNames()), time.Since(r.started).Round(time.Millisecond))
	case errors.Is(startErr, context.Canceled):
		startErr = nil
	default:
		fmt.Fprintf(os.Stderr, "fleetlet: shard %d: %v; hosting the nodes that are up until interrupted\n", id.Ordinal, startErr)
	}
	if r != nil && r.fleetRunning() {
		<-ctx.Done()
	}
	shutdown, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	err = errors.Join(startErr, httpSrv.Shutdown(shutdown))
	<-serveDone
	if r != nil {
		err = errors.Join(err, r.Close())
	}
	cancel(nil)
	if lerr := <-leaseDone; lerr != nil {
		err = errors.Join(err, fmt.Errorf("shard %d: %w", id.Ordinal, lerr))
	}
	return err
}

// shardInfo is what a shard says of itself at shardInfoPath.
type shardInfo struct {
	Ordinal int `json:"ordinal"`
	// Ready is set once every node of the shard was Ready.
	Ready bool     `json:"ready"`
	Nodes []string `json:"nodes"`
	// Holder is the process's identity in its shard lease.
	Holder string `json:"holder"`
}

// shardClock is the shard's Collector clock, read as late as possible
// before answering.
type shardClock struct {
	Now time.Time `json:"now"`
}

// shardServer serves a shard's measurements.
type shardServer struct {
	ordinal int
	lease   string
	run     atomic.Pointer[profileRun]
	ready   atomic.Bool
}

func (s *shardServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+shardHealthPath, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET "+shardInfoPath, func(w http.ResponseWriter, _ *http.Request) {
		info := shardInfo{Ordinal: s.ordinal, Ready: s.ready.Load(), Holder: s.lease, Nodes: []string{}}
		if r := s.run.Load(); r != nil {
			info.Nodes = r.fleet.NodeNames()
		}
		writeJSON(w, info)
	})
	mux.HandleFunc("GET "+shardClockPath, func(w http.ResponseWriter, _ *http.Request) {
		r := s.run.Load()
		if r == nil {
			http.Error(w, "the shard's fleet is not running yet", http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, shardClock{Now: r.collector.Now()})
	})
	mux.HandleFunc("GET "+shardStampsPath, func(w http.ResponseWriter, _ *http.Request) {
		r := s.run.Load()
		if r == nil {
			http.Error(w, "the shard's fleet is not running yet", http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, r.collector.Export())
	})
	mux.HandleFunc("GET "+shardReportPath, func(w http.ResponseWriter, _ *http.Request) {
		r := s.run.Load()
		if r == nil {
			http.Error(w, "the shard's fleet is not running yet", http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, shardReport(r))
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		klog.Background().Error(err, "Writing a shard endpoint's answer")
	}
}

// shardReport is what a shard measured that the driver cannot: its
// agents' requests and watches, their heartbeats, their kube-proxies'
// network programming, and the fleet's own cost. The pods' milestones go
// by shardStampsPath instead, so that phases crossing processes can be
// computed from stamps; what the report would derive from them here, and
// what the driver measures itself (outages, the control plane's metrics),
// is left out so that the merge counts it once.
func shardReport(r *profileRun) *reports.Report {
	rep := r.report(nil, nil)
	rep.Pods = reports.PodCounts{}
	rep.Phases, rep.PodGroups, rep.Workloads, rep.Outages, rep.Faults = nil, nil, nil, nil, nil
	rep.SLIs = slices.DeleteFunc(rep.SLIs, func(s reports.PhaseSummary) bool { return s.Name != reports.SLINetworkProgramming })
	rep.Series.Pods = reports.PodSeries{}
	rep.Scheduling = reports.SchedulingStats{}
	rep.SLOs, rep.SLOThresholds = nil, nil
	rep.APIServerLatency = nil
	return rep
}
