package staticpods

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validatePod checks what the agent needs of a static pod before it runs
// it: the part of the API server's ValidatePodCreate (which the kubelet's
// file source calls, and which lives in k8s.io/kubernetes) that a pod
// cannot run without. The mirror pod goes through the API server's full
// validation when it is created.
func validatePod(pod *corev1.Pod) field.ErrorList {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	for _, msg := range validation.IsDNS1123Subdomain(pod.Name) {
		errs = append(errs, field.Invalid(meta.Child("name"), pod.Name, msg))
	}
	for _, msg := range validation.IsDNS1123Label(pod.Namespace) {
		errs = append(errs, field.Invalid(meta.Child("namespace"), pod.Namespace, msg))
	}
	spec := field.NewPath("spec")
	if len(pod.Spec.Containers) == 0 {
		errs = append(errs, field.Required(spec.Child("containers"), ""))
	}
	names := sets.New[string]()
	for _, group := range []struct {
		name       string
		containers []corev1.Container
	}{{"initContainers", pod.Spec.InitContainers}, {"containers", pod.Spec.Containers}} {
		for i, c := range group.containers {
			p := spec.Child(group.name).Index(i)
			switch {
			case c.Name == "":
				errs = append(errs, field.Required(p.Child("name"), ""))
			case names.Has(c.Name):
				errs = append(errs, field.Duplicate(p.Child("name"), c.Name))
			default:
				for _, msg := range validation.IsDNS1123Label(c.Name) {
					errs = append(errs, field.Invalid(p.Child("name"), c.Name, msg))
				}
			}
			names.Insert(c.Name)
			if c.Image == "" {
				errs = append(errs, field.Required(p.Child("image"), ""))
			} else if strings.TrimSpace(c.Image) != c.Image {
				errs = append(errs, field.Invalid(p.Child("image"), c.Image, "must not have leading or trailing whitespace"))
			}
		}
	}
	switch pod.Spec.RestartPolicy {
	case corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	default:
		errs = append(errs, field.NotSupported(spec.Child("restartPolicy"), pod.Spec.RestartPolicy,
			[]corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}))
	}
	switch pod.Spec.DNSPolicy {
	case corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone:
	default:
		errs = append(errs, field.NotSupported(spec.Child("dnsPolicy"), pod.Spec.DNSPolicy,
			[]corev1.DNSPolicy{corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone}))
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		errs = append(errs, field.Invalid(spec.Child("terminationGracePeriodSeconds"), *g, "must be greater than or equal to 0"))
	}
	return errs
}

