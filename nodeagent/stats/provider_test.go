package stats

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"
)

const mi = 1 << 20

// criStub answers the CRI runtime calls the provider makes from fixed data.
type criStub struct {
	internalapi.RuntimeService
	sandboxes      []*runtimeapi.PodSandbox
	containers     []*runtimeapi.Container
	containerStats []*runtimeapi.ContainerStats
	sandboxStats   []*runtimeapi.PodSandboxStats
	imageBytes     uint64
	// listErr fails ListPodSandboxStats; sandboxErr fails PodSandboxStats
	// for the sandboxes it names, and asked records what that was asked.
	listErr    error
	sandboxErr map[string]error
	asked      []string
}

func (c *criStub) ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return c.sandboxes, nil
}

func (c *criStub) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return c.containers, nil
}

func (c *criStub) ListContainerStats(context.Context, *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	return c.containerStats, nil
}

func (c *criStub) ListPodSandboxStats(context.Context, *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	if c.listErr != nil {
		return nil, c.listErr
	}
	return c.sandboxStats, nil
}

func (c *criStub) PodSandboxStats(_ context.Context, id string) (*runtimeapi.PodSandboxStats, error) {
	c.asked = append(c.asked, id)
	if err := c.sandboxErr[id]; err != nil {
		return nil, err
	}
	for _, st := range c.sandboxStats {
		if st.Attributes.Id == id {
			return st, nil
		}
	}
	return &runtimeapi.PodSandboxStats{Attributes: &runtimeapi.PodSandboxAttributes{Id: id}}, nil
}

// imageStub reports the image filesystem usage of a criStub.
type imageStub struct {
	internalapi.ImageManagerService
	cri *criStub
}

func (i imageStub) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{{
		UsedBytes: &runtimeapi.UInt64Value{Value: i.cri.imageBytes}, InodesUsed: &runtimeapi.UInt64Value{Value: 100},
	}}}, nil
}

func sandbox(id, name string, created int64, state runtimeapi.PodSandboxState) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{
		Id: id, CreatedAt: created, State: state,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: "uid-" + name},
		Labels:   map[string]string{labelPodName: name, labelPodNamespace: "default", labelPodUID: "uid-" + name},
	}
}

func container(id, sandboxID, name string, state runtimeapi.ContainerState) *runtimeapi.Container {
	return &runtimeapi.Container{Id: id, PodSandboxId: sandboxID, State: state, Metadata: &runtimeapi.ContainerMetadata{Name: name}}
}

func cstats(id string, nanoCores, wsMi, layerMi uint64) *runtimeapi.ContainerStats {
	return &runtimeapi.ContainerStats{
		Attributes:    &runtimeapi.ContainerAttributes{Id: id},
		Cpu:           &runtimeapi.CpuUsage{UsageNanoCores: &runtimeapi.UInt64Value{Value: nanoCores}, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: nanoCores * 10}},
		Memory:        &runtimeapi.MemoryUsage{WorkingSetBytes: &runtimeapi.UInt64Value{Value: wsMi * mi}, UsageBytes: &runtimeapi.UInt64Value{Value: wsMi * mi}},
		WritableLayer: &runtimeapi.FilesystemUsage{UsedBytes: &runtimeapi.UInt64Value{Value: layerMi * mi}, InodesUsed: &runtimeapi.UInt64Value{Value: 10}},
	}
}

// twoPods is a node with pod "web" (two running containers, an exited one,
// and an older dead sandbox) and pod "db" (one running container, and
// sandbox stats with its own figures).
func twoPods() *criStub {
	ready, notReady := runtimeapi.PodSandboxState_SANDBOX_READY, runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	running, exited := runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_EXITED
	return &criStub{
		sandboxes: []*runtimeapi.PodSandbox{
			sandbox("web-old", "web", 1, notReady), sandbox("web-1", "web", 2, ready), sandbox("db-1", "db", 3, ready),
		},
		containers: []*runtimeapi.Container{
			container("w-app", "web-1", "app", running), container("w-side", "web-1", "sidecar", running),
			container("w-dead", "web-1", "app", exited), container("d-db", "db-1", "db", running),
		},
		containerStats: []*runtimeapi.ContainerStats{
			cstats("w-app", 100, 200, 10), cstats("w-side", 50, 50, 5), cstats("w-dead", 0, 0, 20), cstats("d-db", 300, 400, 30),
		},
		sandboxStats: []*runtimeapi.PodSandboxStats{{
			Attributes: &runtimeapi.PodSandboxAttributes{Id: "db-1"},
			Linux: &runtimeapi.LinuxPodSandboxStats{
				Cpu:     &runtimeapi.CpuUsage{UsageNanoCores: &runtimeapi.UInt64Value{Value: 350}},
				Memory:  &runtimeapi.MemoryUsage{WorkingSetBytes: &runtimeapi.UInt64Value{Value: 420 * mi}},
				Process: &runtimeapi.ProcessUsage{ProcessCount: &runtimeapi.UInt64Value{Value: 12}},
			},
		}},
		imageBytes: 500 * mi,
	}
}

