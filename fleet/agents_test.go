package fleet

import (
	"context"
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/internal/testutil"
	"github.com/fleetlet/fleetlet/nodeagent"
	"github.com/fleetlet/fleetlet/nodeagent/watchers"
)

// TestAgentInEachWatchMode runs one agent on its own watches and one on the
// fleet's shared informers. Each registers, turns Ready, runs a pod its pod
// source delivers and deletes it; idle, it holds no more goroutines than
// its budget. A fleet multiplies each goroutine by thousands of nodes, so a
// change that adds one must say why and raise the budget. The budgets count
// the goroutine that runs the agent; against an API server they are 33 and
// 15 (README's Density), where the fake clientset's watches stream no HTTP.
func TestAgentInEachWatchMode(t *testing.T) {
	for _, tc := range []struct {
		mode       string
		goroutines int
	}{
		// Per node: 28 before the kubelet's four watches of Services,
		// RuntimeClasses, CSIDrivers and PodCertificateRequests, and at
		// most two goroutines each (a reflector, its watch's decoder).
		{WatchPerNode, 28 + 4*2},
		{WatchShared, 14},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			client := fake.NewClientset()
			var shared *SharedInformers
			var sharedWatches *watchers.Kubelet
			informersDone := make(chan struct{})
			if tc.mode == WatchShared {
				shared = NewSharedInformers(client)
				sharedWatches = watchers.NewKubelet(watchers.Config{Client: client})
				if err := sharedWatches.Start(ctx); err != nil {
					t.Fatal(err)
				}
				go func() { defer close(informersDone); shared.Run(ctx); sharedWatches.Wait() }()
				testutil.WaitFor(t, "the shared informers sync", func() bool { return shared.HasSynced() && sharedWatches.HasSynced() })
			} else {
				close(informersDone)
			}

			before := testutil.SettledGoroutines()
			clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC))
			rt := fakeruntime.New(fakeruntime.Config{Clock: clk})
			cfg := nodeagent.Config{
				NodeName: "n1", NodeIP: net.ParseIP("127.1.0.1"),
				Capacity: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"),
					corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
				},
				Client: client, Runtime: rt, Images: rt, Clock: clk,
			}
			if shared != nil {
				cfg.Informers, cfg.KubeletWatches = shared, sharedWatches
			}
			agent, err := nodeagent.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			agentCtx, stopAgent := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- agent.Run(agentCtx) }()
			// eventually steps the fake clock, driving the agent's loops,
			// until cond holds.
			eventually := func(what string, cond func() bool) {
				t.Helper()
				err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, testutil.Patience, true, func(context.Context) (bool, error) {
					if cond() {
						return true, nil
					}
					clk.Step(time.Second)
					return false, nil
				})
				if err != nil {
					t.Fatalf("timed out waiting until %s", what)
				}
			}
			nodes := client.CoreV1().Nodes()
			eventually("the node is Ready", func() bool {
				node, err := nodes.Get(ctx, "n1", metav1.GetOptions{})
				if err != nil {
					return false
				}
				for _, c := range node.Status.Conditions {
					if c.Type == corev1.NodeReady {
						return c.Status == corev1.ConditionTrue
					}
				}
				return false
			})
			// A minute on, every loop has ticked and is idle again.
			clk.Step(time.Minute)
			if got := testutil.SettledGoroutines() - before; got > tc.goroutines {
				t.Errorf("an idle agent holds %d goroutines, want at most %d", got, tc.goroutines)
			} else {
				t.Logf("an idle agent holds %d goroutines", got)
			}

			// The controller-manager's node IPAM: the runtime hands out pod
			// IPs from the node's pod CIDR.
			node, err := nodes.Get(ctx, "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			node.Spec.PodCIDR = "10.64.3.0/24"
			if _, err := nodes.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			pods := client.CoreV1().Pods("default")
			pod := boundPod("web", "n1")
			pod.UID = "uid-web"
			pod.Spec.Containers = []corev1.Container{{Name: "app", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent}}
			if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			eventually("the pod is reported Running", func() bool {
				p, err := pods.Get(ctx, "web", metav1.GetOptions{})
				return err == nil && p.Status.Phase == corev1.PodRunning
			})
			p, err := pods.Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p.DeletionTimestamp = &metav1.Time{Time: clk.Now()}
			p.DeletionGracePeriodSeconds = new(int64)
			if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			eventually("the agent deletes the pod", func() bool {
				_, err := pods.Get(ctx, "web", metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			})

			stopAgent()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("agent.Run: %v", err)
				}
			case <-time.After(testutil.Patience):
				t.Fatal("the agent did not stop after its context ended")
			}
			cancel()
			<-informersDone
		})
	}
}
