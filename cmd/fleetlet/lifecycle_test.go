//go:build integration

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/fleetlet/fleetlet/loadprofiles"
)

// timeline records, per pod, each change of what matters in its status,
// stamped with the time since the load started.
type timeline struct {
	mu      sync.Mutex
	start   time.Time
	last    map[string]string
	entries map[string][]string
}

func (tl *timeline) observe(pods []corev1.Pod) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, p := range pods {
		phase := strings.SplitN(p.Name, "-", 2)[0]
		state := describe(&p)
		if tl.last[phase] != state {
			tl.last[phase] = state
			tl.entries[phase] = append(tl.entries[phase], fmt.Sprintf("%6.1fs %s", time.Since(tl.start).Seconds(), state))
		}
	}
}

// describe is one line of a pod's status: phase, Ready, and per container
// its state, reason and restart count.
func describe(p *corev1.Pod) string {
	parts := []string{string(p.Status.Phase), "ready=" + string(condition(p.Status.Conditions, corev1.PodReady))}
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		st := "?"
		switch {
		case cs.State.Running != nil:
			st = "running"
		case cs.State.Waiting != nil:
			st = "waiting:" + cs.State.Waiting.Reason
		case cs.State.Terminated != nil:
			st = fmt.Sprintf("terminated:%s(%d)", cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
		}
		parts = append(parts, fmt.Sprintf("%s=%s/restarts=%d", cs.Name, st, cs.RestartCount))
	}
	return strings.Join(parts, " ")
}

func (tl *timeline) has(phase, substr string) bool {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, e := range tl.entries[phase] {
		if strings.Contains(e, substr) {
			return true
		}
	}
	return false
}

func kubeletEvents(ctx context.Context, t *testing.T, client kubernetes.Interface, pod *corev1.Pod) map[string]int {
	t.Helper()
	events, err := client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, e := range events.Items {
		if e.Source.Component == "kubelet" {
			reasons[e.Reason] += int(max(e.Count, 1))
		}
	}
	return reasons
}

