package nodeagent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/nodeagent/eviction"
)

const configHead = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// A kubeadm node's /var/lib/kubelet/config.yaml, abridged.
const kubeadmConfig = configHead + `authentication:
  anonymous: {enabled: false}
  webhook: {cacheTTL: 0s, enabled: true}
  x509: {clientCAFile: pki/ca.crt}
authorization:
  mode: Webhook
cgroupDriver: systemd
clusterDNS: [10.96.0.10]
clusterDomain: cluster.local
containerRuntimeEndpoint: ""
rotateCertificates: true
staticPodPath: manifests
nodeStatusUpdateFrequency: 4s
maxParallelImagePulls: 3
evictionHard: {memory.available: 200Mi}
mergeDefaultEvictionSettings: true
`

func TestLoadKubeletConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(kubeadmConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	kc, err := LoadKubeletConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Relative paths are the file's directory's.
	if kc.StaticPodPath != filepath.Join(dir, "manifests") || kc.Authentication.X509.ClientCAFile != filepath.Join(dir, "pki/ca.crt") {
		t.Errorf("paths %q %q, want them under %s", kc.StaticPodPath, kc.Authentication.X509.ClientCAFile, dir)
	}
	// What the file gives is kept; the rest is the kubelet's defaults.
	if kc.CgroupDriver != "systemd" || kc.MaxPods != 110 || kc.Port != 10250 || kc.FileCheckFrequency.Duration != 20*time.Second ||
		kc.ContainerRuntimeEndpoint != "unix:///run/containerd/containerd.sock" || kc.PodLogsDir != "/var/log/pods" ||
		kc.Authentication.Webhook.CacheTTL.Duration != 2*time.Minute {
		t.Errorf("defaults: cgroupDriver %q maxPods %d port %d fileCheckFrequency %v endpoint %q podLogsDir %q cacheTTL %v",
			kc.CgroupDriver, kc.MaxPods, kc.Port, kc.FileCheckFrequency, kc.ContainerRuntimeEndpoint, kc.PodLogsDir, kc.Authentication.Webhook.CacheTTL)
	}
	// The kubelet's defaulting rules that follow other fields: the report
	// frequency is an explicit update frequency; parallel pulls turn off
	// serialized pulls; the default hard thresholds merge in when asked.
	if kc.NodeStatusReportFrequency.Duration != 4*time.Second || kc.NodeStatusUpdateFrequency.Duration != 4*time.Second {
		t.Errorf("node status frequencies %v %v, want both 4s", kc.NodeStatusUpdateFrequency, kc.NodeStatusReportFrequency)
	}
	if ptr.Deref(kc.SerializeImagePulls, true) {
		t.Error("serializeImagePulls is true with maxParallelImagePulls 3")
	}
	wantHard := eviction.DefaultEvictionHard()
	wantHard["memory.available"] = "200Mi"
	if len(kc.EvictionHard) != len(wantHard) || kc.EvictionHard["memory.available"] != "200Mi" || kc.EvictionHard["nodefs.available"] != wantHard["nodefs.available"] {
		t.Errorf("evictionHard %v, want %v", kc.EvictionHard, wantHard)
	}
	if errs := ValidateKubeletConfiguration(kc); len(errs) > 0 {
		t.Errorf("a kubeadm config does not validate: %v", errs.ToAggregate())
	}

	// Without mergeDefaultEvictionSettings, the given thresholds are all.
	kc, err = DecodeKubeletConfiguration([]byte(configHead + "evictionHard: {memory.available: 1Gi}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(kc.EvictionHard) != 1 {
		t.Errorf("evictionHard %v, want the one given", kc.EvictionHard)
	}
	// None given: the kubelet's.
	if kc, err = DecodeKubeletConfiguration([]byte(configHead)); err != nil || len(kc.EvictionHard) != len(eviction.DefaultEvictionHard()) {
		t.Errorf("evictionHard %v (%v), want the defaults", kc.EvictionHard, err)
	}

	if _, err := LoadKubeletConfigFile(filepath.Join(dir, "nosuch.yaml")); err == nil || !strings.Contains(err.Error(), "nosuch.yaml") {
		t.Errorf("a missing file: %v", err)
	}
}

func TestDecodeKubeletConfigurationErrors(t *testing.T) {
	cases := []struct{ name, data, want string }{
		{"empty", "  \n", "the file is empty; it needs at least apiVersion: kubelet.config.k8s.io/v1beta1 and kind: KubeletConfiguration"},
		{"not YAML", "{{{", "not YAML or JSON: "},
		{"a list", "[1, 2]", "not a KubeletConfiguration"},
		{"no kind", "maxPods: 3\n", `apiVersion "", kind "": want apiVersion: kubelet.config.k8s.io/v1beta1 and kind: KubeletConfiguration`},
		{"another version", "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n", `apiVersion "kubelet.config.k8s.io/v1"`},
		{"unknown field", configHead + "maxpods: 3\n", `unknown field "maxpods": not in kubelet.config.k8s.io/v1beta1 KubeletConfiguration; remove or correct it (names are case-sensitive)`},
		{"unknown fields", configHead + "authorization: {webhook: {cacheTTL: 1s}}\nfoo: 1\n", `unknown fields "authorization.webhook.cacheTTL", "foo"`},
		{"duplicate field", configHead + "maxPods: 3\nport: 1\nmaxPods: 4\n", `line 5: duplicate field "maxPods"; give each field once`},
		{"duplicate key", configHead + "evictionHard:\n  memory.available: 1Mi\n  memory.available: 2Mi\n", `line 5: duplicate field "memory.available"`},
		{"duplicate in JSON", `{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "port": 1, "port": 2}`, `duplicate field "port"`},
		{"wrong type", configHead + "maxPods: lots\n", "maxPods: a string, want an integer"},
		{"wrong nested type", configHead + "authentication: {anonymous: {enabled: 3}}\n", "authentication.anonymous.enabled: a number, want true or false"},
		{"bad duration", configHead + "syncFrequency: soon\n", `syncFrequency: invalid duration "soon": want a duration such as 20s or 1m30s`},
		{"bad nested duration", configHead + "authentication: {webhook: {cacheTTL: soon}}\n", `authentication.webhook.cacheTTL: invalid duration "soon"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeKubeletConfiguration([]byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %v, want one line containing %q", err, tc.want)
			}
		})
	}
}

// TestSetKubeletDefaultsAgrees: the defaults of an empty file are the
// defaults the fleet's agents start from, for every setting an agent reads.
func TestSetKubeletDefaultsAgrees(t *testing.T) {
	kc := &kubeletconfig.KubeletConfiguration{}
	SetKubeletDefaults(kc)
	subset := reflect.ValueOf(DefaultKubeletConfiguration()).Elem()
	full := reflect.ValueOf(kc).Elem()
	for i := range subset.NumField() {
		if f := subset.Field(i); !f.IsZero() && !apiequality.Semantic.DeepEqual(f.Interface(), full.Field(i).Interface()) {
			t.Errorf("%s: SetKubeletDefaults gives %v, DefaultKubeletConfiguration %v", subset.Type().Field(i).Name, full.Field(i), f)
		}
	}
	if errs := ValidateKubeletConfiguration(kc); len(errs) > 0 {
		t.Errorf("the kubelet's defaults do not validate: %v", errs.ToAggregate())
	}
	// Defaulting twice changes nothing.
	again := kc.DeepCopy()
	SetKubeletDefaults(again)
	if a, b := mustJSON(t, kc), mustJSON(t, again); a != b {
		t.Errorf("defaulting again changed the configuration:\n%s\n%s", a, b)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
