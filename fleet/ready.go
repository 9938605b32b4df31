package fleet

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// WaitForNodesReady blocks until every named node is Ready, as the API server
// holds it, or timeout passes (0: until ctx ends); the error then names how
// many are not Ready and a few of them.
func WaitForNodesReady(ctx context.Context, client kubernetes.Interface, names []string, timeout time.Duration) error {
	return waitForNodes(ctx, client, names, timeout, "Ready", nodeReady)
}

// WaitForNodesSchedulable is WaitForNodesReady that also waits for the node
// lifecycle controller to lift the taints it set at registration
// (node.kubernetes.io/not-ready and the like): until then the scheduler
// places nothing on the node, and the controller-manager's patches to
// thousands of fresh nodes still load the API server.
func WaitForNodesSchedulable(ctx context.Context, client kubernetes.Interface, names []string, timeout time.Duration) error {
	return waitForNodes(ctx, client, names, timeout, "schedulable", func(n *corev1.Node) bool {
		return nodeReady(n) && !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return strings.HasPrefix(t.Key, systemTaintPrefix)
		})
	})
}

// systemTaintPrefix starts the taints Kubernetes itself sets on nodes; a
// pool's own taints have other keys.
const systemTaintPrefix = "node.kubernetes.io/"

// NodesListWatch lists and watches the Nodes of fleets: those with the
// pool label.
func NodesListWatch(client kubernetes.Interface) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = PoolLabel
			return client.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = PoolLabel
			return client.CoreV1().Nodes().Watch(ctx, o)
		},
	}
}

func waitForNodes(ctx context.Context, client kubernetes.Interface, names []string, timeout time.Duration, what string, cond func(*corev1.Node) bool) error {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = false
	}
	met := 0
	lw := NodesListWatch(client)
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	_, err := watchtools.UntilWithSync(ctx, cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Node{}, nil, func(e watch.Event) (bool, error) {
		node, ok := e.Object.(*corev1.Node)
		if !ok {
			return false, nil
		}
		was, tracked := want[node.Name]
		if !tracked {
			return false, nil
		}
		now := e.Type != watch.Deleted && cond(node)
		if now != was {
			want[node.Name] = now
			if now {
				met++
			} else {
				met--
			}
		}
		return met == len(want), nil
	})
	if err == nil {
		return nil
	}
	var missing []string
	for n, ok := range want {
		if !ok {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 5 {
		missing = append(missing[:5], "...")
	}
	return fmt.Errorf("%d of %d nodes not %s after %v: %v", len(want)-met, len(want), what, timeout, missing)
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
