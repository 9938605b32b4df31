package kuberuntime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// resources builds requests and limits from "cpu/memory" strings.
func resources(req, lim string) corev1.ResourceRequirements {
	list := func(s string) corev1.ResourceList {
		if s == "" {
			return nil
		}
		cpu, mem, _ := strings.Cut(s, "/")
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	}
	return corev1.ResourceRequirements{Requests: list(req), Limits: list(lim)}
}

func TestLinuxResources(t *testing.T) {
	const gi = int64(1) << 30
	cases := []struct {
		name       string
		res        corev1.ResourceRequirements
		capacity   int64
		minOOM     int64
		wantQOS    corev1.PodQOSClass
		wantParent string
		want       *runtimeapi.LinuxContainerResources
	}{
		{name: "best effort", wantQOS: corev1.PodQOSBestEffort, capacity: 8 * gi, minOOM: -997,
			wantParent: "/fleetlet/kubepods/besteffort/podu",
			want:       &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, OomScoreAdj: 1000}},
		{name: "guaranteed", res: resources("500m/1Gi", "500m/1Gi"), wantQOS: corev1.PodQOSGuaranteed, capacity: 8 * gi, minOOM: -997,
			wantParent: "/fleetlet/kubepods/podu",
			want:       &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: gi, OomScoreAdj: -997}},
		{name: "guaranteed on a host that forbids negative scores", res: resources("", "2/1Gi"), wantQOS: corev1.PodQOSGuaranteed, capacity: 8 * gi,
			wantParent: "/fleetlet/kubepods/podu",
			want:       &runtimeapi.LinuxContainerResources{CpuShares: 2048, CpuPeriod: 100000, CpuQuota: 200000, MemoryLimitInBytes: gi, OomScoreAdj: 0}},
		{name: "burstable by its share of memory", res: resources("100m/2Gi", "1/4Gi"), wantQOS: corev1.PodQOSBurstable, capacity: 8 * gi, minOOM: -997,
			wantParent: "/fleetlet/kubepods/burstable/podu",
			want:       &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, CpuQuota: 100000, MemoryLimitInBytes: 4 * gi, OomScoreAdj: 750}},
		{name: "burstable with capacity unknown", res: resources("100m/2Gi", ""), wantQOS: corev1.PodQOSBurstable, minOOM: -997,
			wantParent: "/fleetlet/kubepods/burstable/podu",
			want:       &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, OomScoreAdj: 999}},
		{name: "tiny cpu limit gets the minimum quota", res: resources("", "5m/8Gi"), wantQOS: corev1.PodQOSGuaranteed, capacity: 8 * gi, minOOM: -997,
			wantParent: "/fleetlet/kubepods/podu",
			want:       &runtimeapi.LinuxContainerResources{CpuShares: 5, CpuPeriod: 100000, CpuQuota: 1000, MemoryLimitInBytes: 8 * gi, OomScoreAdj: -997}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPod("u", false, corev1.PullIfNotPresent, "app")
			pod.Spec.Containers[0].Resources = tc.res
			if got := PodQOS(pod); got != tc.wantQOS {
				t.Errorf("QoS %s, want %s", got, tc.wantQOS)
			}
			if got := podCgroupParent("/fleetlet", pod); got != tc.wantParent {
				t.Errorf("cgroup parent %s, want %s", got, tc.wantParent)
			}
			got := linuxResources(pod, &pod.Spec.Containers[0], tc.capacity, tc.minOOM)
			if got.String() != tc.want.String() {
				t.Errorf("resources\n %v\nwant\n %v", got, tc.want)
			}
		})
	}
}

func TestSidecarOOMScoreAdj(t *testing.T) {
	const gi = int64(1) << 30
	pod := newPod("u", false, corev1.PullIfNotPresent, "big", "small")
	pod.Spec.Containers[0].Resources = resources("1/4Gi", "")
	pod.Spec.Containers[1].Resources = resources("1/1Gi", "")
	pod.Spec.InitContainers = []corev1.Container{{Name: "side", Resources: resources("1/512Mi", ""), RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
	// The sidecar ranks as the smallest regular container (1Gi of 8Gi).
	if got := oomScoreAdj(pod, &pod.Spec.InitContainers[0], 8*gi); got != 875 {
		t.Errorf("sidecar oom_score_adj %d, want 875", got)
	}
}

func TestDNSConfig(t *testing.T) {
	pod := newPod("u", false, corev1.PullIfNotPresent, "app")
	if dnsConfig(pod) != nil {
		t.Error("ClusterFirst on a node without cluster DNS: want the runtime's copy of the host's resolv.conf")
	}
	pod.Spec.DNSPolicy = corev1.DNSNone
	pod.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"10.0.0.10"}, Searches: []string{"svc.local"},
		Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}, {Name: "edns0"}}}
	want := &runtimeapi.DNSConfig{Servers: []string{"10.0.0.10"}, Searches: []string{"svc.local"}, Options: []string{"ndots:2", "edns0"}}
	if got := dnsConfig(pod); got.String() != want.String() {
		t.Errorf("dns %v, want %v", got, want)
	}
}

