package fakeruntime

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// statsOf returns the container's stats and fails the test on error.
func statsOf(t *testing.T, rt *Runtime, id string) *runtimeapi.ContainerStats {
	t.Helper()
	st, err := rt.ContainerStats(context.Background(), id)
	if err != nil {
		t.Fatalf("ContainerStats(%s): %v", id, err)
	}
	return st
}

// TestContainerStatsOverTime follows one container through its life: its
// curves grow, its memory reaches the 128 MiB limit of containerConfig at
// 64 s, and it then reports its final usage.
func TestContainerStatsOverTime(t *testing.T) {
	ctx := context.Background()
	rt, clk := newTestRuntime(t, Behaviour{})
	pod := podWithBehaviour("web-0", `app:
  cpu: {start: 500m}
  memory: {start: 64Mi, perSecond: 1Mi}
  pids: {start: 3}
  writableLayer: {start: 1Mi, perSecond: 1Ki}
`)
	sbID := runPod(t, rt, pod)
	id := createAttempt(t, rt, sbID, pod, "app", pauseImage, 0)

	type want struct {
		state                        runtimeapi.ContainerState
		memory, available            uint64
		coreNanoSeconds, nanoCores   uint64
		writableLayer, layerInodes   uint64
		podProcesses, podMemoryBytes uint64
	}
	check := func(when string, w want) {
		t.Helper()
		st := statsOf(t, rt, id)
		now := clk.Now().UnixNano()
		if got := containerStatus(t, rt, id).State; got != w.state {
			t.Errorf("%s: state %v, want %v", when, got, w.state)
		}
		if st.Attributes.Id != id || st.Attributes.Metadata.Name != "app" || st.Attributes.Labels["io.kubernetes.container.name"] != "app" {
			t.Errorf("%s: attributes %v", when, st.Attributes)
		}
		m := st.Memory
		if m.Timestamp != now || m.WorkingSetBytes.Value != w.memory || m.UsageBytes.Value != w.memory || m.RssBytes.Value != w.memory || m.AvailableBytes.GetValue() != w.available {
			t.Errorf("%s: memory %v, want working set, usage and RSS %d, available %d at %d", when, m, w.memory, w.available, now)
		}
		if c := st.Cpu; c.Timestamp != now || c.UsageCoreNanoSeconds.Value != w.coreNanoSeconds || c.UsageNanoCores.Value != w.nanoCores {
			t.Errorf("%s: cpu %v, want %d core-ns and %d nanocores", when, c, w.coreNanoSeconds, w.nanoCores)
		}
		if l := st.WritableLayer; l.UsedBytes.Value != w.writableLayer || l.InodesUsed.Value != w.layerInodes || l.FsId.GetMountpoint() == "" {
			t.Errorf("%s: writable layer %v, want %d bytes, %d inodes", when, l, w.writableLayer, w.layerInodes)
		}
		ps, err := rt.PodSandboxStats(ctx, sbID)
		if err != nil {
			t.Fatalf("%s: PodSandboxStats: %v", when, err)
		}
		if got := ps.Linux.Process.ProcessCount.Value; got != w.podProcesses {
			t.Errorf("%s: pod processes %d, want %d", when, got, w.podProcesses)
		}
		if got := ps.Linux.Memory.WorkingSetBytes.Value; got != w.podMemoryBytes {
			t.Errorf("%s: pod memory %d, want %d", when, got, w.podMemoryBytes)
		}
	}
	const limit = 128 * mi
	check("created", want{state: created, available: limit, writableLayer: mi, layerInodes: 64, podProcesses: 1})
	if err := rt.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	check("at the start", want{state: running, memory: 64 * mi, available: 64 * mi, nanoCores: 5e8, writableLayer: mi, layerInodes: 64, podProcesses: 4, podMemoryBytes: 64 * mi})
	clk.Step(10 * time.Second)
	check("after 10 s", want{state: running, memory: 74 * mi, available: 54 * mi, coreNanoSeconds: 5e9, nanoCores: 5e8,
		writableLayer: mi + 10<<10, layerInodes: 65, podProcesses: 4, podMemoryBytes: 74 * mi})
	clk.Step(54*time.Second - time.Nanosecond)
	if got := containerStatus(t, rt, id).State; got != running {
		t.Fatalf("1 ns before its memory reaches the limit: %v, want running", got)
	}
	clk.Step(time.Minute) // ask late: it was killed at 64 s all the same
	st := containerStatus(t, rt, id)
	start := testEpoch.UnixNano()
	if st.State != exited || st.ExitCode != 137 || st.Reason != "OOMKilled" || st.FinishedAt != start+int64(64*time.Second) {
		t.Fatalf("after the limit: %v exit %d %q finished %d; want exited 137 OOMKilled at start+64s", st.State, st.ExitCode, st.Reason, st.FinishedAt-start)
	}
	check("OOM-killed: final usage", want{state: exited, memory: limit, available: 0, coreNanoSeconds: 32e9,
		writableLayer: mi + 64<<10, layerInodes: 68, podProcesses: 1})

	if err := rt.RemoveContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, err := rt.ContainerStats(ctx, id)
	wantCode(t, "ContainerStats of a removed container", err, codes.NotFound)
	if ps, err := rt.PodSandboxStats(ctx, sbID); err != nil || len(ps.Linux.Containers) != 0 {
		t.Errorf("PodSandboxStats after the remove = %v, %v; want no containers", ps, err)
	}
	_, err = rt.PodSandboxStats(ctx, "nope")
	wantCode(t, "PodSandboxStats of an unknown sandbox", err, codes.NotFound)
}

