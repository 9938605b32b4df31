package kuberuntime

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/reports"
)

// refEvent is one event with the object it is about.
type refEvent struct {
	fieldPath, eventType, reason, message string
}

// refRecorder records events with the field path of their object, as the
// API's involvedObject has it.
type refRecorder struct {
	mu     sync.Mutex
	events []refEvent
}

func (r *refRecorder) Event(obj runtime.Object, eventType, reason, message string) {
	var field string
	if ref, ok := obj.(*corev1.ObjectReference); ok {
		field = ref.FieldPath
	}
	r.mu.Lock()
	r.events = append(r.events, refEvent{field, eventType, reason, message})
	r.mu.Unlock()
}

func (r *refRecorder) Eventf(obj runtime.Object, eventType, reason, format string, args ...any) {
	r.Event(obj, eventType, reason, fmt.Sprintf(format, args...))
}

func (r *refRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventType, reason, format string, args ...any) {
	r.Eventf(obj, eventType, reason, format, args...)
}

// drain returns the events recorded since the last drain.
func (r *refRecorder) drain() []refEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

// configRecorder keeps the configs containers were created with.
type configRecorder struct {
	internalapi.RuntimeService
	mu      sync.Mutex
	configs map[string]*runtimeapi.ContainerConfig
}

func (r *configRecorder) CreateContainer(ctx context.Context, sandboxID string, config *runtimeapi.ContainerConfig, sb *runtimeapi.PodSandboxConfig) (string, error) {
	id, err := r.RuntimeService.CreateContainer(ctx, sandboxID, config, sb)
	if err == nil {
		r.mu.Lock()
		r.configs[config.GetMetadata().GetName()] = config
		r.mu.Unlock()
	}
	return id, err
}

func (r *configRecorder) config(name string) *runtimeapi.ContainerConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.configs[name]
}

func withEphemeral(pod *corev1.Pod, name, target string) *corev1.Pod {
	pod = pod.DeepCopy()
	pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: name, Image: "busybox:1.36", ImagePullPolicy: corev1.PullIfNotPresent, Stdin: true, TTY: true,
		},
		TargetContainerName: target,
	})
	return pod
}

func TestComputePodActionsEphemeral(t *testing.T) {
	const (
		running = runtimeapi.ContainerState_CONTAINER_RUNNING
		exited  = runtimeapi.ContainerState_CONTAINER_EXITED
	)
	ready := []*runtimeapi.PodSandboxStatus{{Id: "sb", State: runtimeapi.PodSandboxState_SANDBOX_READY}}
	stopped := []*runtimeapi.PodSandboxStatus{{Id: "sb", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}}
	pod := withEphemeral(newPod("u", false, corev1.PullIfNotPresent, "app"), "debugger", "")
	withInit := pod.DeepCopy()
	withInit.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}
	cases := []struct {
		name   string
		pod    *corev1.Pod
		status *PodStatus
		want   []int
	}{
		{name: "added to a running pod: started", pod: pod,
			status: &PodStatus{Sandboxes: ready, Containers: []*ContainerStatus{cs("app", running, 0)}}, want: []int{0}},
		{name: "while the init containers run: started", pod: withInit,
			status: &PodStatus{Sandboxes: ready, Containers: []*ContainerStatus{cs("init", running, 0)}}, want: []int{0}},
		{name: "running: nothing to do", pod: pod,
			status: &PodStatus{Sandboxes: ready, Containers: []*ContainerStatus{cs("app", running, 0), cs("debugger", running, 0)}}},
		{name: "exited: never restarted", pod: pod,
			status: &PodStatus{Sandboxes: ready, Containers: []*ContainerStatus{cs("app", running, 0), cs("debugger", exited, 1)}}},
		{name: "the sandbox is being made again: not with it", pod: pod,
			status: &PodStatus{Sandboxes: stopped, Containers: []*ContainerStatus{cs("app", exited, 0)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := computePodActions(tc.pod, tc.status, healthy{})
			if !slices.Equal(got.EphemeralContainersToStart, tc.want) {
				t.Errorf("ephemeral containers to start = %v, want %v", got.EphemeralContainersToStart, tc.want)
			}
		})
	}
}

