package envvars

import (
	"errors"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ErrServicesNotSynced is what Input.Services returns until the node's
// Service watch has listed once: the kubelet's makeEnvironmentVariables
// refuses a pod from the API server then, so that it does not start without
// KUBERNETES_SERVICE_HOST, which in-cluster clients need.
var ErrServicesNotSynced = errors.New("services have not yet been read at least once, cannot construct envvars")

// masterService is the kubelet's masterServices: the Service of the default
// namespace whose variables every pod gets, whatever its enableServiceLinks.
const masterService = "kubernetes"

// serviceEnvVarMap is the kubelet's getServiceEnvVarMap: the variables of
// the Services with a cluster IP in namespace ns if enableServiceLinks, and
// of default/kubernetes always. A Service named kubernetes in ns, with
// enableServiceLinks, replaces the master service, as on the kubelet.
//
// The kubelet hands FromServices its Services in a map's order, so that of
// two whose variables collide either may win; here the later by name does.
func serviceEnvVarMap(services []*corev1.Service, ns string, enableServiceLinks bool) map[string]string {
	byName := map[string]*corev1.Service{}
	for _, s := range services {
		if !isServiceIPSet(s) {
			continue
		}
		switch {
		case s.Namespace == metav1.NamespaceDefault && s.Name == masterService:
			if _, ok := byName[s.Name]; !ok {
				byName[s.Name] = s
			}
		case s.Namespace == ns && enableServiceLinks:
			byName[s.Name] = s
		}
	}
	mapped := make([]*corev1.Service, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		mapped = append(mapped, byName[name])
	}
	vars := FromServices(mapped)
	m := make(map[string]string, len(vars))
	for _, e := range vars {
		m[e.Name] = e.Value
	}
	return m
}

// FromServices is the kubelet's envvars.FromServices: for each Service with
// a cluster IP, in order, {SVC}_SERVICE_HOST, {SVC}_SERVICE_PORT for the
// first port and {SVC}_SERVICE_PORT_{NAME} for each named one, then the
// Docker-link variables of makeLinkVariables. {SVC} and {NAME} are upper
// case with dashes as underscores. A Service without ports, which the API
// server rejects and on which the kubelet would panic, gets only its host.
func FromServices(services []*corev1.Service) []corev1.EnvVar {
	var result []corev1.EnvVar
	for _, s := range services {
		if !isServiceIPSet(s) {
			continue
		}
		prefix := makeEnvVariableName(s.Name)
		result = append(result, corev1.EnvVar{Name: prefix + "_SERVICE_HOST", Value: s.Spec.ClusterIP})
		if len(s.Spec.Ports) == 0 {
			continue
		}
		name := prefix + "_SERVICE_PORT"
		result = append(result, corev1.EnvVar{Name: name, Value: strconv.Itoa(int(s.Spec.Ports[0].Port))})
		for i := range s.Spec.Ports {
			if sp := &s.Spec.Ports[i]; sp.Name != "" {
				result = append(result, corev1.EnvVar{Name: name + "_" + makeEnvVariableName(sp.Name), Value: strconv.Itoa(int(sp.Port))})
			}
		}
		result = makeLinkVariables(result, s, prefix)
	}
	return result
}

// makeEnvVariableName is the kubelet's: upper case, dashes as underscores.
func makeEnvVariableName(s string) string {
	return strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
}

// makeLinkVariables is the kubelet's, appending to vars: {SVC}_PORT for the
// first port, and for each {SVC}_PORT_{PORT}_{PROTO} with its _PROTO, _PORT
// and _ADDR, the protocol defaulting to TCP.
func makeLinkVariables(vars []corev1.EnvVar, s *corev1.Service, prefix string) []corev1.EnvVar {
	for i := range s.Spec.Ports {
		sp := &s.Spec.Ports[i]
		protocol := string(corev1.ProtocolTCP)
		if sp.Protocol != "" {
			protocol = string(sp.Protocol)
		}
		proto := strings.ToLower(protocol)
		port := strconv.Itoa(int(sp.Port))
		url := proto + "://" + net.JoinHostPort(s.Spec.ClusterIP, port)
		if i == 0 {
			// Docker special-cases the first port.
			vars = append(vars, corev1.EnvVar{Name: prefix + "_PORT", Value: url})
		}
		portPrefix := prefix + "_PORT_" + port + "_" + strings.ToUpper(protocol)
		vars = append(vars,
			corev1.EnvVar{Name: portPrefix, Value: url},
			corev1.EnvVar{Name: portPrefix + "_PROTO", Value: proto},
			corev1.EnvVar{Name: portPrefix + "_PORT", Value: port},
			corev1.EnvVar{Name: portPrefix + "_ADDR", Value: s.Spec.ClusterIP},
		)
	}
	return vars
}

// isServiceIPSet is the kubelet's v1helper.IsServiceIPSet: a cluster IP
// that is neither None (headless) nor empty (ExternalName, not yet
// allocated).
func isServiceIPSet(s *corev1.Service) bool {
	return s.Spec.ClusterIP != corev1.ClusterIPNone && s.Spec.ClusterIP != ""
}
