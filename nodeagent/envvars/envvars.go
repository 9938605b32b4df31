// Package envvars resolves a container's environment as the kubelet's
// makeEnvironmentVariables does: envFrom ConfigMaps and Secrets first, then
// env in declared order with $(VAR) expansion, values from ConfigMap and
// Secret keys, the downward API's fields and the container's resources, then
// the service links that neither set.
//
// Service links are the {SVC}_SERVICE_HOST, {SVC}_SERVICE_PORT and
// Docker-link {SVC}_PORT_{PORT}_{PROTO} variables of every Service with a
// cluster IP in the pod's namespace when pod.spec.enableServiceLinks is true,
// and always of the master service, default/kubernetes, as the kubelet's
// getServiceEnvVarMap makes them. A $(VAR) in an env value sees them after
// the variables set so far.
package envvars

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubectl/pkg/util/fieldpath"
	"k8s.io/kubectl/pkg/util/resource"
)

// Sources are where ConfigMaps and Secrets come from: the node's cache of
// them in the agent, maps in tests.
type Sources interface {
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// Input is what a container's environment depends on besides the API
// server's objects.
type Input struct {
	Pod       *corev1.Pod
	Container *corev1.Container
	// HostIPs are the node's IPs, for status.hostIP and status.hostIPs.
	HostIPs []string
	// PodIPs returns the pod's IPs, for status.podIP and status.podIPs. It
	// is called only if a variable asks for them: on a first start they come
	// from the sandbox, which costs a runtime call.
	PodIPs func(ctx context.Context) ([]string, error)
	// Allocatable is the node's allocatable, which resourceFieldRef reports
	// for a limit the container does not set, as the kubelet does.
	Allocatable corev1.ResourceList
	// Services returns every Service the node knows, in any namespace, as
	// the kubelet's serviceLister.List(labels.Everything()) does; Make picks
	// those of the pod's namespace and the master service itself. Its error,
	// ErrServicesNotSynced before the node's watch has listed once, is
	// Make's. Nil means no service links at all, as for a kubelet without
	// an API server.
	Services func() ([]*corev1.Service, error)
}

// Make returns the container's environment, sorted by name, or the error the
// kubelet reports as CreateContainerConfigError: Services failing, a required
// ConfigMap, Secret or key that is missing. It is the kubelet's
// makeEnvironmentVariables, pod.spec.enableServiceLinks unset reading as
// true, its API default, where the kubelet refuses the pod.
func Make(ctx context.Context, src Sources, in Input) ([]*runtimeapi.KeyValue, error) {
	pod, c := in.Pod, in.Container
	var serviceEnv map[string]string
	if in.Services != nil {
		services, err := in.Services()
		if err != nil {
			return nil, err
		}
		enableServiceLinks := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
		serviceEnv = serviceEnvVarMap(services, pod.Namespace, enableServiceLinks)
	}
	env := make(map[string]string, len(serviceEnv)+len(c.Env))
	// A $(VAR) sees the variables set so far, then the service links, as
	// the kubelet's expansion.MappingFuncFor(tmpEnv, serviceEnv).
	lookup := func(name string) (string, bool) {
		if v, ok := env[name]; ok {
			return v, true
		}
		v, ok := serviceEnv[name]
		return v, ok
	}
	configMaps := map[string]*corev1.ConfigMap{}
	secrets := map[string]*corev1.Secret{}
	configMap := func(name string) (*corev1.ConfigMap, error) {
		if cm, ok := configMaps[name]; ok {
			return cm, nil
		}
		cm, err := src.ConfigMap(ctx, pod.Namespace, name)
		if err == nil {
			configMaps[name] = cm
		}
		return cm, err
	}
	secret := func(name string) (*corev1.Secret, error) {
		if s, ok := secrets[name]; ok {
			return s, nil
		}
		s, err := src.Secret(ctx, pod.Namespace, name)
		if err == nil {
			secrets[name] = s
		}
		return s, err
	}

	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, err := configMap(from.ConfigMapRef.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && isTrue(from.ConfigMapRef.Optional) {
					continue
				}
				return nil, err
			}
			for k, v := range cm.Data {
				env[from.Prefix+k] = v
			}
		case from.SecretRef != nil:
			s, err := secret(from.SecretRef.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && isTrue(from.SecretRef.Optional) {
					continue
				}
				return nil, err
			}
			for k, v := range s.Data {
				env[from.Prefix+k] = string(v)
			}
		}
	}

	var podIPs []string
	podIPsResolved := false
	ips := func() ([]string, error) {
		if podIPsResolved || in.PodIPs == nil {
			return podIPs, nil
		}
		var err error
		podIPs, err = in.PodIPs(ctx)
		podIPsResolved = err == nil
		return podIPs, err
	}

	for _, e := range c.Env {
		value := e.Value
		switch {
		case value != "":
			value = expand(value, lookup)
		case e.ValueFrom == nil:
		case e.ValueFrom.FieldRef != nil:
			v, err := fieldValue(e.ValueFrom.FieldRef.FieldPath, pod, in.HostIPs, ips)
			if err != nil {
				return nil, fmt.Errorf("env %s of container %s: %w", e.Name, c.Name, err)
			}
			value = v
		case e.ValueFrom.ResourceFieldRef != nil:
			v, err := resourceValue(e.ValueFrom.ResourceFieldRef, pod, c, in.Allocatable)
			if err != nil {
				return nil, fmt.Errorf("env %s of container %s: %w", e.Name, c.Name, err)
			}
			value = v
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, err := configMap(ref.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && isTrue(ref.Optional) {
					continue
				}
				return nil, err
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				if isTrue(ref.Optional) {
					continue
				}
				return nil, fmt.Errorf("couldn't find key %v in ConfigMap %v/%v", ref.Key, pod.Namespace, ref.Name)
			}
			value = v
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, err := secret(ref.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && isTrue(ref.Optional) {
					continue
				}
				return nil, err
			}
			v, ok := s.Data[ref.Key]
			if !ok {
				if isTrue(ref.Optional) {
					continue
				}
				return nil, fmt.Errorf("couldn't find key %v in Secret %v/%v", ref.Key, pod.Namespace, ref.Name)
			}
			value = string(v)
		}
		env[e.Name] = value
	}

	// The service links that neither envFrom nor env set: the kubelet's
	// "Append remaining service env vars".
	for k, v := range serviceEnv {
		if _, ok := env[k]; !ok {
			env[k] = v
		}
	}

	out := make([]*runtimeapi.KeyValue, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, &runtimeapi.KeyValue{Key: k, Value: []byte(env[k])})
	}
	return out, nil
}

