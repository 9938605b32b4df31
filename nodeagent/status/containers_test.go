package status

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
)

var (
	running = runtimeapi.ContainerState_CONTAINER_RUNNING
	exited  = runtimeapi.ContainerState_CONTAINER_EXITED
	created = runtimeapi.ContainerState_CONTAINER_CREATED
)

func runtimeWith(containers ...*kuberuntime.ContainerStatus) *kuberuntime.PodStatus {
	return &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(true)}, Containers: containers}
}

func statusNamed(statuses []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}

func quantities(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

// equalLists compares resource lists by value, as the API does.
func equalLists(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, q := range a {
		if r, ok := b[k]; !ok || q.Cmp(r) != 0 {
			return false
		}
	}
	return true
}

// TestContainerStatusOrder: app and ephemeral container statuses are
// sorted by name (the kubelet's SortedContainerStatuses), init container
// statuses keep the spec's order.
func TestContainerStatusOrder(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, false, "web", "agent", "cache")
	pod.Spec.InitContainers = []corev1.Container{{Name: "z-init"}, {Name: "a-init"}}
	pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{
		{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger-2"}},
		{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger-1"}},
	}
	st := Generate(Input{Pod: pod, NodeIP: nodeIP, Now: t0, Previous: pod.Status})
	names := func(statuses []corev1.ContainerStatus) []string {
		var out []string
		for _, s := range statuses {
			out = append(out, s.Name)
		}
		return out
	}
	for _, tc := range []struct {
		what      string
		got, want []string
	}{
		{"containerStatuses", names(st.ContainerStatuses), []string{"agent", "cache", "web"}},
		{"initContainerStatuses", names(st.InitContainerStatuses), []string{"z-init", "a-init"}},
		{"ephemeralContainerStatuses", names(st.EphemeralContainerStatuses), []string{"debugger-1", "debugger-2"}},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%s = %v, want %v", tc.what, tc.got, tc.want)
		}
	}
}

// TestContainerStatusVolumeMounts: every container reports its mounts from
// the spec (readOnly ones with their recursive read-only mode), and keeps
// them once reported.
func TestContainerStatusVolumeMounts(t *testing.T) {
	ifPossible, enabled := corev1.RecursiveReadOnlyIfPossible, corev1.RecursiveReadOnlyEnabled
	pod := testPod(corev1.RestartPolicyAlways, false, "a")
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "data", MountPath: "/data"},
		{Name: "config", MountPath: "/etc/a", ReadOnly: true},
		{Name: "certs", MountPath: "/etc/certs", ReadOnly: true, RecursiveReadOnly: &ifPossible},
		{Name: "keys", MountPath: "/etc/keys", ReadOnly: true, RecursiveReadOnly: &enabled},
	}
	mode := func(m corev1.RecursiveReadOnlyMode) *corev1.RecursiveReadOnlyMode { return &m }
	for _, tc := range []struct {
		name      string
		supported bool
		want      []*corev1.RecursiveReadOnlyMode
	}{
		{"runtime without recursive read-only mounts", false, []*corev1.RecursiveReadOnlyMode{nil, mode(corev1.RecursiveReadOnlyDisabled), mode(corev1.RecursiveReadOnlyDisabled), mode(corev1.RecursiveReadOnlyDisabled)}},
		{"runtime with them", true, []*corev1.RecursiveReadOnlyMode{nil, mode(corev1.RecursiveReadOnlyDisabled), mode(corev1.RecursiveReadOnlyEnabled), mode(corev1.RecursiveReadOnlyEnabled)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := Generate(Input{Pod: pod, NodeIP: nodeIP, Now: t0, Previous: pod.Status, RecursiveReadOnlyMounts: tc.supported})
			got := first.ContainerStatuses[0].VolumeMounts
			if len(got) != 4 {
				t.Fatalf("volumeMounts = %+v, want the spec's 4", got)
			}
			for i, m := range pod.Spec.Containers[0].VolumeMounts {
				if got[i].Name != m.Name || got[i].MountPath != m.MountPath || got[i].ReadOnly != m.ReadOnly {
					t.Errorf("mount %d = %+v, want %s at %s readOnly %v", i, got[i], m.Name, m.MountPath, m.ReadOnly)
				}
				if w, g := tc.want[i], got[i].RecursiveReadOnly; (w == nil) != (g == nil) || (w != nil && *w != *g) {
					t.Errorf("mount %s recursiveReadOnly = %v, want %v", m.Name, g, w)
				}
			}
			// Once the container runs, the mounts are those reported
			// before: the kubelet keeps them, as they cannot change.
			next := Generate(Input{Pod: pod, Runtime: runtimeWith(ctr("a", running, 0)), NodeIP: nodeIP, Now: t0, Previous: first, RecursiveReadOnlyMounts: !tc.supported})
			if !apiequality.Semantic.DeepEqual(next.ContainerStatuses[0].VolumeMounts, got) {
				t.Errorf("volumeMounts of the running container = %+v, want those reported before %+v", next.ContainerStatuses[0].VolumeMounts, got)
			}
		})
	}
}

