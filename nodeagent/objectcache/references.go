package objectcache

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// visitor is called with each name a pod refers to, and returns whether
// visiting goes on.
type visitor func(name string) (shouldContinue bool)

// skipEmptyNames keeps visit from being called with an empty name, which
// an optional reference left unset carries. It mirrors skipEmptyNames in
// pkg/api/v1/pod/util.go.
func skipEmptyNames(visit visitor) visitor {
	return func(name string) bool {
		return name == "" || visit(name)
	}
}

// visitContainers calls visit with every container of spec, init
// containers, then containers, then ephemeral containers, until it returns
// false. It mirrors VisitContainers with AllContainers in
// pkg/api/v1/pod/util.go.
func visitContainers(spec *corev1.PodSpec, visit func(*corev1.Container) bool) bool {
	for i := range spec.InitContainers {
		if !visit(&spec.InitContainers[i]) {
			return false
		}
	}
	for i := range spec.Containers {
		if !visit(&spec.Containers[i]) {
			return false
		}
	}
	for i := range spec.EphemeralContainers {
		if !visit((*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon)) {
			return false
		}
	}
	return true
}

// visitPodSecretNames calls visit with the name of every Secret pod refers
// to: its image pull secrets, its containers' envFrom and env, and its
// volumes, the volume plugins' secret references included. References
// through other objects (pod, PVC, PV, Secret) are not followed. It mirrors
// VisitPodSecretNames in pkg/api/v1/pod/util.go.
func visitPodSecretNames(pod *corev1.Pod, visit visitor) bool {
	visit = skipEmptyNames(visit)
	for _, ref := range pod.Spec.ImagePullSecrets {
		if !visit(ref.Name) {
			return false
		}
	}
	if !visitContainers(&pod.Spec, func(c *corev1.Container) bool { return visitContainerSecretNames(c, visit) }) {
		return false
	}
	for i := range pod.Spec.Volumes {
		source := &pod.Spec.Volumes[i].VolumeSource
		switch {
		case source.AzureFile != nil:
			if source.AzureFile.SecretName != "" && !visit(source.AzureFile.SecretName) {
				return false
			}
		case source.CephFS != nil:
			if source.CephFS.SecretRef != nil && !visit(source.CephFS.SecretRef.Name) {
				return false
			}
		case source.Cinder != nil:
			if source.Cinder.SecretRef != nil && !visit(source.Cinder.SecretRef.Name) {
				return false
			}
		case source.FlexVolume != nil:
			if source.FlexVolume.SecretRef != nil && !visit(source.FlexVolume.SecretRef.Name) {
				return false
			}
		case source.Projected != nil:
			for j := range source.Projected.Sources {
				if s := source.Projected.Sources[j].Secret; s != nil && !visit(s.Name) {
					return false
				}
			}
		case source.RBD != nil:
			if source.RBD.SecretRef != nil && !visit(source.RBD.SecretRef.Name) {
				return false
			}
		case source.Secret != nil:
			if !visit(source.Secret.SecretName) {
				return false
			}
		case source.ScaleIO != nil:
			if source.ScaleIO.SecretRef != nil && !visit(source.ScaleIO.SecretRef.Name) {
				return false
			}
		case source.ISCSI != nil:
			if source.ISCSI.SecretRef != nil && !visit(source.ISCSI.SecretRef.Name) {
				return false
			}
		case source.StorageOS != nil:
			if source.StorageOS.SecretRef != nil && !visit(source.StorageOS.SecretRef.Name) {
				return false
			}
		case source.CSI != nil:
			if source.CSI.NodePublishSecretRef != nil && !visit(source.CSI.NodePublishSecretRef.Name) {
				return false
			}
		}
	}
	return true
}

// visitContainerSecretNames mirrors visitContainerSecretNames in
// pkg/api/v1/pod/util.go.
func visitContainerSecretNames(c *corev1.Container, visit visitor) bool {
	for _, env := range c.EnvFrom {
		if env.SecretRef != nil && !visit(env.SecretRef.Name) {
			return false
		}
	}
	for _, env := range c.Env {
		if env.ValueFrom != nil && env.ValueFrom.SecretKeyRef != nil && !visit(env.ValueFrom.SecretKeyRef.Name) {
			return false
		}
	}
	return true
}

// visitPodConfigMapNames calls visit with the name of every ConfigMap pod
// refers to: its containers' envFrom and env, and its configMap and
// projected volumes. It mirrors VisitPodConfigmapNames in
// pkg/api/v1/pod/util.go.
func visitPodConfigMapNames(pod *corev1.Pod, visit visitor) bool {
	visit = skipEmptyNames(visit)
	if !visitContainers(&pod.Spec, func(c *corev1.Container) bool { return visitContainerConfigMapNames(c, visit) }) {
		return false
	}
	for i := range pod.Spec.Volumes {
		source := &pod.Spec.Volumes[i].VolumeSource
		switch {
		case source.Projected != nil:
			for j := range source.Projected.Sources {
				if cm := source.Projected.Sources[j].ConfigMap; cm != nil && !visit(cm.Name) {
					return false
				}
			}
		case source.ConfigMap != nil:
			if !visit(source.ConfigMap.Name) {
				return false
			}
		}
	}
	return true
}

// visitContainerConfigMapNames mirrors visitContainerConfigmapNames in
// pkg/api/v1/pod/util.go.
func visitContainerConfigMapNames(c *corev1.Container, visit visitor) bool {
	for _, env := range c.EnvFrom {
		if env.ConfigMapRef != nil && !visit(env.ConfigMapRef.Name) {
			return false
		}
	}
	for _, env := range c.Env {
		if env.ValueFrom != nil && env.ValueFrom.ConfigMapKeyRef != nil && !visit(env.ValueFrom.ConfigMapKeyRef.Name) {
			return false
		}
	}
	return true
}

// secretNames is the set of Secrets pod refers to. It mirrors
// getSecretNames in pkg/kubelet/secret/secret_manager.go.
func secretNames(pod *corev1.Pod) sets.Set[string] {
	names := sets.New[string]()
	visitPodSecretNames(pod, func(name string) bool {
		names.Insert(name)
		return true
	})
	return names
}

// configMapNames is the set of ConfigMaps pod refers to. It mirrors
// getConfigMapNames in pkg/kubelet/configmap/configmap_manager.go.
func configMapNames(pod *corev1.Pod) sets.Set[string] {
	names := sets.New[string]()
	visitPodConfigMapNames(pod, func(name string) bool {
		names.Insert(name)
		return true
	})
	return names
}