// TestSyncPodRunsEphemeralContainer: SyncPod starts an ephemeral container
// added to a running pod in its target's PID namespace, with the kubelet's
// events about it, leaves it be once it has exited, and KillPod stops it
// with the pod.
func TestSyncPodRunsEphemeralContainer(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	rt := fakeruntime.New(fakeruntime.Config{Clock: clk, PreloadedImages: []string{"nginx"}})
	if err := rt.UpdateRuntimeConfig(ctx, &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.64.0.0/16"}}); err != nil {
		t.Fatal(err)
	}
	events := &refRecorder{}
	rec := &configRecorder{RuntimeService: rt, configs: map[string]*runtimeapi.ContainerConfig{}}
	m := NewManager(Config{Runtime: rec, Images: rt, Events: events, Recorder: reports.Discard{}, Clock: clk, SerializeImagePulls: true})
	pod := newPod("u1", false, corev1.PullIfNotPresent, "app")
	pod.Spec.Containers[0].Image = "nginx"
	// The debugger exits 10 s after it starts.
	pod.Annotations = map[string]string{fakeruntime.AnnotationBehaviour: `{"debugger": {"runFor": "10s", "exitCode": 0}}`}
	sync := func(p *corev1.Pod) *PodStatus {
		t.Helper()
		status, err := m.GetPodStatus(ctx, p.UID)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.SyncPod(ctx, p, status, healthy{}); err != nil {
			t.Fatal(err)
		}
		status, err = m.GetPodStatus(ctx, p.UID)
		if err != nil {
			t.Fatal(err)
		}
		return status
	}
	status := sync(pod)
	app := status.Container("app")
	events.drain()

	debugged := withEphemeral(pod, "debugger", "app")
	status = sync(debugged)
	dbg := status.Container("debugger")
	if dbg == nil || dbg.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("debugger = %+v, want it running", dbg)
	}
	field := "spec.ephemeralContainers{debugger}"
	got := events.drain()
	want := []refEvent{
		{field, corev1.EventTypeNormal, "Pulling", `Pulling image "busybox:1.36"`},
		{field, corev1.EventTypeNormal, "Pulled", ""},
		{field, corev1.EventTypeNormal, "Created", "Container created"},
		{field, corev1.EventTypeNormal, "Started", "Container started"},
	}
	if len(got) != len(want) {
		t.Fatalf("events %+v, want %+v", got, want)
	}
	for i := range want {
		w, g := want[i], got[i]
		if w.message == "" {
			w.message = g.message
			if !strings.HasPrefix(g.message, `Successfully pulled image "busybox:1.36" in `) || !strings.HasSuffix(g.message, " bytes.") {
				t.Errorf("Pulled message %q, want the kubelet's with the image size", g.message)
			}
		}
		if g != w {
			t.Errorf("event %d = %+v, want %+v", i, g, w)
		}
	}
	if cfg := rec.config("debugger"); !cfg.Stdin || !cfg.Tty || cfg.StdinOnce {
		t.Errorf("debugger config stdin %v tty %v stdinOnce %v, want the spec's", cfg.Stdin, cfg.Tty, cfg.StdinOnce)
	}
	ns := rec.config("debugger").GetLinux().GetSecurityContext().GetNamespaceOptions()
	if ns.GetPid() != runtimeapi.NamespaceMode_TARGET || ns.GetTargetId() != app.ID {
		t.Errorf("debugger namespaces %v, want the PID namespace of app (%s)", ns, app.ID)
	}
	if c := status.Container("app"); c.ID != app.ID || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("app = %+v, want it untouched", c)
	}

	clk.Step(10 * time.Second)
	status = sync(debugged)
	if c := status.Container("debugger"); c.ID != dbg.ID || c.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("debugger after 10s = %+v, want the same container exited and not started again", c)
	}
	if got := events.drain(); len(got) != 0 {
		t.Errorf("sync after the debugger exited: events %+v, want none", got)
	}

	// A second debugger, still running when the pod is killed.
	twice := withEphemeral(debugged, "debugger-2", "")
	status = sync(twice)
	events.drain()
	if ns := rec.config("debugger-2").GetLinux().GetSecurityContext().GetNamespaceOptions(); ns.GetPid() != runtimeapi.NamespaceMode_CONTAINER {
		t.Errorf("untargeted debugger namespaces %v, want its own PID namespace", ns)
	}
	if err := m.KillPod(ctx, twice, status, 30); err != nil {
		t.Fatal(err)
	}
	killed := false
	for _, e := range events.drain() {
		killed = killed || e == refEvent{"spec.ephemeralContainers{debugger-2}", corev1.EventTypeNormal, "Killing", "Stopping container debugger-2"}
	}
	status, err := m.GetPodStatus(ctx, pod.UID)
	if err != nil {
		t.Fatal(err)
	}
	if c := status.Container("debugger-2"); !killed || c.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("debugger-2 = %+v (Killing event %v), want it stopped with the pod", c, killed)
	}
}

