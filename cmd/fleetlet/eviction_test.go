//go:build integration

package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fleetlet/fleetlet/loadprofiles"
)

// stormWatch samples the storm node's memory pressure and taint and the
// pods' evictions, in the order they were first seen.
type stormWatch struct {
	mu       sync.Mutex
	start    time.Time
	pressure []string // "12.0s True" at each change
	taint    []string // "13.0s present" at each change
	evicted  []string // pod names in eviction order
	seen     map[string]bool
	timeline []string
}

func (w *stormWatch) observe(node *corev1.Node, pods []corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at := fmt.Sprintf("%5.1fs", time.Since(w.start).Seconds())
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeMemoryPressure {
			if n := len(w.pressure); n == 0 || !strings.HasSuffix(w.pressure[n-1], " "+string(c.Status)) {
				w.pressure = append(w.pressure, at+" "+string(c.Status))
				w.timeline = append(w.timeline, at+" MemoryPressure="+string(c.Status))
			}
		}
	}
	state := "absent"
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeMemoryPressure {
			state = "present"
		}
	}
	if n := len(w.taint); n == 0 || !strings.HasSuffix(w.taint[n-1], " "+state) {
		w.taint = append(w.taint, at+" "+state)
		w.timeline = append(w.timeline, at+" taint "+corev1.TaintNodeMemoryPressure+" "+state)
	}
	for _, p := range pods {
		if p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Evicted" && !w.seen[p.Name] {
			w.seen[p.Name] = true
			w.evicted = append(w.evicted, p.Name)
			w.timeline = append(w.timeline, at+" evicted "+p.Name+": "+p.Status.Message)
		}
	}
}

// TestEvictionStorm runs the built-in eviction-storm profile against the
// real control plane: the agent's eviction manager evicts the BestEffort
// pod, then a Burstable one, never a Guaranteed one; MemoryPressure turns
// on and off again, and the real controller-manager taints and untaints
// the node.
func TestEvictionStorm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := startTestSession(ctx, t, "eviction-storm", func(ph loadprofiles.Phase) bool {
		return ph.Create != nil || ph.WaitRunning != nil || ph.Sleep != nil
	})
	client := s.client
	w := &stormWatch{start: time.Now(), seen: map[string]bool{}}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		_ = wait.PollUntilContextCancel(sampleCtx, time.Second, true, func(ctx context.Context) (bool, error) {
			nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			if nodes.Items = ownNodes(s, nodes.Items); len(nodes.Items) != 1 {
				return false, nil
			}
			pods, err := client.CoreV1().Pods(loadprofiles.DefaultNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			w.observe(&nodes.Items[0], pods.Items)
			return false, nil
		})
	}()
	if err := s.drive(ctx); err != nil {
		t.Fatal(err)
	}
	stopSampling()
	<-sampled
	t.Logf("storm timeline:\n  %s", strings.Join(w.timeline, "\n  "))

	if len(w.evicted) < 2 || !strings.HasPrefix(w.evicted[0], "besteffort-") || !strings.HasPrefix(w.evicted[1], "burstable-") {
		t.Errorf("evicted %v; want the BestEffort pod, then a Burstable one", w.evicted)
	}
	for _, name := range w.evicted {
		if strings.HasPrefix(name, "guaranteed-") {
			t.Errorf("Guaranteed pod %s was evicted", name)
		}
	}
	if !slices.ContainsFunc(w.pressure, func(s string) bool { return strings.HasSuffix(s, " True") }) ||
		!strings.HasSuffix(w.pressure[len(w.pressure)-1], " False") {
		t.Errorf("MemoryPressure went %v; want True, then False again", w.pressure)
	}
	if !slices.ContainsFunc(w.taint, func(s string) bool { return strings.HasSuffix(s, " present") }) ||
		!strings.HasSuffix(w.taint[len(w.taint)-1], " absent") {
		t.Errorf("the memory-pressure taint went %v; want present, then absent", w.taint)
	}

	pods, err := client.CoreV1().Pods(loadprofiles.DefaultNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var running *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodRunning && running == nil {
			running = p
		}
		if p.Status.Reason != "Evicted" {
			continue
		}
		if !strings.HasPrefix(p.Status.Message, "The node was low on resource: memory. Threshold quantity: 100Mi, available: ") {
			t.Errorf("pod %s eviction message %q", p.Name, p.Status.Message)
		}
		if condition(p.Status.Conditions, corev1.DisruptionTarget) != corev1.ConditionTrue {
			t.Errorf("pod %s has no DisruptionTarget condition: %v", p.Name, p.Status.Conditions)
		}
		if ev := kubeletEvents(ctx, t, client, p); ev["Evicted"] == 0 || ev["Killing"] == 0 {
			t.Errorf("pod %s events %v, want Evicted and Killing", p.Name, ev)
		}
	}
	if running == nil {
		t.Fatal("no pod left running after the storm")
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkKubeletAPI(ctx, t, s, running, nodes)
}
