// Package fleet hosts many node agents in one process: it names them, gives
// each its own loopback address, CRI endpoint, API client and client-side
// limiter, starts them with jitter and stops them together.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryv1client "k8s.io/client-go/kubernetes/typed/discovery/v1"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	networkingv1client "k8s.io/client-go/kubernetes/typed/networking/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	internalapi "k8s.io/cri-api/pkg/apis"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/nodeagent"
	"github.com/fleetlet/fleetlet/nodeagent/certificate"
	"github.com/fleetlet/fleetlet/nodeagent/prober"
	"github.com/fleetlet/fleetlet/nodeagent/proxy"
	"github.com/fleetlet/fleetlet/nodeagent/server"
	"github.com/fleetlet/fleetlet/nodeagent/staticpods"
	"github.com/fleetlet/fleetlet/nodeagent/watchers"
	"github.com/fleetlet/fleetlet/reports"
)

// NodePool is a group of identical nodes.
type NodePool struct {
	Name     string
	Count    int
	Capacity corev1.ResourceList
	Labels   map[string]string
	Taints   []corev1.Taint
	// Kubelet overrides the kubelet defaults for this pool's agents. Its
	// staticPodPath, if set, is read once for the whole pool, every
	// fileCheckFrequency and at each change, and its manifests run on
	// every node of the pool.
	Kubelet *kubeletconfig.KubeletConfiguration
	// StaticPods are static pods of every node of the pool, given inline:
	// each as a manifest file of staticPodPath, named staticPods[i].
	StaticPods []corev1.Pod
	// KubeProxy is the pool's kube-proxy; nil runs one on every node with
	// kube-proxy's defaults, as on a real cluster, when the fleet has
	// kube-proxy credentials (Config.ProxyClientConfig).
	KubeProxy *KubeProxy
	// SystemUsage is each node's usage outside pods (cpu, memory), which
	// its stats add to its pods' (nodeagent.Config.SystemUsage).
	SystemUsage corev1.ResourceList
}

// KubeProxy is a pool's kube-proxy settings.
type KubeProxy struct {
	// Disabled runs no kube-proxy on the pool's nodes (clusters whose CNI
	// replaces it).
	Disabled bool
	// MinSyncPeriod is kube-proxy's minSyncPeriod; 0 is its default, 1 s.
	MinSyncPeriod time.Duration
}

// Runtime is one node's CRI endpoint; Close releases it when the agent stops.
type Runtime struct {
	Runtime internalapi.RuntimeService
	Images  internalapi.ImageManagerService
	// Prober answers the node's network probes; nil probes the pods for real.
	Prober prober.NetworkRunner
	// Logs reads the node's container logs for the kubelet API; nil reads
	// the CRI log files a real runtime writes.
	Logs nodeagent.LogReader
	// Faults sets the faults of a fake runtime and reboots it; nil for a
	// real runtime, on which the fleet injects no runtime fault and boots
	// no node again.
	Faults RuntimeFaults
	Close  func() error
}

// RuntimeFaults are the switches of a fake runtime (*fakeruntime.Runtime)
// that faults throw.
type RuntimeFaults interface {
	SetFault(fakeruntime.Fault)
	Reboot()
}