func newProvider(t *testing.T, cri *criStub, mod func(*Config)) *Provider {
	t.Helper()
	cfg := Config{
		NodeName: "node-1", Runtime: cri, Images: imageStub{cri: cri},
		Capacity: corev1.ResourceList{
			corev1.ResourceMemory:           *resource.NewQuantity(2048*mi, resource.BinarySI),
			corev1.ResourceEphemeralStorage: *resource.NewQuantity(10240*mi, resource.BinarySI),
		},
		PIDLimit: 1000, SystemMemoryBytes: 100 * mi, SystemCPUNanoCores: 7, SystemProcesses: 20, ContainerLogBytes: mi,
		Clock: testingclock.NewFakeClock(time.Unix(1000, 0)),
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func podByName(s *statsapi.Summary, name string) *statsapi.PodStats {
	for i := range s.Pods {
		if s.Pods[i].PodRef.Name == name {
			return &s.Pods[i]
		}
	}
	return nil
}

func TestSummaryNode(t *testing.T) {
	s, err := newProvider(t, twoPods(), nil).Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := s.Node
	// Pods: web 250Mi (its containers' sum), db 420Mi (its sandbox's); plus 100Mi system.
	checks := []struct {
		name      string
		got, want uint64
	}{
		{"memory working set", *n.Memory.WorkingSetBytes, 770 * mi},
		{"memory available", *n.Memory.AvailableBytes, (2048 - 770) * mi},
		{"cpu nano cores", *n.CPU.UsageNanoCores, 150 + 350 + 7},
		// Every container's layer and log (4 containers, 1Mi each) and the
		// images share nodefs: 65 + 4 + 500.
		{"nodefs used", *n.Fs.UsedBytes, 569 * mi},
		{"nodefs available", *n.Fs.AvailableBytes, (10240 - 569) * mi},
		{"nodefs inodes", *n.Fs.Inodes, 10240 * mi / DefaultBytesPerInode},
		{"nodefs inodes used", *n.Fs.InodesUsed, 40 + 4 + 100},
		{"imagefs used", *n.Runtime.ImageFs.UsedBytes, 500 * mi},
		{"imagefs available is nodefs's", *n.Runtime.ImageFs.AvailableBytes, *n.Fs.AvailableBytes},
		{"imagefs capacity is nodefs's", *n.Runtime.ImageFs.CapacityBytes, 10240 * mi},
		{"max PID", uint64(*n.Rlimit.MaxPID), 1000},
		// web: no process count from the runtime, one per running container.
		{"running processes", uint64(*n.Rlimit.NumOfRunningProcesses), 2 + 12 + 20},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if n.NodeName != "node-1" {
		t.Errorf("node name = %q", n.NodeName)
	}
}

// The system's share of the node's CPU accrues in its cumulative counter,
// which metrics-server takes its rates from: a node whose pods use nothing
// still uses CPU, at the configured rate.
func TestSummaryNodeCumulativeCPU(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	p := newProvider(t, twoPods(), func(c *Config) { c.Clock = clk; c.SystemCPUNanoCores = 2e9 })
	before, err := p.Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	clk.Step(24*time.Hour + 500*time.Millisecond)
	after, err := p.Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The pods' counters stand still in the stub; two cores for a day and
	// half a second (no overflow at this size).
	got := *after.Node.CPU.UsageCoreNanoSeconds - *before.Node.CPU.UsageCoreNanoSeconds
	if want := uint64(2 * (86400*1e9 + 5e8)); got != want {
		t.Errorf("node CPU over a day = %d core-ns, want %d", got, want)
	}
}

func TestSummaryPods(t *testing.T) {
	s, err := newProvider(t, twoPods(), nil).Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pods) != 2 {
		t.Fatalf("%d pods, want 2 (the dead sandbox of web is not a pod)", len(s.Pods))
	}
	web := podByName(s, "web")
	if web == nil || web.PodRef.UID != "uid-web" || web.PodRef.Namespace != "default" {
		t.Fatalf("web = %+v", web)
	}
	if len(web.Containers) != 2 || web.Containers[0].Name != "app" || web.Containers[1].Name != "sidecar" {
		t.Fatalf("web containers = %+v, want the running app and sidecar", web.Containers)
	}
	app := web.Containers[0]
	if *app.CPU.UsageNanoCores != 100 || *app.Memory.WorkingSetBytes != 200*mi || *app.Rootfs.UsedBytes != 10*mi || *app.Logs.UsedBytes != mi {
		t.Errorf("app stats: cpu %d, memory %d, rootfs %d, logs %d", *app.CPU.UsageNanoCores, *app.Memory.WorkingSetBytes, *app.Rootfs.UsedBytes, *app.Logs.UsedBytes)
	}
	if *web.Memory.WorkingSetBytes != 250*mi || *web.CPU.UsageNanoCores != 150 || *web.ProcessStats.ProcessCount != 2 {
		t.Errorf("web pod: memory %d, cpu %d, processes %d", *web.Memory.WorkingSetBytes, *web.CPU.UsageNanoCores, *web.ProcessStats.ProcessCount)
	}
	if *web.EphemeralStorage.UsedBytes != 17*mi || *web.EphemeralStorage.CapacityBytes != 10240*mi {
		t.Errorf("web ephemeral storage: used %d of %d, want 17Mi of 10Gi", *web.EphemeralStorage.UsedBytes, *web.EphemeralStorage.CapacityBytes)
	}
	db := podByName(s, "db")
	if *db.Memory.WorkingSetBytes != 420*mi || *db.CPU.UsageNanoCores != 350 || *db.ProcessStats.ProcessCount != 12 {
		t.Errorf("db pod, from its sandbox stats: memory %d, cpu %d, processes %d", *db.Memory.WorkingSetBytes, *db.CPU.UsageNanoCores, *db.ProcessStats.ProcessCount)
	}
}

// containerd 1.6 fails ListPodSandboxStats as a whole when one sandbox has
// lost its task; the summary then comes sandbox by sandbox.
func TestSummaryWhenListPodSandboxStatsFails(t *testing.T) {
	cri := twoPods()
	cri.listErr = status.Error(codes.NotFound, `failed to decode sandbox container metrics for sandbox "web-old": no running task found`)
	s, err := newProvider(t, cri, nil).Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cri.asked, []string{"web-1", "db-1"}) {
		t.Errorf("PodSandboxStats asked for %q, want only the ready sandboxes web-1 and db-1", cri.asked)
	}
	if db := podByName(s, "db"); db == nil || *db.Memory.WorkingSetBytes != 420*mi {
		t.Errorf("db pod = %+v, want its sandbox's 420Mi working set", db)
	}

	cri = twoPods()
	cri.listErr = status.Error(codes.NotFound, "no running task found")
	cri.sandboxErr = map[string]error{"web-1": status.Error(codes.NotFound, "sandbox web-1 not found")}
	s, err = newProvider(t, cri, nil).Summary(context.Background())
	if err != nil {
		t.Fatalf("a sandbox gone between the list and its stats: %v", err)
	}
	if podByName(s, "db") == nil {
		t.Errorf("pods %+v, want db still summarised", s.Pods)
	}

	cri = twoPods()
	cri.listErr = status.Error(codes.NotFound, "no running task found")
	cri.sandboxErr = map[string]error{"db-1": status.Error(codes.Unavailable, "connection refused")}
	if _, err := newProvider(t, cri, nil).Summary(context.Background()); err == nil || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "no running task found") {
		t.Errorf("runtime down during the fallback: err = %v, want both causes", err)
	}
}

