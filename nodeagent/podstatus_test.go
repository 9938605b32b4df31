package nodeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/fakeruntime"
)

// podRequests are the agent's requests about one pod, in order: "get",
// "patch <body>", "delete".
func (h *harness) podRequests(name string) []string {
	var out []string
	for _, a := range h.client.Actions() {
		if a.GetResource().Resource != "pods" || a.GetSubresource() == "binding" {
			continue
		}
		named, ok := a.(interface{ GetName() string })
		if !ok || named.GetName() != name {
			continue
		}
		switch a.GetVerb() {
		case "get", "delete":
			out = append(out, a.GetVerb())
		case "patch":
			out = append(out, "patch "+string(a.(k8stesting.PatchAction).GetPatch()))
		}
	}
	return out
}

// stepUntil steps the fake clock a second at a time, and after each step
// waits in real time (up to a few seconds) for cond, so that what a step
// sets off settles before the next: one step moves the pod one stage on.
func (h *harness) stepUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 30 {
		if cond() {
			return
		}
		h.clock.Step(time.Second)
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if cond() {
				return
			}
		}
	}
	t.Fatalf("timed out waiting until %s", what)
}

func patchedStatus(t *testing.T, req string) map[string]any {
	t.Helper()
	var p struct {
		Status map[string]any `json:"status"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(req, "patch ")), &p); err != nil {
		t.Fatal(err)
	}
	return p.Status
}

// TestAgentSendsTheKubeletsStatusUpdates follows a pod's status updates
// through the agent as the audit log shows a 1.37 kubelet's: at start the
// status without a sandbox, PodReadyToStartContainers (OnPodSandboxReady),
// then Running; at deletion the terminating status (the new generation
// observed) and the terminal phase, then, after the worker has waited for
// a newer PLEG relist, a GET without a PATCH before the delete. The fake
// runtime's latencies hold each stage on the fake clock, so that no two
// updates can reach the status manager together.
func TestAgentSendsTheKubeletsStatusUpdates(t *testing.T) {
	h := startAgent(t, func(c *Config) {
		rt := fakeruntime.New(fakeruntime.Config{Clock: c.Clock.(*clocktesting.FakeClock), Behaviour: fakeruntime.Behaviour{
			SandboxStartLatency: time.Second, ContainerStartLatency: time.Second, StopLatency: time.Second,
		}})
		c.Runtime, c.Images = rt, rt
	})
	ctx := context.Background()
	h.allocatePodCIDR(t)
	h.eventually(t, "the node is Ready", func() bool {
		node := h.node(t)
		return node != nil && nodeCondition(node, corev1.NodeReady) == corev1.ConditionTrue
	})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web", Generation: 1},
		Spec: corev1.PodSpec{
			NodeName: "n1", RestartPolicy: corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
			Volumes:    []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}},
	}
	if _, err := h.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The test reads the tracker, so that the client's actions are the
	// agent's alone.
	get := func() *corev1.Pod {
		obj, err := h.client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "default", "web")
		if err != nil {
			return nil
		}
		return obj.(*corev1.Pod)
	}
	patches := func() []string {
		var out []string
		for _, r := range h.podRequests("web") {
			if strings.HasPrefix(r, "patch ") {
				out = append(out, r)
			}
		}
		return out
	}

	h.stepUntil(t, "the first status", func() bool { return len(patches()) == 1 })
	first := patchedStatus(t, patches()[0])
	if first["phase"] != nil || !strings.Contains(patches()[0], `"message":"no pod sandbox exists"`) {
		t.Errorf("first status %s, want Pending (no phase change) without a sandbox", patches()[0])
	}
	h.stepUntil(t, "PodReadyToStartContainers", func() bool { return len(patches()) == 2 })
	second := patchedStatus(t, patches()[1])
	if second["phase"] != nil || second["podIP"] != nil || second["containerStatuses"] != nil ||
		!strings.Contains(patches()[1], `"status":"True","type":"PodReadyToStartContainers"`) {
		t.Errorf("second status %s, want PodReadyToStartContainers True alone", patches()[1])
	}
	h.stepUntil(t, "Running", func() bool { return len(patches()) == 3 })
	if third := patchedStatus(t, patches()[2]); third["phase"] != string(corev1.PodRunning) || third["podIP"] == nil {
		t.Errorf("third status %s, want Running with the pod IP", patches()[2])
	}

	// A graceful deletion, as the API server makes it: the deletion
	// timestamp, and the generation moved on.
	p := get()
	p.DeletionTimestamp = &metav1.Time{Time: h.clock.Now()}
	p.DeletionGracePeriodSeconds = new(int64)
	*p.DeletionGracePeriodSeconds = 30
	p.Generation = 2
	if _, err := h.client.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The worker waits for a relist newer than its last sync, then reports
	// the terminating status; the kill waits on the fake clock, so that
	// status comes alone.
	h.stepUntil(t, "the terminating status", func() bool { return len(patches()) == 4 })
	if st := get().Status; st.ObservedGeneration != 2 || st.Phase != corev1.PodRunning {
		t.Errorf("terminating status: observedGeneration %d phase %s, want 2 Running", st.ObservedGeneration, st.Phase)
	}
	// Once the kill completes, the stopped containers' status, with the
	// terminal phase (held back, as mergePodStatus does, if the status
	// manager merged it before the worker marked the containers stopped:
	// it then goes out with SyncTerminatedPod's status).
	h.stepUntil(t, "the stopped containers' status", func() bool { return len(patches()) == 5 })
	if st := get().Status; st.ContainerStatuses[0].State.Terminated == nil || st.PodIP == "" {
		t.Errorf("stopped status: %+v, want the container terminated and the pod IP kept", st)
	}
	// The worker waits for a relist newer than the kill's end before it
	// cleans up: nothing more happens until the clock moves.
	if get() == nil || strings.Contains(strings.Join(h.podRequests("web"), " "), "delete") {
		t.Fatal("deleted before the clean-up waited for the PLEG")
	}
	h.stepUntil(t, "the pod is deleted", func() bool { return get() == nil })
	reqs := h.podRequests("web")
	if reqs[len(reqs)-1] != "delete" || reqs[len(reqs)-2] == "delete" {
		t.Fatalf("requests %v, want them to end with one delete", reqs)
	}
	// The delete is TerminatePod's: after a GET of its own, or after the
	// held phase's patch, once the API holds the terminal phase.
	last := patches()[len(patches())-1]
	if !strings.Contains(last, `"phase":"Succeeded"`) {
		t.Errorf("last patch %s, want the terminal phase before the delete", last)
	}
	if n := len(patches()); n != 5 && n != 6 {
		t.Errorf("%d status patches, want the kubelet's 5 (6 with the phase held back): %v", n, patches())
	}
}

var updateGolden = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// checkGolden compares got with testdata/name, or rewrites it with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	golden := filepath.Join("testdata", name)
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./nodeagent/ -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("status differs from %s (rerun with -update if the change is intended):\n%s", golden, lineDiff(want, got))
	}
}

// lineDiff lists the lines of got that differ from want, by number.
func lineDiff(want, got []byte) string {
	wl, gl := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
	var b strings.Builder
	for i := range max(len(wl), len(gl)) {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			fmt.Fprintf(&b, "line %d:\n  want %s\n  got  %s\n", i+1, w, g)
		}
	}
	return b.String()
}

// normalizedStatus is the pod's status as indented JSON with what differs
// from run to run or machine to machine replaced: times, IPs, container
// IDs and image digests.
func normalizedStatus(t *testing.T, st corev1.PodStatus) []byte {
	t.Helper()
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				s, isString := e.(string)
				switch {
				case !isString:
					v[k] = walk(e)
				case k == "startTime" || k == "lastTransitionTime" || k == "startedAt" || k == "finishedAt":
					v[k] = "<time>"
				case k == "podIP" || k == "hostIP" || k == "ip":
					v[k] = "<ip>"
				case k == "containerID":
					runtimeName, _, _ := strings.Cut(s, "://")
					v[k] = runtimeName + "://<id>"
				case k == "imageID":
					repo, _, _ := strings.Cut(s, "@")
					v[k] = repo + "@sha256:<digest>"
				}
			}
			return v
		case []any:
			for i := range v {
				v[i] = walk(v[i])
			}
		}
		return v
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(walk(doc)); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// goldenPod is a Burstable pod with what most pods have: an init
// container, two app containers (spec order not name order) with requests
// and limits, a ConfigMap and a projected volume mounted read-only, and a
// pod security context with supplemental groups and an fsGroup.
func goldenPod() *corev1.Pod {
	rl := func(cpu, memory string) corev1.ResourceList {
		l := corev1.ResourceList{}
		if cpu != "" {
			l[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if memory != "" {
			l[corev1.ResourceMemory] = resource.MustParse(memory)
		}
		return l
	}
	ifPossible := corev1.RecursiveReadOnlyIfPossible
	fsGroup := int64(3000)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "default", UID: "uid-web", Generation: 1,
			// The init container completes; the others run until stopped.
			Annotations: map[string]string{fakeruntime.AnnotationBehaviour: `{"migrate": {"runFor": "2s"}}`},
		},
		Spec: corev1.PodSpec{
			NodeName: "n1", RestartPolicy: corev1.RestartPolicyAlways,
			SecurityContext: &corev1.PodSecurityContext{SupplementalGroups: []int64{2000, 1000}, FSGroup: &fsGroup},
			InitContainers: []corev1.Container{{
				Name: "migrate", Image: "busybox:1.36", ImagePullPolicy: corev1.PullIfNotPresent,
				Resources: corev1.ResourceRequirements{Requests: rl("50m", "32Mi")},
			}},
			Containers: []corev1.Container{
				{
					Name: "web", Image: "nginx:1.27", ImagePullPolicy: corev1.PullIfNotPresent,
					Resources: corev1.ResourceRequirements{Requests: rl("100m", "64Mi"), Limits: rl("500m", "128Mi")},
					VolumeMounts: []corev1.VolumeMount{
						{Name: "config", MountPath: "/etc/web", ReadOnly: true},
						{Name: "info", MountPath: "/etc/info", ReadOnly: true, RecursiveReadOnly: &ifPossible},
						{Name: "cache", MountPath: "/var/cache/web"},
					},
				},
				{
					Name: "agent", Image: "busybox:1.36", ImagePullPolicy: corev1.PullIfNotPresent,
					Resources:    corev1.ResourceRequirements{Requests: rl("250m", "32Mi"), Limits: rl("", "64Mi")},
					VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/agent", ReadOnly: true}},
				},
			},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"},
				}}},
				{Name: "info", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "web-config"}}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
						{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
					}}},
				}}}},
				{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
		// As the API server creates it.
		Status: corev1.PodStatus{
			Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}},
		},
	}
}

// TestAgentPodStatusGolden runs goldenPod to Running on the fake runtime
// and compares the status the agent reports, once the pod has been resynced
// as Running (the kubelet then reads the pod's resources back from its
// cgroup), with testdata/podstatus.golden: every field the 1.37 kubelet
// writes for that spec, with the same values.
func TestAgentPodStatusGolden(t *testing.T) {
	h := startAgent(t)
	ctx := context.Background()
	h.allocatePodCIDR(t)
	if _, err := h.client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-config"}, Data: map[string]string{"web.conf": "listen 80;"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.CoreV1().Pods("default").Create(ctx, goldenPod(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := func() bool {
		p := h.pod(t, "web")
		return p != nil && p.Status.Phase == corev1.PodRunning && podCondition(p, corev1.PodReady) == corev1.ConditionTrue
	}
	h.eventually(t, "the pod is Running and Ready", ready)
	// The next sync (the pod worker's resync) sees the API's Running.
	h.eventually(t, "the pod's resources are read back from its cgroup", func() bool {
		p := h.pod(t, "web")
		return p.Status.Resources != nil && p.Status.Resources.Requests.Cpu().MilliValue() != 350
	})
	checkGolden(t, "podstatus.golden", normalizedStatus(t, h.pod(t, "web").Status))
}

// TestAgentRunsEphemeralContainer is `kubectl debug`: an ephemeral
// container added to a running pod through the ephemeralcontainers
// subresource is pulled, created and started (events naming it by its
// field path), reported Running in ephemeralContainerStatuses, and killed
// with the pod.
func TestAgentRunsEphemeralContainer(t *testing.T) {
	h := startAgent(t)
	ctx := context.Background()
	h.allocatePodCIDR(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec: corev1.PodSpec{
			NodeName: "n1", RestartPolicy: corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{Name: "app", Image: "nginx:1.27", ImagePullPolicy: corev1.PullIfNotPresent}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}},
	}
	if _, err := h.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "the pod runs", func() bool { return h.pod(t, "web").Status.Phase == corev1.PodRunning })

	// What kubectl debug -it --image=busybox:1.36 --target=app sends.
	p := h.pod(t, "web")
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: "busybox:1.36", ImagePullPolicy: corev1.PullIfNotPresent,
			Stdin: true, TTY: true, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		},
		TargetContainerName: "app",
	})
	if _, err := h.client.CoreV1().Pods("default").UpdateEphemeralContainers(ctx, "web", p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := func() bool {
		ecs := h.pod(t, "web").Status.EphemeralContainerStatuses
		return len(ecs) == 1 && ecs[0].State.Running != nil
	}
	h.eventually(t, "the ephemeral container is reported Running", running)
	ec := h.pod(t, "web").Status.EphemeralContainerStatuses[0]
	if ec.Name != "debugger" || ec.Ready || ec.Started != nil || ec.RestartCount != 0 || ec.ContainerID == "" ||
		ec.Image != "docker.io/library/busybox:1.36" || ec.User == nil {
		t.Errorf("ephemeral container status %+v, want debugger running, not ready, with no started field", ec)
	}
	if p := h.pod(t, "web"); p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("pod status %+v, want the app container untouched", p.Status)
	}
	// The kubelet's events, about the ephemeral container.
	field := "spec.ephemeralContainers{debugger}"
	for _, want := range []struct{ reason, message string }{
		{"Pulling", `Pulling image "busybox:1.36"`},
		{"Pulled", ""},
		{"Created", "Container created"},
		{"Started", "Container started"},
	} {
		h.eventually(t, fmt.Sprintf("a %s event %q for %s", want.reason, want.message, field), func() bool {
			return h.hasContainerEvent(field, want.reason, want.message)
		})
	}

	// The pod is deleted: the ephemeral container is stopped with the rest.
	p = h.pod(t, "web")
	p.DeletionTimestamp = &metav1.Time{Time: h.clock.Now()}
	p.DeletionGracePeriodSeconds = new(int64)
	*p.DeletionGracePeriodSeconds = 30
	if _, err := h.client.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "the ephemeral container is killed with the pod", func() bool {
		return h.hasContainerEvent(field, "Killing", "Stopping container debugger")
	})
	h.eventually(t, "the pod is gone", func() bool { return h.pod(t, "web") == nil })
	containers, err := h.runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{})
	if err != nil || len(containers) != 0 {
		t.Errorf("containers left = %v, %v", containers, err)
	}
}

// hasContainerEvent reports an event about the container at fieldPath
// with that reason and message ("" for any).
func (h *harness) hasContainerEvent(fieldPath, reason, message string) bool {
	events, err := h.client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, e := range events.Items {
		if e.InvolvedObject.FieldPath == fieldPath && e.Reason == reason && (message == "" || e.Message == message) {
			return true
		}
	}
	return false
}
