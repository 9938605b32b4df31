// Package kuberuntime drives one node's pods through CRI: it reads a pod's
// runtime status, and brings the runtime to what the pod spec asks for
// (SyncPod) or tears the pod down (KillPod), as the kubelet's
// kuberuntime manager does. It speaks only the CRI v1 API, so the same code
// runs against the in-process fake, the fake over a socket, and containerd.
package kuberuntime

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// The kubelet's CRI labels and annotations: runtimes and tools such as crictl
// rely on them to map sandboxes and containers back to pods.
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"
	annotationRestarts = "io.kubernetes.container.restartCount"
)

func podLabels(pod *corev1.Pod) map[string]string {
	labels := make(map[string]string, len(pod.Labels)+3)
	for k, v := range pod.Labels {
		labels[k] = v
	}
	labels[labelPodName] = pod.Name
	labels[labelPodNamespace] = pod.Namespace
	labels[labelPodUID] = string(pod.UID)
	return labels
}

func containerLabels(pod *corev1.Pod, name string) map[string]string {
	return map[string]string{
		labelPodName:       pod.Name,
		labelPodNamespace:  pod.Namespace,
		labelPodUID:        string(pod.UID),
		labelContainerName: name,
	}
}

func restartCount(annotations map[string]string) int32 {
	n, _ := strconv.Atoi(annotations[annotationRestarts])
	return int32(n)
}