// Config describes a fleet.
type Config struct {
	Pools []NodePool
	// NamePrefix starts every node name: "<prefix><pool>-<index>". Shards of
	// one large fleet use different prefixes.
	NamePrefix string
	// FirstIP is the first node's InternalIP; each next node takes the next
	// address. It must be a loopback address so nothing routes off the machine.
	FirstIP netip.Addr
	// PodIP, when set, is the one InternalIP of every node, as for a fleet
	// shard in a pod of another cluster: each node's kubelet API listens on
	// a port of its own, KubeletAPI.Port plus the node's index in the
	// fleet, and advertises it in its Node's daemonEndpoints, so the API
	// server reaches each one (logs, exec, stats) at the pod's address.
	// FirstIP is then unused.
	PodIP netip.Addr
	// ClientConfig returns the API credentials of a node: its own client
	// certificate against our control plane, or a shared kubeconfig.
	ClientConfig func(nodeName string) (*rest.Config, error)
	// ClientCertificate, if set, gives each node a client certificate of
	// its own by TLS bootstrap (and rotation), as a kubelet started with
	// --bootstrap-kubeconfig; the node's clients present it, and
	// ClientConfig is not asked.
	ClientCertificate func(nodeName string) (*certificate.ClientCertificate, error)
	// NewRuntime returns the CRI endpoint of a node.
	NewRuntime func(nodeName string) (Runtime, error)
	// WrapTransport wraps every agent's transport, to count API requests;
	// WrapProxyTransport every kube-proxy's.
	WrapTransport      transport.WrapperFunc
	WrapProxyTransport transport.WrapperFunc
	// ProxyClientConfig returns the credentials of a node's kube-proxy
	// (system:kube-proxy on our control plane, the shared kubeconfig on
	// another); nil runs no kube-proxy on any node.
	ProxyClientConfig func(nodeName string) (*rest.Config, error)
	// NetworkProgramming receives the kube-proxies' network programming
	// latencies.
	NetworkProgramming proxy.LatencyRecorder
	Recorder           reports.Recorder
	Clock              clock.WithTickerAndDelayedExecution
	// StartJitter spreads agent starts uniformly over this window, so that a
	// fleet does not register and renew its leases in lockstep.
	StartJitter time.Duration
	// Seed makes the start order and jitter replayable.
	Seed uint64
	// Metrics, if set, counts the fleet's agents.
	Metrics *Metrics
	// WatchMode is WatchPerNode (the default) or WatchShared.
	WatchMode string
	// SharedClientConfig is the identity of the fleet's shared clients: the
	// shared informers (which list every bound pod and every Node, which a
	// node's own identity may not) and the kubelet API's TokenReviews and
	// SubjectAccessReviews. Required with WatchShared or KubeletAPI.
	SharedClientConfig *rest.Config
	// KubeletAPI, if set, has every agent serve the kubelet API on its IP.
	KubeletAPI *KubeletAPIConfig
}

// KubeletAPIConfig is how a fleet's agents serve the kubelet API: one
// serving certificate and one authenticator and authorizer for them all.
type KubeletAPIConfig struct {
	// Port is each agent's kubelet port; 0 takes any free port, which the
	// agent advertises in its Node's daemonEndpoints.
	Port int
	// ClientCAPEM is the CA whose client certificates the kubelet API
	// trusts, as the kubelet's --client-ca-file: the API server's
	// kubelet-client certificate must chain to it.
	ClientCAPEM []byte
}

// defaultFirstIP leaves 127.0.0.1 to the control plane.
var defaultFirstIP = netip.AddrFrom4([4]byte{127, 1, 0, 1})

// Member is one agent of the fleet.
type Member struct {
	Name string
	IP   net.IP
	Pool string
	// CRI is the node's runtime service, to look at what its agent made
	// there, as crictl does on a node.
	CRI   internalapi.RuntimeService
	close func() error
	// staticPods is its pool's static pod source, nil without one.
	staticPods *staticpods.FileSource
	pool       NodePool
	rt         Runtime
	// link is the node's network to the API server, which a partition
	// cuts.
	link *link
	// index is the node's place in the fleet, which picks its kubelet
	// port when every node shares the pod's IP.
	index int

	mu    sync.Mutex
	agent *nodeagent.Agent
	// power is the node's power state, which faults switch (faults.go).
	power power
	// runtimeFault is what is wrong with its runtime now, the sum of the
	// runtime faults in place.
	runtimeFault fakeruntime.Fault
}

// Fleet is a set of agents sharing one process.
type Fleet struct {
	cfg       Config
	members   []*Member
	informers *SharedInformers
	serving   *nodeagent.ServingConfig
	// probes times and runs every agent's probes: one delaying queue and
	// a few workers for the fleet, as KWOK serves every node's lease, not
	// a queue per agent.
	probes *prober.Queue
	// interners share the decoded Services, RuntimeClasses, CSIDrivers and
	// PodCertificateRequests of every agent's own watches; watches, in the
	// shared watch mode, are the one set of those watches for all agents.
	interners *watchers.Interners
	watches   *watchers.Kubelet
	// proxyInformers feed the kube-proxies in the shared watch mode.
	proxyInformers *sharedProxyInformers
	// staticPods are the pools' static pod sources, one per pool that has
	// static pods: its directory read once for all its nodes.
	staticPods []*staticpods.FileSource
}

