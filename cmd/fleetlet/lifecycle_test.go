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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
