package nodeagent

import (
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	internalapi "k8s.io/cri-api/pkg/apis"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/nodeagent/prober"
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
	// Labels are added to the kubelet's well-known node labels.
	Labels map[string]string
	// Taints are registered with the node, as --register-with-taints does.
	Taints []corev1.Taint
	// Kubelet holds the kubelet settings the agent honours, defaulted by
	// DefaultKubeletConfiguration; a nil value means all defaults.
	Kubelet *kubeletconfig.KubeletConfiguration

	Client  kubernetes.Interface
	Runtime internalapi.RuntimeService
	Images  internalapi.ImageManagerService
	// NetworkProber runs httpGet, tcpSocket and grpc probes. Emulated nodes
	// get one that asks the fake runtime's behaviour model; nil sends real
	// probes to the pod's IP, as on a physical node.
	NetworkProber prober.NetworkRunner
	Recorder      reports.Recorder
	Clock         clock.WithTickerAndDelayedExecution
}

// DefaultKubeletConfiguration returns the upstream kubelet's defaults for the
// settings an agent reads. They are restated here because the defaulting
// functions live in k8s.io/kubernetes, which is not importable as a library;
// each value is the one pkg/kubelet/apis/config/v1beta1/defaults.go sets.
func DefaultKubeletConfiguration() *kubeletconfig.KubeletConfiguration {
	return &kubeletconfig.KubeletConfiguration{
		SyncFrequency:             metav1.Duration{Duration: time.Minute},
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
