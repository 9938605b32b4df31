package nodeagent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/fakeruntime"
)

// metricsAgent is an agent serving its kubelet API, kept at hand so that
// a benchmark can call its handler directly.
type metricsAgent struct {
	agent   *Agent
	client  *fake.Clientset
	runtime *fakeruntime.Runtime
	clock   *clocktesting.FakeClock
	base    string
	http    *http.Client
}

func startMetricsAgent(tb testing.TB) *metricsAgent {
	tb.Helper()
	m := &metricsAgent{client: fake.NewClientset(), clock: clocktesting.NewFakeClock(time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC))}
	m.runtime = fakeruntime.New(fakeruntime.Config{Clock: m.clock})
	cfg := Config{
		NodeName: "n1",
		NodeIP:   net.ParseIP("127.1.0.1"),
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi")},
		Client:   m.client, Runtime: m.runtime, Images: m.runtime, Clock: m.clock,
	}
	withKubeletAPI(tb)(&cfg)
	var err error
	if m.agent, err = New(cfg); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.agent.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("agent.Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			tb.Error("agent did not stop within 30s of its context ending")
		}
	})
	m.eventually(tb, "the node is registered", func() bool {
		_, err := m.client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
		return err == nil
	})
	node, _ := m.client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	node.Spec.PodCIDR = "10.64.3.0/24"
	if _, err := m.client.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		tb.Fatal(err)
	}
	port := int(node.Status.DaemonEndpoints.KubeletEndpoint.Port)
	m.base = "https://" + net.JoinHostPort("127.1.0.1", strconv.Itoa(port))
	tlsCfg, err := rest.TLSConfigFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		tb.Fatal(err)
	}
	m.http = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	return m
}

// eventually steps the fake clock a second at a time until cond holds.
func (m *metricsAgent) eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		if cond() {
			return true, nil
		}
		m.clock.Step(time.Second)
		return false, nil
	})
	if err != nil {
		tb.Fatalf("timed out waiting until %s", what)
	}
}

// probedPod is a pod whose one container has an exec readiness probe,
// which the fake runtime answers with success.
func probedPod(name string, created time.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(created)},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{
			Name: "app", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent,
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
				PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
			},
		}}},
	}
}

func (m *metricsAgent) ready(name string) bool {
	p, err := m.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	return err == nil && podCondition(p, corev1.PodReady) == corev1.ConditionTrue
}

