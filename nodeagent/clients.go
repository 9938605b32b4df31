package nodeagent

import (
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// KubeletClients are the three clients a kubelet builds from its kubeconfig
// (cmd/kubelet/app/server.go): the main one at kubeAPIQPS/kubeAPIBurst, the
// event client at eventRecordQPS/eventBurst, and the heartbeat client for
// lease renewals and node status, unthrottled, with a timeout of
// min(nodeStatusUpdateFrequency, nodeLeaseDurationSeconds). All three share
// one HTTP transport, so one connection, as the kubelet's do. Only the main
// client is a full clientset: the other two carry the API groups they call,
// since a clientset's fifty REST clients (about 28 KiB) twice over would
// add 6 % to an agent for nothing.
type KubeletClients struct {
	Main      kubernetes.Interface
	Events    corev1client.CoreV1Interface
	Heartbeat kubernetes.Interface
	// CloseIdle is the kubelet's onHeartbeatFailure: it closes the idle
	// connections of the shared transport, so that the next heartbeat
	// dials again instead of writing to a connection that died with the
	// API server.
	CloseIdle func()
}

// NewKubeletClients builds a node's clients from its rest config, with the
// limits of kc.
func NewKubeletClients(restCfg *rest.Config, kc *kubeletconfig.KubeletConfiguration) (*KubeletClients, error) {
	httpClient, err := rest.HTTPClientFor(restCfg)
	if err != nil {
		return nil, err
	}
	main, err := kubernetes.NewForConfigAndClient(restCfg, httpClient)
	if err != nil {
		return nil, err
	}

	eventCfg := rest.CopyConfig(restCfg)
	eventCfg.QPS, eventCfg.Burst = float32(ptr.Deref(kc.EventRecordQPS, 50)), int(kc.EventBurst)
	if eventCfg.QPS == 0 { // the kubelet's: eventRecordQPS 0 means no limit
		eventCfg.QPS = -1
	}
	if eventCfg.Burst == 0 {
		eventCfg.Burst = 100
	}
	events, err := corev1client.NewForConfigAndClient(eventCfg, httpClient)
	if err != nil {
		return nil, err
	}

	hbCfg := rest.CopyConfig(restCfg)
	hbCfg.QPS = -1
	hbCfg.Timeout = heartbeatTimeout(kc)
	hbHTTP := *httpClient
	hbHTTP.Timeout = hbCfg.Timeout
	hb := &heartbeatClient{Interface: main}
	if hb.core, err = corev1client.NewForConfigAndClient(hbCfg, &hbHTTP); err != nil {
		return nil, err
	}
	if hb.coordination, err = coordinationv1client.NewForConfigAndClient(hbCfg, &hbHTTP); err != nil {
		return nil, err
	}
	return &KubeletClients{
		Main: main, Events: events, Heartbeat: hb,
		CloseIdle: func() { utilnet.CloseIdleConnectionsFor(httpClient.Transport) },
	}, nil
}

// Wire sets the clients in cfg.
func (c *KubeletClients) Wire(cfg *Config) {
	cfg.Client, cfg.EventClient, cfg.HeartbeatClient, cfg.OnRepeatedHeartbeatFailure = c.Main, c.Events, c.Heartbeat, c.CloseIdle
}

// heartbeatTimeout is the kubelet's heartbeat client timeout: the smaller of
// nodeStatusUpdateFrequency and the lease duration.
func heartbeatTimeout(kc *kubeletconfig.KubeletConfiguration) time.Duration {
	t := kc.NodeStatusUpdateFrequency.Duration
	if lease := time.Duration(kc.NodeLeaseDurationSeconds) * time.Second; t <= 0 || (lease > 0 && lease < t) {
		t = lease
	}
	return t
}

// heartbeatClient answers CoreV1 and CoordinationV1, the groups the lease
// controller and the node status manager call, with the heartbeat client's
// settings; any other group falls through to the main client, which they
// never call.
type heartbeatClient struct {
	kubernetes.Interface
	core         corev1client.CoreV1Interface
	coordination coordinationv1client.CoordinationV1Interface
}

func (c *heartbeatClient) CoreV1() corev1client.CoreV1Interface { return c.core }

func (c *heartbeatClient) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return c.coordination
}