// TestLifecycleProfile runs the built-in lifecycle profile against the real
// control plane and checks that each pod goes through the kubelet's status
// transitions and events.
func TestLifecycleProfile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := startTestSession(ctx, t, "lifecycle", func(ph loadprofiles.Phase) bool { return ph.Create != nil || ph.Sleep != nil })
	client := s.client
	tl := &timeline{start: time.Now(), last: map[string]string{}, entries: map[string][]string{}}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		_ = wait.PollUntilContextCancel(sampleCtx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			if pods, err := client.CoreV1().Pods(loadprofiles.DefaultNamespace).List(ctx, metav1.ListOptions{}); err == nil {
				tl.observe(pods.Items)
			}
			return false, nil
		})
	}()
	if err := s.drive(ctx); err != nil {
		t.Fatal(err)
	}
	stopSampling()
	<-sampled
	for phase, entries := range tl.entries {
		t.Logf("%s:\n  %s", phase, strings.Join(entries, "\n  "))
	}

	pods := map[string]*corev1.Pod{}
	list, err := client.CoreV1().Pods(loadprofiles.DefaultNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		pods[strings.SplitN(list.Items[i].Name, "-", 2)[0]] = &list.Items[i]
	}

	t.Run("crash loop", func(t *testing.T) {
		p := pods["crashloop"]
		cs := p.Status.ContainerStatuses[0]
		// Runs 2 s per attempt, restarts at once, then after 10, 20, 40 s:
		// at least 3 restarts in 75 s.
		if cs.RestartCount < 3 || p.Status.Phase != corev1.PodRunning {
			t.Errorf("restarts %d, phase %s; want >= 3 and Running", cs.RestartCount, p.Status.Phase)
		}
		if lt := cs.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 1 || lt.Reason != "Error" {
			t.Errorf("lastState = %+v, want terminated Error (1)", cs.LastTerminationState)
		}
		if !tl.has("crashloop", "app=waiting:CrashLoopBackOff") {
			t.Error("never seen waiting in CrashLoopBackOff")
		}
		if ev := kubeletEvents(ctx, t, client, p); ev["BackOff"] == 0 || ev["Started"] < 3 {
			t.Errorf("events %v, want BackOff and several Started", ev)
		}
	})
	t.Run("pull failure", func(t *testing.T) {
		p := pods["pullfail"]
		if p.Status.Phase != corev1.PodPending {
			t.Errorf("phase %s, want Pending", p.Status.Phase)
		}
		if !tl.has("pullfail", "waiting:ErrImagePull") || !tl.has("pullfail", "waiting:ImagePullBackOff") {
			t.Error("not seen going ErrImagePull then ImagePullBackOff")
		}
		// Pulls at 0, 10, 30 and 70 s.
		if ev := kubeletEvents(ctx, t, client, p); ev["Pulling"] < 3 || ev["Failed"] == 0 || ev["BackOff"] == 0 {
			t.Errorf("events %v, want at least 3 Pulling, Failed and BackOff", ev)
		}
	})
	t.Run("run to completion", func(t *testing.T) {
		p := pods["complete"]
		cs := p.Status.ContainerStatuses[0]
		if p.Status.Phase != corev1.PodSucceeded || cs.State.Terminated == nil || cs.State.Terminated.Reason != "Completed" {
			t.Errorf("phase %s, state %+v; want Succeeded with the container Completed", p.Status.Phase, cs.State)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && (c.Status != corev1.ConditionFalse || c.Reason != "PodCompleted") {
				t.Errorf("Ready = %s (%s), want False (PodCompleted)", c.Status, c.Reason)
			}
		}
	})
	t.Run("init containers and sidecar", func(t *testing.T) {
		p := pods["initsidecar"]
		if p.Status.Phase != corev1.PodRunning || condition(p.Status.Conditions, corev1.PodInitialized) != corev1.ConditionTrue ||
			condition(p.Status.Conditions, corev1.PodReady) != corev1.ConditionTrue {
			t.Fatalf("status: %s", describe(p))
		}
		init := p.Status.InitContainerStatuses
		if init[0].State.Running == nil || init[1].State.Terminated == nil || init[1].State.Terminated.ExitCode != 0 {
			t.Errorf("init containers: %s", describe(p))
		}
		if !tl.has("initsidecar", "Pending") {
			t.Error("never seen Pending while initializing")
		}
	})
	t.Run("liveness restart", func(t *testing.T) {
		p := pods["liveness"]
		// Healthy for 20 s, then two failed probes 5 s apart: killed and
		// restarted, and the new container's schedule starts over.
		if cs := p.Status.ContainerStatuses[0]; cs.RestartCount < 1 {
			t.Errorf("restarts %d, want at least 1", cs.RestartCount)
		}
		if ev := kubeletEvents(ctx, t, client, p); ev["Unhealthy"] == 0 || ev["Killing"] == 0 {
			t.Errorf("events %v, want Unhealthy and Killing", ev)
		}
	})
	t.Run("readiness flapping", func(t *testing.T) {
		if !tl.has("readiness", "ready=False") || !tl.has("readiness", "Running ready=True") {
			t.Fatal("Ready never flipped")
		}
		tl.mu.Lock()
		defer tl.mu.Unlock()
		var flips []string
		for _, e := range tl.entries["readiness"] {
			if strings.Contains(e, "Running ready=") {
				flips = append(flips, strings.Fields(e)[2])
			}
		}
		want := "ready=True ready=False ready=True"
		if !strings.Contains(strings.Join(flips, " "), want) {
			t.Errorf("readiness went %v, want it to contain %s", flips, want)
		}
	})

	t.Run("volumes and environment", func(t *testing.T) {
		p := pods["config"]
		if p.Status.Phase != corev1.PodRunning || condition(p.Status.Conditions, corev1.PodReady) != corev1.ConditionTrue {
			t.Fatalf("pod with emptyDir, downwardAPI, a projected token and env from kube-root-ca.crt: %s", describe(p))
		}
		// What the agent handed its runtime, as crictl inspect shows it on a
		// node: a mount for every volumeMount of the spec (the projected
		// token's among them, which admission added), and the environment
		// resolved from the pod and from the kube-root-ca.crt ConfigMap.
		mounts, envs := containerConfig(ctx, t, s, p)
		for _, vm := range p.Spec.Containers[0].VolumeMounts {
			if !mounts[vm.MountPath] {
				t.Errorf("volume %s is not mounted at %s: the runtime has mounts %v", vm.Name, vm.MountPath, mounts)
			}
		}
		if envs["POD_NAME"] != p.Name {
			t.Errorf("POD_NAME = %q, want the pod's name %q", envs["POD_NAME"], p.Name)
		}
		if !strings.HasPrefix(envs["CA"], "-----BEGIN CERTIFICATE-----") {
			t.Errorf("CA = %.40q, want kube-root-ca.crt's ca.crt", envs["CA"])
		}
	})
	t.Run("missing volume source", func(t *testing.T) {
		p := pods["missingvolume"]
		if p.Status.Phase != corev1.PodPending || !tl.has("missingvolume", "app=waiting:ContainerCreating") {
			t.Errorf("status %s; want Pending in ContainerCreating", describe(p))
		}
		if ev := kubeletEvents(ctx, t, client, p); ev["FailedMount"] == 0 || ev["Started"] != 0 {
			t.Errorf("events %v, want FailedMount and nothing started", ev)
		}
	})
	t.Run("failing postStart hook", func(t *testing.T) {
		p := pods["poststart"]
		if cs := p.Status.ContainerStatuses[0]; cs.RestartCount < 1 {
			t.Errorf("restarts %d, want at least 1: the kubelet kills a container whose postStart hook fails", cs.RestartCount)
		}
		if ev := kubeletEvents(ctx, t, client, p); ev["FailedPostStartHook"] == 0 || ev["Killing"] == 0 {
			t.Errorf("events %v, want FailedPostStartHook and Killing", ev)
		}
	})
	t.Run("missing environment source", func(t *testing.T) {
		p := pods["missingenv"]
		w := p.Status.ContainerStatuses[0].State.Waiting
		if p.Status.Phase != corev1.PodPending || w == nil || w.Reason != "CreateContainerConfigError" ||
			w.Message != `secret "db-credentials-that-do-not-exist" not found` {
			t.Errorf("status %s (%+v); want waiting CreateContainerConfigError naming the secret", describe(p), w)
		}
	})

	t.Run("readiness gate", func(t *testing.T) {
		p := pods["gates"]
		ready := findCondition(p.Status.Conditions, corev1.PodReady)
		want := `corresponding condition of pod readiness gate "fleetlet.io/load-balancer-ready" does not exist.`
		if condition(p.Status.Conditions, corev1.ContainersReady) != corev1.ConditionTrue || ready == nil ||
			ready.Status != corev1.ConditionFalse || ready.Reason != "ReadinessGatesNotReady" || ready.Message != want {
			t.Fatalf("Ready = %+v with containers ready; want False, ReadinessGatesNotReady, %q", ready, want)
		}
		// What a load-balancer controller does once the pod is in rotation.
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
			Type: "fleetlet.io/load-balancer-ready", Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(),
		})
		start := time.Now()
		if _, err := client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(ctx, t, client, p, "Ready once its gate is True", func(p *corev1.Pod) bool {
			return condition(p.Status.Conditions, corev1.PodReady) == corev1.ConditionTrue
		})
		t.Logf("gate set True: pod Ready %s later", time.Since(start).Round(time.Millisecond))
	})
	t.Run("ephemeral container", func(t *testing.T) {
		p := pods["gates"]
		p, err := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// What kubectl debug -it --image=busybox:1.36 --target=app sends.
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debugger", Image: "busybox:1.36", ImagePullPolicy: corev1.PullIfNotPresent,
				Stdin: true, TTY: true, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			},
			TargetContainerName: "app",
		})
		start := time.Now()
		if _, err := client.CoreV1().Pods(p.Namespace).UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		p = waitPod(ctx, t, client, p, "its ephemeral container running", func(p *corev1.Pod) bool {
			ecs := p.Status.EphemeralContainerStatuses
			return len(ecs) == 1 && ecs[0].State.Running != nil
		})
		t.Logf("ephemeral container added: Running in the API %s later", time.Since(start).Round(time.Millisecond))
		if ec := p.Status.EphemeralContainerStatuses[0]; ec.Ready || ec.RestartCount != 0 || ec.ContainerID == "" {
			t.Errorf("ephemeral container status %+v", ec)
		}
		if ev := kubeletEvents(ctx, t, client, p); ev["Pulling"] == 0 || ev["Started"] < 2 {
			t.Errorf("events %v, want the debugger pulled and started", ev)
		}
	})
	t.Run("in-place resize", func(t *testing.T) {
		p := pods["resizable"]
		start := time.Now()
		// kubectl patch pod P --subresource resize --patch ...
		patch := `{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"150m"},"limits":{"cpu":"300m"}}}]}}`
		resized, err := client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize")
		if err != nil {
			t.Fatalf("the API server refused the resize: %v", err)
		}
		cpu := func(l corev1.ResourceList) string { return l.Cpu().String() }
		p = waitPod(ctx, t, client, resized, "resized and reported", func(p *corev1.Pod) bool {
			cs := p.Status.ContainerStatuses
			return p.Status.ObservedGeneration == resized.Generation && findCondition(p.Status.Conditions, corev1.PodResizeInProgress) == nil &&
				len(cs) == 1 && cs[0].Resources != nil && cpu(cs[0].Resources.Requests) == "150m" && cpu(cs[0].Resources.Limits) == "300m" &&
				cpu(cs[0].AllocatedResources) == "150m"
		})
		t.Logf("resize to 150m/300m: done in the API %s later (generation %d)", time.Since(start).Round(time.Millisecond), p.Generation)
		if cs := p.Status.ContainerStatuses[0]; cs.RestartCount != 0 {
			t.Errorf("restarts %d: a NotRequired resize restarts nothing", cs.RestartCount)
		}
		if ev := kubeletEvents(ctx, t, client, p); ev["ResizeStarted"] != 1 || ev["ResizeCompleted"] != 1 {
			t.Errorf("events %v, want one ResizeStarted and one ResizeCompleted", ev)
		}
		// The API server refuses a resize beyond the node's allocatable;
		// one that fits it but not beside the other pods is the kubelet's
		// to defer. A pod bound to the same node takes 7800m of its 8000m.
		filler := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "filler", Namespace: p.Namespace},
			Spec: corev1.PodSpec{NodeName: p.Spec.NodeName, Containers: []corev1.Container{{
				Name: "app", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("7800m")}},
			}}},
		}
		if filler, err = client.CoreV1().Pods(p.Namespace).Create(ctx, filler, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(ctx, t, client, filler, "the filler running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		patch = `{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"300m"}}}]}}`
		if resized, err = client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
			t.Fatal(err)
		}
		p = waitPod(ctx, t, client, resized, "the resize deferred", func(p *corev1.Pod) bool {
			c := findCondition(p.Status.Conditions, corev1.PodResizePending)
			return c != nil && c.Reason == corev1.PodReasonDeferred && c.ObservedGeneration == resized.Generation
		})
		if c := findCondition(p.Status.Conditions, corev1.PodResizePending); c.Message != "Node didn't have enough resource: cpu, requested: 300, used: 7800, capacity: 8000" {
			t.Errorf("PodResizePending message %q, want the kubelet's admission message", c.Message)
		}
		if got := cpu(p.Status.ContainerStatuses[0].AllocatedResources); got != "150m" {
			t.Errorf("allocated cpu %s while deferred, want 150m", got)
		}
		// The filler goes: the deferred resize is retried and done.
		start = time.Now()
		if err := client.CoreV1().Pods(p.Namespace).Delete(ctx, filler.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		waitPod(ctx, t, client, resized, "resized once the filler is gone", func(p *corev1.Pod) bool {
			cs := p.Status.ContainerStatuses
			return findCondition(p.Status.Conditions, corev1.PodResizePending) == nil && findCondition(p.Status.Conditions, corev1.PodResizeInProgress) == nil &&
				len(cs) == 1 && cs[0].Resources != nil && cpu(cs[0].Resources.Requests) == "300m"
		})
		t.Logf("deferred resize to 300m: done %s after the filler's deletion", time.Since(start).Round(time.Millisecond))
	})
	t.Run("static pods", func(t *testing.T) {
		mirrors := map[string]*corev1.Pod{}
		for _, node := range s.fleet.NodeNames() {
			name := "node-agent-" + node
			m := waitPod(ctx, t, client, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name}}, "its mirror pod running", func(p *corev1.Pod) bool {
				return p.Status.Phase == corev1.PodRunning && p.Annotations[corev1.MirrorPodAnnotationKey] != ""
			})
			if m.Spec.NodeName != node {
				t.Errorf("mirror pod %s is on %q", name, m.Spec.NodeName)
			}
			mirrors[node] = m
		}
		// A deleted mirror pod is made again, as the kubelet does.
		node := s.fleet.NodeNames()[0]
		old := mirrors[node]
		if err := client.CoreV1().Pods("kube-system").Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitPod(ctx, t, client, old, "its mirror pod made again", func(p *corev1.Pod) bool {
			return p.UID != old.UID && p.Status.Phase == corev1.PodRunning
		})
	})

	// Graceful deletion of everything, including the completed pod and the
	// one with a preStop hook: the agents finish every deletion.
	if err := client.CoreV1().Pods(loadprofiles.DefaultNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		left, err := client.CoreV1().Pods(loadprofiles.DefaultNamespace).List(ctx, metav1.ListOptions{})
		return err == nil && len(left.Items) == 0, nil
	})
	if err != nil {
		t.Errorf("pods still present 2 minutes after their deletion")
	}
	if ev := kubeletEvents(ctx, t, client, pods["graceful"]); ev["Killing"] == 0 {
		t.Errorf("graceful pod events %v, want Killing", ev)
	}
}

