package envvars

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// TestFromServices is upstream's pkg/kubelet/envvars TestFromServices, its
// Services and expected variables as they are there, in order.
func TestFromServices(t *testing.T) {
	sl := []*corev1.Service{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "foo-bar"},
			Spec: corev1.ServiceSpec{
				Selector:  map[string]string{"bar": "baz"},
				ClusterIP: "1.2.3.4",
				Ports:     []corev1.ServicePort{{Port: 8080, Protocol: "TCP"}},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "abc-123"},
			Spec: corev1.ServiceSpec{
				Selector:  map[string]string{"bar": "baz"},
				ClusterIP: "5.6.7.8",
				Ports: []corev1.ServicePort{
					{Name: "u-d-p", Port: 8081, Protocol: "UDP"},
					{Name: "t-c-p", Port: 8081, Protocol: "TCP"},
				},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "q-u-u-x"},
			Spec: corev1.ServiceSpec{
				Selector:  map[string]string{"bar": "baz"},
				ClusterIP: "9.8.7.6",
				Ports: []corev1.ServicePort{
					{Port: 8082, Protocol: "TCP"},
					{Name: "8083", Port: 8083, Protocol: "TCP"},
				},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "svrc-clusterip-none"},
			Spec: corev1.ServiceSpec{
				Selector:  map[string]string{"bar": "baz"},
				ClusterIP: "None",
				Ports:     []corev1.ServicePort{{Port: 8082, Protocol: "TCP"}},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "svrc-clusterip-empty"},
			Spec: corev1.ServiceSpec{
				Selector:  map[string]string{"bar": "baz"},
				ClusterIP: "",
				Ports:     []corev1.ServicePort{{Port: 8082, Protocol: "TCP"}},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "super-ipv6"},
			Spec: corev1.ServiceSpec{
				Selector:  map[string]string{"bar": "baz"},
				ClusterIP: "2001:DB8::",
				Ports: []corev1.ServicePort{
					{Name: "u-d-p", Port: 8084, Protocol: "UDP"},
					{Name: "t-c-p", Port: 8084, Protocol: "TCP"},
				},
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "sctp-1"},
			Spec: corev1.ServiceSpec{
				Selector:  map[string]string{"bar": "sctp-sel"},
				ClusterIP: "1.2.3.4",
				Ports:     []corev1.ServicePort{{Port: 777, Protocol: "SCTP"}},
			},
		},
	}
	expected := []corev1.EnvVar{
		{Name: "FOO_BAR_SERVICE_HOST", Value: "1.2.3.4"},
		{Name: "FOO_BAR_SERVICE_PORT", Value: "8080"},
		{Name: "FOO_BAR_PORT", Value: "tcp://1.2.3.4:8080"},
		{Name: "FOO_BAR_PORT_8080_TCP", Value: "tcp://1.2.3.4:8080"},
		{Name: "FOO_BAR_PORT_8080_TCP_PROTO", Value: "tcp"},
		{Name: "FOO_BAR_PORT_8080_TCP_PORT", Value: "8080"},
		{Name: "FOO_BAR_PORT_8080_TCP_ADDR", Value: "1.2.3.4"},
		{Name: "ABC_123_SERVICE_HOST", Value: "5.6.7.8"},
		{Name: "ABC_123_SERVICE_PORT", Value: "8081"},
		{Name: "ABC_123_SERVICE_PORT_U_D_P", Value: "8081"},
		{Name: "ABC_123_SERVICE_PORT_T_C_P", Value: "8081"},
		{Name: "ABC_123_PORT", Value: "udp://5.6.7.8:8081"},
		{Name: "ABC_123_PORT_8081_UDP", Value: "udp://5.6.7.8:8081"},
		{Name: "ABC_123_PORT_8081_UDP_PROTO", Value: "udp"},
		{Name: "ABC_123_PORT_8081_UDP_PORT", Value: "8081"},
		{Name: "ABC_123_PORT_8081_UDP_ADDR", Value: "5.6.7.8"},
		{Name: "ABC_123_PORT_8081_TCP", Value: "tcp://5.6.7.8:8081"},
		{Name: "ABC_123_PORT_8081_TCP_PROTO", Value: "tcp"},
		{Name: "ABC_123_PORT_8081_TCP_PORT", Value: "8081"},
		{Name: "ABC_123_PORT_8081_TCP_ADDR", Value: "5.6.7.8"},
		{Name: "Q_U_U_X_SERVICE_HOST", Value: "9.8.7.6"},
		{Name: "Q_U_U_X_SERVICE_PORT", Value: "8082"},
		{Name: "Q_U_U_X_SERVICE_PORT_8083", Value: "8083"},
		{Name: "Q_U_U_X_PORT", Value: "tcp://9.8.7.6:8082"},
		{Name: "Q_U_U_X_PORT_8082_TCP", Value: "tcp://9.8.7.6:8082"},
		{Name: "Q_U_U_X_PORT_8082_TCP_PROTO", Value: "tcp"},
		{Name: "Q_U_U_X_PORT_8082_TCP_PORT", Value: "8082"},
		{Name: "Q_U_U_X_PORT_8082_TCP_ADDR", Value: "9.8.7.6"},
		{Name: "Q_U_U_X_PORT_8083_TCP", Value: "tcp://9.8.7.6:8083"},
		{Name: "Q_U_U_X_PORT_8083_TCP_PROTO", Value: "tcp"},
		{Name: "Q_U_U_X_PORT_8083_TCP_PORT", Value: "8083"},
		{Name: "Q_U_U_X_PORT_8083_TCP_ADDR", Value: "9.8.7.6"},
		{Name: "SUPER_IPV6_SERVICE_HOST", Value: "2001:DB8::"},
		{Name: "SUPER_IPV6_SERVICE_PORT", Value: "8084"},
		{Name: "SUPER_IPV6_SERVICE_PORT_U_D_P", Value: "8084"},
		{Name: "SUPER_IPV6_SERVICE_PORT_T_C_P", Value: "8084"},
		{Name: "SUPER_IPV6_PORT", Value: "udp://[2001:DB8::]:8084"},
		{Name: "SUPER_IPV6_PORT_8084_UDP", Value: "udp://[2001:DB8::]:8084"},
		{Name: "SUPER_IPV6_PORT_8084_UDP_PROTO", Value: "udp"},
		{Name: "SUPER_IPV6_PORT_8084_UDP_PORT", Value: "8084"},
		{Name: "SUPER_IPV6_PORT_8084_UDP_ADDR", Value: "2001:DB8::"},
		{Name: "SUPER_IPV6_PORT_8084_TCP", Value: "tcp://[2001:DB8::]:8084"},
		{Name: "SUPER_IPV6_PORT_8084_TCP_PROTO", Value: "tcp"},
		{Name: "SUPER_IPV6_PORT_8084_TCP_PORT", Value: "8084"},
		{Name: "SUPER_IPV6_PORT_8084_TCP_ADDR", Value: "2001:DB8::"},
		{Name: "SCTP_1_SERVICE_HOST", Value: "1.2.3.4"},
		{Name: "SCTP_1_SERVICE_PORT", Value: "777"},
		{Name: "SCTP_1_PORT", Value: "sctp://1.2.3.4:777"},
		{Name: "SCTP_1_PORT_777_SCTP", Value: "sctp://1.2.3.4:777"},
		{Name: "SCTP_1_PORT_777_SCTP_PROTO", Value: "sctp"},
		{Name: "SCTP_1_PORT_777_SCTP_PORT", Value: "777"},
		{Name: "SCTP_1_PORT_777_SCTP_ADDR", Value: "1.2.3.4"},
	}
	if got := FromServices(sl); !reflect.DeepEqual(got, expected) {
		t.Errorf("FromServices =\n%v\nwant\n%v", got, expected)
	}
}

