package nodeagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/fleetlet/fleetlet/internal/yamltype"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/fleetlet/fleetlet/nodeagent/eviction"
)

// The kubelet's config file type.
const (
	kubeletConfigAPIVersion = "kubelet.config.k8s.io/v1beta1"
	kubeletConfigKind       = "KubeletConfiguration"
)

// LoadKubeletConfigFile reads a kubelet config file (the kubelet's --config,
// such as /var/lib/kubelet/config.yaml) as the kubelet's loadConfigFile
// does: a KubeletConfiguration of kubelet.config.k8s.io/v1beta1, in YAML or
// JSON; defaulted as the kubelet defaults it (SetKubeletDefaults, then
// evictionHard); relative paths in it resolved against the file's
// directory. It is decoded strictly: an unknown or duplicate field is an
// error naming it, where the kubelet, for v1beta1, only warns and goes on.
// Every error is one line naming the file. The result is not validated:
// flags may still override it (ValidateKubeletConfiguration).
func LoadKubeletConfigFile(path string) (*kubeletconfig.KubeletConfiguration, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("kubelet config file %s: %w", path, err)
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return nil, fmt.Errorf("kubelet config file %s: %w; pass the kubelet's config file, such as /var/lib/kubelet/config.yaml", path, err)
	}
	kc, err := DecodeKubeletConfiguration(data)
	if err != nil {
		return nil, fmt.Errorf("kubelet config file %s: %w", path, err)
	}
	for _, p := range []*string{&kc.StaticPodPath, &kc.Authentication.X509.ClientCAFile, &kc.TLSCertFile,
		&kc.TLSPrivateKeyFile, kc.ResolverConfig, &kc.VolumePluginDir, &kc.PodLogsDir} {
		if p != nil && *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(filepath.Dir(abs), *p)
		}
	}
	return kc, nil
}

// yamlLine finds the line of a YAML parser's error.
var yamlLine = regexp.MustCompile(`line (\d+): key "([^"]*)" already set in map`)

// DecodeKubeletConfiguration decodes and defaults a kubelet config file's
// content, strictly (LoadKubeletConfigFile).
func DecodeKubeletConfiguration(data []byte) (*kubeletconfig.KubeletConfiguration, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("the file is empty; it needs at least apiVersion: %s and kind: %s", kubeletConfigAPIVersion, kubeletConfigKind)
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			return nil, fmt.Errorf("line %s: duplicate field %q; give each field once", m[1], m[2])
		}
		return nil, fmt.Errorf("not YAML or JSON: %s", oneLine(strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")))
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, fmt.Errorf("not a KubeletConfiguration: the file must be a mapping with apiVersion: %s and kind: %s", kubeletConfigAPIVersion, kubeletConfigKind)
	}
	if tm.APIVersion != kubeletConfigAPIVersion || tm.Kind != kubeletConfigKind {
		return nil, fmt.Errorf("apiVersion %q, kind %q: want apiVersion: %s and kind: %s, the kubelet's config file",
			tm.APIVersion, tm.Kind, kubeletConfigAPIVersion, kubeletConfigKind)
	}
	kc := &kubeletconfig.KubeletConfiguration{}
	strict, err := sigsjson.UnmarshalStrict(js, kc)
	if err != nil {
		return nil, valueError(js, err)
	}
	if len(strict) > 0 {
		var unknown, dup []string
		for _, e := range strict {
			msg := e.Error()
			if f, ok := strings.CutPrefix(msg, "unknown field "); ok {
				unknown = append(unknown, f)
			} else if f, ok := strings.CutPrefix(msg, "duplicate field "); ok {
				dup = append(dup, f)
			} else {
				unknown = append(unknown, msg)
			}
		}
		if len(dup) > 0 {
			return nil, fmt.Errorf("duplicate field %s; give each field once", strings.Join(dup, ", "))
		}
		word := "field"
		if len(unknown) > 1 {
			word = "fields"
		}
		return nil, fmt.Errorf("unknown %s %s: not in %s %s; remove or correct it (names are case-sensitive)",
			word, strings.Join(unknown, ", "), kubeletConfigAPIVersion, kubeletConfigKind)
	}
	SetKubeletDefaults(kc)
	// loadConfigFile's evictionHard: the kubelet's defaults when unset,
	// merged into what is given with mergeDefaultEvictionSettings.
	if kc.EvictionHard == nil {
		kc.EvictionHard = eviction.DefaultEvictionHard()
	} else if ptr.Deref(kc.MergeDefaultEvictionSettings, false) {
		for k, v := range eviction.DefaultEvictionHard() {
			if _, ok := kc.EvictionHard[k]; !ok {
				kc.EvictionHard[k] = v
			}
		}
	}
	return kc, nil
}

