package nodeagent

import (
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	internalapi "k8s.io/cri-api/pkg/apis"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/nodeagent/certificate"
	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
	"github.com/fleetlet/fleetlet/nodeagent/prober"
	"github.com/fleetlet/fleetlet/nodeagent/proxy"
	"github.com/fleetlet/fleetlet/nodeagent/staticpods"
	"github.com/fleetlet/fleetlet/nodeagent/watchers"
	"github.com/fleetlet/fleetlet/reports"
)

// Config is everything one agent needs. The fleet fills one per node; a real
// node's `fleetlet agent` fills one from its command line.
type Config struct {
	// NodeName is the Node object's name and the agent's identity.
	NodeName string
	// NodeIP is the node's InternalIP: a loopback address of its own when
	// emulated, so that nothing it advertises routes off the machine.
	NodeIP net.IP
	// Capacity is the node's shape (cpu, memory, pods, ephemeral-storage).
	Capacity corev1.ResourceList
	// SystemUsage is what an emulated node's OS, runtime and kubelet use
	// outside pods (cpu, memory): its stats (Summary API, resource metrics,
	// eviction) add it to the pods' sum, as the kubelet's root cgroup holds
	// both. Nil: none, the pods' sum alone.
	SystemUsage corev1.ResourceList
	// Labels are added to the kubelet's well-known node labels.
	Labels map[string]string
	// Taints are registered with the node, as --register-with-taints does.
	Taints []corev1.Taint
	// Kubelet holds the kubelet settings the agent honours, defaulted by
	// DefaultKubeletConfiguration; a nil value means all defaults.
	Kubelet *kubeletconfig.KubeletConfiguration

	Client kubernetes.Interface
	// HeartbeatClient sends the node's lease renewals and status patches,
	// as the kubelet's heartbeat client: the same connection as Client,
	// without client-side throttling and with a timeout of the smaller of
	// nodeStatusUpdateFrequency and the lease duration, so that a heartbeat
	// never waits behind the node's other requests nor hangs on an API
	// server that accepted it and went away. Nil sends them through Client.
	HeartbeatClient kubernetes.Interface
	// ClientCertificate, if set, is the node's client certificate, which
	// its clients present: the agent starts it first and waits for a
	// certificate (by TLS bootstrap if it has none) before anything else
	// talks to the API server, then rotates it. Nil: the clients carry
	// their credentials.
	ClientCertificate *certificate.ClientCertificate
	// EventClient sends the node's events, as the kubelet's event client
	// at eventRecordQPS and eventBurst. Nil sends them through Client.
	EventClient typedcorev1.CoreV1Interface
	// OnRepeatedHeartbeatFailure is called when a lease renewal or a status
	// update fails again after a retry: the kubelet closes its idle
	// connections there, so that the next try dials afresh rather than
	// reusing one that died with the API server. Nil does nothing.
	OnRepeatedHeartbeatFailure func()
	// Runtime and Images are the node's CRI endpoint: its runtime service
	// and its image service. The agent's own runtime manager
	// (kuberuntime.Manager) runs pods through them.
	Runtime internalapi.RuntimeService
	Images  internalapi.ImageManagerService
	// NetworkProber runs httpGet, tcpSocket and grpc probes. Emulated nodes
	// get one that asks the fake runtime's behaviour model; nil sends real
	// probes to the pod's IP, as on a physical node.
	NetworkProber prober.NetworkRunner
	// Serving, if set, serves the kubelet API on the node's IP.
	Serving *ServingConfig
	// Logs reads containers' logs for the kubelet API; nil reads the CRI
	// log files a real runtime writes.
	Logs LogReader
	// Informers, if set, are the fleet's shared pod and node informers,
	// fanned out by node name; nil gives the agent its own watches of its
	// pods and its Node, as a kubelet has.
	Informers SharedInformers
	// KubeletWatches, if set, are the fleet's shared watches of Services,
	// RuntimeClasses, CSIDrivers and PodCertificateRequests (the shared watch
	// mode); nil gives the agent its own, with the kubelet's selectors.
	KubeletWatches *watchers.Kubelet
	// KubeProxy, if set, runs the node's kube-proxy beside the kubelet, with
	// this client: kube-proxy's own identity and connection, as a kube-proxy
	// pod on a real node has. Nil: a node without kube-proxy.
	KubeProxy *KubeProxyConfig
	// Interners, if set, share the decoded objects of the agent's own
	// watches with the other agents of its fleet.
	Interners *watchers.Interners
	// PodsDir is where a real node writes pods' volumes for its runtime to
	// bind-mount (the kubelet's /var/lib/kubelet/pods); empty on emulated
	// nodes, which write nothing to disk.
	PodsDir string
	// Host is set on a real runtime only: pod log directories and cgroups.
	Host     *kuberuntime.Host
	Recorder reports.Recorder
	Clock    clock.WithTickerAndDelayedExecution
	// ProbeQueue, when set, times and runs this agent's probes with those of
	// the other agents on it (a fleet's one queue, on the same Clock); nil
	// gives the agent a queue of its own.
	ProbeQueue *prober.Queue
	// StaticPods, if set, is the source of the node's static pods: its
	// pool's, which the fleet runs and every node of the pool shares. Nil:
	// the agent reads Kubelet.StaticPodPath itself, if it is set.
	StaticPods *staticpods.FileSource
}

