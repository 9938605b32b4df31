package nodeagent

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/nodeagent/eviction"
	"github.com/fleetlet/fleetlet/nodeagent/pleg"
)

// KnownFeatureGates are the kubelet feature gates an agent acts on, sorted.
// Any other gate in a configuration is an error: an agent would accept it and
// behave as if it were not there.
func KnownFeatureGates() []string {
	return []string{pleg.FeatureEventedPLEG}
}

// The kubelet's defaults for the settings ValidateKubeletConfiguration
// compares when a configuration leaves them unset (nil or zero), as
// pkg/kubelet/apis/config/v1beta1/defaults.go sets them.
const (
	defaultImageGCHighThresholdPercent = 85
	defaultImageGCLowThresholdPercent  = 80
	defaultImageMinimumGCAge           = 2 * time.Minute
)

// ValidateKubeletConfiguration checks the settings an agent reads in kc, as
// the kubelet checks them before it starts, and returns every problem, each
// at its path from the configuration's root: "evictionHard[memory.available]",
// "imageGCLowThresholdPercent". kc is a defaulted configuration, such as
// DefaultKubeletConfiguration with a node pool's settings applied.
//
// It is written by hand because the kubelet's own checks live in
// k8s.io/kubernetes, which is not importable as a library (its go.mod
// replaces the staging modules with local paths). It mirrors, for the fields
// an agent reads, k8s.io/kubernetes/pkg/kubelet/apis/config/validation.ValidateKubeletConfiguration,
// plus the checks the kubelet makes as it starts: eviction.ParseThresholdConfig
// (here our eviction.ParseThresholds, run on each entry so that each bad one
// is reported at its key) and cmd/kubelet/app's parseResourceList for
// systemReserved and kubeReserved.
//
// It is stricter than upstream in two ways. The kubelet defaults a zero
// duration or count before validating, so it never sees one; a configuration
// applied over DefaultKubeletConfiguration keeps an explicit zero, which would
// stop an agent (a zero ticker period panics), so zero periods are rejected.
// And feature gates other than KnownFeatureGates are rejected, where the
// kubelet knows all of its own.
func ValidateKubeletConfiguration(kc *kubeletconfig.KubeletConfiguration) field.ErrorList {
	var errs field.ErrorList
	for _, gate := range slices.Sorted(maps.Keys(kc.FeatureGates)) {
		if !slices.Contains(KnownFeatureGates(), gate) {
			errs = append(errs, field.NotSupported(field.NewPath("featureGates").Key(gate), gate, KnownFeatureGates()))
		}
	}

	// Periods: upstream checks none of these, because it defaults them.
	errs = append(errs, positivePeriod(kc.SyncFrequency.Duration, "syncFrequency", "1m0s")...)
	errs = append(errs, positivePeriod(kc.NodeStatusUpdateFrequency.Duration, "nodeStatusUpdateFrequency", "10s")...)
	errs = append(errs, positivePeriod(kc.NodeStatusReportFrequency.Duration, "nodeStatusReportFrequency", "5m0s")...)
	if kc.NodeLeaseDurationSeconds <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("nodeLeaseDurationSeconds"), kc.NodeLeaseDurationSeconds,
			"must be greater than zero; leave it out for the kubelet's default 40"))
	}

	errs = append(errs, validateStaticPods(kc)...)
	errs = append(errs, validateNodeFields(kc)...)

	if kc.MaxPods < 0 {
		errs = append(errs, field.Invalid(field.NewPath("maxPods"), kc.MaxPods, "must not be negative"))
	}
	if kc.PodPidsLimit != nil && *kc.PodPidsLimit < -1 {
		errs = append(errs, field.Invalid(field.NewPath("podPidsLimit"), *kc.PodPidsLimit, "must be -1 (no limit) or more"))
	}
	if kc.KubeAPIQPS != nil && *kc.KubeAPIQPS < 0 {
		errs = append(errs, field.Invalid(field.NewPath("kubeAPIQPS"), *kc.KubeAPIQPS, "must not be negative"))
	}
	if kc.KubeAPIBurst < 0 {
		errs = append(errs, field.Invalid(field.NewPath("kubeAPIBurst"), kc.KubeAPIBurst, "must not be negative"))
	}

	errs = append(errs, validateEviction(kc)...)
	errs = append(errs, validateImageGC(kc)...)

	switch strategy := kc.ConfigMapAndSecretChangeDetectionStrategy; strategy {
	case "", kubeletconfig.WatchChangeDetectionStrategy, kubeletconfig.TTLCacheChangeDetectionStrategy, kubeletconfig.GetChangeDetectionStrategy:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("configMapAndSecretChangeDetectionStrategy"), strategy,
			[]kubeletconfig.ResourceChangeDetectionStrategy{kubeletconfig.WatchChangeDetectionStrategy, kubeletconfig.TTLCacheChangeDetectionStrategy, kubeletconfig.GetChangeDetectionStrategy}))
	}

	if n := kc.MaxParallelImagePulls; n != nil {
		p := field.NewPath("maxParallelImagePulls")
		switch {
		case *n < 1:
			errs = append(errs, field.Invalid(p, *n, "must be at least 1; leave it out for no limit"))
		case *n > 1 && ptr.Deref(kc.SerializeImagePulls, true):
			errs = append(errs, field.Invalid(p, *n, "must be 1 while serializeImagePulls is true; set serializeImagePulls: false to pull in parallel"))
		}
	}

	errs = append(errs, validateReserved(kc.SystemReserved, field.NewPath("systemReserved"))...)
	errs = append(errs, validateReserved(kc.KubeReserved, field.NewPath("kubeReserved"))...)
	return errs
}