// apiObjectReference is the kubelet's check that a static pod references
// no API object (podutil.HasAPIObjectReference): a static pod runs without
// the API server, so it may not use a service account, Secrets,
// ConfigMaps, claims or volumes that need them. It returns the resource
// referenced, or an error for a volume it does not know.
func apiObjectReference(pod *corev1.Pod) (string, error) {
	spec := &pod.Spec
	if spec.ServiceAccountName != "" {
		return "serviceaccounts", nil
	}
	var secrets, configMaps bool
	for _, ref := range spec.ImagePullSecrets {
		secrets = secrets || ref.Name != ""
	}
	for _, containers := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range containers {
			s, c := containerReferences(&containers[i])
			secrets, configMaps = secrets || s, configMaps || c
		}
	}
	for i := range spec.EphemeralContainers {
		s, c := containerReferences((*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon))
		secrets, configMaps = secrets || s, configMaps || c
	}
	for _, v := range spec.Volumes {
		src := v.VolumeSource
		switch {
		case src.AzureFile != nil && src.AzureFile.SecretName != "",
			src.CephFS != nil && src.CephFS.SecretRef != nil && src.CephFS.SecretRef.Name != "",
			src.Cinder != nil && src.Cinder.SecretRef != nil && src.Cinder.SecretRef.Name != "",
			src.FlexVolume != nil && src.FlexVolume.SecretRef != nil && src.FlexVolume.SecretRef.Name != "",
			src.RBD != nil && src.RBD.SecretRef != nil && src.RBD.SecretRef.Name != "",
			src.Secret != nil && src.Secret.SecretName != "",
			src.ScaleIO != nil && src.ScaleIO.SecretRef != nil && src.ScaleIO.SecretRef.Name != "",
			src.ISCSI != nil && src.ISCSI.SecretRef != nil && src.ISCSI.SecretRef.Name != "",
			src.StorageOS != nil && src.StorageOS.SecretRef != nil && src.StorageOS.SecretRef.Name != "",
			src.CSI != nil && src.CSI.NodePublishSecretRef != nil && src.CSI.NodePublishSecretRef.Name != "":
			secrets = true
		case src.ConfigMap != nil && src.ConfigMap.Name != "":
			configMaps = true
		case src.Projected != nil:
			for _, s := range src.Projected.Sources {
				secrets = secrets || (s.Secret != nil && s.Secret.Name != "")
				configMaps = configMaps || (s.ConfigMap != nil && s.ConfigMap.Name != "")
			}
		}
	}
	switch {
	case secrets:
		return "secrets", nil
	case configMaps:
		return "configmaps", nil
	case len(spec.ResourceClaims) > 0:
		return "resourceclaims", nil
	}
	for _, v := range spec.Volumes {
		src := v.VolumeSource
		switch {
		case src.AWSElasticBlockStore != nil, src.AzureDisk != nil, src.CephFS != nil, src.Cinder != nil,
			src.DownwardAPI != nil, src.EmptyDir != nil, src.FC != nil, src.FlexVolume != nil, src.Flocker != nil, src.GCEPersistentDisk != nil,
			src.GitRepo != nil, src.HostPath != nil, src.Image != nil, src.ISCSI != nil, src.NFS != nil, src.PhotonPersistentDisk != nil,
			src.PortworxVolume != nil, src.Quobyte != nil, src.RBD != nil, src.ScaleIO != nil, src.StorageOS != nil, src.VsphereVolume != nil:
		case src.ConfigMap != nil:
			return "configmaps (via configmap volumes)", nil
		case src.Secret != nil:
			return "secrets (via secret volumes)", nil
		case src.CSI != nil:
			return "csidrivers (via CSI volumes)", nil
		case src.Glusterfs != nil:
			return "endpoints (via glusterFS volumes)", nil
		case src.PersistentVolumeClaim != nil:
			return "persistentvolumeclaims", nil
		case src.Ephemeral != nil:
			return "persistentvolumeclaims (via ephemeral volumes)", nil
		case src.AzureFile != nil:
			return "secrets (via azureFile volumes)", nil
		case src.Projected != nil:
			for _, s := range src.Projected.Sources {
				switch {
				case s.ConfigMap != nil:
					return "configmaps (via projected volumes)", nil
				case s.Secret != nil:
					return "secrets (via projected volumes)", nil
				case s.ServiceAccountToken != nil:
					return "serviceaccounts (via projected volumes)", nil
				case s.ClusterTrustBundle != nil:
					return "clustertrustbundles", nil
				case s.PodCertificate != nil:
					return "podcertificates", nil
				case s.DownwardAPI != nil:
				default:
					return "", fmt.Errorf("unknown source for projected volume %q", v.Name)
				}
			}
		default:
			return "", fmt.Errorf("unknown volume type for volume  %q", v.Name)
		}
	}
	return "", nil
}

// containerReferences reports whether a container's environment names a
// Secret or a ConfigMap.
func containerReferences(c *corev1.Container) (secrets, configMaps bool) {
	for _, from := range c.EnvFrom {
		secrets = secrets || (from.SecretRef != nil && from.SecretRef.Name != "")
		configMaps = configMaps || (from.ConfigMapRef != nil && from.ConfigMapRef.Name != "")
	}
	for _, env := range c.Env {
		if v := env.ValueFrom; v != nil {
			secrets = secrets || (v.SecretKeyRef != nil && v.SecretKeyRef.Name != "")
			configMaps = configMaps || (v.ConfigMapKeyRef != nil && v.ConfigMapKeyRef.Name != "")
		}
	}
	return secrets, configMaps
}
