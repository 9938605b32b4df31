package nodeagent

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func (h *harness) pod(t *testing.T, name string) *corev1.Pod {
	p, err := h.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return p
}

func (h *harness) hasEvent(reason, message string) bool {
	events, err := h.client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, e := range events.Items {
		if e.Reason == reason && e.Message == message {
			return true
		}
	}
	return false
}

func waitingReason(p *corev1.Pod) string {
	if p == nil || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Waiting == nil {
		return ""
	}
	return p.Status.ContainerStatuses[0].State.Waiting.Reason
}

func TestAgentHoldsPodUntilItsConfigMapExists(t *testing.T) {
	h := startAgent(t)
	ctx := context.Background()
	h.allocatePodCIDR(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec: corev1.PodSpec{
			NodeName: "n1",
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"},
			}}}},
			Containers: []corev1.Container{{
				Name: "app", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent,
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}},
			}},
		},
	}
	if _, err := h.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "a FailedMount event names the missing ConfigMap", func() bool {
		return h.hasEvent("FailedMount", `MountVolume.SetUp failed for volume "config" : configmap "app-config" not found`)
	})
	h.eventually(t, "the pod is reported Pending in ContainerCreating", func() bool {
		got := h.pod(t, "web")
		return got.Status.Phase == corev1.PodPending && waitingReason(got) == "ContainerCreating"
	})
	if sandboxes, _ := h.runtime.ListPodSandbox(ctx, nil); len(sandboxes) != 0 {
		t.Errorf("a sandbox was created before the pod's volumes were set up")
	}

	if _, err := h.client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app-config"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "the pod runs once its ConfigMap exists", func() bool {
		p := h.pod(t, "web")
		return p != nil && p.Status.Phase == corev1.PodRunning
	})
	containers, err := h.runtime.ListContainers(ctx, nil)
	if err != nil || len(containers) != 1 {
		t.Fatalf("containers = %v, %v", containers, err)
	}
	status, err := h.runtime.ContainerStatus(ctx, containers[0].Id, false)
	if err != nil {
		t.Fatal(err)
	}
	if m := status.Status.Mounts; len(m) != 1 || m[0].ContainerPath != "/etc/app" {
		t.Errorf("container mounts = %v, want the ConfigMap at /etc/app", m)
	}
}

func TestAgentReportsCreateContainerConfigError(t *testing.T) {
	h := startAgent(t)
	ctx := context.Background()
	h.allocatePodCIDR(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec: corev1.PodSpec{
			NodeName: "n1",
			Containers: []corev1.Container{{
				Name: "app", Image: "busybox", ImagePullPolicy: corev1.PullIfNotPresent,
				Env: []corev1.EnvVar{
					{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
					{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password",
					}}},
				},
			}},
		},
	}
	if _, err := h.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "the container waits with CreateContainerConfigError", func() bool {
		return waitingReason(h.pod(t, "web")) == "CreateContainerConfigError"
	})
	if got := h.pod(t, "web"); got.Status.ContainerStatuses[0].State.Waiting.Message != `secret "creds" not found` {
		t.Errorf("waiting message = %q", got.Status.ContainerStatuses[0].State.Waiting.Message)
	}

	if _, err := h.client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "creds"}, Data: map[string][]byte{"password": []byte("pw")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "the pod runs once its Secret exists", func() bool {
		p := h.pod(t, "web")
		return p != nil && p.Status.Phase == corev1.PodRunning
	})
}