// KubeProxyConfig is a node's kube-proxy.
type KubeProxyConfig struct {
	Client proxy.Client
	// MinSyncPeriod is kube-proxy's minSyncPeriod; 0 is its default, 1 s.
	MinSyncPeriod time.Duration
	// Latency receives its network programming latencies.
	Latency proxy.LatencyRecorder
	// Shared, if set, are the fleet's informers of what every kube-proxy
	// watches (the shared watch mode); nil gives the proxy its own watches.
	Shared proxy.SharedSources
}

// SharedInformers are one pod informer and one node informer serving many
// agents, each agent seeing only the objects of its node.
type SharedInformers interface {
	// Nodes is the node informer's store, keyed by node name.
	Nodes() cache.Indexer
	// AddPodHandler delivers the events of pods bound to nodeName to h,
	// starting with an add for each such pod already known.
	AddPodHandler(nodeName string, h cache.ResourceEventHandler) (remove func())
	// AddNodeHandler does the same for the Node named nodeName.
	AddNodeHandler(nodeName string, h cache.ResourceEventHandler) (remove func())
	// HasSynced reports whether both informers have listed once.
	HasSynced() bool
}

// DefaultKubeletConfiguration returns the upstream kubelet's defaults for the
// settings an agent reads. They are restated here because the defaulting
// functions live in k8s.io/kubernetes, which is not importable as a library;
// each value is the one pkg/kubelet/apis/config/v1beta1/defaults.go sets.
func DefaultKubeletConfiguration() *kubeletconfig.KubeletConfiguration {
	return &kubeletconfig.KubeletConfiguration{
		SyncFrequency:             metav1.Duration{Duration: time.Minute},
		FileCheckFrequency:        metav1.Duration{Duration: staticpods.DefaultFileCheckFrequency},
		NodeStatusUpdateFrequency: metav1.Duration{Duration: 10 * time.Second},
		NodeStatusReportFrequency: metav1.Duration{Duration: 5 * time.Minute},
		NodeLeaseDurationSeconds:  40,
		MaxPods:                   110,
		KubeAPIQPS:                ptr.To[int32](50),
		KubeAPIBurst:              100,
		SerializeImagePulls:       ptr.To(true),
	}
}

// Defaults fills the zero fields of c.
func (c *Config) Defaults() {
	if c.Kubelet == nil {
		c.Kubelet = DefaultKubeletConfiguration()
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Recorder == nil {
		c.Recorder = reports.Discard{}
	}
	if c.HeartbeatClient == nil {
		c.HeartbeatClient = c.Client
	}
	if c.EventClient == nil && c.Client != nil {
		c.EventClient = c.Client.CoreV1()
	}
}

// Validate reports the first missing piece of wiring, naming the node.
func (c *Config) Validate() error {
	switch {
	case c.NodeName == "":
		return fmt.Errorf("node agent: NodeName is empty")
	case c.NodeIP == nil:
		return fmt.Errorf("node agent %s: NodeIP is not set", c.NodeName)
	case c.Client == nil:
		return fmt.Errorf("node agent %s: no API client", c.NodeName)
	case c.Runtime == nil || c.Images == nil:
		return fmt.Errorf("node agent %s: no CRI runtime or image service", c.NodeName)
	}
	return nil
}