// TestSyncPodEphemeralTargetMissing: an ephemeral container whose target
// the runtime does not have waits with CreateContainerConfigError, and the
// pod's own containers start regardless.
func TestSyncPodEphemeralTargetMissing(t *testing.T) {
	ctx := context.Background()
	m, rt, _ := newManager(t, "busybox")
	events := &refRecorder{}
	m.cfg.Events = events
	pod := withEphemeral(newPod("u1", false, corev1.PullIfNotPresent, "app"), "debugger", "nope")
	status, err := m.GetPodStatus(ctx, pod.UID)
	if err != nil {
		t.Fatal(err)
	}
	// The first sync makes the sandbox and starts app; the next one the
	// debugger.
	if err := m.SyncPod(ctx, pod, status, healthy{}); err != nil {
		t.Fatal(err)
	}
	if status, err = m.GetPodStatus(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	err = m.SyncPod(ctx, pod, status, healthy{})
	if err == nil || !strings.Contains(err.Error(), "unable to find target container nope") {
		t.Fatalf("SyncPod: %v, want the missing target", err)
	}
	if w := m.Waiting(pod.UID)["debugger"]; w.Reason != "CreateContainerConfigError" || w.Message != "unable to find target container nope" {
		t.Errorf("debugger waits %+v, want CreateContainerConfigError", w)
	}
	found := false
	for _, e := range events.drain() {
		found = found || e == refEvent{"spec.ephemeralContainers{debugger}", corev1.EventTypeWarning, "Failed", "Error: unable to find target container nope"}
	}
	if !found {
		t.Error("no Failed event for the debugger")
	}
	containers, err := rt.ListContainers(ctx, nil)
	if err != nil || len(containers) != 1 || containers[0].GetMetadata().GetName() != "app" {
		t.Errorf("containers %v, %v: want app alone", containers, err)
	}
}

func TestContainerSecurityContext(t *testing.T) {
	fsGroup, uid, gid, cuid := int64(3000), int64(1000), int64(2000), int64(1001)
	share := true
	noEscalation := false
	pod := newPod("u", false, corev1.PullIfNotPresent, "app")
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsUser: &uid, RunAsGroup: &gid, FSGroup: &fsGroup, SupplementalGroups: []int64{5000, 4000},
	}
	c := &corev1.Container{Name: "app", SecurityContext: &corev1.SecurityContext{
		RunAsUser: &cuid, AllowPrivilegeEscalation: &noEscalation,
		Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}},
	}}
	sc, err := containerSecurityContext(pod, c, "")
	if err != nil {
		t.Fatal(err)
	}
	if sc.GetRunAsUser().GetValue() != cuid || sc.GetRunAsGroup().GetValue() != gid {
		t.Errorf("user/group %v/%v, want the container's user and the pod's group", sc.GetRunAsUser(), sc.GetRunAsGroup())
	}
	// The kubelet's order: the fsGroup, then the supplemental groups.
	if !slices.Equal(sc.SupplementalGroups, []int64{3000, 5000, 4000}) {
		t.Errorf("supplemental groups %v, want [3000 5000 4000]", sc.SupplementalGroups)
	}
	if !sc.NoNewPrivs || !slices.Equal(sc.GetCapabilities().GetAddCapabilities(), []string{"NET_ADMIN"}) || !slices.Equal(sc.GetCapabilities().GetDropCapabilities(), []string{"ALL"}) {
		t.Errorf("noNewPrivs %v capabilities %v", sc.NoNewPrivs, sc.GetCapabilities())
	}
	ns := sc.GetNamespaceOptions()
	if ns.GetNetwork() != runtimeapi.NamespaceMode_POD || ns.GetPid() != runtimeapi.NamespaceMode_CONTAINER || ns.GetIpc() != runtimeapi.NamespaceMode_POD {
		t.Errorf("namespaces %v, want the pod's network and IPC, its own PID", ns)
	}

	// A pod sharing its PID namespace: a target changes nothing.
	pod.Spec.ShareProcessNamespace = &share
	if sc, err = containerSecurityContext(pod, c, "target-id"); err != nil {
		t.Fatal(err)
	}
	if ns := sc.GetNamespaceOptions(); ns.GetPid() != runtimeapi.NamespaceMode_POD || ns.GetTargetId() != "" {
		t.Errorf("shared PID namespace with a target: %v, want the pod's", ns)
	}

	sb, err := sandboxSecurityContext(pod)
	if err != nil {
		t.Fatal(err)
	}
	if sb.GetRunAsUser().GetValue() != uid || !slices.Equal(sb.SupplementalGroups, []int64{3000, 5000, 4000}) ||
		sb.GetNamespaceOptions().GetPid() != runtimeapi.NamespaceMode_POD || sb.GetSeccomp().GetProfileType() != runtimeapi.SecurityProfile_RuntimeDefault {
		t.Errorf("sandbox security context %v", sb)
	}
	strict := corev1.SupplementalGroupsPolicy("Bogus")
	pod.Spec.SecurityContext.SupplementalGroupsPolicy = &strict
	if _, err := containerSecurityContext(pod, c, ""); err == nil || !strings.Contains(err.Error(), "unsupported supplementalGroupsPolicy") {
		t.Errorf("unknown policy: %v, want an error", err)
	}
}