// New builds every agent of the fleet; nothing talks to the API server yet.
func New(cfg Config) (*Fleet, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Recorder == nil {
		cfg.Recorder = reports.Discard{}
	}
	if !cfg.FirstIP.IsValid() {
		cfg.FirstIP = defaultFirstIP
	}
	if err := checkAddresses(cfg); err != nil {
		return nil, err
	}
	if (cfg.ClientConfig == nil && cfg.ClientCertificate == nil) || cfg.NewRuntime == nil {
		return nil, errors.New("fleet: ClientConfig (or ClientCertificate) and NewRuntime must be set")
	}
	f := &Fleet{cfg: cfg, interners: &watchers.Interners{}}
	sharedClientFor := func(base *rest.Config, userAgent string) (kubernetes.Interface, error) {
		if cfg.SharedClientConfig == nil {
			return nil, errors.New("fleet: SharedClientConfig is not set; the shared watch mode and the kubelet API need an identity that may list every pod and node and review tokens")
		}
		restCfg := rest.CopyConfig(base)
		restCfg.UserAgent = userAgent
		restCfg.ContentType = "application/vnd.kubernetes.protobuf"
		restCfg.Wrap(gzipWatches)
		if cfg.WrapTransport != nil {
			restCfg.Wrap(cfg.WrapTransport)
		}
		return kubernetes.NewForConfig(restCfg)
	}
	sharedClient := func(userAgent string) (kubernetes.Interface, error) {
		return sharedClientFor(cfg.SharedClientConfig, userAgent)
	}
	switch cfg.WatchMode {
	case "", WatchPerNode:
	case WatchShared:
		client, err := sharedClient("fleetlet/shared-informers")
		if err != nil {
			return nil, err
		}
		f.informers = NewSharedInformers(client)
		f.watches = watchers.NewKubelet(watchers.Config{Client: client, Interners: f.interners, Clock: cfg.Clock})
		if cfg.ProxyClientConfig != nil {
			f.proxyInformers = newSharedProxyInformers(client, f.informers)
		}
	default:
		return nil, fmt.Errorf("fleet: unknown watch mode %q; use %q or %q", cfg.WatchMode, WatchPerNode, WatchShared)
	}
	if api := cfg.KubeletAPI; api != nil {
		// The kubelet API's TokenReviews and SubjectAccessReviews. Each
		// kubelet sends its own through its own client, within its own
		// kubeAPIQPS and kubeAPIBurst; here one client sends every node's,
		// so it gets the sum of their budgets. At client-go's default of
		// 5 QPS, the first stats, logs and exec requests to 100 nodes wait
		// a minute for their reviews, and most time out.
		kc := nodeagent.DefaultKubeletConfiguration()
		nodes := 0
		for _, p := range cfg.Pools {
			nodes += p.Count
		}
		authCfg := cfg.SharedClientConfig
		if authCfg != nil {
			authCfg = rest.CopyConfig(authCfg)
			authCfg.QPS, authCfg.Burst = float32(int(*kc.KubeAPIQPS)*max(nodes, 1)), int(kc.KubeAPIBurst)*max(nodes, 1)
		}
		client, err := sharedClientFor(authCfg, "fleetlet/kubelet-auth")
		if err != nil {
			return nil, err
		}
		authn, authz, err := server.NewDelegatingAuth(client, api.ClientCAPEM)
		if err != nil {
			return nil, fmt.Errorf("fleet: kubelet API authentication: %w", err)
		}
		// One certificate for every node, naming none of their IPs: a
		// certificate listing thousands of IPs would be sent in every
		// handshake, and the API server does not verify kubelets' serving
		// certificates unless it is given --kubelet-certificate-authority.
		cert, err := server.SelfSignedCert(nil, []string{"fleetlet-kubelet"}, cfg.Clock.Now())
		if err != nil {
			return nil, fmt.Errorf("fleet: kubelet serving certificate: %w", err)
		}
		f.serving = &nodeagent.ServingConfig{Port: api.Port, Cert: cert, Authenticator: authn, Authorizer: authz}
	}
	f.probes = prober.NewQueue(prober.QueueConfig{Clock: cfg.Clock})
	ip := cfg.FirstIP
	for _, pool := range cfg.Pools {
		files, err := staticPodsOf(pool, cfg.Clock)
		if err != nil {
			stopUnstarted(f.probes)
			f.close()
			return nil, err
		}
		if files != nil {
			f.staticPods = append(f.staticPods, files)
		}
		for i := range pool.Count {
			if cfg.PodIP.IsValid() {
				ip = cfg.PodIP
			} else if !ip.IsLoopback() {
				f.close()
				stopUnstarted(f.probes)
				return nil, fmt.Errorf("fleet: ran out of loopback addresses at node %d of pool %s; start from a lower first IP", i, pool.Name)
			}
			m, err := f.newMember(pool, NodeName(cfg.NamePrefix, pool.Name, i), net.IP(ip.AsSlice()), files)
			if err != nil {
				f.close()
				stopUnstarted(f.probes)
				return nil, err
			}
			f.members = append(f.members, m)
			if !cfg.PodIP.IsValid() {
				ip = ip.Next()
			}
		}
	}
	return f, nil
}

