package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/viper"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"github.com/fleetlet/fleetlet/controlplane"
	"github.com/fleetlet/fleetlet/fleet"
	"github.com/fleetlet/fleetlet/loadprofiles"
	"github.com/fleetlet/fleetlet/reports"
)

// sessionOptions are everything a session needs: the cluster, the fleet's
// shape and its flags, and what measures it. `run`, `fleet` and `bench`
// each fill one and start a session from it.
type sessionOptions struct {
	// Profile's node pools and runtime behaviour make the fleet.
	Profile *loadprofiles.Profile
	// Dir holds the embedded control plane's certificates, data and logs.
	Dir string
	// Kubeconfig, when set, names an existing cluster to use instead of
	// starting the embedded control plane from the binaries in BinDir.
	Kubeconfig, BinDir string
	// ControlPlane, when set, is an embedded control plane already
	// running, which the session uses as its own but leaves running: the
	// integration tests share one.
	ControlPlane *controlplane.ControlPlane

	CRI string
	// CRISocketDir holds the sockets of fake runtimes served by another
	// process; "" serves them here.
	CRISocketDir string
	NodePrefix   string
	FirstIP      netip.Addr
	// PodIP, when set, is every node's address, each with a kubelet port
	// of its own (a shard in a pod).
	PodIP netip.Addr
	// Shards, when set, are the fleet: the shard processes of another
	// machine or cluster, which the session waits for and reads instead of
	// starting agents of its own.
	Shards      *shardSet
	StartJitter time.Duration
	Seed        uint64
	KubeletPort int
	// BootstrapKubeconfig, with Kubeconfig, has each node bootstrap a
	// client certificate of its own with this kubeconfig's token; CertDir
	// keeps them (default on the embedded control plane: node-certs in
	// its directory, where its nodes always bootstrap).
	BootstrapKubeconfig, CertDir string
	// WatchMode is the --watch-mode flag; "" takes the profile's, then
	// per-node.
	WatchMode string
	DebugAddr string

	// ReadyTimeout bounds the wait for every node to be Ready; 0 waits
	// until the context ends.
	ReadyTimeout time.Duration
	// Schedulable also waits, after Ready, for the control plane to lift
	// the taints it sets at registration: a load must not start before.
	Schedulable bool

	// Recorder receives the agents' milestones; WrapTransport wraps every
	// agent's API transport; DebugCollectors are served beside the fleet's
	// own metrics on DebugAddr.
	Recorder        reports.Recorder
	WrapTransport   transport.WrapperFunc
	DebugCollectors []prometheus.Collector
	// WrapProxyTransport wraps every kube-proxy's transport;
	// NetworkProgramming receives their programming latencies.
	WrapProxyTransport transport.WrapperFunc
	NetworkProgramming *reports.NetworkProgramming
	// BeforeFleet, when set, runs once the cluster is open and before the
	// fleet is built: what it creates, every agent finds at its first list.
	BeforeFleet func(ctx context.Context, admin *rest.Config) error
}

// optionsFrom reads the cluster and fleet flags into options for profile p
// with the control plane's data in dir. The commands check the flags first
// (preflight); only --first-ip is parsed here.
func optionsFrom(v *viper.Viper, p *loadprofiles.Profile, dir string) (sessionOptions, error) {
	firstIP, err := parseLoopback(v.GetString("first-ip"))
	if err != nil {
		return sessionOptions{}, err
	}
	return sessionOptions{
		Profile: p, Dir: dir,
		Kubeconfig: kubeconfigPath(v), BinDir: v.GetString("bin-dir"),
		CRI: v.GetString("cri"), CRISocketDir: v.GetString("cri-socket-dir"), NodePrefix: v.GetString("node-prefix"), FirstIP: firstIP,
		StartJitter: v.GetDuration("start-jitter"), Seed: v.GetUint64("seed"), KubeletPort: v.GetInt("kubelet-port"),
		WatchMode: v.GetString("watch-mode"), DebugAddr: v.GetString("debug-addr"),
		BootstrapKubeconfig: v.GetString("bootstrap-kubeconfig"), CertDir: v.GetString("cert-dir"),
		ReadyTimeout: v.GetDuration("ready-timeout"),
		Recorder:     reports.Discard{},
	}, nil
}

// watchMode is the mode the fleet runs in: the flag's, the profile's, or
// per-node.
func (o *sessionOptions) watchMode() string {
	return cmp.Or(o.WatchMode, o.Profile.WatchMode, fleet.WatchPerNode)
}

