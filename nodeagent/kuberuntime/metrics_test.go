package kuberuntime

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/nodeagent/metrics/metricstest"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/nodeagent/metrics"
	"github.com/fleetlet/fleetlet/reports"
)

// counters scrapes m's counters: value by "name{k=v,...}".
func counters(t *testing.T, m *metrics.Kubelet) map[string]float64 {
	t.Helper()
	fs := m.Gather(metrics.Runtime{})
	defer metrics.Release(fs)
	fams := metricstest.Parse(t, fs)
	out := map[string]float64{}
	for name, mf := range fams {
		for _, s := range mf.GetMetric() {
			var kv []string
			for _, l := range s.GetLabel() {
				kv = append(kv, l.GetName()+"="+l.GetValue())
			}
			if s.Counter != nil {
				out[name+"{"+strings.Join(kv, ",")+"}"] = s.GetCounter().GetValue()
			}
		}
	}
	return out
}

// TestStartedPodsAndContainersCounts: a sandbox creation is a started pod;
// each start of a container past its crash back-off a started container,
// and a failed one an error with the kubelet's code.
func TestStartedPodsAndContainersCounts(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	rt := fakeruntime.New(fakeruntime.Config{Clock: clk})
	if err := rt.UpdateRuntimeConfig(ctx, &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.64.0.0/16"}}); err != nil {
		t.Fatal(err)
	}
	km := metrics.NewKubelet("n1", clk.Now())
	m := NewManager(Config{
		Runtime: rt, Images: &failingImages{ImageManagerService: rt}, Events: record.NewFakeRecorder(1000),
		Recorder: reports.Discard{}, Clock: clk, Metrics: km,
	})
	pod := newPod("pull", false, corev1.PullIfNotPresent, "app")
	for range 2 { // a failed pull, then its back-off
		st, _ := m.GetPodStatus(ctx, pod.UID)
		if err := m.SyncPod(ctx, pod, st, healthy{}); err == nil {
			t.Fatal("sync succeeded with a failing pull")
		}
		clk.Step(time.Second)
	}
	got := counters(t, km)
	for key, want := range map[string]float64{
		"kubelet_started_pods_total{}":                                                            1,
		"kubelet_started_pods_errors_total{}":                                                     0,
		"kubelet_started_containers_total{container_type=container}":                              2,
		"kubelet_started_containers_errors_total{code=ErrImagePull,container_type=container}":     1,
		"kubelet_started_containers_errors_total{code=ImagePullBackOff,container_type=container}": 1,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v (all: %v)", key, got[key], want, got)
		}
	}
}
