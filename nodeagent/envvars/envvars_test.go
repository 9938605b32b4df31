package envvars

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

type mapSources struct {
	configMaps map[string]map[string]string
	secrets    map[string]map[string][]byte
}

func (m mapSources) ConfigMap(_ context.Context, ns, name string) (*corev1.ConfigMap, error) {
	d, ok := m.configMaps[name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmap"}, name)
	}
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: d}, nil
}

func (m mapSources) Secret(_ context.Context, ns, name string) (*corev1.Secret, error) {
	d, ok := m.secrets[name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secret"}, name)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: d}, nil
}

var sources = mapSources{
	configMaps: map[string]map[string]string{"cfg": {"MODE": "fast", "LEVEL": "3"}},
	secrets:    map[string]map[string][]byte{"creds": {"password": []byte("s3cret")}},
}

func pod(c corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-0", UID: "uid-1", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "node-1", ServiceAccountName: "sa", Containers: []corev1.Container{c}},
	}
}

func field(path string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
}

func TestMake(t *testing.T) {
	tests := []struct {
		name    string
		c       corev1.Container
		want    map[string]string
		wantErr string
	}{{
		name: "literal values and $(VAR) expansion",
		c: corev1.Container{Env: []corev1.EnvVar{
			{Name: "A", Value: "a"},
			{Name: "B", Value: "$(A)-b $$(A) $(UNKNOWN) $(C)"},
			{Name: "C", Value: "c"},
		}},
		want: map[string]string{"A": "a", "B": "a-b $(A) $(UNKNOWN) $(C)", "C": "c"},
	}, {
		name: "envFrom with prefix, overridden by env",
		c: corev1.Container{
			EnvFrom: []corev1.EnvFromSource{
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}},
				{Prefix: "S_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}},
			},
			Env: []corev1.EnvVar{{Name: "MODE", Value: "slow/$(LEVEL)"}},
		},
		want: map[string]string{"MODE": "slow/3", "LEVEL": "3", "S_password": "s3cret"},
	}, {
		name: "keys of ConfigMaps and Secrets",
		c: corev1.Container{Env: []corev1.EnvVar{
			{Name: "M", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "MODE"}}},
			{Name: "P", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}},
		}},
		want: map[string]string{"M": "fast", "P": "s3cret"},
	}, {
		name: "optional sources that are missing are left out",
		c: corev1.Container{
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Optional: ptr.To(true)}}},
			Env: []corev1.EnvVar{
				{Name: "K", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "nope", Optional: ptr.To(true)}}},
				{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Key: "x", Optional: ptr.To(true)}}},
			},
		},
		want: map[string]string{},
	}, {
		name:    "a required ConfigMap that is missing",
		c:       corev1.Container{EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}}}}},
		wantErr: `configmap "gone" not found`,
	}, {
		name: "a required key that is missing",
		c: corev1.Container{Env: []corev1.EnvVar{
			{Name: "K", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "token"}}},
		}},
		wantErr: "couldn't find key token in Secret ns/creds",
	}, {
		name: "the downward API's fields",
		c: corev1.Container{Env: []corev1.EnvVar{
			{Name: "NAME", ValueFrom: field("metadata.name")},
			{Name: "NS", ValueFrom: field("metadata.namespace")},
			{Name: "UID", ValueFrom: field("metadata.uid")},
			{Name: "APP", ValueFrom: field("metadata.labels['app']")},
			{Name: "NODE", ValueFrom: field("spec.nodeName")},
			{Name: "SA", ValueFrom: field("spec.serviceAccountName")},
			{Name: "HOST_IP", ValueFrom: field("status.hostIP")},
			{Name: "POD_IP", ValueFrom: field("status.podIP")},
			{Name: "POD_IPS", ValueFrom: field("status.podIPs")},
		}},
		want: map[string]string{
			"NAME": "web-0", "NS": "ns", "UID": "uid-1", "APP": "web", "NODE": "node-1", "SA": "sa",
			"HOST_IP": "127.1.0.1", "POD_IP": "10.0.0.5", "POD_IPS": "10.0.0.5,fd00::5",
		},
	}, {
		name: "resources, an unset limit reading as the node's allocatable",
		c: corev1.Container{
			Name: "app",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
			},
			Env: []corev1.EnvVar{
				{Name: "CPU_REQ_M", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: resource.MustParse("1m")}}},
				{Name: "MEM_MI", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
				{Name: "CPU_LIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
			},
		},
		want: map[string]string{"CPU_REQ_M": "250", "MEM_MI": "256", "CPU_LIMIT": "4"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			podIPCalls := 0
			in := Input{
				Pod: pod(tt.c), HostIPs: []string{"127.1.0.1"},
				PodIPs: func(context.Context) ([]string, error) {
					podIPCalls++
					return []string{"10.0.0.5", "fd00::5"}, nil
				},
				Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")},
			}
			in.Container = &in.Pod.Spec.Containers[0]
			got, err := Make(context.Background(), sources, in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gotMap := map[string]string{}
			for i, kv := range got {
				if i > 0 && got[i-1].Key >= kv.Key {
					t.Errorf("not sorted: %q before %q", got[i-1].Key, kv.Key)
				}
				gotMap[kv.Key] = string(kv.Value)
			}
			if len(gotMap) != len(tt.want) {
				t.Errorf("got %v, want %v", gotMap, tt.want)
			}
			for k, v := range tt.want {
				if gotMap[k] != v {
					t.Errorf("%s = %q, want %q", k, gotMap[k], v)
				}
			}
			if podIPCalls > 1 {
				t.Errorf("pod IPs asked for %d times, want at most once", podIPCalls)
			}
		})
	}
}

func TestPodIPsAreNotAskedForUnlessUsed(t *testing.T) {
	in := Input{Pod: pod(corev1.Container{Env: []corev1.EnvVar{{Name: "A", Value: "a"}}}), PodIPs: func(context.Context) ([]string, error) {
		return nil, errors.New("must not be called")
	}}
	in.Container = &in.Pod.Spec.Containers[0]
	if _, err := Make(context.Background(), sources, in); err != nil {
		t.Fatal(err)
	}
}
