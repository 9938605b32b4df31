package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func TestNewRejectsIncompleteConfig(t *testing.T) {
	_, err := New(Config{NodeName: testNode})
	if err == nil {
		t.Fatal("New accepted a config without Pods, Authenticator and Authorizer")
	}
	for _, want := range []string{"Pods", "Authenticator", "Authorizer", testNode} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestHealthzOverHTTP2(t *testing.T) {
	base, pool, _ := serveTLS(t, newTestServer(t, testConfig(&recorder{})))
	c := tlsClient(pool, nil)
	resp, err := c.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("protocol = %s, want HTTP/2 negotiated by ALPN", resp.Proto)
	}
	code, body, _ := send(t, c, http.MethodGet, base+"/healthz", testToken)
	if code != http.StatusOK || body != "ok" {
		t.Errorf("GET /healthz = %d %q, want 200 \"ok\"", code, body)
	}
}

func TestPodsIsAV1PodList(t *testing.T) {
	base, pool, _ := serveTLS(t, newTestServer(t, testConfig(&recorder{})))
	code, body, hdr := send(t, tlsClient(pool, nil), http.MethodGet, base+"/pods", testToken)
	if code != http.StatusOK {
		t.Fatalf("GET /pods = %d %s", code, body)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var meta struct{ Kind, APIVersion string }
	if err := json.Unmarshal([]byte(body), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Kind != "PodList" || meta.APIVersion != "v1" {
		t.Errorf("kind/apiVersion = %s/%s, want PodList/v1", meta.Kind, meta.APIVersion)
	}
	list := &corev1.PodList{}
	if err := runtime.DecodeInto(scheme.Codecs.UniversalDecoder(corev1.SchemeGroupVersion), []byte(body), list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "web" || list.Items[0].Spec.Containers[0].Name != "app" {
		t.Errorf("pods = %+v, want the one pod web", list.Items)
	}
}

func getSummary(t *testing.T, base string, c *http.Client, method, query string) *statsapi.Summary {
	t.Helper()
	code, body, _ := send(t, c, method, base+"/stats/summary"+query, testToken)
	if code != http.StatusOK {
		t.Fatalf("%s /stats/summary%s = %d %s", method, query, code, body)
	}
	s := &statsapi.Summary{}
	if err := json.Unmarshal([]byte(body), s); err != nil {
		t.Fatalf("decoding /stats/summary: %v", err)
	}
	return s
}

func TestStatsSummary(t *testing.T) {
	base, pool, _ := serveTLS(t, newTestServer(t, testConfig(&recorder{})))
	c := tlsClient(pool, nil)
	want := testSummary()
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		for _, query := range []string{"", "?only_cpu_and_memory=false", "?only_cpu_and_memory=true&only_cpu_and_memory=true"} {
			if got := getSummary(t, base, c, method, query); !apiequality.Semantic.DeepEqual(got, want) {
				t.Errorf("%s /stats/summary%s is not the provider's summary:\n got %+v\nwant %+v", method, query, got, want)
			}
		}
	}

	trimmed := getSummary(t, base, c, http.MethodGet, "?only_cpu_and_memory=true")
	if n := trimmed.Node; n.Network != nil || n.Fs != nil || n.Runtime != nil || n.Rlimit != nil {
		t.Errorf("trimmed node kept network/fs/runtime/rlimit: %+v", n)
	}
	if n := trimmed.Node; n.NodeName != testNode || n.CPU == nil || n.Memory == nil || len(n.SystemContainers) != 1 || n.SystemContainers[0].Rootfs != nil || n.SystemContainers[0].CPU == nil {
		t.Errorf("trimmed node lost CPU, memory or system containers, or kept their fs: %+v", n)
	}
	p := trimmed.Pods[0]
	if p.Network != nil || p.VolumeStats != nil || p.EphemeralStorage != nil {
		t.Errorf("trimmed pod kept network/volumes/ephemeral storage: %+v", p)
	}
	if p.PodRef.Name != "web" || p.CPU == nil || p.Memory == nil {
		t.Errorf("trimmed pod lost its ref, CPU or memory: %+v", p)
	}
	ctr := p.Containers[0]
	if ctr.Rootfs != nil || ctr.Logs != nil || ctr.Name != "app" || ctr.CPU == nil || ctr.Memory == nil || ctr.Swap == nil {
		t.Errorf("trimmed container = %+v, want name, CPU, memory and swap only", ctr)
	}
	full := testSummary()
	cpuAndMemoryOnly(full)
	if !apiequality.Semantic.DeepEqual(full, testSummary()) {
		t.Error("cpuAndMemoryOnly modified its input")
	}
}

func TestStatsSummaryProviderError(t *testing.T) {
	cfg := testConfig(&recorder{})
	cfg.Summary = func(context.Context) (*statsapi.Summary, error) { return nil, errors.New("CRI stats unavailable") }
	base, pool, _ := serveTLS(t, newTestServer(t, cfg))
	code, body, _ := send(t, tlsClient(pool, nil), http.MethodGet, base+"/stats/summary", testToken)
	if code != http.StatusInternalServerError || body != "Internal Error: CRI stats unavailable" {
		t.Errorf("GET /stats/summary = %d %q, want 500 with the provider's error", code, body)
	}
}

func scrape(t *testing.T, cfg Config) map[string]*familyView {
	t.Helper()
	base, pool, _ := serveTLS(t, newTestServer(t, cfg))
	code, body, _ := send(t, tlsClient(pool, nil), http.MethodGet, base+"/metrics/resource", testToken)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics/resource = %d %s", code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics/resource: %v\n%s", err, body)
	}
	out := map[string]*familyView{}
	for name, f := range families {
		v := &familyView{help: f.GetHelp(), typ: f.GetType().String()}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			var value float64
			switch {
			case m.Counter != nil:
				value = m.GetCounter().GetValue()
			case m.Gauge != nil:
				value = m.GetGauge().GetValue()
			}
			v.samples = append(v.samples, sampleView{labels: labels, value: value, timestampMs: m.GetTimestampMs()})
		}
		out[name] = v
	}
	return out
}