// TestToContainerResources is the kubelet's toKubeContainerResources: the
// CRI's cgroup settings as requests and limits.
func TestToContainerResources(t *testing.T) {
	for _, tc := range []struct {
		in                     *runtimeapi.LinuxContainerResources
		cpuReq, cpuLim, memLim string
		wantNil                bool
	}{
		{in: &runtimeapi.LinuxContainerResources{CpuShares: 102, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 128 << 20}, cpuReq: "100m", cpuLim: "500m", memLim: "128Mi"},
		{in: &runtimeapi.LinuxContainerResources{CpuShares: 1024, CpuPeriod: 100000}, cpuReq: "1"},
		{in: &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, CpuQuota: -1}, cpuReq: "2m"},
		{in: &runtimeapi.LinuxContainerResources{}, wantNil: true},
		{in: nil, wantNil: true},
	} {
		got := toContainerResources(tc.in)
		if tc.wantNil {
			if got != nil {
				t.Errorf("%v: %+v, want nil", tc.in, got)
			}
			continue
		}
		str := func(q interface{ String() string }, isNil bool) string {
			if isNil {
				return ""
			}
			return q.String()
		}
		if r, l, m := str(got.CPURequest, got.CPURequest == nil), str(got.CPULimit, got.CPULimit == nil), str(got.MemoryLimit, got.MemoryLimit == nil); r != tc.cpuReq || l != tc.cpuLim || m != tc.memLim {
			t.Errorf("%v: request %q limit %q memory %q, want %q %q %q", tc.in, r, l, m, tc.cpuReq, tc.cpuLim, tc.memLim)
		}
	}
}

// handlerRuntime reports the runtime handlers it is given.
type handlerRuntime struct {
	internalapi.RuntimeService
	handlers []*runtimeapi.RuntimeHandler
	calls    int
}

func (h *handlerRuntime) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	h.calls++
	return &runtimeapi.StatusResponse{RuntimeHandlers: h.handlers}, nil
}

func TestRecursiveReadOnlyMounts(t *testing.T) {
	m, rt, _ := newManager(t)
	hr := &handlerRuntime{RuntimeService: rt, handlers: []*runtimeapi.RuntimeHandler{
		{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true}},
		{Name: "runsc", Features: &runtimeapi.RuntimeHandlerFeatures{}},
	}}
	m.cfg.Runtime = hr
	m.cfg.RuntimeHandler = func(name *string) (string, error) {
		if name == nil {
			return "", nil
		}
		return *name, nil
	}
	pod := newPod("u", false, corev1.PullIfNotPresent, "a")
	gvisor := pod.DeepCopy()
	runsc := "runsc"
	gvisor.Spec.RuntimeClassName = &runsc
	ctx := context.Background()
	if !m.RecursiveReadOnlyMounts(ctx, pod) || m.RecursiveReadOnlyMounts(ctx, gvisor) {
		t.Error("want the default handler to support recursive read-only mounts and runsc not")
	}
	if hr.calls != 1 {
		t.Errorf("the runtime's Status was asked %d times, want once", hr.calls)
	}
}