func TestSummaryDedicatedImageFs(t *testing.T) {
	p := newProvider(t, twoPods(), func(c *Config) { c.ImageFsCapacityBytes = 2048 * mi })
	if !p.HasDedicatedImageFs() {
		t.Fatal("HasDedicatedImageFs = false with an imagefs capacity")
	}
	s, err := p.Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := s.Node
	if *n.Fs.UsedBytes != 4*mi {
		t.Errorf("nodefs used = %d, want the logs only (4Mi)", *n.Fs.UsedBytes)
	}
	im := n.Runtime.ImageFs
	if *im.CapacityBytes != 2048*mi || *im.UsedBytes != 565*mi || *im.AvailableBytes != (2048-565)*mi {
		t.Errorf("imagefs: %d used, %d available of %d; want images and layers (565Mi) of 2Gi", *im.UsedBytes, *im.AvailableBytes, *im.CapacityBytes)
	}
	fs, err := p.ImageFsStats(context.Background())
	if err != nil || *fs.CapacityBytes != 2048*mi {
		t.Errorf("ImageFsStats = %v, %v", fs, err)
	}
}

func TestSummaryWithoutDiskCapacity(t *testing.T) {
	p := newProvider(t, twoPods(), func(c *Config) { delete(c.Capacity, corev1.ResourceEphemeralStorage) })
	s, err := p.Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Node.Fs != nil || s.Node.Runtime.ImageFs != nil {
		t.Error("a node without ephemeral-storage capacity reports filesystems; the disk signals would be made up")
	}
	if web := podByName(s, "web"); *web.EphemeralStorage.UsedBytes != 17*mi || web.EphemeralStorage.CapacityBytes != nil {
		t.Errorf("web ephemeral storage = %+v", web.EphemeralStorage)
	}
}