// sandboxRecorder keeps the config of every sandbox run.
type sandboxRecorder struct {
	internalapi.RuntimeService
	mu      sync.Mutex
	configs []*runtimeapi.PodSandboxConfig
}

func (r *sandboxRecorder) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	r.mu.Lock()
	r.configs = append(r.configs, config)
	r.mu.Unlock()
	return r.RuntimeService.RunPodSandbox(ctx, config, handler)
}

// TestHost runs a pod's life on a "real" host made of temporary
// directories: the log directory and the pod's cgroups come and go with it.
func TestHost(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	host := &Host{PodLogsDir: filepath.Join(tmp, "pods"), CgroupRoot: "/fleetlet", CgroupFS: filepath.Join(tmp, "cgroup"), MinOOMScoreAdj: 0}
	m, rt, _ := newManager(t, "busybox")
	rec := &sandboxRecorder{RuntimeService: rt}
	m.cfg.Runtime, m.cfg.Host = rec, host
	pod := newPod("h", false, corev1.PullIfNotPresent, "app")

	st, _ := m.GetPodStatus(ctx, pod.UID)
	if err := m.SyncPod(ctx, pod, st, healthy{}); err != nil {
		t.Fatal(err)
	}
	logDir := filepath.Join(host.PodLogsDir, "ns_p-h_h")
	if fi, err := os.Stat(logDir); err != nil || !fi.IsDir() {
		t.Fatalf("pod log directory: %v", err)
	}
	sb := rec.configs[0]
	if sb.LogDirectory != logDir || sb.GetLinux().GetCgroupParent() != "/fleetlet/kubepods/besteffort/podh" {
		t.Errorf("sandbox log directory %s, cgroup parent %s", sb.LogDirectory, sb.GetLinux().GetCgroupParent())
	}

	// What runc would have left: the pod's cgroup in two v1 hierarchies.
	for _, h := range []string{"memory", "cpu,cpuacct"} {
		if err := os.MkdirAll(filepath.Join(host.CgroupFS, h, "fleetlet/kubepods/besteffort/podh"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	st, _ = m.GetPodStatus(ctx, pod.UID)
	if err := m.KillPod(ctx, pod, st, 0); err != nil {
		t.Fatal(err)
	}
	st, _ = m.GetPodStatus(ctx, pod.UID)
	if err := m.RemovePod(ctx, st); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{logDir, filepath.Join(host.CgroupFS, "memory/fleetlet/kubepods/besteffort/podh"), filepath.Join(host.CgroupFS, "cpu,cpuacct/fleetlet/kubepods/besteffort/podh")} {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", gone, err)
		}
	}
}

// TestEmulatedNodeStaysOffTheHost: without a Host, nothing is written and
// no cgroup is asked for.
func TestEmulatedNodeStaysOffTheHost(t *testing.T) {
	ctx := context.Background()
	m, rt, _ := newManager(t, "busybox")
	rec := &sandboxRecorder{RuntimeService: rt}
	m.cfg.Runtime = rec
	pod := newPod("emulated-"+t.Name(), false, corev1.PullIfNotPresent, "app")
	st, _ := m.GetPodStatus(ctx, pod.UID)
	if err := m.SyncPod(ctx, pod, st, healthy{}); err != nil {
		t.Fatal(err)
	}
	sb := rec.configs[0]
	if _, err := os.Stat(sb.LogDirectory); !os.IsNotExist(err) {
		t.Errorf("log directory %s: %v, want none", sb.LogDirectory, err)
	}
	if p := sb.GetLinux().GetCgroupParent(); p != "" {
		t.Errorf("cgroup parent %q on an emulated node", p)
	}
}

// TestPodQOSFromPodLevelResources: pod-level resources decide the class,
// as ComputePodQOS with PodLevelResources on.
func TestPodQOSFromPodLevelResources(t *testing.T) {
	q := resource.MustParse("1")
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Resources:  &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q, corev1.ResourceMemory: q}, Limits: corev1.ResourceList{corev1.ResourceCPU: q, corev1.ResourceMemory: q}},
		Containers: []corev1.Container{{Name: "a"}},
	}}
	if got := PodQOS(pod); got != corev1.PodQOSGuaranteed {
		t.Errorf("QoS %s, want Guaranteed from the pod-level resources", got)
	}
	delete(pod.Spec.Resources.Limits, corev1.ResourceMemory)
	if got := PodQOS(pod); got != corev1.PodQOSBurstable {
		t.Errorf("QoS %s, want Burstable", got)
	}
}