// staticPodsOf is the static pod source of a pool, nil if it has none.
func staticPodsOf(pool NodePool, clk clock.WithTicker) (*staticpods.FileSource, error) {
	var path string
	var period time.Duration
	if kc := pool.Kubelet; kc != nil {
		path, period = kc.StaticPodPath, kc.FileCheckFrequency.Duration
	}
	if path == "" && len(pool.StaticPods) == 0 {
		return nil, nil
	}
	inline := make([]*staticpods.Manifest, 0, len(pool.StaticPods))
	for i := range pool.StaticPods {
		m, err := staticpods.FromPod(staticpods.InlineSource(i), &pool.StaticPods[i])
		if err != nil {
			return nil, fmt.Errorf("fleet: pool %s: %w", pool.Name, err)
		}
		inline = append(inline, m)
	}
	return staticpods.NewFileSource(staticpods.FileSourceConfig{Path: path, Inline: inline, Period: period, Clock: clk}), nil
}

func (f *Fleet) newMember(pool NodePool, name string, ip net.IP, staticPods *staticpods.FileSource) (*Member, error) {
	rt, err := f.cfg.NewRuntime(name)
	if err != nil {
		return nil, fmt.Errorf("fleet: CRI endpoint for node %s: %w", name, err)
	}
	m := &Member{Name: name, IP: ip, Pool: pool.Name, CRI: rt.Runtime, close: rt.Close, staticPods: staticPods, pool: pool, rt: rt, link: &link{}, index: len(f.members)}
	if m.agent, err = f.newAgent(m); err != nil {
		if rt.Close != nil {
			_ = rt.Close()
		}
		return nil, err
	}
	return m, nil
}

// newAgent builds m's agent: its clients, its kube-proxy and its kubelet,
// over its runtime. A node that boots again after a power cut gets a new
// one, as a rebooted machine starts a new kubelet process.
func (f *Fleet) newAgent(m *Member) (*nodeagent.Agent, error) {
	pool, name, ip := m.pool, m.Name, m.IP
	kc := nodeagent.DefaultKubeletConfiguration()
	if pool.Kubelet != nil {
		kc = pool.Kubelet.DeepCopy()
	}
	var cert *certificate.ClientCertificate
	var restCfg *rest.Config
	var err error
	if f.cfg.ClientCertificate != nil {
		if cert, err = f.cfg.ClientCertificate(name); err != nil {
			return nil, fmt.Errorf("fleet: %w", err)
		}
		restCfg = cert.RESTConfig()
	} else if restCfg, err = f.cfg.ClientConfig(name); err != nil {
		return nil, fmt.Errorf("fleet: credentials for node %s: %w", name, err)
	}
	restCfg = rest.CopyConfig(restCfg)
	// Each agent has its own limiter at the kubelet's QPS and burst, so that
	// client-side throttling shows per node as on real nodes, not as one
	// shared limiter that hides contention.
	restCfg.QPS = float32(ptr.Deref(kc.KubeAPIQPS, 50))
	restCfg.Burst = int(kc.KubeAPIBurst)
	ownConnection(restCfg, "fleetlet/"+name, f.cfg.WrapTransport)
	restCfg.Wrap(m.link.wrap)
	clients, err := nodeagent.NewKubeletClients(restCfg, kc)
	if err != nil {
		return nil, fmt.Errorf("fleet: API client for node %s: %w", name, err)
	}
	kubeProxy, err := f.kubeProxyOf(pool, name, m.link)
	if err != nil {
		return nil, err
	}
	rt, staticPods := m.rt, m.staticPods
	agentCfg := nodeagent.Config{
		NodeName: name, NodeIP: ip, Capacity: pool.Capacity, Labels: withPoolLabel(pool), Taints: pool.Taints,
		Kubelet: kc, Runtime: rt.Runtime, Images: rt.Images, NetworkProber: rt.Prober, Logs: rt.Logs,
		Recorder: f.cfg.Recorder, Clock: f.cfg.Clock, Serving: f.servingOf(m), ProbeQueue: f.probes,
		KubeletWatches: f.watches, Interners: f.interners, KubeProxy: kubeProxy, StaticPods: staticPods,
		SystemUsage: pool.SystemUsage,
	}
	clients.Wire(&agentCfg)
	agentCfg.ClientCertificate = cert
	if f.informers != nil {
		agentCfg.Informers = f.informers
	}
	return nodeagent.New(agentCfg)
}

