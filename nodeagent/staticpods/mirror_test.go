package staticpods

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// apiServerPods makes the fake clientset's pods behave as the API server's
// in what mirror pods depend on: a created pod gets a UID of its own, and a
// delete with a UID precondition fails with a conflict on another UID.
func apiServerPods(client *fake.Clientset) {
	n := 0
	client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		pod := action.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		n++
		pod.UID = types.UID(fmt.Sprintf("api-uid-%d", n))
		return false, nil, nil
	})
	client.PrependReactor("delete", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		del := action.(k8stesting.DeleteActionImpl)
		pre := del.DeleteOptions.Preconditions
		if pre == nil || pre.UID == nil {
			return false, nil, nil
		}
		obj, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), del.Namespace, del.Name)
		if err != nil {
			return false, nil, nil
		}
		if uid := obj.(*corev1.Pod).UID; uid != *pre.UID {
			return true, nil, apierrors.NewConflict(corev1.Resource("pods"), del.Name,
				fmt.Errorf("precondition failed: UID in precondition: %s, UID in object meta: %s", *pre.UID, uid))
		}
		return false, nil, nil
	})
}

func TestMirrorClient(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	apiServerPods(client)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid"}}
	var nodeErr error
	mc := NewMirrorClient(client, "n1", func() (*corev1.Node, error) { return node, nodeErr })
	static := mustForNode(t, mustDecode(t, "/m/etcd.yaml", etcdYAML), "n1")
	static.Annotations[ConfigSourceAnnotationKey] = SourceFile

	if err := mc.CreateMirrorPod(ctx, static); err != nil {
		t.Fatal(err)
	}
	mirror, err := client.CoreV1().Pods("default").Get(ctx, "etcd-n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !IsMirrorPod(mirror) || !IsMirrorPodOf(mirror, static) || mirror.Annotations[ConfigMirrorAnnotationKey] != string(static.UID) {
		t.Errorf("mirror annotations %v, want the static pod's and its hash", mirror.Annotations)
	}
	if _, ok := static.Annotations[ConfigMirrorAnnotationKey]; ok {
		t.Error("CreateMirrorPod annotated the static pod")
	}
	want := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "n1", UID: "node-uid", Controller: ptr.To(true)}
	if refs := mirror.OwnerReferences; len(refs) != 1 || refs[0].UID != want.UID || refs[0].Kind != want.Kind ||
		refs[0].APIVersion != want.APIVersion || refs[0].Name != want.Name || !ptr.Deref(refs[0].Controller, false) {
		t.Errorf("owner references %+v, want %+v", refs, want)
	}
	if mirror.UID == static.UID || mirror.Spec.NodeName != "n1" {
		t.Errorf("mirror UID %s (static %s), node %q", mirror.UID, static.UID, mirror.Spec.NodeName)
	}

	// Already there: an error, as the kubelet's (the object returned with
	// the error has no annotations to compare).
	if err := mc.CreateMirrorPod(ctx, static); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create: %v", err)
	}

	// A UID precondition of another pod deletes nothing.
	other := types.UID("other")
	if ok, err := mc.DeleteMirrorPod(ctx, "default", "etcd-n1", &other); ok || err != nil {
		t.Errorf("delete of another UID: %v %v, want false and no error", ok, err)
	}
	if ok, err := mc.DeleteMirrorPod(ctx, "default", "etcd-n1", &mirror.UID); !ok || err != nil {
		t.Errorf("delete: %v %v", ok, err)
	}
	if ok, err := mc.DeleteMirrorPod(ctx, "default", "etcd-n1", nil); ok || err != nil {
		t.Errorf("delete of a pod gone: %v %v, want false and no error", ok, err)
	}
	client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("down")
	})
	if ok, err := mc.DeleteMirrorPod(ctx, "default", "etcd-n1", nil); ok || err == nil {
		t.Errorf("delete with the API server down: %v %v, want an error", ok, err)
	}

	// Without the node's UID there is no owner reference, hence no mirror pod.
	nodeErr = errors.New("not registered")
	if err := mc.CreateMirrorPod(ctx, static); err == nil {
		t.Error("created a mirror pod without the node")
	}
	nodeErr, node.UID = nil, ""
	if err := mc.CreateMirrorPod(ctx, static); err == nil {
		t.Error("created a mirror pod without the node's UID")
	}
}