// TestContainerStatusResources: convertContainerStatusResources, and
// allocatedResources as the spec's requests.
func TestContainerStatusResources(t *testing.T) {
	read := func(cpuReq, cpuLim, memLim string) *kuberuntime.ContainerResources {
		r := &kuberuntime.ContainerResources{}
		for _, p := range []struct {
			to **resource.Quantity
			v  string
		}{{&r.CPURequest, cpuReq}, {&r.CPULimit, cpuLim}, {&r.MemoryLimit, memLim}} {
			if p.v != "" {
				q := resource.MustParse(p.v)
				*p.to = &q
			}
		}
		return r
	}
	cases := []struct {
		name          string
		spec          corev1.ResourceRequirements
		state         runtimeapi.ContainerState
		actual        *kuberuntime.ContainerResources
		wantRequests  corev1.ResourceList
		wantLimits    corev1.ResourceList
		wantAllocated corev1.ResourceList
	}{
		{
			name:  "running: the cgroups' values",
			spec:  corev1.ResourceRequirements{Requests: quantities("cpu", "100m", "memory", "64Mi"), Limits: quantities("cpu", "500m", "memory", "128Mi")},
			state: running, actual: read("99m", "490m", "120Mi"),
			wantRequests: quantities("cpu", "99m", "memory", "64Mi"), wantLimits: quantities("cpu", "490m", "memory", "120Mi"),
			wantAllocated: quantities("cpu", "100m", "memory", "64Mi"),
		},
		{
			name:  "running, requests only: no limits reported",
			spec:  corev1.ResourceRequirements{Requests: quantities("cpu", "250m")},
			state: running, actual: read("250m", "", ""),
			wantRequests: quantities("cpu", "250m"), wantAllocated: quantities("cpu", "250m"),
		},
		{
			name:  "running at the cgroup minimum: the allocation stays",
			spec:  corev1.ResourceRequirements{Requests: quantities("cpu", "1m"), Limits: quantities("cpu", "5m")},
			state: running, actual: read("2m", "10m", ""),
			wantRequests: quantities("cpu", "1m"), wantLimits: quantities("cpu", "5m"), wantAllocated: quantities("cpu", "1m"),
		},
		{
			name:  "exited: the allocation",
			spec:  corev1.ResourceRequirements{Requests: quantities("cpu", "100m"), Limits: quantities("memory", "128Mi")},
			state: exited, actual: read("99m", "", "100Mi"),
			wantRequests: quantities("cpu", "100m"), wantLimits: quantities("memory", "128Mi"), wantAllocated: quantities("cpu", "100m"),
		},
		{
			name:  "best effort: empty resources, nothing allocated",
			state: running, actual: read("2m", "", ""),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod(corev1.RestartPolicyAlways, false, "a")
			pod.Spec.Containers[0].Resources = tc.spec
			c := ctr("a", tc.state, 0)
			c.Resources = tc.actual
			st := Generate(Input{Pod: pod, Runtime: runtimeWith(c), NodeIP: nodeIP, Now: t0, Previous: pod.Status})
			cs := st.ContainerStatuses[0]
			if cs.Resources == nil {
				t.Fatal("no resources, want them reported for a container the runtime has")
			}
			if !equalLists(cs.Resources.Requests, tc.wantRequests) || !equalLists(cs.Resources.Limits, tc.wantLimits) {
				t.Errorf("resources = %v / %v, want requests %v limits %v", cs.Resources.Requests, cs.Resources.Limits, tc.wantRequests, tc.wantLimits)
			}
			if !equalLists(cs.AllocatedResources, tc.wantAllocated) {
				t.Errorf("allocatedResources = %v, want %v", cs.AllocatedResources, tc.wantAllocated)
			}
		})
	}

	// Not yet in the runtime: neither field.
	pod := testPod(corev1.RestartPolicyAlways, false, "a")
	pod.Spec.Containers[0].Resources.Requests = quantities("cpu", "100m")
	if cs := Generate(Input{Pod: pod, NodeIP: nodeIP, Now: t0, Previous: pod.Status}).ContainerStatuses[0]; cs.Resources != nil || cs.AllocatedResources != nil {
		t.Errorf("waiting container: resources %v allocated %v, want neither", cs.Resources, cs.AllocatedResources)
	}

	// A value the runtime stops reporting for the same running container
	// stays as reported before.
	pod.Spec.Containers[0].Resources.Limits = quantities("cpu", "500m")
	c := ctr("a", running, 0)
	c.Resources = read("100m", "400m", "")
	first := Generate(Input{Pod: pod, Runtime: runtimeWith(c), NodeIP: nodeIP, Now: t0, Previous: pod.Status})
	c.Resources = nil
	next := Generate(Input{Pod: pod, Runtime: runtimeWith(c), NodeIP: nodeIP, Now: t0, Previous: first})
	if got := next.ContainerStatuses[0].Resources; !equalLists(got.Limits, quantities("cpu", "400m")) || !equalLists(got.Requests, quantities("cpu", "100m")) {
		t.Errorf("resources = %v, want those reported before", got)
	}
}