// servingOf is how m serves the kubelet API: the fleet's, on a port of its
// own when every node shares the pod's IP.
func (f *Fleet) servingOf(m *Member) *nodeagent.ServingConfig {
	if f.serving == nil || !f.cfg.PodIP.IsValid() || f.serving.Port == 0 {
		return f.serving
	}
	s := *f.serving
	s.Port += m.index
	return &s
}

// checkAddresses refuses node addresses that could route traffic where it
// should not go: loopback addresses on one machine; in a pod, the pod's own
// address, with a kubelet port per node that stays a port.
func checkAddresses(cfg Config) error {
	if !cfg.PodIP.IsValid() {
		if !cfg.FirstIP.IsLoopback() || !cfg.FirstIP.Is4() {
			return fmt.Errorf("fleet: first node IP %s is not an IPv4 loopback address; use one in 127.0.0.0/8", cfg.FirstIP)
		}
		return nil
	}
	ip := cfg.PodIP
	if ip.IsUnspecified() || ip.IsMulticast() || ip.IsLinkLocalUnicast() {
		return fmt.Errorf("fleet: pod IP %s cannot be a node's address; give the pod's own IP (status.podIP)", ip)
	}
	if cfg.KubeletAPI != nil && cfg.KubeletAPI.Port > 0 {
		nodes := 0
		for _, p := range cfg.Pools {
			nodes += p.Count
		}
		if last := cfg.KubeletAPI.Port + nodes - 1; last > 65535 {
			return fmt.Errorf("fleet: %d nodes on pod IP %s need kubelet ports %d to %d, past 65535; start from a lower --kubelet-port or host fewer nodes per shard", nodes, ip, cfg.KubeletAPI.Port, last)
		}
	}
	return nil
}