// TestPodSandboxStatsSums checks how a pod adds up its containers: CPU time
// over all of them, the rest over the running ones.
func TestPodSandboxStatsSums(t *testing.T) {
	ctx := context.Background()
	rt, clk := newTestRuntime(t, Behaviour{})
	pod := podWithBehaviour("web-0", `
app: {cpu: {start: 250m}, memory: {start: 10Mi}, pids: {start: 2}}
init: {runFor: 5s, cpu: {start: 1}, memory: {start: 50Mi}}
`)
	sbID := runPod(t, rt, pod)
	app := runContainer(t, rt, sbID, pod, "app", pauseImage)
	initID := runContainer(t, rt, sbID, pod, "init", pauseImage)
	clk.Step(10 * time.Second)

	ps, err := rt.PodSandboxStats(ctx, sbID[:8])
	if err != nil {
		t.Fatal(err)
	}
	now := clk.Now().UnixNano()
	if a := ps.Attributes; a.Id != sbID || a.Metadata.Name != "web-0" || a.Labels["app"] != "web" || a.Annotations[AnnotationBehaviour] == "" {
		t.Errorf("attributes = %v", a)
	}
	l := ps.Linux
	if l.Cpu.Timestamp != now || l.Cpu.UsageCoreNanoSeconds.Value != 7.5e9 || l.Cpu.UsageNanoCores.Value != 2.5e8 {
		t.Errorf("pod cpu = %v, want 7.5e9 core-ns (2.5 s of app, 5 s of init) and 2.5e8 nanocores (app only)", l.Cpu)
	}
	if l.Memory.WorkingSetBytes.Value != 10*mi || l.Memory.AvailableBytes != nil {
		t.Errorf("pod memory = %v, want app's 10 MiB", l.Memory)
	}
	if l.Process.Timestamp != now || l.Process.ProcessCount.Value != 3 {
		t.Errorf("pod processes = %v, want pause and app's two", l.Process)
	}
	var ids []string
	for _, c := range l.Containers {
		ids = append(ids, c.Attributes.Id)
	}
	if !slices.Equal(ids, []string{app, initID}) {
		t.Errorf("pod's containers = %v, want app and init in creation order", ids)
	}
	if got := l.Containers[1].Memory.WorkingSetBytes.Value; got != 50*mi {
		t.Errorf("exited init's memory = %d, want its final 50 MiB", got)
	}

	if err := rt.StopPodSandbox(ctx, sbID); err != nil {
		t.Fatal(err)
	}
	clk.Step(10 * time.Second)
	ps, err = rt.PodSandboxStats(ctx, sbID)
	if err != nil {
		t.Fatal(err)
	}
	if l := ps.Linux; l.Process.ProcessCount.Value != 0 || l.Memory.WorkingSetBytes.Value != 0 || l.Cpu.UsageCoreNanoSeconds.Value != 7.5e9 {
		t.Errorf("stopped pod: processes %d, memory %d, cpu %d; want 0, 0 and the CPU time spent before the stop",
			l.Process.ProcessCount.Value, l.Memory.WorkingSetBytes.Value, l.Cpu.UsageCoreNanoSeconds.Value)
	}
}

