package main

import (
	"context"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// accessClient answers SelfSubjectAccessReviews: allowed unless the
// resource is in refused.
func accessClient(refused ...string) (*fake.Clientset, *int) {
	client := fake.NewClientset()
	reviews := 0
	client.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews++
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		attrs := r.Spec.ResourceAttributes
		r.Status.Allowed = true
		for _, res := range refused {
			if attrs.Resource == res && attrs.Verb == "watch" {
				r.Status.Allowed = false
			}
		}
		return true, r, nil
	})
	return client, &reviews
}

func TestCheckWatchAccess(t *testing.T) {
	ctx := context.Background()
	client, reviews := accessClient()
	if err := checkWatchAccess(ctx, client, "kc"); err != nil {
		t.Fatalf("every watch allowed: %v", err)
	}
	// A resource both components watch is asked about once per verb.
	if *reviews != 2*10 {
		t.Errorf("%d reviews, want 20 (10 resources, list and watch)", *reviews)
	}

	client, _ = accessClient("endpointslices", "csidrivers")
	err := checkWatchAccess(ctx, client, "kc")
	if err == nil {
		t.Fatal("refused watches were let through")
	}
	msg := err.Error()
	for _, want := range []string{"kubeconfig kc", "csidrivers.storage.k8s.io, endpointslices.discovery.k8s.io", "kube-proxy and kubelet", "system:node and system:node-proxier"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error %q is more than one line", msg)
	}
}