// ownConnection makes restCfg a node component's client: protobuf, watch
// bodies decoded by gzipWatches, then wrap (the run's counters), and a
// connection of its own. A dial function of its own keeps client-go from
// handing every client with the same credentials one cached transport:
// each agent's kubelet and kube-proxy get their own connection, as on a
// node, and long-lived watches never queue behind one connection's HTTP/2
// stream limit.
func ownConnection(restCfg *rest.Config, userAgent string, wrap transport.WrapperFunc) {
	restCfg.UserAgent = userAgent
	restCfg.ContentType = "application/vnd.kubernetes.protobuf"
	restCfg.Wrap(gzipWatches)
	if wrap != nil {
		restCfg.Wrap(wrap)
	}
	if restCfg.Transport != nil {
		return // a transport of the node's own already (its client certificate's)
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	restCfg.Dial = dialer.DialContext
}

// kubeProxyOf is the kube-proxy of node name, nil if its pool runs none:
// its own client, with kube-proxy's identity, its default client limits
// (--kube-api-qps 5, --kube-api-burst 10) and a connection of its own, as a
// kube-proxy pod beside the kubelet has.
func (f *Fleet) kubeProxyOf(pool NodePool, name string, l *link) (*nodeagent.KubeProxyConfig, error) {
	if f.cfg.ProxyClientConfig == nil || (pool.KubeProxy != nil && pool.KubeProxy.Disabled) {
		return nil, nil
	}
	restCfg, err := f.cfg.ProxyClientConfig(name)
	if err != nil {
		return nil, fmt.Errorf("fleet: kube-proxy credentials for node %s: %w", name, err)
	}
	restCfg = rest.CopyConfig(restCfg)
	restCfg.QPS, restCfg.Burst = 5, 10
	ownConnection(restCfg, "fleetlet-kube-proxy/"+name, f.cfg.WrapProxyTransport)
	restCfg.Wrap(l.wrap)
	client, err := newProxyClient(restCfg)
	if err != nil {
		return nil, fmt.Errorf("fleet: kube-proxy API client for node %s: %w", name, err)
	}
	kp := &nodeagent.KubeProxyConfig{Client: client, Latency: f.cfg.NetworkProgramming}
	if pool.KubeProxy != nil {
		kp.MinSyncPeriod = pool.KubeProxy.MinSyncPeriod
	}
	if f.proxyInformers != nil {
		kp.Shared = f.proxyInformers
	}
	return kp, nil
}

// PoolLabel names the pool a node belongs to.
const PoolLabel = "fleetlet.io/pool"

func withPoolLabel(pool NodePool) map[string]string {
	labels := make(map[string]string, len(pool.Labels)+1)
	for k, v := range pool.Labels {
		labels[k] = v
	}
	labels[PoolLabel] = pool.Name
	return labels
}

// Members returns the fleet's agents in start order.
func (f *Fleet) Members() []*Member { return f.members }

// NodeName is the name of node i of a pool: <prefix><pool>-<i>.
func NodeName(prefix, pool string, i int) string {
	return prefix + pool + "-" + strconv.Itoa(i)
}

// NodeNames returns every node's name.
func (f *Fleet) NodeNames() []string {
	names := make([]string, len(f.members))
	for i, m := range f.members {
		names[i] = m.Name
	}
	return names
}

// Run starts every agent, each after its jitter, and returns when ctx ends
// and every agent has stopped. Agents that failed to start are reported
// together; the others keep running until ctx ends.
func (f *Fleet) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	rng := rand.New(rand.NewPCG(f.cfg.Seed, 0x666c656574))
	if m := f.cfg.Metrics; m != nil {
		m.agents.Set(float64(len(f.members)))
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	if f.informers != nil {
		wg.Add(1)
		go func() { defer wg.Done(); f.informers.Run(ctx) }()
	}
	if f.watches != nil {
		if err := f.watches.Start(ctx); err != nil {
			return err
		}
		defer f.watches.Wait()
	}
	if f.proxyInformers != nil {
		wg.Add(1)
		go func() { defer wg.Done(); f.proxyInformers.Run(ctx) }()
	}
	if err := f.probes.Start(ctx); err != nil {
		return err
	}
	for _, files := range f.staticPods {
		wg.Add(1)
		go func() { defer wg.Done(); files.Run(ctx) }()
	}
	for _, m := range f.members {
		delay := time.Duration(0)
		if f.cfg.StartJitter > 0 {
			delay = time.Duration(rng.Int64N(int64(f.cfg.StartJitter)))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
				return
			case <-f.cfg.Clock.After(delay):
			}
			if err := f.runMember(ctx, m); err != nil {
				logger.Error(err, "Node agent failed", "node", m.Name)
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	f.probes.Wait()
	f.close()
	return errors.Join(errs...)
}

// stopUnstarted stops a probe queue that will never run: its delaying
// queue's waiting loop runs from its making until it is stopped.
func stopUnstarted(q *prober.Queue) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = q.Start(ctx)
}

func (f *Fleet) close() {
	for _, m := range f.members {
		if m.close != nil {
			_ = m.close()
		}
	}
}

// proxyClient is a kube-proxy's client: the four API groups it calls, over
// one HTTP client, rather than a full clientset's fifty REST clients, which
// thousands of proxies in one process would each hold for nothing.
type proxyClient struct {
	core       *corev1client.CoreV1Client
	discovery  *discoveryv1client.DiscoveryV1Client
	networking *networkingv1client.NetworkingV1Client
	events     *eventsv1client.EventsV1Client
}

func newProxyClient(cfg *rest.Config) (*proxyClient, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	c := &proxyClient{}
	if c.core, err = corev1client.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, err
	}
	if c.discovery, err = discoveryv1client.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, err
	}
	if c.networking, err = networkingv1client.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, err
	}
	if c.events, err = eventsv1client.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *proxyClient) CoreV1() corev1client.CoreV1Interface { return c.core }

func (c *proxyClient) DiscoveryV1() discoveryv1client.DiscoveryV1Interface { return c.discovery }

func (c *proxyClient) NetworkingV1() networkingv1client.NetworkingV1Interface { return c.networking }

func (c *proxyClient) EventsV1() eventsv1client.EventsV1Interface { return c.events }