// scrape GETs path over the agent's HTTPS port and parses the text
// exposition: each family's series by their labels, "k=v,..." in name
// order.
func (m *metricsAgent) scrape(tb testing.TB, path string) map[string]map[string]*dto.Metric {
	tb.Helper()
	req, _ := http.NewRequest(http.MethodGet, m.base+path, nil)
	req.Header.Set("Authorization", "Bearer t")
	resp, err := m.http.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		tb.Fatalf("GET %s: %s %s", path, resp.Status, body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		tb.Fatalf("GET %s does not parse: %v", path, err)
	}
	out := map[string]map[string]*dto.Metric{}
	for name, mf := range fams {
		out[name] = map[string]*dto.Metric{}
		for _, s := range mf.GetMetric() {
			var kv []string
			for _, l := range s.GetLabel() {
				kv = append(kv, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(kv)
			out[name][strings.Join(kv, ",")] = s
		}
	}
	return out
}

// TestKubeletMetricsOverHTTPS starts a pod with a readiness probe on an
// emulated node and scrapes the node's three metrics endpoints as
// Prometheus does.
func TestKubeletMetricsOverHTTPS(t *testing.T) {
	m := startMetricsAgent(t)
	pod := probedPod("web", m.clock.Now())
	if _, err := m.client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.eventually(t, "the pod is ready", func() bool { return m.ready("web") })
	// The SLI is recorded when the watch delivers the Running status.
	m.eventually(t, "the pod's start is recorded", func() bool {
		return m.scrape(t, "/metrics")["kubelet_pod_start_sli_duration_seconds"] != nil
	})

	// The running containers are counted at the PLEG's next full relist,
	// and the interval between relists once there have been two.
	m.eventually(t, "a relist counts the container", func() bool {
		return m.scrape(t, "/metrics")["kubelet_running_containers"]["container_state=running"].GetGauge().GetValue() == 1
	})
	m.eventually(t, "a second relist records an interval", func() bool {
		return m.scrape(t, "/metrics")["kubelet_pleg_relist_interval_seconds"][""].GetHistogram().GetSampleCount() > 0
	})

	kubelet := m.scrape(t, "/metrics")
	for _, c := range []struct {
		name, labels string
		want         float64
	}{
		{"kubelet_node_name", "node=n1", 1},
		{"kubelet_running_pods", "", 1},
		{"kubelet_running_containers", "container_state=running", 1},
		{"kubelet_started_pods_total", "", 1},
		{"kubelet_started_pods_errors_total", "", 0},
		{"kubelet_started_containers_total", "container_type=container", 1},
	} {
		s := kubelet[c.name][c.labels]
		if s == nil {
			t.Errorf("%s{%s} missing: %v", c.name, c.labels, kubelet[c.name])
			continue
		}
		if got := s.GetGauge().GetValue() + s.GetCounter().GetValue(); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// As the 1.37 kubelet: once at the first sync, once at Running.
	if n := kubelet["kubelet_pod_start_duration_seconds"][""].GetHistogram().GetSampleCount(); n != 2 {
		t.Errorf("kubelet_pod_start_duration_seconds count %d, want 2", n)
	}
	if n := kubelet["kubelet_pod_start_sli_duration_seconds"][""].GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("kubelet_pod_start_sli_duration_seconds count %d, want 1", n)
	}
	if n := kubelet["kubelet_pod_worker_duration_seconds"]["operation_type=create"].GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("pod worker create durations %d, want 1", n)
	}
	if n := kubelet["kubelet_pod_worker_duration_seconds"]["operation_type=sync"].GetHistogram().GetSampleCount(); n == 0 {
		t.Error("no pod worker sync durations: the PLEG's syncs of the started container")
	}
	if n := kubelet["kubelet_pleg_relist_duration_seconds"][""].GetHistogram().GetSampleCount(); n == 0 {
		t.Error("no PLEG relist recorded")
	}
	if n := kubelet["kubelet_pleg_relist_interval_seconds"][""].GetHistogram().GetSampleCount(); n == 0 {
		t.Error("no PLEG relist interval recorded")
	}
	if v := kubelet["kubelet_pleg_last_seen_seconds"][""].GetGauge().GetValue(); v < float64(pod.CreationTimestamp.Unix()) {
		t.Errorf("kubelet_pleg_last_seen_seconds = %v, want a relist after the pod was created", v)
	}
	if n := m.agent.metrics.Starting(); n != 0 {
		t.Errorf("%d pods still tracked for their start once it was recorded, want none", n)
	}

	probes := m.scrape(t, "/metrics/probes")
	successes := probes["prober_probe_total"]["container=app,namespace=default,pod=web,pod_uid=uid-web,probe_type=Readiness,result=successful"]
	if successes.GetCounter().GetValue() < 1 {
		t.Errorf("successful readiness probes = %v, want at least the one that made the pod ready: %v", successes.GetCounter().GetValue(), probes["prober_probe_total"])
	}
	durations := probes["prober_probe_duration_seconds"]["container=app,namespace=default,pod=web,probe_type=Readiness"].GetHistogram()
	if float64(durations.GetSampleCount()) != successes.GetCounter().GetValue() {
		t.Errorf("%d probe durations for %v successful probes, want one each", durations.GetSampleCount(), successes.GetCounter().GetValue())
	}
	if _, ok := probes["process_start_time_seconds"]; !ok {
		t.Error("process_start_time_seconds missing from /metrics/probes")
	}

	web, err := m.client.CoreV1().Pods("default").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, id, _ := strings.Cut(web.Status.ContainerStatuses[0].ContainerID, "://")
	cadvisor := m.scrape(t, "/metrics/cadvisor")
	app := "container=app,id=/kubepods/besteffort/poduid-web/" + id + ",image=busybox,name=" + id + ",namespace=default,pod=web"
	if cadvisor["container_memory_working_set_bytes"][app] == nil {
		t.Errorf("no working set for web/app %q: %v", app, cadvisor["container_memory_working_set_bytes"])
	}
	if cadvisor["container_start_time_seconds"][app] == nil {
		t.Errorf("no start time for web/app")
	}
	machine := fmt.Sprintf("boot_id=%s,machine_id=%s,system_uuid=%s", m.nodeInfo(t).BootID, m.nodeInfo(t).MachineID, m.nodeInfo(t).SystemUUID)
	if v := cadvisor["machine_cpu_cores"][machine].GetGauge().GetValue(); v != 8 {
		t.Errorf("machine_cpu_cores{%s} = %v, want 8", machine, v)
	}
	if v := cadvisor["machine_memory_bytes"][machine].GetGauge().GetValue(); v != 32<<30 {
		t.Errorf("machine_memory_bytes = %v, want 32 Gi", v)
	}

	// The running gauges follow the runtime: the pod deleted, nothing runs.
	if err := m.client.CoreV1().Pods("default").Delete(context.Background(), "web", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	m.eventually(t, "no pod runs", func() bool {
		return m.scrape(t, "/metrics")["kubelet_running_pods"][""].GetGauge().GetValue() == 0
	})
}

func (m *metricsAgent) nodeInfo(t *testing.T) corev1.NodeSystemInfo {
	node, err := m.client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return node.Status.NodeInfo
}

// BenchmarkScrape is one scrape of each endpoint of a node running 30
// probed pods: through the agent's handler (authentication included, as
// the fleet's shared authenticator answers from its cache), and over
// HTTPS on a kept-alive connection, as Prometheus scrapes. cpu-ns/op is
// the process's CPU time per scrape, GC included; wall time per op is
// inflated when other work shares the machine.
func BenchmarkScrape(b *testing.B) {
	m := startMetricsAgent(b)
	for i := range 30 {
		pod := probedPod(fmt.Sprintf("p%02d", i), m.clock.Now())
		if _, err := m.client.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	m.eventually(b, "the 30 pods are ready", func() bool {
		for i := range 30 {
			if !m.ready(fmt.Sprintf("p%02d", i)) {
				return false
			}
		}
		return true
	})
	// The pods' events are sent by the broadcaster after the fact, and the
	// fake API server's handling of each is costly: let them all arrive,
	// so that the scrapes are all the process does.
	last := -1
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, false, func(ctx context.Context) (bool, error) {
		events, err := m.client.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		n := len(events.Items)
		settled := n == last
		last = n
		return settled, nil
	}); err != nil {
		b.Fatalf("events did not settle: %v", err)
	}
	handler := m.agent.kubeletServer.Handler()
	// /healthz is the floor (authentication and routing only), and
	// /metrics/resource the endpoint served through client_golang's
	// registry, for comparison.
	for _, path := range []string{"/metrics", "/metrics/probes", "/metrics/cadvisor", "/healthz", "/metrics/resource"} {
		b.Run("handler"+path, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.Header.Set("Authorization", "Bearer t")
			w := &discardResponse{header: http.Header{}}
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				w.code, w.n = 0, 0
				handler.ServeHTTP(w, req)
				if w.code != http.StatusOK {
					b.Fatalf("GET %s: %d", path, w.code)
				}
			}
			cpu.report(b)
			b.ReportMetric(float64(w.n), "bytes/scrape")
		})
		b.Run("https"+path, func(b *testing.B) {
			b.ReportAllocs()
			cpu := startCPU()
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodGet, m.base+path, nil)
				req.Header.Set("Authorization", "Bearer t")
				resp, err := m.http.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			// Client and server, both in this process.
			cpu.report(b)
		})
	}
}

// cpuClock measures the process's CPU time over a benchmark loop: wall
// time per op is inflated when other work shares the machine's cores.
type cpuClock struct {
	start time.Duration
	ok    bool
}

func startCPU() cpuClock {
	t, ok := processCPU()
	return cpuClock{t, ok}
}

// report adds cpu-ns/op, the process's CPU time (GC included) per op.
func (c cpuClock) report(b *testing.B) {
	if end, ok := processCPU(); ok && c.ok {
		b.ReportMetric(float64(end-c.start)/float64(b.N), "cpu-ns/op")
	}
}

// discardResponse is a ResponseWriter that counts what it is sent, as a
// server's connection would take it, without the buffer growth of a
// recorder.
type discardResponse struct {
	header http.Header
	code   int
	n      int
}

func (d *discardResponse) Header() http.Header { return d.header }

func (d *discardResponse) Write(p []byte) (int, error) {
	if d.code == 0 {
		d.code = http.StatusOK
	}
	d.n += len(p)
	return len(p), nil
}

func (d *discardResponse) WriteHeader(code int) { d.code = code }
