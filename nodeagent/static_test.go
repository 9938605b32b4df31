package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/fleetlet/fleetlet/nodeagent/staticpods"
)

// withAPIServerUIDs has the fake API server give every pod and node it
// creates a UID of its own, as a real one does, and honour a delete's UID
// precondition: a mirror pod's UID is never its static pod's.
func withAPIServerUIDs(c *Config) {
	client := c.Client.(*fake.Clientset)
	n := 0
	assign := func(action k8stesting.Action) (bool, runtime.Object, error) {
		obj := action.(k8stesting.CreateAction).GetObject().(metav1.Object)
		n++
		obj.SetUID(types.UID(fmt.Sprintf("api-%s-%d", action.GetResource().Resource, n)))
		return false, nil, nil
	}
	client.PrependReactor("create", "pods", assign)
	client.PrependReactor("create", "nodes", assign)
	client.PrependReactor("delete", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		del := action.(k8stesting.DeleteActionImpl)
		if pre := del.DeleteOptions.Preconditions; pre != nil && pre.UID != nil {
			obj, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), del.Namespace, del.Name)
			if err == nil && obj.(*corev1.Pod).UID != *pre.UID {
				return true, nil, apierrors.NewConflict(corev1.Resource("pods"), del.Name, fmt.Errorf("UID precondition failed"))
			}
		}
		return false, nil, nil
	})
}

// withStaticPodPath gives the agent a static pod directory, read by the
// agent itself, as on a node of its own.
func withStaticPodPath(dir string) func(*Config) {
	return func(c *Config) {
		c.Kubelet = DefaultKubeletConfiguration()
		c.Kubelet.StaticPodPath = dir
	}
}

func staticManifest(image string) string {
	return "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: kube-system}\n" +
		"spec: {containers: [{name: app, image: " + image + "}]}\n"
}

func writeManifest(t *testing.T, path, data string) {
	t.Helper()
	// Written aside and renamed in, as editors and kubeadm do, so that the
	// watch never reads half a file.
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) mirrorPod(t *testing.T) *corev1.Pod {
	t.Helper()
	pod, err := h.client.CoreV1().Pods("kube-system").Get(context.Background(), "web-n1", metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return pod
}

func (h *harness) runningContainers(t *testing.T) []*runtimeapi.Container {
	t.Helper()
	cs, err := h.runtime.ListContainers(context.Background(), &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// runningMirror waits for the static pod's mirror pod to report it
// Running, and returns it.
func (h *harness) runningMirror(t *testing.T, what string, ok func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var mirror *corev1.Pod
	h.eventually(t, what, func() bool {
		mirror = h.mirrorPod(t)
		return mirror != nil && mirror.DeletionTimestamp == nil && mirror.Status.Phase == corev1.PodRunning &&
			len(mirror.Status.ContainerStatuses) == 1 && mirror.Status.ContainerStatuses[0].State.Running != nil && ok(mirror)
	})
	return mirror
}

func TestAgentRunsStaticPodAndMirrorsIt(t *testing.T) {
	dir := t.TempDir()
	writeManifest(t, filepath.Join(dir, "web.yaml"), staticManifest("busybox:1"))
	h := startAgent(t, withAPIServerUIDs, withStaticPodPath(dir))
	h.allocatePodCIDR(t)

	mirror := h.runningMirror(t, "the mirror pod reports the static pod Running", func(*corev1.Pod) bool { return true })
	hash := mirror.Annotations[staticpods.ConfigHashAnnotationKey]
	if hash == "" || mirror.Annotations[staticpods.ConfigMirrorAnnotationKey] != hash ||
		mirror.Annotations[staticpods.ConfigSourceAnnotationKey] != staticpods.SourceFile {
		t.Errorf("mirror annotations %v", mirror.Annotations)
	}
	if mirror.UID == types.UID(hash) {
		t.Errorf("the mirror pod has the static pod's UID %s", hash)
	}
	node := h.node(t)
	if refs := mirror.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].UID != node.UID || refs[0].Controller == nil || !*refs[0].Controller {
		t.Errorf("owner references %+v, want the Node %s as controller", refs, node.UID)
	}
	if mirror.Spec.NodeName != "n1" || mirror.Status.HostIP != "127.1.0.1" || mirror.Status.PodIP == "" {
		t.Errorf("node %q hostIP %q podIP %q", mirror.Spec.NodeName, mirror.Status.HostIP, mirror.Status.PodIP)
	}

	// The static pod runs from its manifest, under its hash; the mirror
	// pod, which the pod watch shows the agent, is not run.
	sandboxes, err := h.runtime.ListPodSandbox(context.Background(), &runtimeapi.PodSandboxFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sandboxes) != 1 || sandboxes[0].Metadata.Uid != hash {
		t.Errorf("sandboxes %v, want one, of the static pod %s", sandboxes, hash)
	}
	// Static pods are the node's, not the load's: no milestones.
	for _, uid := range []types.UID{types.UID(hash), mirror.UID} {
		h.marks.mu.Lock()
		stamps := h.marks.m[uid]
		h.marks.mu.Unlock()
		if len(stamps) > 0 {
			t.Errorf("milestones of %s: %v", uid, stamps)
		}
	}
}

// TestAgentMirrorPodLifecycle: a mirror pod deleted is created again; a
// manifest changed replaces the static pod and its mirror pod; a manifest
// removed stops the static pod, then deletes its mirror pod.
func TestAgentMirrorPodLifecycle(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "web.yaml")
	writeManifest(t, path, staticManifest("busybox:1"))
	h := startAgent(t, withAPIServerUIDs, withStaticPodPath(dir))
	h.allocatePodCIDR(t)
	first := h.runningMirror(t, "the mirror pod reports Running", func(*corev1.Pod) bool { return true })

	// Deleted at once (as kubectl delete --force): another is created,
	// and the static pod's status goes to it.
	if err := h.client.CoreV1().Pods("kube-system").Delete(ctx, "web-n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	second := h.runningMirror(t, "a new mirror pod reports Running", func(p *corev1.Pod) bool { return p.UID != first.UID })
	if len(h.runningContainers(t)) != 1 {
		t.Errorf("the static pod was restarted with its mirror pod: %d containers running", len(h.runningContainers(t)))
	}

	// Deleted gracefully: the kubelet does not wait, it deletes and creates
	// it again.
	second.DeletionTimestamp = &metav1.Time{Time: h.clock.Now()}
	second.DeletionGracePeriodSeconds = new(int64)
	*second.DeletionGracePeriodSeconds = 30
	if _, err := h.client.CoreV1().Pods("kube-system").Update(ctx, second, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	third := h.runningMirror(t, "the mirror pod being deleted is replaced", func(p *corev1.Pod) bool { return p.UID != second.UID })

	// A new image: a new hash, a new static pod; the old one stops first,
	// and the mirror pod of the old hash is replaced.
	oldHash := third.Annotations[staticpods.ConfigMirrorAnnotationKey]
	writeManifest(t, path, staticManifest("busybox:2"))
	fourth := h.runningMirror(t, "the mirror pod of the new hash reports Running", func(p *corev1.Pod) bool {
		return p.Annotations[staticpods.ConfigMirrorAnnotationKey] != oldHash && p.Spec.Containers[0].Image == "busybox:2"
	})
	if fourth.Annotations[staticpods.ConfigMirrorAnnotationKey] != fourth.Annotations[staticpods.ConfigHashAnnotationKey] {
		t.Errorf("mirror annotations %v", fourth.Annotations)
	}
	h.eventually(t, "only the new static pod runs", func() bool {
		cs := h.runningContainers(t)
		return len(cs) == 1 && cs[0].Labels["io.kubernetes.pod.uid"] == fourth.Annotations[staticpods.ConfigHashAnnotationKey]
	})

	// The manifest goes: the static pod stops, then its mirror pod is deleted.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "the static pod stops and its mirror pod is deleted", func() bool {
		return h.mirrorPod(t) == nil && len(h.runningContainers(t)) == 0
	})
	h.eventually(t, "the static pod's sandbox is removed", func() bool {
		sandboxes, err := h.runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{})
		return err == nil && len(sandboxes) == 0
	})
}

