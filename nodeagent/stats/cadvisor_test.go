package stats

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"

	"github.com/fleetlet/fleetlet/nodeagent/metrics/metricstest"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/fleetlet/fleetlet/nodeagent/metrics"
)

// series parses families as a scraper would: each family's series by
// their labels, rendered "k=v,..." in name order.
func series(t *testing.T, families metrics.Families) map[string]map[string]*dto.Metric {
	t.Helper()
	fams := metricstest.Parse(t, families)
	out := map[string]map[string]*dto.Metric{}
	for name, mf := range fams {
		out[name] = map[string]*dto.Metric{}
		for _, m := range mf.GetMetric() {
			var kv []string
			for _, l := range m.GetLabel() {
				kv = append(kv, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(kv)
			out[name][strings.Join(kv, ",")] = m
		}
	}
	return out
}

// cgroup is the key of a cgroup's series; a pod's are in "default".
func cgroup(container, id, image, name, pod string) string {
	namespace := ""
	if pod != "" {
		namespace = "default"
	}
	return "container=" + container + ",id=" + id + ",image=" + image + ",name=" + name + ",namespace=" + namespace + ",pod=" + pod
}

func qosOf(uid types.UID) corev1.PodQOSClass {
	switch uid {
	case "uid-web":
		return corev1.PodQOSBurstable
	case "uid-db":
		return corev1.PodQOSGuaranteed
	}
	return ""
}

func TestCadvisor(t *testing.T) {
	cri := twoPods()
	cri.containers[0].Image = &runtimeapi.ImageSpec{Image: "sha256:abc", UserSpecifiedImage: "nginx:1.27"}
	cri.containers[0].CreatedAt = 1_700_000_000_500_000_000
	cri.containerStats[0].Cpu.Timestamp = 1_700_000_100_000_000_000
	p := newProvider(t, cri, func(c *Config) { c.Capacity[corev1.ResourceCPU] = resource.MustParse("4") })
	machine := &Machine{MachineID: "m1", SystemUUID: "u1", BootID: "b1"}
	got := series(t, p.Cadvisor(context.Background(), machine, qosOf))

	webApp := cgroup("app", "/kubepods/burstable/poduid-web/w-app", "nginx:1.27", "w-app", "web")
	webSide := cgroup("sidecar", "/kubepods/burstable/poduid-web/w-side", "", "w-side", "web")
	db := cgroup("db", "/kubepods/poduid-db/d-db", "", "d-db", "db")
	webPod := cgroup("", "/kubepods/burstable/poduid-web", "", "", "web")
	dbPod := cgroup("", "/kubepods/poduid-db", "", "", "db")
	root := cgroup("", "/", "", "", "")

	ws := got["container_memory_working_set_bytes"]
	for key, want := range map[string]float64{
		webApp: 200 * mi, webSide: 50 * mi, db: 400 * mi,
		webPod: 250 * mi, // the sum of its containers
		dbPod:  420 * mi, // its sandbox's own figure
		root:   770 * mi, // the pods and what the system uses
	} {
		if v := ws[key].GetGauge().GetValue(); v != want {
			t.Errorf("working set {%s} = %v, want %v", key, v, want)
		}
	}
	if len(ws) != 6 {
		t.Errorf("%d working set series, want 6 (no exited container, no dead sandbox): %v", len(ws), ws)
	}
	cpu := got["container_cpu_usage_seconds_total"]
	if v := cpu[strings.Replace(webApp, "id=", "cpu=total,id=", 1)].GetCounter().GetValue(); v != 1000e-9 {
		t.Errorf("cpu of web/app = %v, want 1e-6 s", v)
	}
	if ts := cpu[strings.Replace(webApp, "id=", "cpu=total,id=", 1)].GetTimestampMs(); ts != 1_700_000_100_000 {
		t.Errorf("cpu sample of web/app stamped %d, want the runtime's measurement time", ts)
	}
	if v := cpu[strings.Replace(root, "id=", "cpu=total,id=", 1)].GetCounter().GetValue(); v != 4500e-9 {
		t.Errorf("cpu of / = %v, want the pods' 4.5e-6 s", v)
	}
	if v := got["container_start_time_seconds"][webApp].GetGauge().GetValue(); v != 1_700_000_000 {
		t.Errorf("start of web/app = %v, want whole seconds", v)
	}
	if _, ok := got["container_memory_rss"][db]; !ok {
		t.Error("container_memory_rss missing for db")
	}
	if v := got["machine_cpu_cores"]["boot_id=b1,machine_id=m1,system_uuid=u1"].GetGauge().GetValue(); v != 4 {
		t.Errorf("machine_cpu_cores = %v, want 4", v)
	}
	if v := got["machine_memory_bytes"]["boot_id=b1,machine_id=m1,system_uuid=u1"].GetGauge().GetValue(); v != 2048*mi {
		t.Errorf("machine_memory_bytes = %v, want 2 Gi", v)
	}
	if v := got["container_scrape_error"][""].GetGauge().GetValue(); v != 0 {
		t.Errorf("container_scrape_error = %v, want 0", v)
	}
}

// brokenCRI cannot list containers.
type brokenCRI struct{ *criStub }

func (brokenCRI) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return nil, errors.New("runtime down")
}

func TestCadvisorScrapeErrors(t *testing.T) {
	cri := twoPods()
	p := newProvider(t, cri, func(c *Config) { c.Runtime = brokenCRI{cri} })
	got := series(t, p.Cadvisor(context.Background(), nil, nil))
	if v := got["container_scrape_error"][""].GetGauge().GetValue(); v != 1 {
		t.Errorf("container_scrape_error = %v with the runtime down, want 1", v)
	}
	if v := got["machine_scrape_error"][""].GetGauge().GetValue(); v != 1 {
		t.Errorf("machine_scrape_error = %v without the Node's machine, want 1", v)
	}
	if _, ok := got["container_memory_working_set_bytes"]; ok {
		t.Error("container series served although the runtime could not be read")
	}
}