// TestContainerStatusUser: the user the runtime reports, for containers it
// has.
func TestContainerStatusUser(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, false, "a", "b")
	a := ctr("a", running, 0)
	a.User = &kuberuntime.ContainerUser{UID: 1000, GID: 3000, SupplementalGroups: []int64{3000, 4000}}
	st := Generate(Input{Pod: pod, Runtime: runtimeWith(a), NodeIP: nodeIP, Now: t0, Previous: pod.Status})
	got := statusNamed(st.ContainerStatuses, "a").User
	if got == nil || got.Linux == nil || got.Linux.UID != 1000 || got.Linux.GID != 3000 || !slices.Equal(got.Linux.SupplementalGroups, []int64{3000, 4000}) {
		t.Errorf("user = %+v, want the runtime's", got)
	}
	if u := statusNamed(st.ContainerStatuses, "b").User; u != nil {
		t.Errorf("user of a container not created = %+v, want none", u)
	}
}

// TestContainerStatusStates: created is waiting with no reason; a
// completed init container is ready; a container that ran and is gone
// keeps a last state saying so; one the pod restarts shows the reason it
// waits, unless the pod is being deleted.
func TestContainerStatusStates(t *testing.T) {
	t.Run("created", func(t *testing.T) {
		pod := testPod(corev1.RestartPolicyAlways, false, "a")
		cs := Generate(Input{Pod: pod, Runtime: runtimeWith(ctr("a", created, 0)), NodeIP: nodeIP, Now: t0, Previous: pod.Status}).ContainerStatuses[0]
		if cs.State.Waiting == nil || cs.State.Waiting.Reason != "" || cs.ContainerID == "" {
			t.Errorf("state %+v, want waiting with no reason, and the container's ID", cs.State)
		}
	})
	t.Run("completed init container", func(t *testing.T) {
		pod := testPod(corev1.RestartPolicyAlways, false, "a")
		pod.Spec.InitContainers = []corev1.Container{{Name: "init"}}
		st := Generate(Input{Pod: pod, Runtime: runtimeWith(ctr("init", exited, 0), ctr("a", running, 0)), NodeIP: nodeIP, Now: t0, Previous: pod.Status})
		ics := st.InitContainerStatuses[0]
		if !ics.Ready || ics.Started == nil || *ics.Started || ics.State.Terminated == nil {
			t.Errorf("init status ready %v started %v state %+v, want ready, not started, terminated", ics.Ready, ics.Started, ics.State)
		}
	})
	t.Run("running init container is not ready", func(t *testing.T) {
		pod := testPod(corev1.RestartPolicyAlways, false, "a")
		pod.Spec.InitContainers = []corev1.Container{{Name: "init"}}
		st := Generate(Input{Pod: pod, Runtime: runtimeWith(ctr("init", running, 0)), NodeIP: nodeIP, Now: t0, Previous: pod.Status})
		if ics := st.InitContainerStatuses[0]; ics.Ready || ics.Started == nil || !*ics.Started {
			t.Errorf("init status ready %v started %v, want started and not ready", ics.Ready, ics.Started)
		}
		if cs := st.ContainerStatuses[0]; cs.State.Waiting == nil || cs.State.Waiting.Reason != "PodInitializing" {
			t.Errorf("app container state %+v, want PodInitializing", cs.State)
		}
	})
	t.Run("gone from the runtime while running", func(t *testing.T) {
		pod := testPod(corev1.RestartPolicyAlways, false, "a")
		first := Generate(Input{Pod: pod, Runtime: runtimeWith(ctr("a", running, 0)), NodeIP: nodeIP, Now: t0, Previous: pod.Status})
		cs := Generate(Input{Pod: pod, Runtime: runtimeWith(), NodeIP: nodeIP, Now: t0, Previous: first}).ContainerStatuses[0]
		lt := cs.LastTerminationState.Terminated
		if lt == nil || lt.Reason != "ContainerStatusUnknown" || lt.ExitCode != 137 || lt.Message != messageContainerGone || cs.RestartCount != 1 {
			t.Errorf("status %+v, want lastState ContainerStatusUnknown 137 and one restart more", cs)
		}
		if cs.State.Waiting == nil || cs.State.Waiting.Reason != "ContainerCreating" {
			t.Errorf("state %+v, want waiting", cs.State)
		}
	})
	t.Run("terminated, then gone: still terminated", func(t *testing.T) {
		pod := testPod(corev1.RestartPolicyNever, false, "a")
		first := Generate(Input{Pod: pod, Runtime: runtimeWith(ctr("a", exited, 3)), NodeIP: nodeIP, Now: t0, Previous: pod.Status})
		cs := Generate(Input{Pod: pod, Runtime: runtimeWith(), NodeIP: nodeIP, Now: t0, Previous: first}).ContainerStatuses[0]
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 3 {
			t.Errorf("state %+v, want the termination reported before", cs.State)
		}
	})
	t.Run("waiting to restart, and not once deleted", func(t *testing.T) {
		pod := testPod(corev1.RestartPolicyAlways, false, "a")
		waiting := map[string]kuberuntime.Waiting{"a": {Reason: "CrashLoopBackOff", Message: "back-off 10s"}}
		rt := runtimeWith(ctr("a", exited, 1))
		cs := Generate(Input{Pod: pod, Runtime: rt, Waiting: waiting, NodeIP: nodeIP, Now: t0, Previous: pod.Status}).ContainerStatuses[0]
		if cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" || cs.LastTerminationState.Terminated == nil {
			t.Errorf("status %+v, want CrashLoopBackOff with the exit as lastState", cs)
		}
		deleted := pod.DeepCopy()
		deleted.DeletionTimestamp = &metav1.Time{Time: t0}
		cs = Generate(Input{Pod: deleted, Runtime: rt, Waiting: waiting, NodeIP: nodeIP, Now: t0, Previous: pod.Status}).ContainerStatuses[0]
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 1 {
			t.Errorf("deleted pod: state %+v, want terminated: it will not restart", cs.State)
		}
	})
}