// fieldValue is the kubelet's podFieldSelectorRuntimeValue: the node and
// status fields it answers itself, metadata through the downward API's
// field paths.
func fieldValue(path string, pod *corev1.Pod, hostIPs []string, podIPs func() ([]string, error)) (string, error) {
	switch path {
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		if len(hostIPs) == 0 {
			return "", fmt.Errorf("the node has no IP yet")
		}
		return hostIPs[0], nil
	case "status.hostIPs":
		return strings.Join(hostIPs, ","), nil
	case "status.podIP", "status.podIPs":
		ips, err := podIPs()
		if err != nil {
			return "", err
		}
		if path == "status.podIPs" {
			return strings.Join(ips, ","), nil
		}
		if len(ips) == 0 {
			return "", nil
		}
		return ips[0], nil
	}
	return fieldpath.ExtractFieldPathAsString(pod, path)
}

// resourceValue reports a container's request or limit, a limit the
// container leaves unset being the node's allocatable, as the kubelet's
// defaultPodLimitsForDownwardAPI makes it.
func resourceValue(ref *corev1.ResourceFieldSelector, pod *corev1.Pod, c *corev1.Container, allocatable corev1.ResourceList) (string, error) {
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		other := findContainer(pod, ref.ContainerName)
		if other == nil {
			return "", fmt.Errorf("container %s not found in pod %s/%s", ref.ContainerName, pod.Namespace, pod.Name)
		}
		c = other
	}
	defaulted := c.DeepCopy()
	if defaulted.Resources.Limits == nil {
		defaulted.Resources.Limits = corev1.ResourceList{}
	}
	for name, q := range allocatable {
		if _, ok := defaulted.Resources.Limits[name]; !ok {
			defaulted.Resources.Limits[name] = q
		}
	}
	return resource.ExtractContainerResourceValue(ref, defaulted)
}

func findContainer(pod *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

func isTrue(b *bool) bool { return b != nil && *b }

// Expand replaces $(NAME) with the value of a variable defined so far and
// $$ with $, leaving unknown and unclosed references as written: the
// kubelet's rules for env values, commands and args. Written here because
// the kubelet's implementation lives in k8s.io/kubernetes/third_party, which
// cannot be imported as a library.
func Expand(s string, vars map[string]string) string {
	return expand(s, func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	})
}

// expand is Expand looking variables up with lookup, which stands for the
// kubelet's expansion.MappingFuncFor over several maps.
func expand(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