// settingsOf is what a report states of o: every agent setting that
// differs from the kubelet's defaults, and the fleet's modes when they are
// not the defaults.
func settingsOf(o sessionOptions) (map[string]string, error) {
	_, settings, err := fleetPools(o.Profile)
	if err != nil {
		return nil, err
	}
	if mode := o.watchMode(); mode != fleet.WatchPerNode {
		settings["watch-mode"] = mode
	}
	if o.CRI != criInProc {
		settings["cri"] = o.CRI
	}
	return settings, nil
}

// session is a fleet on a cluster: Start opens the cluster, starts the fleet
// and waits for its nodes; Close stops them in reverse.
type session struct {
	opts    sessionOptions
	cluster *cluster
	fleet   *fleet.Fleet
	// admin is a client with the cluster's admin credentials.
	admin kubernetes.Interface

	// started is when Start was called; fleetStarted when the agents
	// began to start. readyAfter and schedulableAfter count from
	// fleetStarted.
	started, fleetStarted        time.Time
	readyAfter, schedulableAfter time.Duration
	// remoteNodes are the shards' nodes, when the fleet is theirs.
	remoteNodes []string

	// closers release what Start acquired; Close runs them in reverse.
	closers   []func() error
	stopFleet context.CancelFunc
	fleetDone chan error
}

func newSession(opts sessionOptions) *session {
	if opts.Recorder == nil {
		opts.Recorder = reports.Discard{}
	}
	return &session{opts: opts}
}

// errNodesNotUp marks a Start that got the fleet running but not every
// node Ready (or schedulable) in time: the fleet runs, so a caller can
// still report what it measured, then Close.
var errNodesNotUp = errors.New("fleet did not come up")

// Start opens the cluster, builds and starts the fleet, and waits for its
// nodes. Whatever it returns, Close releases what it acquired.
func (s *session) Start(ctx context.Context) error {
	s.started = time.Now()
	o := &s.opts
	var cl *cluster
	var err error
	if o.ControlPlane != nil {
		cl = embeddedCluster(o.ControlPlane)
		cl.shared = true
	} else if cl, err = openCluster(ctx, o.Kubeconfig, o.BinDir, o.Dir); err != nil {
		return err
	}
	s.cluster = cl
	s.closers = append(s.closers, cl.Stop)
	if s.admin, err = kubernetes.NewForConfig(cl.admin); err != nil {
		return err
	}
	if o.Shards != nil {
		return s.startShards(ctx)
	}
	if cl.cp == nil {
		// On an existing cluster the agents are the kubeconfig's user.
		if err := checkWatchAccess(ctx, s.admin, cl.kubeconfig); err != nil {
			return err
		}
	}
	pools, _, err := fleetPools(o.Profile)
	if err != nil {
		return err
	}
	if o.BeforeFleet != nil {
		if err := o.BeforeFleet(ctx, cl.admin); err != nil {
			return err
		}
	}
	certs, err := s.nodeCertificates(ctx, cl)
	if err != nil {
		return err
	}
	newRuntime, stopRuntimes, err := runtimeFactory(ctx, o.CRI, o.CRISocketDir, behaviour(o.Profile.Runtime))
	if err != nil {
		return err
	}
	s.closers = append(s.closers, func() error { stopRuntimes(); return nil })
	var metrics *fleet.Metrics
	if o.DebugAddr != "" {
		if metrics, err = s.serveDebug(ctx); err != nil {
			return err
		}
	}
	fc := fleet.Config{
		WatchMode:          o.watchMode(),
		SharedClientConfig: cl.admin,
		KubeletAPI:         &fleet.KubeletAPIConfig{Port: o.KubeletPort, ClientCAPEM: cl.clientCAPEM},
		Pools:              pools,
		NamePrefix:         o.NodePrefix,
		FirstIP:            o.FirstIP,
		PodIP:              o.PodIP,
		ClientConfig:       cl.nodeConfig,
		NewRuntime:         newRuntime,
		WrapTransport:      o.WrapTransport,
		WrapProxyTransport: o.WrapProxyTransport,
		ProxyClientConfig:  cl.proxyConfig,
		Recorder:           o.Recorder,
		StartJitter:        o.StartJitter,
		Seed:               o.Seed,
		Metrics:            metrics,
	}
	if o.NetworkProgramming != nil {
		fc.NetworkProgramming = o.NetworkProgramming
	}
	if certs != nil {
		fc.ClientConfig, fc.ClientCertificate = nil, certs.forNode
	}
	if s.fleet, err = fleet.New(fc); err != nil {
		return err
	}

	fleetCtx, stop := context.WithCancel(ctx)
	s.stopFleet, s.fleetDone = stop, make(chan error, 1)
	s.fleetStarted = time.Now()
	go func() { s.fleetDone <- s.fleet.Run(fleetCtx) }()

	return s.waitForNodes(ctx, s.fleet.NodeNames())
}