func positivePeriod(d time.Duration, name, def string) field.ErrorList {
	if d > 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(field.NewPath(name), d.String(),
		"must be greater than zero; leave it out for the kubelet's default "+def)}
}

// validateImageGC mirrors upstream's image GC checks, on the values the image
// manager will use (images.PolicyFrom's defaults for those unset).
func validateImageGC(kc *kubeletconfig.KubeletConfiguration) field.ErrorList {
	var errs field.ErrorList
	high := ptr.Deref(kc.ImageGCHighThresholdPercent, defaultImageGCHighThresholdPercent)
	low := ptr.Deref(kc.ImageGCLowThresholdPercent, defaultImageGCLowThresholdPercent)
	highPath, lowPath := field.NewPath("imageGCHighThresholdPercent"), field.NewPath("imageGCLowThresholdPercent")
	inRange := true
	for _, t := range []struct {
		path *field.Path
		v    int32
	}{{highPath, high}, {lowPath, low}} {
		if t.v < 0 || t.v > 100 {
			errs = append(errs, field.Invalid(t.path, t.v, "must be between 0 and 100, inclusive"))
			inRange = false
		}
	}
	if inRange && low >= high {
		errs = append(errs, field.Invalid(lowPath, low,
			fmt.Sprintf("must be less than imageGCHighThresholdPercent (%d)", high)))
	}

	minAge, maxAge := kc.ImageMinimumGCAge.Duration, kc.ImageMaximumGCAge.Duration
	if minAge < 0 {
		errs = append(errs, field.Invalid(field.NewPath("imageMinimumGCAge"), minAge.String(), "must not be negative"))
	}
	if minAge == 0 {
		minAge = defaultImageMinimumGCAge
	}
	switch {
	case maxAge < 0:
		errs = append(errs, field.Invalid(field.NewPath("imageMaximumGCAge"), maxAge.String(), "must not be negative; 0s turns it off"))
	case maxAge > 0 && maxAge <= minAge:
		errs = append(errs, field.Invalid(field.NewPath("imageMaximumGCAge"), maxAge.String(),
			fmt.Sprintf("must be greater than imageMinimumGCAge (%s), or 0s to turn it off", minAge)))
	}
	return errs
}

