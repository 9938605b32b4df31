package staticpods

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// MirrorClient creates and deletes the mirror pods of a node's static pods,
// as the kubelet's basicMirrorClient does.
type MirrorClient struct {
	client   kubernetes.Interface
	nodeName string
	// getNode reads the node, for the owner reference its mirror pods need.
	getNode func() (*corev1.Node, error)
}

// NewMirrorClient returns the mirror client of node nodeName; getNode reads
// the Node (from the agent's informer).
func NewMirrorClient(client kubernetes.Interface, nodeName string, getNode func() (*corev1.Node, error)) *MirrorClient {
	return &MirrorClient{client: client, nodeName: nodeName, getNode: getNode}
}

// CreateMirrorPod creates the mirror pod of a static pod: a copy with the
// config.mirror annotation (the static pod's hash) and the Node as its
// controlling owner, which the NodeRestriction admission plugin requires. A
// mirror pod of the same hash already there is not an error.
func (c *MirrorClient) CreateMirrorPod(ctx context.Context, pod *corev1.Pod) error {
	mirror := *pod
	mirror.Annotations = maps.Clone(pod.Annotations)
	if mirror.Annotations == nil {
		mirror.Annotations = map[string]string{}
	}
	hash := pod.Annotations[ConfigHashAnnotationKey]
	mirror.Annotations[ConfigMirrorAnnotationKey] = hash
	node, err := c.getNode()
	if err != nil {
		return fmt.Errorf("failed to get node UID: %v", err)
	}
	if node.UID == "" {
		return fmt.Errorf("failed to get node UID: UID unset for node %s", c.nodeName)
	}
	mirror.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: corev1.SchemeGroupVersion.String(),
		Kind:       "Node",
		Name:       c.nodeName,
		UID:        node.UID,
		Controller: ptr.To(true),
	}}
	created, err := c.client.CoreV1().Pods(mirror.Namespace).Create(ctx, &mirror, metav1.CreateOptions{})
	if err != nil && apierrors.IsAlreadyExists(err) && created != nil {
		// As the kubelet: what Create returns with its error is checked.
		if h, ok := created.Annotations[ConfigMirrorAnnotationKey]; ok && h == hash {
			return nil
		}
	}
	return err
}

// DeleteMirrorPod deletes a mirror pod at once (grace period 0), only if it
// has uid when uid is set. It reports whether it deleted it: a pod already
// gone, or of another UID, is no error. Any other failure is returned (the
// kubelet logs it and tries again at its next sync or housekeeping).
func (c *MirrorClient) DeleteMirrorPod(ctx context.Context, namespace, name string, uid *types.UID) (bool, error) {
	klog.FromContext(ctx).V(2).Info("Deleting a mirror pod", "pod", klog.KRef(namespace, name), "podUID", ptr.Deref(uid, ""))
	err := c.client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: uid},
	})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return false, nil
	}
	return false, fmt.Errorf("deleting mirror pod %s/%s: %w", namespace, name, err)
}