// startShards takes the shards of o.Shards as the fleet: once every one
// says its nodes are Ready, the session waits for them as for its own.
func (s *session) startShards(ctx context.Context) error {
	names, err := s.opts.Shards.wait(ctx, s.opts.ReadyTimeout)
	if err != nil {
		return err
	}
	s.remoteNodes = names
	s.fleetStarted = time.Now()
	// Nothing of the fleet runs here; Close has nothing to stop.
	s.fleetDone = make(chan error, 1)
	s.stopFleet = func() { s.fleetDone <- nil }
	return s.waitForNodes(ctx, names)
}

// nodeNames are the fleet's nodes: this process's agents, or the shards'.
func (s *session) nodeNames() []string {
	if s.fleet == nil {
		return s.remoteNodes
	}
	return s.fleet.NodeNames()
}

// waitForNodes waits for names to be Ready (and, if asked, schedulable).
func (s *session) waitForNodes(ctx context.Context, names []string) error {
	o := &s.opts
	if err := fleet.WaitForNodesReady(ctx, s.admin, names, o.ReadyTimeout); err != nil {
		return s.notUp(err)
	}
	s.readyAfter = time.Since(s.fleetStarted)
	if o.Schedulable {
		// As clusterloader2 does, a load starts once every node is Ready
		// and untainted: before, the scheduler would crowd the first nodes.
		if err := fleet.WaitForNodesSchedulable(ctx, s.admin, names, o.ReadyTimeout); err != nil {
			return s.notUp(err)
		}
		s.schedulableAfter = time.Since(s.fleetStarted)
	}
	return nil
}

// nodeCertificates is how the nodes get their client certificates by TLS
// bootstrap: always on the embedded control plane, with
// --bootstrap-kubeconfig on another; nil when they use the kubeconfig's
// credentials.
func (s *session) nodeCertificates(ctx context.Context, cl *cluster) (*nodeCertificates, error) {
	o := &s.opts
	switch {
	case cl.cp != nil:
		dir := o.CertDir
		if dir == "" {
			dir = filepath.Join(cmp.Or(o.Dir, cl.cp.Dir()), "node-certs")
		}
		return &nodeCertificates{ctx: ctx, dir: dir, bootstrap: cl.cp.BootstrapRESTConfig(), source: cl.cp.BootstrapKubeconfig(), wrap: o.WrapTransport}, nil
	case o.BootstrapKubeconfig != "":
		cfg, err := loadKubeconfig(o.BootstrapKubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--bootstrap-kubeconfig: %w", err)
		}
		return &nodeCertificates{ctx: ctx, dir: o.CertDir, bootstrap: cfg, source: o.BootstrapKubeconfig, wrap: o.WrapTransport}, nil
	}
	return nil, nil
}

// notUp wraps a failed wait for the nodes with where to look.
func (s *session) notUp(err error) error {
	hint := fmt.Sprintf("see the control plane logs in %s", filepath.Join(s.opts.Dir, "logs"))
	if s.cluster.cp == nil {
		hint = fmt.Sprintf("see `kubectl --kubeconfig %s get nodes` and the cluster's own logs", s.cluster.kubeconfig)
	}
	return fmt.Errorf("%w: %w; %s", errNodesNotUp, err, hint)
}

// fleetRunning reports whether Start got as far as running the fleet.
func (s *session) fleetRunning() bool { return s.fleetDone != nil }

// serveDebug serves pprof and the fleet's metrics, with the options'
// collectors, on the debug address until Close.
func (s *session) serveDebug(ctx context.Context) (*fleet.Metrics, error) {
	lis, err := fleet.ListenDebug(s.opts.DebugAddr)
	if err != nil {
		return nil, err
	}
	metrics := fleet.NewMetrics()
	metrics.Registry.MustRegister(s.opts.DebugCollectors...)
	debugCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := fleet.ServeDebug(debugCtx, lis, metrics); err != nil {
			klog.FromContext(ctx).Error(err, "Debug endpoint failed")
		}
	}()
	s.closers = append(s.closers, func() error { stop(); <-done; return nil })
	return metrics, nil
}

// Close stops the fleet, then releases the rest in the reverse order of
// Start: the debug endpoint, the runtimes, the cluster.
func (s *session) Close() error {
	var err error
	if s.stopFleet != nil {
		s.stopFleet()
		err = <-s.fleetDone
		s.stopFleet = nil
	}
	for i := len(s.closers) - 1; i >= 0; i-- {
		err = errors.Join(err, s.closers[i]())
	}
	s.closers = nil
	return err
}

// tempDir is dir, or a new temporary directory named after prefix.
func tempDir(dir, prefix string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	return os.MkdirTemp("", prefix)
}