func TestListStatsFilters(t *testing.T) {
	ctx := context.Background()
	rt, _ := newTestRuntime(t, Behaviour{})
	var sandboxes, apps []string
	for i := range 3 {
		pod := podConfig(fmt.Sprintf("pod-%d", i))
		sbID := runPod(t, rt, pod)
		sandboxes = append(sandboxes, sbID)
		apps = append(apps, runContainer(t, rt, sbID, pod, "app", pauseImage))
	}
	pod0 := podConfig("pod-0")
	sidecar := runContainer(t, rt, sandboxes[0], pod0, "sidecar", pauseImage)
	gone := runContainer(t, rt, sandboxes[2], podConfig("pod-2"), "gone", pauseImage)
	if err := rt.RemoveContainer(ctx, gone); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		filter *runtimeapi.ContainerStatsFilter
		want   []string
	}{
		{"no filter: all, oldest first", nil, []string{apps[0], apps[1], apps[2], sidecar}},
		{"empty filter", &runtimeapi.ContainerStatsFilter{}, []string{apps[0], apps[1], apps[2], sidecar}},
		{"by ID prefix", &runtimeapi.ContainerStatsFilter{Id: apps[1][:10]}, []string{apps[1]}},
		{"by sandbox", &runtimeapi.ContainerStatsFilter{PodSandboxId: sandboxes[0]}, []string{apps[0], sidecar}},
		{"by labels", &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"io.kubernetes.container.name": "sidecar"}}, []string{sidecar}},
		{"by sandbox and labels", &runtimeapi.ContainerStatsFilter{PodSandboxId: sandboxes[1], LabelSelector: map[string]string{"io.kubernetes.container.name": "app"}}, []string{apps[1]}},
		{"a removed container", &runtimeapi.ContainerStatsFilter{Id: gone}, nil},
		{"no match", &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"app": "db"}}, nil},
	} {
		t.Run("containers "+tc.name, func(t *testing.T) {
			sts, err := rt.ListContainerStats(ctx, tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, st := range sts {
				got = append(got, st.Attributes.Id)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ListContainerStats(%v) = %v, want %v", tc.filter, got, tc.want)
			}
		})
	}

	for _, tc := range []struct {
		name   string
		filter *runtimeapi.PodSandboxStatsFilter
		want   []string
	}{
		{"no filter: all, oldest first", nil, sandboxes},
		{"by ID prefix", &runtimeapi.PodSandboxStatsFilter{Id: sandboxes[2][:10]}, sandboxes[2:]},
		{"by labels", &runtimeapi.PodSandboxStatsFilter{LabelSelector: map[string]string{"io.kubernetes.pod.name": "pod-1"}}, sandboxes[1:2]},
		{"no match", &runtimeapi.PodSandboxStatsFilter{LabelSelector: map[string]string{"app": "db"}}, nil},
	} {
		t.Run("sandboxes "+tc.name, func(t *testing.T) {
			sts, err := rt.ListPodSandboxStats(ctx, tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, st := range sts {
				got = append(got, st.Attributes.Id)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ListPodSandboxStats(%v) = %v, want %v", tc.filter, got, tc.want)
			}
		})
	}
}

// TestUpdateContainerResourcesMovesOOM changes the memory limit of a
// container whose memory grows: a higher limit puts the kill later, one
// below the current use kills it at once, never in the past.
func TestUpdateContainerResourcesMovesOOM(t *testing.T) {
	ctx := context.Background()
	start := testEpoch.UnixNano()
	sec := int64(time.Second)
	limit := func(bytes int64) *runtimeapi.ContainerResources {
		return &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: bytes}}
	}
	for _, tc := range []struct {
		name         string
		updateAt     time.Duration
		resources    *runtimeapi.ContainerResources
		wantFinished int64 // after the start; 0: still running at 10 min
	}{
		{"no update: killed at the 128 MiB limit", 0, nil, 28 * sec},
		{"a higher limit", 10 * time.Second, limit(256 * mi), 156 * sec},
		{"a limit below the current use: killed at the update", 20 * time.Second, limit(64 * mi), 20 * sec},
		{"no limit", 10 * time.Second, limit(0), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, clk := newTestRuntime(t, Behaviour{})
			pod := podWithBehaviour("web-0", `app: {memory: {start: 100Mi, perSecond: 1Mi}}`)
			id := runContainer(t, rt, runPod(t, rt, pod), pod, "app", pauseImage)
			if tc.resources != nil {
				clk.Step(tc.updateAt)
				if err := rt.UpdateContainerResources(ctx, id, tc.resources); err != nil {
					t.Fatal(err)
				}
			}
			clk.SetTime(testEpoch.Add(10 * time.Minute))
			st := containerStatus(t, rt, id)
			if tc.wantFinished == 0 {
				if st.State != running {
					t.Errorf("state %v (%q), want running", st.State, st.Reason)
				}
				return
			}
			if st.State != exited || st.Reason != "OOMKilled" || st.FinishedAt-start != tc.wantFinished {
				t.Errorf("%v %q finished at start+%ds; want OOMKilled at start+%ds", st.State, st.Reason, (st.FinishedAt-start)/sec, tc.wantFinished/sec)
			}
		})
	}
}