type familyView struct {
	help, typ string
	samples   []sampleView
}

type sampleView struct {
	labels      map[string]string
	value       float64
	timestampMs int64
}

func TestResourceMetrics(t *testing.T) {
	families := scrape(t, testConfig(&recorder{}))
	statsMs := testNow.Add(-10 * time.Second).UnixMilli()
	ctrLabels := map[string]string{"container": "app", "pod": "web", "namespace": "default"}
	podLabels := map[string]string{"pod": "web", "namespace": "default"}
	for _, tc := range []struct {
		name, typ   string
		labels      map[string]string
		value       float64
		timestampMs int64
	}{
		{"node_cpu_usage_seconds_total", "COUNTER", map[string]string{}, 12.5, statsMs},
		{"node_memory_working_set_bytes", "GAUGE", map[string]string{}, 1 << 30, statsMs},
		{"container_cpu_usage_seconds_total", "COUNTER", ctrLabels, 2.5, statsMs},
		{"container_memory_working_set_bytes", "GAUGE", ctrLabels, 60 << 20, statsMs},
		{"container_swap_usage_bytes", "GAUGE", ctrLabels, 10, statsMs},
		{"container_swap_limit_bytes", "GAUGE", ctrLabels, 100, statsMs},
		{"container_start_time_seconds", "GAUGE", ctrLabels, float64(testNow.Add(-time.Hour).Unix()), 0},
		{"pod_cpu_usage_seconds_total", "COUNTER", podLabels, 3, statsMs},
		{"pod_memory_working_set_bytes", "GAUGE", podLabels, 64 << 20, statsMs},
		{"resource_scrape_error", "GAUGE", map[string]string{}, 0, 0},
	} {
		f, ok := families[tc.name]
		if !ok {
			t.Errorf("%s missing", tc.name)
			continue
		}
		if f.typ != tc.typ || len(f.samples) != 1 {
			t.Errorf("%s: type %s with %d samples, want %s with 1", tc.name, f.typ, len(f.samples), tc.typ)
			continue
		}
		got := f.samples[0]
		if !reflect.DeepEqual(got.labels, tc.labels) || got.value != tc.value || got.timestampMs != tc.timestampMs {
			t.Errorf("%s = %v %v @%d, want %v %v @%d", tc.name, got.labels, got.value, got.timestampMs, tc.labels, tc.value, tc.timestampMs)
		}
	}
	if h := families["node_cpu_usage_seconds_total"].help; h != "[STABLE] Cumulative cpu time consumed by the node in core-seconds" {
		t.Errorf("node_cpu_usage_seconds_total help = %q, want the kubelet's", h)
	}
	for _, absent := range []string{"node_swap_usage_bytes", "pod_swap_usage_bytes", "scrape_error"} {
		if _, ok := families[absent]; ok {
			t.Errorf("%s served though the summary has no such stat (or it is hidden on a 1.37 kubelet)", absent)
		}
	}
}

func TestResourceMetricsScrapeError(t *testing.T) {
	cfg := testConfig(&recorder{})
	cfg.Summary = func(context.Context) (*statsapi.Summary, error) { return nil, errors.New("CRI stats unavailable") }
	families := scrape(t, cfg)
	if len(families) != 1 {
		t.Errorf("families = %d, want only resource_scrape_error", len(families))
	}
	f := families["resource_scrape_error"]
	if f == nil || len(f.samples) != 1 || f.samples[0].value != 1 {
		t.Errorf("resource_scrape_error = %+v, want 1", f)
	}
}

func TestMissingProvidersAnswer501(t *testing.T) {
	cfg := testConfig(&recorder{})
	cfg.Summary, cfg.Logs, cfg.Exec = nil, nil, nil
	base, pool, _ := serveTLS(t, newTestServer(t, cfg))
	c := tlsClient(pool, nil)
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/stats/summary"},
		{http.MethodGet, "/metrics/resource"},
		{http.MethodGet, "/metrics"},
		{http.MethodGet, "/metrics/probes"},
		{http.MethodGet, "/metrics/cadvisor"},
		{http.MethodGet, "/containerLogs/default/web/app"},
		{http.MethodPost, "/run/default/web/app?cmd=ls"},
		{http.MethodPost, "/exec/default/web/app?command=ls&output=1"},
	} {
		code, body, _ := send(t, c, r.method, base+r.path, testToken)
		if code != http.StatusNotImplemented || !strings.Contains(body, testNode) {
			t.Errorf("%s %s = %d %q, want 501 naming the node", r.method, r.path, code, body)
		}
	}
}
