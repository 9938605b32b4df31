package objectcache

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

func TestTheVisitorsFindEveryReference(t *testing.T) {
	ref := func(name string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: name} }
	secretRef := func(name string) *corev1.LocalObjectReference { r := ref(name); return &r }
	envFrom := func(e corev1.EnvFromSource) corev1.Container {
		return corev1.Container{Name: "c", EnvFrom: []corev1.EnvFromSource{e}}
	}
	env := func(v corev1.EnvVarSource) corev1.Container {
		return corev1.Container{Name: "c", Env: []corev1.EnvVar{{Name: "E", ValueFrom: &v}}}
	}
	volume := func(s corev1.VolumeSource) corev1.PodSpec {
		return corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: s}}}
	}
	containers := func(c corev1.Container) corev1.PodSpec { return corev1.PodSpec{Containers: []corev1.Container{c}} }
	for _, tc := range []struct {
		name                       string
		spec                       corev1.PodSpec
		wantConfigMaps, wantSecret []string
	}{
		{name: "container env configMapKeyRef", spec: containers(env(corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref("x"), Key: "k"}})), wantConfigMaps: []string{"x"}},
		{name: "container env secretKeyRef", spec: containers(env(corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: ref("x"), Key: "k"}})), wantSecret: []string{"x"}},
		{name: "container envFrom configMapRef", spec: containers(envFrom(corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref("x")}})), wantConfigMaps: []string{"x"}},
		{name: "container envFrom secretRef", spec: containers(envFrom(corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: ref("x")}})), wantSecret: []string{"x"}},
		{name: "container env fieldRef refers to nothing", spec: containers(env(corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}))},
		{name: "init container env configMapKeyRef", spec: corev1.PodSpec{InitContainers: []corev1.Container{env(corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref("x")}})}}, wantConfigMaps: []string{"x"}},
		{name: "init container envFrom secretRef", spec: corev1.PodSpec{InitContainers: []corev1.Container{envFrom(corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: ref("x")}})}}, wantSecret: []string{"x"}},
		{name: "ephemeral container envFrom configMapRef", spec: corev1.PodSpec{EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon(envFrom(corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref("x")}}))}}}, wantConfigMaps: []string{"x"}},
		{name: "ephemeral container env secretKeyRef", spec: corev1.PodSpec{EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon(env(corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: ref("x")}}))}}}, wantSecret: []string{"x"}},
		{name: "imagePullSecrets", spec: corev1.PodSpec{ImagePullSecrets: []corev1.LocalObjectReference{ref("x"), ref("y")}}, wantSecret: []string{"x", "y"}},
		{name: "configMap volume", spec: volume(corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref("x")}}), wantConfigMaps: []string{"x"}},
		{name: "secret volume", spec: volume(corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "x"}}), wantSecret: []string{"x"}},
		{name: "projected volume", spec: volume(corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref("cm")}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: ref("s")}},
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
			{DownwardAPI: &corev1.DownwardAPIProjection{}},
		}}}), wantConfigMaps: []string{"cm"}, wantSecret: []string{"s"}},
		{name: "azureFile volume", spec: volume(corev1.VolumeSource{AzureFile: &corev1.AzureFileVolumeSource{SecretName: "x"}}), wantSecret: []string{"x"}},
		{name: "cephfs volume", spec: volume(corev1.VolumeSource{CephFS: &corev1.CephFSVolumeSource{SecretRef: secretRef("x")}}), wantSecret: []string{"x"}},
		{name: "cinder volume", spec: volume(corev1.VolumeSource{Cinder: &corev1.CinderVolumeSource{SecretRef: secretRef("x")}}), wantSecret: []string{"x"}},
		{name: "flexVolume volume", spec: volume(corev1.VolumeSource{FlexVolume: &corev1.FlexVolumeSource{SecretRef: secretRef("x")}}), wantSecret: []string{"x"}},
		{name: "rbd volume", spec: volume(corev1.VolumeSource{RBD: &corev1.RBDVolumeSource{SecretRef: secretRef("x")}}), wantSecret: []string{"x"}},
		{name: "scaleIO volume", spec: volume(corev1.VolumeSource{ScaleIO: &corev1.ScaleIOVolumeSource{SecretRef: secretRef("x")}}), wantSecret: []string{"x"}},
		{name: "iscsi volume", spec: volume(corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{SecretRef: secretRef("x")}}), wantSecret: []string{"x"}},
		{name: "storageos volume", spec: volume(corev1.VolumeSource{StorageOS: &corev1.StorageOSVolumeSource{SecretRef: secretRef("x")}}), wantSecret: []string{"x"}},
		{name: "csi volume nodePublishSecretRef", spec: volume(corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d", NodePublishSecretRef: secretRef("x")}}), wantSecret: []string{"x"}},
		{name: "empty names are skipped", spec: corev1.PodSpec{
			ImagePullSecrets: []corev1.LocalObjectReference{ref("")},
			Volumes: []corev1.Volume{
				{Name: "a", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
				{Name: "b", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{}}},
			},
		}},
		{name: "emptyDir volume refers to nothing", spec: volume(corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: tc.spec}
			if got, want := configMapNames(pod), sets.New(tc.wantConfigMaps...); !got.Equal(want) {
				t.Errorf("ConfigMaps = %v, want %v", sets.List(got), sets.List(want))
			}
			if got, want := secretNames(pod), sets.New(tc.wantSecret...); !got.Equal(want) {
				t.Errorf("Secrets = %v, want %v", sets.List(got), sets.List(want))
			}
		})
	}
}

func TestTheVisitorsStopWhenAskedTo(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "a"}, {Name: "b"}},
		Volumes: []corev1.Volume{
			{Name: "a", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "a"}}}},
			{Name: "b", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "b"}}}},
		},
	}}
	for name, visit := range map[string]func(*corev1.Pod, visitor) bool{"secrets": visitPodSecretNames, "configmaps": visitPodConfigMapNames} {
		var seen []string
		completed := visit(pod, func(name string) bool { seen = append(seen, name); return false })
		if completed || len(seen) != 1 {
			t.Errorf("%s: visiting went on after the visitor stopped it: completed %v, saw %v", name, completed, seen)
		}
	}
}
