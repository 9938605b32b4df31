// Package staticpods is the kubelet's static pods: its file source
// (pkg/kubelet/config/file.go, file_linux.go, common.go), which reads pod
// manifests from the staticPodPath directory every fileCheckFrequency and on
// every change; the merge of that source into the node's pods (config.go's
// podStorage for the "file" source); and the mirror pods through which the
// API server sees them (pkg/kubelet/pod/mirror_client.go).
//
// A FileSource reads a directory once for every node that runs its manifests:
// what it decodes (the manifest, defaulted as the kubelet's scheme defaults
// it) does not depend on the node. Each node's NodeSource then makes its own
// static pods of them (named for the node, with the node's UID hash) and
// hands their additions, updates and removals to the agent, as the kubelet's
// pod config does.
package staticpods

import (
	corev1 "k8s.io/api/core/v1"
)

// The kubelet's pod annotations (pkg/kubelet/types/pod_update.go).
const (
	// ConfigSourceAnnotationKey names the source a pod came from: "file"
	// for a static pod, "api" for one from the API server.
	ConfigSourceAnnotationKey = "kubernetes.io/config.source"
	// ConfigMirrorAnnotationKey marks a mirror pod; its value is the hash
	// of the static pod it mirrors.
	ConfigMirrorAnnotationKey = corev1.MirrorPodAnnotationKey
	// ConfigFirstSeenAnnotationKey is when the kubelet first saw the pod.
	ConfigFirstSeenAnnotationKey = "kubernetes.io/config.seen"
	// ConfigHashAnnotationKey is a static pod's hash: its UID.
	ConfigHashAnnotationKey = "kubernetes.io/config.hash"

	// SourceFile is the config.source of a pod read from a manifest.
	SourceFile = "file"
	// SourceAPIServer is the config.source of a pod from the API server.
	SourceAPIServer = "api"
)

// IsMirrorPod reports whether pod is a mirror pod, as the kubelet's
// kubetypes.IsMirrorPod: it carries the mirror annotation.
func IsMirrorPod(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[ConfigMirrorAnnotationKey]
	return ok
}

// IsStaticPod reports whether pod came from a source other than the API
// server, as kubetypes.IsStaticPod. A mirror pod read from the API carries
// its static pod's annotations: test IsMirrorPod first.
func IsStaticPod(pod *corev1.Pod) bool {
	source, ok := pod.Annotations[ConfigSourceAnnotationKey]
	return ok && source != SourceAPIServer
}

// IsMirrorPodOf reports whether mirror is the mirror pod of pod: the same
// name and namespace, and the hash of pod (kubepod.IsMirrorPodOf).
func IsMirrorPodOf(mirror, pod *corev1.Pod) bool {
	if pod.Name != mirror.Name || pod.Namespace != mirror.Namespace {
		return false
	}
	hash, ok := mirror.Annotations[ConfigMirrorAnnotationKey]
	return ok && hash == pod.Annotations[ConfigHashAnnotationKey]
}

// FullName is the kubelet's pod full name, name_namespace
// (kubecontainer.GetPodFullName): a static pod and its mirror pod share it.
func FullName(pod *corev1.Pod) string {
	return pod.Name + "_" + pod.Namespace
}