// valueError names the field whose value failed to decode: encoding/json
// names it for a value of the wrong type, not for one a type refuses
// itself (a duration such as "soon"), which is found by decoding the
// fields one at a time.
func valueError(js []byte, err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return fmt.Errorf("%s: a %s, want %s", typeErr.Field, typeErr.Value, yamltype.Describe(typeErr.Type))
	}
	var tree map[string]any
	if json.Unmarshal(js, &tree) == nil {
		if path, detail := failingField(tree, nil); path != "" {
			return fmt.Errorf("%s: %s", path, detail)
		}
	}
	return errors.New(oneLine(err.Error()))
}

// failingField returns the deepest field of tree (under prefix) whose value
// alone fails to decode into a KubeletConfiguration, and the error.
func failingField(tree map[string]any, prefix []string) (string, string) {
	keys := make([]string, 0, len(tree))
	for k := range tree {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		path := append(slices.Clone(prefix), k)
		var doc any = tree[k]
		for i := len(path) - 1; i >= 0; i-- {
			doc = map[string]any{path[i]: doc}
		}
		js, _ := json.Marshal(doc)
		if err := json.Unmarshal(js, &kubeletconfig.KubeletConfiguration{}); err != nil {
			if sub, ok := tree[k].(map[string]any); ok {
				if p, d := failingField(sub, path); p != "" {
					return p, d
				}
			}
			detail := oneLine(err.Error())
			if d, ok := strings.CutPrefix(detail, "time: "); ok {
				detail = d + ": want a duration such as 20s or 1m30s"
			}
			return strings.Join(path, "."), detail
		}
	}
	return "", ""
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// SetKubeletDefaults fills the fields of kc left unset as the kubelet's
// SetDefaults_KubeletConfiguration does (pkg/kubelet/apis/config/v1beta1,
// in k8s.io/kubernetes, not importable as a library), with the feature
// gates at their 1.37 defaults. The logging options, which an agent does
// not read, are left as they are.
func SetKubeletDefaults(kc *kubeletconfig.KubeletConfiguration) {
	zero := metav1.Duration{}
	setDuration := func(d *metav1.Duration, def time.Duration) {
		if *d == zero {
			*d = metav1.Duration{Duration: def}
		}
	}
	setString := func(s *string, def string) {
		if *s == "" {
			*s = def
		}
	}
	if kc.EnableServer == nil {
		kc.EnableServer = ptr.To(true)
	}
	setDuration(&kc.SyncFrequency, time.Minute)
	setDuration(&kc.FileCheckFrequency, 20*time.Second)
	setDuration(&kc.HTTPCheckFrequency, 20*time.Second)
	setString(&kc.Address, "0.0.0.0")
	if kc.Port == 0 {
		kc.Port = 10250
	}
	if kc.Authentication.Anonymous.Enabled == nil {
		kc.Authentication.Anonymous.Enabled = ptr.To(false)
	}
	if kc.Authentication.Webhook.Enabled == nil {
		kc.Authentication.Webhook.Enabled = ptr.To(true)
	}
	setDuration(&kc.Authentication.Webhook.CacheTTL, 2*time.Minute)
	if kc.Authorization.Mode == "" {
		kc.Authorization.Mode = kubeletconfig.KubeletAuthorizationModeWebhook
	}
	setDuration(&kc.Authorization.Webhook.CacheAuthorizedTTL, 5*time.Minute)
	setDuration(&kc.Authorization.Webhook.CacheUnauthorizedTTL, 30*time.Second)
	if kc.RegistryPullQPS == nil {
		kc.RegistryPullQPS = ptr.To[int32](5)
	}
	if kc.RegistryBurst == 0 {
		kc.RegistryBurst = 10
	}
	if kc.EventRecordQPS == nil {
		kc.EventRecordQPS = ptr.To[int32](50)
	}
	if kc.EventBurst == 0 {
		kc.EventBurst = 100
	}
	if kc.EnableDebuggingHandlers == nil {
		kc.EnableDebuggingHandlers = ptr.To(true)
	}
	if kc.HealthzPort == nil {
		kc.HealthzPort = ptr.To[int32](10248)
	}
	setString(&kc.HealthzBindAddress, "127.0.0.1")
	if kc.OOMScoreAdj == nil {
		kc.OOMScoreAdj = ptr.To[int32](-999)
	}
	setDuration(&kc.StreamingConnectionIdleTimeout, 4*time.Hour)
	if kc.NodeStatusReportFrequency == zero {
		// An explicit update frequency is the report frequency too, for
		// compatibility with kubelets that had only one.
		if kc.NodeStatusUpdateFrequency == zero {
			kc.NodeStatusReportFrequency = metav1.Duration{Duration: 5 * time.Minute}
		} else {
			kc.NodeStatusReportFrequency = kc.NodeStatusUpdateFrequency
		}
	}
	setDuration(&kc.NodeStatusUpdateFrequency, 10*time.Second)
	if kc.NodeLeaseDurationSeconds == 0 {
		kc.NodeLeaseDurationSeconds = 40
	}
	setDuration(&kc.ImageMinimumGCAge, 2*time.Minute)
	if kc.ImageGCHighThresholdPercent == nil {
		kc.ImageGCHighThresholdPercent = ptr.To[int32](85)
	}
	if kc.ImageGCLowThresholdPercent == nil {
		kc.ImageGCLowThresholdPercent = ptr.To[int32](80)
	}
	setDuration(&kc.VolumeStatsAggPeriod, time.Minute)
	if kc.CgroupsPerQOS == nil {
		kc.CgroupsPerQOS = ptr.To(true)
	}
	setString(&kc.CgroupDriver, "cgroupfs")
	setString(&kc.CPUManagerPolicy, "none")
	setDuration(&kc.CPUManagerReconcilePeriod, 10*time.Second)
	setString(&kc.MemoryManagerPolicy, kubeletconfig.NoneMemoryManagerPolicy)
	setString(&kc.TopologyManagerPolicy, kubeletconfig.NoneTopologyManagerPolicy)
	setString(&kc.TopologyManagerScope, kubeletconfig.ContainerTopologyManagerScope)
	setDuration(&kc.RuntimeRequestTimeout, 2*time.Minute)
	setString(&kc.HairpinMode, kubeletconfig.PromiscuousBridge)
	if kc.MaxPods == 0 {
		kc.MaxPods = 110
	}
	if kc.PodPidsLimit == nil || *kc.PodPidsLimit < 0 {
		kc.PodPidsLimit = ptr.To[int64](-1)
	}
	if kc.ResolverConfig == nil {
		kc.ResolverConfig = ptr.To("/etc/resolv.conf")
	}
	if kc.CPUCFSQuota == nil {
		kc.CPUCFSQuota = ptr.To(true)
	}
	if kc.CPUCFSQuotaPeriod == nil {
		kc.CPUCFSQuotaPeriod = &metav1.Duration{Duration: 100 * time.Millisecond}
	}
	if kc.NodeStatusMaxImages == nil {
		kc.NodeStatusMaxImages = ptr.To[int32](50)
	}
	if kc.MaxOpenFiles == 0 {
		kc.MaxOpenFiles = 1000000
	}
	setString(&kc.ContentType, "application/vnd.kubernetes.protobuf")
	if kc.KubeAPIQPS == nil {
		kc.KubeAPIQPS = ptr.To[int32](50)
	}
	if kc.KubeAPIBurst == 0 {
		kc.KubeAPIBurst = 100
	}
	if kc.SerializeImagePulls == nil {
		// True unless parallel pulls are asked for.
		kc.SerializeImagePulls = ptr.To(kc.MaxParallelImagePulls == nil || *kc.MaxParallelImagePulls < 2)
	}
	setDuration(&kc.EvictionPressureTransitionPeriod, 5*time.Minute)
	if kc.MergeDefaultEvictionSettings == nil {
		kc.MergeDefaultEvictionSettings = ptr.To(false)
	}
	if kc.EnableControllerAttachDetach == nil {
		kc.EnableControllerAttachDetach = ptr.To(true)
	}
	if kc.MakeIPTablesUtilChains == nil {
		kc.MakeIPTablesUtilChains = ptr.To(true)
	}
	if kc.IPTablesMasqueradeBit == nil {
		kc.IPTablesMasqueradeBit = ptr.To[int32](14)
	}
	if kc.IPTablesDropBit == nil {
		kc.IPTablesDropBit = ptr.To[int32](15)
	}
	if kc.FailSwapOn == nil {
		kc.FailSwapOn = ptr.To(true)
	}
	setString(&kc.ContainerLogMaxSize, "10Mi")
	if kc.ContainerLogMaxFiles == nil {
		kc.ContainerLogMaxFiles = ptr.To[int32](5)
	}
	if kc.ContainerLogMaxWorkers == nil {
		kc.ContainerLogMaxWorkers = ptr.To[int32](1)
	}
	if kc.ContainerLogMonitorInterval == nil {
		kc.ContainerLogMonitorInterval = &metav1.Duration{Duration: 10 * time.Second}
	}
	if kc.ConfigMapAndSecretChangeDetectionStrategy == "" {
		kc.ConfigMapAndSecretChangeDetectionStrategy = kubeletconfig.WatchChangeDetectionStrategy
	}
	if kc.EnforceNodeAllocatable == nil {
		kc.EnforceNodeAllocatable = []string{"pods"}
	}
	setString(&kc.VolumePluginDir, "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/")
	if kc.EnableSystemLogHandler == nil {
		kc.EnableSystemLogHandler = ptr.To(true)
	}
	if kc.EnableProfilingHandler == nil {
		kc.EnableProfilingHandler = ptr.To(true)
	}
	if kc.EnableDebugFlagsHandler == nil {
		kc.EnableDebugFlagsHandler = ptr.To(true)
	}
	if kc.SeccompDefault == nil {
		kc.SeccompDefault = ptr.To(false)
	}
	if kc.FailCgroupV1 == nil {
		kc.FailCgroupV1 = ptr.To(true)
	}
	if kc.MemoryReservationPolicy == "" {
		kc.MemoryReservationPolicy = kubeletconfig.NoneMemoryReservationPolicy
	}
	if kc.RegisterNode == nil {
		kc.RegisterNode = ptr.To(true)
	}
	if kc.LocalStorageCapacityIsolation == nil {
		kc.LocalStorageCapacityIsolation = ptr.To(true)
	}
	setString(&kc.ContainerRuntimeEndpoint, "unix:///run/containerd/containerd.sock")
	setString(&kc.PodLogsDir, "/var/log/pods")
	// KubeletCrashLoopBackOffMax and KubeletEnsureSecretPulledImages are
	// on by default in 1.37.
	if kc.CrashLoopBackOff.MaxContainerRestartPeriod == nil {
		kc.CrashLoopBackOff.MaxContainerRestartPeriod = &metav1.Duration{Duration: 300 * time.Second}
	}
	if kc.ImagePullCredentialsVerificationPolicy == "" {
		kc.ImagePullCredentialsVerificationPolicy = kubeletconfig.NeverVerifyPreloadedImages
	}
}
