package nodeagent

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/nodeagent/eviction"
)

func TestValidateKubeletConfigurationDefaults(t *testing.T) {
	if errs := ValidateKubeletConfiguration(DefaultKubeletConfiguration()); len(errs) > 0 {
		t.Fatalf("the defaults are invalid: %v", errs.ToAggregate())
	}
	kc := DefaultKubeletConfiguration()
	kc.FeatureGates = map[string]bool{"EventedPLEG": true}
	kc.EvictionHard = map[string]string{"memory.available": "200Mi", "nodefs.available": "0%", "containerfs.available": "5%"}
	kc.EvictionSoft = map[string]string{"memory.available": "500Mi", "pid.available": "10%"}
	kc.EvictionSoftGracePeriod = map[string]string{"memory.available": "1m30s", "pid.available": "0s"}
	kc.EvictionMinimumReclaim = map[string]string{"memory.available": "0Mi", "nodefs.available": "1%"}
	kc.EvictionPressureTransitionPeriod = metav1.Duration{Duration: 30 * time.Second}
	kc.EvictionMaxPodGracePeriod = 30
	kc.ImageGCHighThresholdPercent, kc.ImageGCLowThresholdPercent = ptr.To[int32](100), ptr.To[int32](0)
	kc.ImageMaximumGCAge = metav1.Duration{Duration: time.Hour}
	kc.SerializeImagePulls, kc.MaxParallelImagePulls = ptr.To(false), ptr.To[int32](5)
	kc.PodPidsLimit = ptr.To[int64](-1)
	kc.SystemReserved = map[string]string{"cpu": "500m", "memory": "1Gi", "pid": "1000"}
	kc.KubeReserved = map[string]string{"ephemeral-storage": "0"}
	kc.ConfigMapAndSecretChangeDetectionStrategy = kubeletconfig.TTLCacheChangeDetectionStrategy
	kc.StaticPodPath, kc.Port, kc.PodLogsDir, kc.CgroupRoot = "/etc/kubernetes/manifests", 10250, "/var/log/pods", "/"
	if errs := ValidateKubeletConfiguration(kc); len(errs) > 0 {
		t.Fatalf("a valid configuration: %v", errs.ToAggregate())
	}
	// What the validation accepts, the eviction manager must too.
	if _, err := eviction.ParseThresholds(kc); err != nil {
		t.Fatalf("ParseThresholds refuses what ValidateKubeletConfiguration accepts: %v", err)
	}
}