func buildService(name, namespace, clusterIP, protocol string, port int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.ServiceSpec{
			Ports:     []corev1.ServicePort{{Protocol: corev1.Protocol(protocol), Port: port}},
			ClusterIP: clusterIP,
		},
	}
}

// links is the variables of a Service with one port.
func links(prefix, ip, proto string, port int) map[string]string {
	p := fmt.Sprintf("%s_PORT_%d_%s", prefix, port, proto)
	url := fmt.Sprintf("%s://%s:%d", lower(proto), ip, port)
	return map[string]string{
		prefix + "_SERVICE_HOST": ip,
		prefix + "_SERVICE_PORT": fmt.Sprint(port),
		prefix + "_PORT":         url,
		p:                        url,
		p + "_PROTO":             lower(proto),
		p + "_PORT":              fmt.Sprint(port),
		p + "_ADDR":              ip,
	}
}

func lower(proto string) string {
	return map[string]string{"TCP": "tcp", "UDP": "udp", "SCTP": "sctp"}[proto]
}

func union(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

// masterLinks is default/kubernetes's variables as upstream's
// TestMakeEnvironmentVariables expects them.
var masterLinks = map[string]string{
	"KUBERNETES_SERVICE_HOST":        "1.2.3.1",
	"KUBERNETES_SERVICE_PORT":        "8081",
	"KUBERNETES_PORT":                "tcp://1.2.3.1:8081",
	"KUBERNETES_PORT_8081_TCP":       "tcp://1.2.3.1:8081",
	"KUBERNETES_PORT_8081_TCP_PROTO": "tcp",
	"KUBERNETES_PORT_8081_TCP_PORT":  "8081",
	"KUBERNETES_PORT_8081_TCP_ADDR":  "1.2.3.1",
}

// TestMakeServiceLinks has the service cases of upstream's
// TestMakeEnvironmentVariables (their Services, names and expectations,
// marked "upstream:") and a row for each rule of getServiceEnvVarMap and
// makeEnvironmentVariables besides.
func TestMakeServiceLinks(t *testing.T) {
	// Upstream's Services, then some of this package's.
	services := []*corev1.Service{
		buildService("kubernetes", metav1.NamespaceDefault, "1.2.3.1", "TCP", 8081),
		buildService("test", "test1", "1.2.3.3", "TCP", 8083),
		buildService("kubernetes", "test2", "1.2.3.4", "TCP", 8084),
		buildService("test", "test2", "1.2.3.5", "TCP", 8085),
		buildService("test", "test2", "None", "TCP", 8085),
		buildService("test", "test2", "", "TCP", 8085),
		buildService("not-special", metav1.NamespaceDefault, "1.2.3.8", "TCP", 8088),
		buildService("not-special", metav1.NamespaceDefault, "None", "TCP", 8088),
		buildService("not-special", metav1.NamespaceDefault, "", "TCP", 8088),

		buildService("my-db-svc", "names", "10.0.0.1", "TCP", 5432),
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: "multi", Name: "dns"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.10", Ports: []corev1.ServicePort{
				{Name: "dns-udp", Port: 53, Protocol: "UDP"},
				{Name: "dns-tcp", Port: 53, Protocol: "TCP"},
				{Name: "metrics", Port: 9153}, // the protocol defaults to TCP
			}},
		},
		buildService("sig", "protos", "10.0.0.20", "SCTP", 3868),
		buildService("syslog", "protos", "10.0.0.21", "UDP", 514),
		buildService("web", "protos", "fd00::21", "TCP", 80),
		buildService("headless", "protos", "None", "TCP", 80),
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: "protos", Name: "external"},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"},
		},
	}
	listed := func() ([]*corev1.Service, error) { return services, nil }
	sources := mapSources{configMaps: map[string]map[string]string{"cfg": {"TEST_SERVICE_PORT": "from-configmap"}}}

	tests := []struct {
		name               string
		ns                 string
		enableServiceLinks *bool
		c                  corev1.Container
		services           func() ([]*corev1.Service, error)
		want               map[string]string
		wantErr            error
	}{{
		name:               "upstream: if services aren't synced, non-static pods should fail",
		ns:                 "test1",
		enableServiceLinks: ptr.To(false),
		services:           func() ([]*corev1.Service, error) { return nil, ErrServicesNotSynced },
		wantErr:            ErrServicesNotSynced,
	}, {
		name:               "upstream: api server = Y, kubelet = N (no Services source: no links)",
		ns:                 "test1",
		enableServiceLinks: ptr.To(true),
		c:                  corev1.Container{Env: []corev1.EnvVar{{Name: "FOO", Value: "BAR"}}},
		want:               map[string]string{"FOO": "BAR"},
	}, {
		name:               "upstream: api server = Y, kubelet = Y (the container sets the same variables)",
		ns:                 "test1",
		enableServiceLinks: ptr.To(false),
		services:           listed,
		c: corev1.Container{Env: []corev1.EnvVar{
			{Name: "FOO", Value: "BAR"},
			{Name: "TEST_SERVICE_HOST", Value: "1.2.3.3"},
			{Name: "TEST_SERVICE_PORT", Value: "8083"},
			{Name: "TEST_PORT", Value: "tcp://1.2.3.3:8083"},
			{Name: "TEST_PORT_8083_TCP", Value: "tcp://1.2.3.3:8083"},
			{Name: "TEST_PORT_8083_TCP_PROTO", Value: "tcp"},
			{Name: "TEST_PORT_8083_TCP_PORT", Value: "8083"},
			{Name: "TEST_PORT_8083_TCP_ADDR", Value: "1.2.3.3"},
		}},
		want: union(map[string]string{"FOO": "BAR"}, links("TEST", "1.2.3.3", "TCP", 8083), masterLinks),
	}, {
		name:               "upstream: api server = N; kubelet = Y (the master service despite enableServiceLinks false)",
		ns:                 "test1",
		enableServiceLinks: ptr.To(false),
		services:           listed,
		c:                  corev1.Container{Env: []corev1.EnvVar{{Name: "FOO", Value: "BAZ"}}},
		want:               union(map[string]string{"FOO": "BAZ"}, masterLinks),
	}, {
		name:               "upstream: api server = N; kubelet = Y; service env vars (another namespace's test ignored)",
		ns:                 "test1",
		enableServiceLinks: ptr.To(true),
		services:           listed,
		c:                  corev1.Container{Env: []corev1.EnvVar{{Name: "FOO", Value: "BAZ"}}},
		want:               union(map[string]string{"FOO": "BAZ"}, links("TEST", "1.2.3.3", "TCP", 8083), masterLinks),
	}, {
		name:               "upstream: master service in pod ns",
		ns:                 "test2",
		enableServiceLinks: ptr.To(false),
		services:           listed,
		c:                  corev1.Container{Env: []corev1.EnvVar{{Name: "FOO", Value: "ZAP"}}},
		want:               union(map[string]string{"FOO": "ZAP"}, masterLinks),
	}, {
		name:               "upstream: master service in pod ns, service env vars (the pod's namespace's kubernetes wins; headless and empty test skipped)",
		ns:                 "test2",
		enableServiceLinks: ptr.To(true),
		services:           listed,
		c:                  corev1.Container{Env: []corev1.EnvVar{{Name: "FOO", Value: "ZAP"}}},
		want:               union(map[string]string{"FOO": "ZAP"}, links("TEST", "1.2.3.5", "TCP", 8085), links("KUBERNETES", "1.2.3.4", "TCP", 8084)),
	}, {
		name:               "the pod's namespace's kubernetes wins, listed before the master service too",
		ns:                 "test2",
		enableServiceLinks: ptr.To(true),
		services: func() ([]*corev1.Service, error) {
			s := slices.Clone(services)
			slices.Reverse(s)
			return s, nil
		},
		want: union(links("TEST", "1.2.3.5", "TCP", 8085), links("KUBERNETES", "1.2.3.4", "TCP", 8084)),
	}, {
		name:               "upstream: pod in master service ns",
		ns:                 metav1.NamespaceDefault,
		enableServiceLinks: ptr.To(false),
		services:           listed,
		want:               masterLinks,
	}, {
		name:               "upstream: pod in master service ns, service env vars",
		ns:                 metav1.NamespaceDefault,
		enableServiceLinks: ptr.To(true),
		services:           listed,
		want:               union(links("NOT_SPECIAL", "1.2.3.8", "TCP", 8088), masterLinks),
	}, {
		name:               "upstream: env expansion, service env vars",
		ns:                 "test1",
		enableServiceLinks: ptr.To(true),
		services:           listed,
		c: corev1.Container{Env: []corev1.EnvVar{
			{Name: "SERVICE_VAR_TEST", Value: "$(TEST_SERVICE_HOST):$(TEST_SERVICE_PORT)"},
			{Name: "TEST_UNDEFINED", Value: "$(UNDEFINED_VAR)"},
		}},
		want: union(map[string]string{"SERVICE_VAR_TEST": "1.2.3.3:8083", "TEST_UNDEFINED": "$(UNDEFINED_VAR)"},
			links("TEST", "1.2.3.3", "TCP", 8083), masterLinks),
	}, {
		name:     "names: upper case, dashes as underscores; enableServiceLinks unset reads as true",
		ns:       "names",
		services: listed,
		want:     union(links("MY_DB_SVC", "10.0.0.1", "TCP", 5432), masterLinks),
	}, {
		name:               "multi-port: the first port unqualified, each named one by name, link variables per port",
		ns:                 "multi",
		enableServiceLinks: ptr.To(true),
		services:           listed,
		want: union(masterLinks, map[string]string{
			"DNS_SERVICE_HOST":         "10.0.0.10",
			"DNS_SERVICE_PORT":         "53",
			"DNS_SERVICE_PORT_DNS_UDP": "53",
			"DNS_SERVICE_PORT_DNS_TCP": "53",
			"DNS_SERVICE_PORT_METRICS": "9153",
			"DNS_PORT":                 "udp://10.0.0.10:53",
			"DNS_PORT_53_UDP":          "udp://10.0.0.10:53",
			"DNS_PORT_53_UDP_PROTO":    "udp",
			"DNS_PORT_53_UDP_PORT":     "53",
			"DNS_PORT_53_UDP_ADDR":     "10.0.0.10",
			"DNS_PORT_53_TCP":          "tcp://10.0.0.10:53",
			"DNS_PORT_53_TCP_PROTO":    "tcp",
			"DNS_PORT_53_TCP_PORT":     "53",
			"DNS_PORT_53_TCP_ADDR":     "10.0.0.10",
			"DNS_PORT_9153_TCP":        "tcp://10.0.0.10:9153",
			"DNS_PORT_9153_TCP_PROTO":  "tcp",
			"DNS_PORT_9153_TCP_PORT":   "9153",
			"DNS_PORT_9153_TCP_ADDR":   "10.0.0.10",
		}),
	}, {
		name:               "link variables for TCP (IPv6 bracketed), UDP and SCTP; headless and ExternalName skipped",
		ns:                 "protos",
		enableServiceLinks: ptr.To(true),
		services:           listed,
		want: union(masterLinks,
			links("SIG", "10.0.0.20", "SCTP", 3868),
			links("SYSLOG", "10.0.0.21", "UDP", 514),
			map[string]string{
				"WEB_SERVICE_HOST":      "fd00::21",
				"WEB_SERVICE_PORT":      "80",
				"WEB_PORT":              "tcp://[fd00::21]:80",
				"WEB_PORT_80_TCP":       "tcp://[fd00::21]:80",
				"WEB_PORT_80_TCP_PROTO": "tcp",
				"WEB_PORT_80_TCP_PORT":  "80",
				"WEB_PORT_80_TCP_ADDR":  "fd00::21",
			}),
	}, {
		name:               "envFrom and env override service variables",
		ns:                 "test1",
		enableServiceLinks: ptr.To(true),
		services:           listed,
		c: corev1.Container{
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
			Env:     []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: "kubernetes.default.svc"}},
		},
		want: union(links("TEST", "1.2.3.3", "TCP", 8083), masterLinks, map[string]string{
			"TEST_SERVICE_PORT":       "from-configmap",
			"KUBERNETES_SERVICE_HOST": "kubernetes.default.svc",
		}),
	}, {
		name:               "$(VAR) sees the container's variables first, service variables otherwise",
		ns:                 "test1",
		enableServiceLinks: ptr.To(true),
		services:           listed,
		c: corev1.Container{Env: []corev1.EnvVar{
			{Name: "BEFORE", Value: "http://$(TEST_SERVICE_HOST):$(TEST_SERVICE_PORT)/ $$(TEST_SERVICE_HOST)"},
			{Name: "TEST_SERVICE_HOST", Value: "test.test1.svc"},
			{Name: "AFTER", Value: "http://$(TEST_SERVICE_HOST):$(TEST_SERVICE_PORT)/"},
		}},
		want: union(links("TEST", "1.2.3.3", "TCP", 8083), masterLinks, map[string]string{
			"BEFORE":            "http://1.2.3.3:8083/ $(TEST_SERVICE_HOST)",
			"TEST_SERVICE_HOST": "test.test1.svc",
			"AFTER":             "http://test.test1.svc:8083/",
		}),
	}, {
		name:               "an optional variable left out leaves the service variable",
		ns:                 "test1",
		enableServiceLinks: ptr.To(true),
		services:           listed,
		c: corev1.Container{Env: []corev1.EnvVar{{Name: "TEST_SERVICE_HOST", ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Key: "k", Optional: ptr.To(true)},
		}}}},
		want: union(links("TEST", "1.2.3.3", "TCP", 8083), masterLinks),
	}, {
		name:               "the Services error comes before a missing ConfigMap's, as upstream",
		ns:                 "test1",
		enableServiceLinks: ptr.To(true),
		services:           func() ([]*corev1.Service, error) { return nil, ErrServicesNotSynced },
		c:                  corev1.Container{EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}}}}},
		wantErr:            ErrServicesNotSynced,
	}, {
		name:               "no Services at all: only the container's variables",
		ns:                 "test1",
		enableServiceLinks: ptr.To(true),
		services:           func() ([]*corev1.Service, error) { return nil, nil },
		c:                  corev1.Container{Env: []corev1.EnvVar{{Name: "A", Value: "$(KUBERNETES_SERVICE_HOST)"}}},
		want:               map[string]string{"A": "$(KUBERNETES_SERVICE_HOST)"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: tt.ns, Name: "dapi-test-pod-name"},
				Spec:       corev1.PodSpec{EnableServiceLinks: tt.enableServiceLinks, Containers: []corev1.Container{tt.c}},
			}
			in := Input{Pod: p, Container: &p.Spec.Containers[0], Services: tt.services}
			got, err := Make(context.Background(), sources, in)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
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
			if !maps.Equal(gotMap, tt.want) {
				for _, k := range slices.Sorted(maps.Keys(union(gotMap, tt.want))) {
					if g, w := gotMap[k], tt.want[k]; g != w {
						t.Errorf("%s = %q, want %q", k, g, w)
					}
				}
			}
		})
	}
}