// validateEviction checks the eviction settings with the eviction manager's
// own parser, eviction.ParseThresholds, given one entry of one map at a time
// so that every bad entry is found and named by its key.
func validateEviction(kc *kubeletconfig.KubeletConfiguration) field.ErrorList {
	var errs field.ErrorList
	// An empty, non-nil evictionHard keeps the parser from adding the
	// default hard thresholds to each single-entry configuration.
	none := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(kc.EvictionHard)) {
		one := &kubeletconfig.KubeletConfiguration{EvictionHard: map[string]string{k: kc.EvictionHard[k]}}
		if _, err := eviction.ParseThresholds(one); err != nil {
			errs = append(errs, thresholdError("evictionHard", k, kc.EvictionHard[k], err))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(kc.EvictionSoft)) {
		v := kc.EvictionSoft[k]
		// With a grace period, any error is the entry's own.
		one := &kubeletconfig.KubeletConfiguration{EvictionHard: none,
			EvictionSoft: map[string]string{k: v}, EvictionSoftGracePeriod: map[string]string{k: "0s"}}
		if _, err := eviction.ParseThresholds(one); err != nil {
			errs = append(errs, thresholdError("evictionSoft", k, v, err))
			continue
		}
		if _, ok := kc.EvictionSoftGracePeriod[k]; ok {
			continue
		}
		// Without one, an error means the parser needs one for k.
		one.EvictionSoftGracePeriod = nil
		if _, err := eviction.ParseThresholds(one); err != nil {
			errs = append(errs, field.Required(field.NewPath("evictionSoftGracePeriod").Key(k),
				fmt.Sprintf("evictionSoft[%s] needs a grace period: add evictionSoftGracePeriod: {%s: 1m30s}", k, k)))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(kc.EvictionSoftGracePeriod)) {
		one := &kubeletconfig.KubeletConfiguration{EvictionHard: none, EvictionSoftGracePeriod: map[string]string{k: kc.EvictionSoftGracePeriod[k]}}
		if _, err := eviction.ParseThresholds(one); err != nil {
			errs = append(errs, thresholdError("evictionSoftGracePeriod", k, kc.EvictionSoftGracePeriod[k], err))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(kc.EvictionMinimumReclaim)) {
		one := &kubeletconfig.KubeletConfiguration{EvictionHard: none, EvictionMinimumReclaim: map[string]string{k: kc.EvictionMinimumReclaim[k]}}
		if _, err := eviction.ParseThresholds(one); err != nil {
			errs = append(errs, thresholdError("evictionMinimumReclaim", k, kc.EvictionMinimumReclaim[k], err))
		}
	}
	if len(errs) == 0 {
		// Every entry parses alone; the whole must too, or the eviction
		// manager would refuse it. This catches what the checks above miss.
		if _, err := eviction.ParseThresholds(kc); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("evictionHard"), field.OmitValueType{}, err.Error()))
		}
	}
	if d := kc.EvictionPressureTransitionPeriod.Duration; d < 0 {
		errs = append(errs, field.Invalid(field.NewPath("evictionPressureTransitionPeriod"), d.String(),
			"must not be negative; 0s or leaving it out gives the kubelet's default 5m0s"))
	}
	if g := kc.EvictionMaxPodGracePeriod; g < 0 {
		errs = append(errs, field.Invalid(field.NewPath("evictionMaxPodGracePeriod"), g, "must not be negative"))
	}
	return errs
}

// enforcedSignals are the eviction signals an agent observes, for "supported
// values" lists.
func enforcedSignals() []string {
	return []string{
		string(eviction.SignalImageFsAvailable), string(eviction.SignalImageFsInodesFree),
		string(eviction.SignalMemoryAvailable), string(eviction.SignalNodeFsAvailable),
		string(eviction.SignalNodeFsInodesFree), string(eviction.SignalPIDAvailable),
	}
}

