package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// nodeWatch is one resource a node lists and watches, and the component
// that does.
type nodeWatch struct {
	component, group, resource string
}

// nodeWatches are the watches of a real node's kubelet and kube-proxy
// (README: What a node costs the API server), which every agent opens.
var nodeWatches = []nodeWatch{
	{"kubelet", "", "pods"},
	{"kubelet", "", "nodes"},
	{"kubelet", "", "services"},
	{"kubelet", "node.k8s.io", "runtimeclasses"},
	{"kubelet", "storage.k8s.io", "csidrivers"},
	{"kubelet", "certificates.k8s.io", "podcertificaterequests"},
	{"kubelet", "", "configmaps"},
	{"kubelet", "", "secrets"},
	{"kube-proxy", "", "nodes"},
	{"kube-proxy", "", "services"},
	{"kube-proxy", "discovery.k8s.io", "endpointslices"},
	{"kube-proxy", "networking.k8s.io", "servicecidrs"},
}

// checkWatchAccess asks the API server, as the agents' identity on an
// existing cluster (the kubeconfig's user), whether it may list and watch
// each resource of a node's watches. A watch it refuses would fail over
// and over in every agent's log; refused here, it is one line at start that
// names what to grant. On our control plane each agent is system:node and
// system:kube-proxy, which may.
func checkWatchAccess(ctx context.Context, client kubernetes.Interface, kubeconfig string) error {
	var refused []string
	components := map[string]bool{}
	seen := map[string]bool{}
	for _, w := range nodeWatches {
		label := w.resource
		if w.group != "" {
			label += "." + w.group
		}
		if seen[label] {
			continue
		}
		for _, verb := range []string{"list", "watch"} {
			review, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: verb, Group: w.group, Resource: w.resource,
				}},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("kubeconfig %s: asking the API server whether its user may %s %s: %w", kubeconfig, verb, label, err)
			}
			if !review.Status.Allowed {
				refused = append(refused, label)
				seen[label] = true
				components[w.component] = true
				break
			}
		}
		seen[label] = true
	}
	if len(refused) == 0 {
		return nil
	}
	var roles []string
	if components["kubelet"] {
		roles = append(roles, "system:node")
	}
	if components["kube-proxy"] {
		roles = append(roles, "system:node-proxier")
	}
	return fmt.Errorf("kubeconfig %s: its user may not list and watch %s, which every node's %s watches: grant list and watch on them, for example with a ClusterRoleBinding of the ClusterRole %s to that user",
		kubeconfig, strings.Join(refused, ", "), strings.Join(slices.Sorted(maps.Keys(components)), " and "), strings.Join(roles, " and "))
}