// TestEphemeralContainerStatuses: an ephemeral container waits
// (PodInitializing in a pod with init containers) until the runtime has it,
// then runs and terminates as the runtime says; it has no started field and
// is never ready, and shows why it waits when it fails to start.
func TestEphemeralContainerStatuses(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, false, "a")
	pod.Spec.InitContainers = []corev1.Container{{Name: "init"}}
	pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox"},
		TargetContainerName:      "a",
	}}
	initDone, app := ctr("init", exited, 0), ctr("a", running, 0)
	debugger := ctr("debugger", running, 0)
	for _, tc := range []struct {
		name    string
		rt      *kuberuntime.PodStatus
		waiting map[string]kuberuntime.Waiting
		check   func(corev1.ContainerStatus) bool
	}{
		{"not created yet", runtimeWith(initDone, app), nil, func(cs corev1.ContainerStatus) bool {
			return cs.State.Waiting != nil && cs.State.Waiting.Reason == "PodInitializing" && cs.Image == "busybox"
		}},
		{"pull failed", runtimeWith(initDone, app), map[string]kuberuntime.Waiting{"debugger": {Reason: "ErrImagePull", Message: "not found"}}, func(cs corev1.ContainerStatus) bool {
			return cs.State.Waiting != nil && cs.State.Waiting.Reason == "ErrImagePull" && cs.State.Waiting.Message == "not found"
		}},
		{"running", runtimeWith(initDone, app, debugger), nil, func(cs corev1.ContainerStatus) bool {
			return cs.State.Running != nil && cs.ContainerID == "fake://id-debugger" && cs.Resources != nil
		}},
		{"exited: terminated, not waiting to restart", runtimeWith(initDone, app, ctr("debugger", exited, 0)), nil, func(cs corev1.ContainerStatus) bool {
			return cs.State.Terminated != nil && cs.State.Terminated.Reason == "Completed"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := Generate(Input{Pod: pod, Runtime: tc.rt, Waiting: tc.waiting, NodeIP: nodeIP, RuntimeName: "fake", Now: t0, Previous: pod.Status})
			if len(st.EphemeralContainerStatuses) != 1 {
				t.Fatalf("ephemeral statuses %+v, want one", st.EphemeralContainerStatuses)
			}
			cs := st.EphemeralContainerStatuses[0]
			if !tc.check(cs) || cs.Started != nil || cs.Ready {
				t.Errorf("ephemeral status %+v", cs)
			}
			if st.Phase != corev1.PodRunning || cond(st, corev1.PodReady) != corev1.ConditionTrue {
				t.Errorf("phase %s Ready %s: the ephemeral container must not count", st.Phase, cond(st, corev1.PodReady))
			}
		})
	}
}