// thresholdError turns eviction.ParseThresholds' error for the single entry
// key: value of the map name into a field error at name[key]. The parser
// words its errors "name[key]: problem" for a bad value and "name:
// unsupported eviction signal key" for a bad key.
func thresholdError(name, key, value string, err error) *field.Error {
	path := field.NewPath(name).Key(key)
	msg := err.Error()
	if strings.HasPrefix(msg, name+": unsupported eviction signal") {
		return field.NotSupported(path, key, enforcedSignals())
	}
	detail, ok := strings.CutPrefix(msg, name+"["+key+"]: ")
	if !ok {
		detail = msg
	}
	switch {
	case name == "evictionSoftGracePeriod":
		if strings.HasPrefix(detail, "time: ") {
			detail = "must be a duration such as 1m30s"
		}
	case errors.Is(err, resource.ErrFormatWrong) || errors.Is(err, resource.ErrSuffix) || strings.HasPrefix(detail, "strconv."):
		detail = "must be a quantity such as 100Mi or a percentage such as 10%"
	}
	return field.Invalid(path, value, detail)
}

// reservableResources are the resources systemReserved and kubeReserved may
// reserve, as the kubelet's parseResourceList accepts them.
func reservableResources() []string {
	return []string{"cpu", "ephemeral-storage", "memory", "pid"}
}

func validateReserved(reserved map[string]string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, k := range slices.Sorted(maps.Keys(reserved)) {
		p := path.Key(k)
		if !slices.Contains(reservableResources(), k) {
			errs = append(errs, field.NotSupported(p, k, reservableResources()))
			continue
		}
		q, err := resource.ParseQuantity(reserved[k])
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(p, reserved[k], "must be a quantity such as 500m or 1Gi"))
		case q.Sign() < 0:
			errs = append(errs, field.Invalid(p, reserved[k], "must not be negative"))
		}
	}
	return errs
}

// validateStaticPods checks the static pod settings: the kubelet resolves
// a relative staticPodPath against its config file's directory, which a
// node pool has not, so the path must be absolute; and a path to read
// needs a period to read it at.
func validateStaticPods(kc *kubeletconfig.KubeletConfiguration) field.ErrorList {
	var errs field.ErrorList
	if p := kc.StaticPodPath; p != "" && !filepath.IsAbs(p) {
		errs = append(errs, field.Invalid(field.NewPath("staticPodPath"), p, "must be an absolute path, such as /etc/kubernetes/manifests"))
	}
	if d := kc.FileCheckFrequency.Duration; d < 0 || (d == 0 && kc.StaticPodPath != "") {
		errs = append(errs, positivePeriod(d, "fileCheckFrequency", "20s")...)
	}
	return errs
}

// validateNodeFields checks what `fleetlet agent` reads of a node's own
// configuration, as the kubelet does: its port, and the paths of its pod
// logs and cgroups. Each is checked only when set: a node pool's agents
// take neither from their configuration.
func validateNodeFields(kc *kubeletconfig.KubeletConfiguration) field.ErrorList {
	var errs field.ErrorList
	if kc.Port != 0 && (kc.Port < 1 || kc.Port > 65535) {
		errs = append(errs, field.Invalid(field.NewPath("port"), kc.Port, "must be between 1 and 65535, inclusive"))
	}
	if p := kc.PodLogsDir; p != "" {
		switch {
		case !filepath.IsAbs(p):
			errs = append(errs, field.Invalid(field.NewPath("podLogsDir"), p, "must be an absolute path"))
		case filepath.Clean(p) != p:
			errs = append(errs, field.Invalid(field.NewPath("podLogsDir"), p, "must be normalized: "+filepath.Clean(p)))
		}
	}
	if p := kc.CgroupRoot; p != "" && !filepath.IsAbs(p) {
		errs = append(errs, field.Invalid(field.NewPath("cgroupRoot"), p, "must be an absolute cgroup path, such as /"))
	}
	return errs
}