// TestAgentDoesNotRunMirrorPods: the pod watch's mirror pods are never run;
// one without a static pod on the node is deleted, as the kubelet's
// housekeeping deletes orphaned mirror pods.
func TestAgentDoesNotRunMirrorPods(t *testing.T) {
	ctx := context.Background()
	h := startAgent(t, withAPIServerUIDs)
	h.allocatePodCIDR(t)
	orphan := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gone-n1", Namespace: "kube-system", Annotations: map[string]string{
			staticpods.ConfigMirrorAnnotationKey: "abc", staticpods.ConfigHashAnnotationKey: "abc",
			staticpods.ConfigSourceAnnotationKey: staticpods.SourceFile,
		}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
	}
	if _, err := h.client.CoreV1().Pods("kube-system").Create(ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "the orphaned mirror pod is deleted", func() bool {
		_, err := h.client.CoreV1().Pods("kube-system").Get(ctx, "gone-n1", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if sandboxes, _ := h.runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{}); len(sandboxes) != 0 {
		t.Errorf("a mirror pod was run: %d sandboxes", len(sandboxes))
	}
}

// TestAgentStaticPodThatCompletes: a static pod that ran to completion
// reports Succeeded on its mirror pod; when its manifest goes, there is
// nothing left to stop, and the mirror pod is deleted.
func TestAgentStaticPodThatCompletes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "job.yaml")
	writeManifest(t, path, "apiVersion: v1\nkind: Pod\n"+
		"metadata: {name: web, namespace: kube-system, annotations: {fleetlet.io/behaviour: '{\"app\": {\"runFor\": \"3s\", \"exitCode\": 0}}'}}\n"+
		"spec: {restartPolicy: Never, containers: [{name: app, image: busybox:1}]}\n")
	h := startAgent(t, withAPIServerUIDs, withStaticPodPath(dir))
	h.allocatePodCIDR(t)
	h.eventually(t, "the mirror pod reports the static pod Succeeded", func() bool {
		mirror := h.mirrorPod(t)
		return mirror != nil && mirror.Status.Phase == corev1.PodSucceeded
	})
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "the mirror pod of the completed static pod is deleted", func() bool { return h.mirrorPod(t) == nil })
}