// TestUsageNodeDefault merges a pod's curve over the node's: each curve
// field is replaced whole, the others kept.
func TestUsageNodeDefault(t *testing.T) {
	rt, clk := newTestRuntime(t, Behaviour{Containers: ContainerBehaviour{
		Memory: &UsageCurve{Start: new(resource.MustParse("20Mi"))},
		CPU:    &UsageCurve{Start: new(resource.MustParse("1"))},
	}})
	plain := podConfig("plain")
	plainID := runContainer(t, rt, runPod(t, rt, plain), plain, "app", pauseImage)
	custom := podWithBehaviour("custom", `"*": {cpu: {start: 100m}}`)
	customID := runContainer(t, rt, runPod(t, rt, custom), custom, "app", pauseImage)
	clk.Step(time.Second)
	for _, tc := range []struct {
		id          string
		memory, cpu uint64
	}{{plainID, 20 * mi, 1e9}, {customID, 20 * mi, 1e8}} {
		st := statsOf(t, rt, tc.id)
		if st.Memory.WorkingSetBytes.Value != tc.memory || st.Cpu.UsageNanoCores.Value != tc.cpu {
			t.Errorf("%s: memory %d, cpu %d; want %d, %d", st.Attributes.Metadata.Name, st.Memory.WorkingSetBytes.Value, st.Cpu.UsageNanoCores.Value, tc.memory, tc.cpu)
		}
	}
}

func TestImageFsInfoWritableLayers(t *testing.T) {
	ctx := context.Background()
	rt, clk := newTestRuntime(t, Behaviour{Containers: ContainerBehaviour{WritableLayer: &UsageCurve{Start: new(resource.MustParse("100Ki")), PerSecond: new(resource.MustParse("1Ki"))}}})
	fsInfo := func() (image, layers *runtimeapi.FilesystemUsage) {
		t.Helper()
		resp, err := rt.ImageFsInfo(ctx)
		if err != nil || len(resp.ImageFilesystems) != 1 || len(resp.ContainerFilesystems) != 1 {
			t.Fatalf("ImageFsInfo = %v, %v; want one image and one container filesystem", resp, err)
		}
		return resp.ImageFilesystems[0], resp.ContainerFilesystems[0]
	}
	image, layers := fsInfo()
	if image.UsedBytes.Value != 10*mi || image.InodesUsed.Value != 640 || layers.UsedBytes.Value != 0 || layers.InodesUsed.Value != 0 {
		t.Errorf("with the pause image only: image fs %v, container fs %v", image, layers)
	}
	pod := podConfig("web-0")
	sbID := runPod(t, rt, pod)
	runContainer(t, rt, sbID, pod, "a", pauseImage)
	createAttempt(t, rt, sbID, pod, "b", pauseImage, 0) // created: its layer as it starts
	clk.Step(10 * time.Second)
	_, layers = fsInfo()
	if layers.UsedBytes.Value != 210<<10 || layers.InodesUsed.Value != 7+7 || layers.Timestamp != clk.Now().UnixNano() || layers.FsId.GetMountpoint() != image.FsId.GetMountpoint() {
		t.Errorf("container fs = %v, want 210 KiB in 14 inodes (110 KiB and 100 KiB), now, on the image fs", layers)
	}
}

// TestDocumentedExample runs the "cache" example of the package
// documentation, so that the documentation stays true.
func TestDocumentedExample(t *testing.T) {
	ctx := context.Background()
	rt, clk := newTestRuntime(t, Behaviour{})
	pod := podWithBehaviour("cache-0", `  cache:
    cpu: {start: 250m}
    memory: {start: 64Mi, perSecond: 1Mi, steps: [{after: 30s, value: 200Mi}]}
    logs: {every: 10s, line: "cache: serving"}
`)
	sbID := runPod(t, rt, pod)
	cfg := containerConfig(pod, "cache", pauseImage)
	cfg.Linux.Resources.MemoryLimitInBytes = 256 * mi
	id, err := rt.CreateContainer(ctx, sbID, cfg, pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	clk.Step(2 * time.Minute)
	st := containerStatus(t, rt, id)
	if st.Reason != "OOMKilled" || st.FinishedAt-st.StartedAt != int64(86*time.Second) {
		t.Errorf("%q after %s; the documentation says OOMKilled after 86s", st.Reason, time.Duration(st.FinishedAt-st.StartedAt))
	}
	lines, err := rt.ContainerLogs(id, time.Time{}, -1)
	if err != nil || len(lines) != 9 || lines[8].Text != "cache: serving" || !lines[8].Time.Equal(testEpoch.Add(80*time.Second)) {
		t.Errorf("logs = %v, %v; want the start line and eight lines, every 10 s to 80 s", lines, err)
	}
	if cpu := statsOf(t, rt, id).Cpu.UsageCoreNanoSeconds.Value; cpu != 21.5e9 {
		t.Errorf("CPU time = %d core-ns, want a quarter core for 86 s", cpu)
	}
}
