//go:build integration

package main

import (
	"context"
	"fmt"
	"github.com/spf13/viper"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetlet/fleetlet/controlplane"
	"github.com/fleetlet/fleetlet/loadprofiles"
)

// shared is the one embedded control plane of the integration tests that
// need nothing of a control plane but that it runs: each test's fleet has
// node names and addresses of its own (sharedFleet), and removes its nodes
// and pods when the test ends. The tests that check a control plane's own
// start (`run`, `bench`, the sweep) or its audit log (the oracle) start
// their own.
var shared struct {
	once  sync.Once
	cp    *controlplane.ControlPlane
	err   error
	tests int
}

// sharedControlPlane starts the shared control plane on first use; it is
// stopped once every test has run.
func sharedControlPlane(t *testing.T) *controlplane.ControlPlane {
	t.Helper()
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "fleetlet-shared-cp-")
		if err != nil {
			shared.err = err
			return
		}
		afterTests = append(afterTests, func() {
			if shared.cp != nil {
				if err := shared.cp.Stop(); err != nil {
					fmt.Fprintf(os.Stderr, "stopping the shared control plane: %v\n", err)
				}
			}
			_ = os.RemoveAll(dir)
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		shared.cp, shared.err = controlplane.Start(ctx, controlplane.Config{BinDir: binDir(t), Dir: filepath.Join(dir, "controlplane")})
	})
	if shared.err != nil {
		t.Fatalf("starting the shared control plane: %v", shared.err)
	}
	return shared.cp
}

// sharedFleet points opts at the shared control plane with node names
// ("<name>-<n>-<pool>-<index>") and loopback addresses (127.<40+n>.0.x) no
// other test's fleet uses. The tests run one after another, so at most one
// fleet is on it at a time.
func sharedFleet(t *testing.T, opts *sessionOptions, name string) {
	t.Helper()
	opts.ControlPlane = sharedControlPlane(t)
	shared.tests++
	opts.NodePrefix = fmt.Sprintf("%s-%d-", name, shared.tests)
	opts.FirstIP = netip.AddrFrom4([4]byte{127, byte(40 + shared.tests), 0, 1})
}

// sharedFleetSettings are a command's settings for a fleet on the shared
// control plane, reached as an existing cluster through --kubeconfig, with
// sharedFleet's node names and addresses.
func sharedFleetSettings(t *testing.T, name string) (*viper.Viper, sessionOptions) {
	t.Helper()
	v := testSettings(t, criInProc)
	var opts sessionOptions
	sharedFleet(t, &opts, name)
	v.Set("kubeconfig", opts.ControlPlane.AdminKubeconfig())
	v.Set("node-prefix", opts.NodePrefix)
	v.Set("first-ip", opts.FirstIP.String())
	return v, opts
}

// removeFleet deletes what a test's fleet left on the shared control
// plane once the fleet has stopped: its pods in the profiles' namespace,
// at once (no agent is left to finish a graceful deletion), and its Nodes
// (their Leases go with them, by owner reference) with the pods bound to
// them in other namespaces (mirror pods), and waits until they
// are gone, so that the next test starts on a clean cluster.
func removeFleet(ctx context.Context, t *testing.T, client kubernetes.Interface, nodes []string) {
	t.Helper()
	pods := client.CoreV1().Pods(loadprofiles.DefaultNamespace)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{}); err != nil {
		t.Errorf("deleting the test's pods: %v", err)
	}
	for _, n := range nodes {
		// Pods bound to the node elsewhere: static pods' mirrors.
		bound, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n})
		if err != nil {
			t.Errorf("listing the pods of node %s: %v", n, err)
		} else {
			for _, p := range bound.Items {
				if err := client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("deleting pod %s/%s: %v", p.Namespace, p.Name, err)
				}
			}
		}
		if err := client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting node %s: %v", n, err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		left, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil || len(left.Items) > 0 {
			return false, nil
		}
		nodeList, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err == nil && !slices.ContainsFunc(nodeList.Items, func(n corev1.Node) bool { return slices.Contains(nodes, n.Name) }), nil
	})
	if err != nil {
		t.Errorf("the test's pods and nodes were not gone from the shared control plane within 2 minutes: %v", err)
	}
}

// ownNodes is the nodes of list that belong to the session's fleet.
func ownNodes(s *profileRun, list []corev1.Node) []corev1.Node {
	names := s.fleet.NodeNames()
	return slices.DeleteFunc(slices.Clone(list), func(n corev1.Node) bool { return !slices.Contains(names, n.Name) })
}