// TestServiceLinksDeterministic checks that Make's output does not depend on
// the order Services are listed in, even when two Services' variables
// collide (a port named b-service-host of a against the host of
// a-service-port-b): the later by name wins, where the kubelet leaves it to
// a map's order.
func TestServiceLinksDeterministic(t *testing.T) {
	services := []*corev1.Service{
		buildService("kubernetes", metav1.NamespaceDefault, "10.96.0.1", "TCP", 443),
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.1", Ports: []corev1.ServicePort{
				{Name: "http", Port: 80}, {Name: "b-service-host", Port: 81},
			}},
		},
		buildService("a-service-port-b", "ns", "10.0.0.2", "TCP", 82),
	}
	for i := range 20 {
		services = append(services, buildService(fmt.Sprintf("svc-%d", i), "ns", fmt.Sprintf("10.0.1.%d", i), "TCP", 8000+int32(i)))
	}
	var first []string
	for i := range 50 {
		shuffled := slices.Clone(services)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		p := pod(corev1.Container{})
		in := Input{Pod: p, Container: &p.Spec.Containers[0], Services: func() ([]*corev1.Service, error) { return shuffled, nil }}
		got, err := Make(context.Background(), sources, in)
		if err != nil {
			t.Fatal(err)
		}
		var flat []string
		for _, kv := range got {
			flat = append(flat, kv.Key+"="+string(kv.Value))
		}
		if i == 0 {
			first = flat
			if !slices.Contains(flat, "A_SERVICE_PORT_B_SERVICE_HOST=10.0.0.2") {
				t.Errorf("the collision went to a, want a-service-port-b, the later by name: %v", flat)
			}
			continue
		}
		if !slices.Equal(flat, first) {
			t.Fatalf("order %d:\n%v\nwant\n%v", i, flat, first)
		}
	}
}