// waitPod polls pod until ok holds for it, for at most a minute.
func waitPod(ctx context.Context, t *testing.T, client kubernetes.Interface, pod *corev1.Pod, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return ok(p), nil
	})
	if err != nil {
		status := "not found"
		if last != nil {
			status = describe(last)
		}
		t.Fatalf("pod %s/%s: not %s within a minute (%s)", pod.Namespace, pod.Name, what, status)
	}
	return last
}

func findCondition(conds []corev1.PodCondition, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// containerConfig reads, from the CRI of pod's node, the mounts (by
// container path) and the environment of pod's running app container.
func containerConfig(ctx context.Context, t *testing.T, s *profileRun, pod *corev1.Pod) (mounts map[string]bool, envs map[string]string) {
	t.Helper()
	var cri internalapi.RuntimeService
	for _, m := range s.fleet.Members() {
		if m.Name == pod.Spec.NodeName {
			cri = m.CRI
		}
	}
	if cri == nil {
		t.Fatalf("pod %s is on node %q, which is not the fleet's", pod.Name, pod.Spec.NodeName)
	}
	containers, err := cri.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(pod.UID)},
	})
	if err != nil || len(containers) != 1 {
		t.Fatalf("running containers of pod %s on its node: %d, %v; want 1", pod.Name, len(containers), err)
	}
	st, err := cri.ContainerStatus(ctx, containers[0].Id, true)
	if err != nil {
		t.Fatal(err)
	}
	mounts = map[string]bool{}
	for _, m := range st.Status.GetMounts() {
		mounts[m.ContainerPath] = true
	}
	var info struct {
		Config json.RawMessage `json:"config"`
	}
	config := &runtimeapi.ContainerConfig{}
	if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
		t.Fatalf("verbose status of container %s: %v", containers[0].Id, err)
	}
	if err := protojson.Unmarshal(info.Config, config); err != nil {
		t.Fatalf("config of container %s: %v", containers[0].Id, err)
	}
	envs = map[string]string{}
	for _, kv := range config.GetEnvs() {
		envs[kv.Key] = string(kv.Value)
	}
	return mounts, envs
}