func TestValidateKubeletConfiguration(t *testing.T) {
	cases := []struct {
		name   string
		modify func(kc *kubeletconfig.KubeletConfiguration)
		want   []string // one line per problem, in order
	}{{
		name: "unknown ConfigMap and Secret strategy",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.ConfigMapAndSecretChangeDetectionStrategy = "Poll"
		},
		want: []string{`configMapAndSecretChangeDetectionStrategy: Unsupported value: "Poll": supported values: "Watch", "Cache", "Get"`},
	}, {
		name: "unknown feature gate",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.FeatureGates = map[string]bool{"NoSuchGate": true, "EventedPLEG": false}
		},
		want: []string{`featureGates[NoSuchGate]: Unsupported value: "NoSuchGate": supported values: "EventedPLEG"`},
	}, {
		name: "misspelt eviction signal",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.EvictionHard = map[string]string{"memory.avialable": "100Mi"}
		},
		want: []string{`evictionHard[memory.avialable]: Unsupported value: "memory.avialable": supported values: ` +
			`"imagefs.available", "imagefs.inodesFree", "memory.available", "nodefs.available", "nodefs.inodesFree", "pid.available"`},
	}, {
		name: "bad eviction quantity",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.EvictionHard = map[string]string{"memory.available": "lots"}
		},
		want: []string{`evictionHard[memory.available]: Invalid value: "lots": must be a quantity such as 100Mi or a percentage such as 10%`},
	}, {
		name: "bad eviction percentage",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.EvictionSoft = map[string]string{"nodefs.available": "x%"}
		},
		want: []string{`evictionSoft[nodefs.available]: Invalid value: "x%": must be a quantity such as 100Mi or a percentage such as 10%`},
	}, {
		name: "eviction percentage over 100",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.EvictionHard = map[string]string{"nodefs.available": "150%"}
		},
		want: []string{`evictionHard[nodefs.available]: Invalid value: "150%": eviction percentage threshold must be within 0% and 100%: 150%`},
	}, {
		name: "zero eviction quantity",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.EvictionHard = map[string]string{"memory.available": "0"}
		},
		want: []string{`evictionHard[memory.available]: Invalid value: "0": eviction threshold must be positive: 0`},
	}, {
		name: "every bad entry, each at its key",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.EvictionHard = map[string]string{"memory.available": "lots", "nodefs.available": "lots"}
		},
		want: []string{
			`evictionHard[memory.available]: Invalid value: "lots": must be a quantity such as 100Mi or a percentage such as 10%`,
			`evictionHard[nodefs.available]: Invalid value: "lots": must be a quantity such as 100Mi or a percentage such as 10%`,
		},
	}, {
		name: "soft threshold without a grace period",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.EvictionSoft = map[string]string{"memory.available": "500Mi"}
		},
		want: []string{`evictionSoftGracePeriod[memory.available]: Required value: evictionSoft[memory.available] needs a grace period: ` +
			`add evictionSoftGracePeriod: {memory.available: 1m30s}`},
	}, {
		name: "bad grace period",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.EvictionSoft = map[string]string{"memory.available": "500Mi"}
			kc.EvictionSoftGracePeriod = map[string]string{"memory.available": "soon"}
		},
		want: []string{`evictionSoftGracePeriod[memory.available]: Invalid value: "soon": must be a duration such as 1m30s`},
	}, {
		name: "negative grace period",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.EvictionSoftGracePeriod = map[string]string{"memory.available": "-1s"}
		},
		want: []string{`evictionSoftGracePeriod[memory.available]: Invalid value: "-1s": invalid eviction grace period -1s, must be a positive value`},
	}, {
		name: "bad minimum reclaim",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.EvictionMinimumReclaim = map[string]string{"memory.available": "-1Mi"}
		},
		want: []string{`evictionMinimumReclaim[memory.available]: Invalid value: "-1Mi": negative eviction minimum reclaim -1Mi`},
	}, {
		name: "negative eviction periods",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.EvictionPressureTransitionPeriod = metav1.Duration{Duration: -time.Second}
			kc.EvictionMaxPodGracePeriod = -1
		},
		want: []string{
			`evictionPressureTransitionPeriod: Invalid value: "-1s": must not be negative; 0s or leaving it out gives the kubelet's default 5m0s`,
			`evictionMaxPodGracePeriod: Invalid value: -1: must not be negative`,
		},
	}, {
		name: "zero periods",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.SyncFrequency, kc.NodeStatusUpdateFrequency, kc.NodeStatusReportFrequency = metav1.Duration{}, metav1.Duration{}, metav1.Duration{Duration: -time.Second}
			kc.NodeLeaseDurationSeconds = 0
		},
		want: []string{
			`syncFrequency: Invalid value: "0s": must be greater than zero; leave it out for the kubelet's default 1m0s`,
			`nodeStatusUpdateFrequency: Invalid value: "0s": must be greater than zero; leave it out for the kubelet's default 10s`,
			`nodeStatusReportFrequency: Invalid value: "-1s": must be greater than zero; leave it out for the kubelet's default 5m0s`,
			`nodeLeaseDurationSeconds: Invalid value: 0: must be greater than zero; leave it out for the kubelet's default 40`,
		},
	}, {
		name: "negative counts",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.MaxPods, kc.PodPidsLimit, kc.KubeAPIQPS, kc.KubeAPIBurst = -1, ptr.To[int64](-2), ptr.To[int32](-1), -1
		},
		want: []string{
			`maxPods: Invalid value: -1: must not be negative`,
			`podPidsLimit: Invalid value: -2: must be -1 (no limit) or more`,
			`kubeAPIQPS: Invalid value: -1: must not be negative`,
			`kubeAPIBurst: Invalid value: -1: must not be negative`,
		},
	}, {
		name:   "image GC low not below high",
		modify: func(kc *kubeletconfig.KubeletConfiguration) { kc.ImageGCLowThresholdPercent = ptr.To[int32](90) },
		want:   []string{`imageGCLowThresholdPercent: Invalid value: 90: must be less than imageGCHighThresholdPercent (85)`},
	}, {
		name: "image GC thresholds out of range",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.ImageGCHighThresholdPercent, kc.ImageGCLowThresholdPercent = ptr.To[int32](101), ptr.To[int32](-1)
		},
		want: []string{
			`imageGCHighThresholdPercent: Invalid value: 101: must be between 0 and 100, inclusive`,
			`imageGCLowThresholdPercent: Invalid value: -1: must be between 0 and 100, inclusive`,
		},
	}, {
		name: "image maximum age not above the minimum",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.ImageMaximumGCAge = metav1.Duration{Duration: time.Minute}
		},
		want: []string{`imageMaximumGCAge: Invalid value: "1m0s": must be greater than imageMinimumGCAge (2m0s), or 0s to turn it off`},
	}, {
		name: "negative image ages",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.ImageMinimumGCAge, kc.ImageMaximumGCAge = metav1.Duration{Duration: -time.Second}, metav1.Duration{Duration: -time.Second}
		},
		want: []string{
			`imageMinimumGCAge: Invalid value: "-1s": must not be negative`,
			`imageMaximumGCAge: Invalid value: "-1s": must not be negative; 0s turns it off`,
		},
	}, {
		name:   "parallel pulls while serialized",
		modify: func(kc *kubeletconfig.KubeletConfiguration) { kc.MaxParallelImagePulls = ptr.To[int32](4) },
		want:   []string{`maxParallelImagePulls: Invalid value: 4: must be 1 while serializeImagePulls is true; set serializeImagePulls: false to pull in parallel`},
	}, {
		name: "no parallel pulls",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.SerializeImagePulls, kc.MaxParallelImagePulls = ptr.To(false), ptr.To[int32](0)
		},
		want: []string{`maxParallelImagePulls: Invalid value: 0: must be at least 1; leave it out for no limit`},
	}, {
		name: "static pods",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.StaticPodPath, kc.FileCheckFrequency = "manifests", metav1.Duration{}
		},
		want: []string{
			`staticPodPath: Invalid value: "manifests": must be an absolute path, such as /etc/kubernetes/manifests`,
			`fileCheckFrequency: Invalid value: "0s": must be greater than zero; leave it out for the kubelet's default 20s`,
		},
	}, {
		name: "negative file check frequency without a static pod path",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.FileCheckFrequency = metav1.Duration{Duration: -time.Second}
		},
		want: []string{`fileCheckFrequency: Invalid value: "-1s": must be greater than zero; leave it out for the kubelet's default 20s`},
	}, {
		name: "a node's own port and paths",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.Port, kc.PodLogsDir, kc.CgroupRoot = 70000, "/var/log//pods/", "kubepods"
		},
		want: []string{
			`port: Invalid value: 70000: must be between 1 and 65535, inclusive`,
			`podLogsDir: Invalid value: "/var/log//pods/": must be normalized: /var/log/pods`,
			`cgroupRoot: Invalid value: "kubepods": must be an absolute cgroup path, such as /`,
		},
	}, {
		name:   "relative pod logs directory",
		modify: func(kc *kubeletconfig.KubeletConfiguration) { kc.PodLogsDir = "logs" },
		want:   []string{`podLogsDir: Invalid value: "logs": must be an absolute path`},
	}, {
		name: "reserved resources",
		modify: func(kc *kubeletconfig.KubeletConfiguration) {
			kc.SystemReserved = map[string]string{"gpu": "1", "memory": "lots"}
			kc.KubeReserved = map[string]string{"cpu": "-1"}
		},
		want: []string{
			`systemReserved[gpu]: Unsupported value: "gpu": supported values: "cpu", "ephemeral-storage", "memory", "pid"`,
			`systemReserved[memory]: Invalid value: "lots": must be a quantity such as 500m or 1Gi`,
			`kubeReserved[cpu]: Invalid value: "-1": must not be negative`,
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kc := DefaultKubeletConfiguration()
			tc.modify(kc)
			errs := ValidateKubeletConfiguration(kc)
			got := make([]string, len(errs))
			for i, err := range errs {
				got[i] = err.Error()
			}
			if g, w := strings.Join(got, "\n"), strings.Join(tc.want, "\n"); g != w {
				t.Errorf("errors:\n got: %s\nwant: %s", g, w)
			}
		})
	}
}