// TestFromServicesWithoutPorts checks the guard on a Service the API server
// would not have admitted.
func TestFromServicesWithoutPorts(t *testing.T) {
	got := FromServices([]*corev1.Service{{ObjectMeta: metav1.ObjectMeta{Name: "bare"}, Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.1"}}})
	want := []corev1.EnvVar{{Name: "BARE_SERVICE_HOST", Value: "10.0.0.1"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FromServices = %v, want %v", got, want)
	}
}

// BenchmarkMakeServiceLinks is Make for a pod whose namespace has 10 of the
// cluster's 1,000 Services, listed from a client-go lister as the agent's
// watch would keep them, against the same pod without a Services source.
func BenchmarkMakeServiceLinks(b *testing.B) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	add := func(s *corev1.Service) {
		if err := indexer.Add(s); err != nil {
			b.Fatal(err)
		}
	}
	add(buildService("kubernetes", metav1.NamespaceDefault, "10.96.0.1", "TCP", 443))
	for i := range 999 {
		ns := fmt.Sprintf("team-%d", i/10)
		if i < 10 {
			ns = "ns"
		}
		add(&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("svc-%d", i)},
			Spec: corev1.ServiceSpec{ClusterIP: fmt.Sprintf("10.96.%d.%d", i/250+1, i%250), Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, Protocol: "TCP"}, {Name: "metrics", Port: 9090, Protocol: "TCP"},
			}},
		})
	}
	lister := corelisters.NewServiceLister(indexer)
	listAll := func() ([]*corev1.Service, error) { return lister.List(labels.Everything()) }

	p := pod(corev1.Container{
		EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
		Env: []corev1.EnvVar{
			{Name: "BACKEND", Value: "http://$(SVC_3_SERVICE_HOST):$(SVC_3_SERVICE_PORT)/"},
			{Name: "NAME", ValueFrom: field("metadata.name")},
			{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}},
		},
	})
	for _, bc := range []struct {
		name     string
		services func() ([]*corev1.Service, error)
	}{{"no Services source", nil}, {"1000 Services, 10 in the namespace", listAll}} {
		b.Run(bc.name, func(b *testing.B) {
			in := Input{Pod: p, Container: &p.Spec.Containers[0], Services: bc.services}
			b.ReportAllocs()
			var n int
			for b.Loop() {
				env, err := Make(context.Background(), sources, in)
				if err != nil {
					b.Fatal(err)
				}
				n = len(env)
			}
			b.ReportMetric(float64(n), "vars")
		})
	}
}
