package nodeagent

import (
	"context"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"weak"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/internal/testutil"
	"github.com/fleetlet/fleetlet/nodeagent/prober"
)

// freePort is a port free on ip now.
func freePort(t *testing.T, ip string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestAgentRunsAgainAfterAStop is a node's power cycle as the fleet does it:
// the agent's context ends (power off), then a new agent built from the same
// Config, on the node's runtime emptied by the reboot, runs (power on). The
// stopped agent has released everything: its kubelet port binds again, its
// goroutines (its watches among them: of its pods, its Node, the kubelet's
// Services and others, the ConfigMap its pod reads) are gone, and nothing
// the node shares with the fleet (its probe queue here) keeps it alive. The new one adopts the Node that is
// still in the API server and runs the pods bound to it again.
func TestAgentRunsAgainAfterAStop(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	queue := prober.NewQueue(prober.QueueConfig{Clock: h.clock})
	queueCtx, stopQueue := context.WithCancel(ctx)
	if err := queue.Start(queueCtx); err != nil {
		t.Fatal(err)
	}
	// Registered after the harness's: the agent stops before the queue.
	t.Cleanup(func() { stopQueue(); queue.Wait() })
	port := freePort(t, "127.1.0.1")
	serving := withKubeletAPI(t)
	cfg := h.config(serving, func(c *Config) {
		c.Serving.Port = port
		c.ProbeQueue = queue
	})
	before := testutil.SettledGoroutines()

	h.run(t, cfg)
	h.allocatePodCIDR(t)
	// A ConfigMap the pod reads: the node watches it.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "default"}, Data: map[string]string{"mode": "fast"}}
	if _, err := h.client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := runningPod("web")
	web.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}
	web.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
		PeriodSeconds: 3600,
	}
	h.createPod(t, web)
	h.eventually(t, "the pod runs and is ready", func() bool {
		p := h.pod(t, "web")
		return p != nil && p.Status.Phase == corev1.PodRunning && podCondition(p, corev1.PodReady) == corev1.ConditionTrue
	})
	oldID := h.pod(t, "web").Status.ContainerStatuses[0].ContainerID

	// Power off.
	h.stop(t)
	stopped := weak.Make(h.agent)
	h.agent = nil
	ln, err := net.Listen("tcp", net.JoinHostPort("127.1.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("the stopped agent's kubelet port: %v", err)
	}
	_ = ln.Close()
	if after := testutil.SettledGoroutines(); after > before {
		t.Errorf("%d goroutines after the agent stopped, %d before it ran", after, before)
	}
	testutil.WaitFor(t, "the stopped agent is collected", func() bool {
		runtime.GC()
		return stopped.Value() == nil
	})
	if cfg.Kubelet != nil || cfg.HeartbeatClient != nil || cfg.EventClient != nil {
		t.Error("New changed the caller's Config")
	}

	// Something changed the Node while the node was off; it is still there.
	node := h.node(t)
	node.Labels[corev1.LabelHostname] = "elsewhere"
	if _, err := h.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Power on: the same Config, an emptied runtime.
	h.runtime = fakeruntime.New(fakeruntime.Config{Clock: h.clock})
	cfg.Runtime, cfg.Images = h.runtime, h.runtime
	h.run(t, cfg)
	h.eventually(t, "the pod runs again in the new runtime", func() bool {
		p := h.pod(t, "web")
		if p == nil || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].ContainerID == oldID {
			return false
		}
		return p.Status.Phase == corev1.PodRunning && podCondition(p, corev1.PodReady) == corev1.ConditionTrue &&
			h.runningContainersOf(t, web.UID) == 1
	})
	id := h.pod(t, "web").Status.ContainerStatuses[0].ContainerID
	if _, err := h.runtime.ContainerStatus(ctx, id[strings.Index(id, "://")+3:], false); err != nil {
		t.Errorf("the pod's reported container %s is not the new runtime's: %v", id, err)
	}
	h.eventually(t, "the node is Ready, with its labels set back", func() bool {
		n := h.node(t)
		return n.Labels[corev1.LabelHostname] == "n1" && nodeCondition(n, corev1.NodeReady) == corev1.ConditionTrue &&
			n.Status.DaemonEndpoints.KubeletEndpoint.Port == int32(port)
	})
}