// TestPodResources: the pod-level resources and allocatedResources the
// kubelet writes for every pod: the sums before the API shows it Running,
// then what a cgroup v2 pod cgroup reads back.
func TestPodResources(t *testing.T) {
	burstable := func() *corev1.Pod {
		pod := testPod(corev1.RestartPolicyAlways, false, "web", "agent")
		pod.Status.QOSClass = corev1.PodQOSBurstable
		pod.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: quantities("cpu", "50m", "memory", "32Mi")}}}
		pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Requests: quantities("cpu", "100m", "memory", "64Mi", "ephemeral-storage", "1Gi"), Limits: quantities("cpu", "500m", "memory", "128Mi"),
		}
		pod.Spec.Containers[1].Resources = corev1.ResourceRequirements{Requests: quantities("cpu", "250m", "memory", "32Mi"), Limits: quantities("memory", "64Mi")}
		return pod
	}
	guaranteed := func() *corev1.Pod {
		pod := testPod(corev1.RestartPolicyAlways, false, "a")
		pod.Status.QOSClass = corev1.PodQOSGuaranteed
		l := quantities("cpu", "1", "memory", "1Gi")
		pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: l, Limits: l}
		return pod
	}
	runningIn := func(pod *corev1.Pod) *corev1.Pod { pod.Status.Phase = corev1.PodRunning; return pod }
	cases := []struct {
		name                     string
		pod                      *corev1.Pod
		prev                     corev1.PodStatus
		wantRequests, wantLimits corev1.ResourceList
		wantAllocated            corev1.ResourceList
	}{
		{
			name: "pending: the sums of the containers (init as a floor)", pod: burstable(),
			wantRequests: quantities("cpu", "350m", "memory", "96Mi", "ephemeral-storage", "1Gi"), wantLimits: quantities("cpu", "500m", "memory", "192Mi"),
			wantAllocated: quantities("cpu", "350m", "memory", "96Mi", "ephemeral-storage", "1Gi"),
		},
		{
			name: "running: cpu from the v2 weight, limits the cgroup lacks as before", pod: runningIn(burstable()),
			prev:         corev1.PodStatus{Phase: corev1.PodRunning, Resources: &corev1.ResourceRequirements{Limits: quantities("cpu", "500m", "memory", "192Mi")}},
			wantRequests: quantities("cpu", "334m", "memory", "96Mi"), wantLimits: quantities("cpu", "500m", "memory", "192Mi"),
			wantAllocated: quantities("cpu", "350m", "memory", "96Mi", "ephemeral-storage", "1Gi"),
		},
		{
			name: "running guaranteed: the cgroup's quota and memory limit", pod: runningIn(guaranteed()),
			wantRequests: quantities("cpu", "975m", "memory", "1Gi"), wantLimits: quantities("cpu", "1", "memory", "1Gi"),
			wantAllocated: quantities("cpu", "1", "memory", "1Gi"),
		},
		{
			name: "best effort", pod: runningIn(testPod(corev1.RestartPolicyAlways, false, "a")),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := Generate(Input{Pod: tc.pod, NodeIP: nodeIP, Now: t0, Previous: tc.prev})
			if st.Resources == nil {
				t.Fatal("no pod resources")
			}
			if !equalLists(st.Resources.Requests, tc.wantRequests) || !equalLists(st.Resources.Limits, tc.wantLimits) {
				t.Errorf("resources = requests %v limits %v, want %v %v", st.Resources.Requests, st.Resources.Limits, tc.wantRequests, tc.wantLimits)
			}
			if !equalLists(st.AllocatedResources, tc.wantAllocated) {
				t.Errorf("allocatedResources = %v, want %v", st.AllocatedResources, tc.wantAllocated)
			}
		})
	}
}

// TestGenerateIsStableForARunningPod: a second status from the same
// runtime state equals the first, so the status manager sends nothing.
func TestGenerateIsStableForARunningPod(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, false, "a")
	pod.Spec.Containers[0].Resources.Requests = quantities("cpu", "100m")
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "v", MountPath: "/v", ReadOnly: true}}
	c := ctr("a", running, 0)
	c.Resources = &kuberuntime.ContainerResources{}
	c.User = &kuberuntime.ContainerUser{SupplementalGroups: []int64{0}}
	pod.Status.Phase = corev1.PodRunning
	first := Generate(Input{Pod: pod, Runtime: runtimeWith(c), NodeIP: nodeIP, Now: t0, Previous: pod.Status})
	second := Generate(Input{Pod: pod, Runtime: runtimeWith(c), NodeIP: nodeIP, Now: t0.Add(time.Minute), Previous: first})
	if !apiequality.Semantic.DeepEqual(first, second) {
		t.Errorf("second status differs:\n%+v\n%+v", first, second)
	}
}
