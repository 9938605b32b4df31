// Package eviction is one node's eviction manager, as the kubelet's: it
// observes the node's signals (memory, disk, PIDs) from the stats summary
// every 10 s, compares them with the evictionHard and evictionSoft
// thresholds, reports MemoryPressure, DiskPressure and PIDPressure, reclaims
// node-level resources (dead containers, unused images) and, when that is
// not enough, evicts one pod per cycle in the kubelet's order. Its
// decisions (parsing, signals, thresholds met, grace and transition periods,
// ranking, messages) are pure functions; the Manager only observes and acts.
package eviction

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
)

// Signal is an eviction signal: a quantity of a node resource that is still
// available. Every signal's operator is "less than": a threshold is met when
// the available quantity falls below it.
type Signal string

// The signals fleetlet observes; their names are the kubelet's.
const (
	SignalMemoryAvailable   Signal = "memory.available"
	SignalNodeFsAvailable   Signal = "nodefs.available"
	SignalNodeFsInodesFree  Signal = "nodefs.inodesFree"
	SignalImageFsAvailable  Signal = "imagefs.available"
	SignalImageFsInodesFree Signal = "imagefs.inodesFree"
	SignalPIDAvailable      Signal = "pid.available"
)

// Resources internal to eviction, as the kubelet names them.
const (
	resourceInodes corev1.ResourceName = "inodes"
	resourcePids   corev1.ResourceName = "pids"
)

// signalToResource is the resource each signal reclaims; it never changes.
func signalToResource(s Signal) (corev1.ResourceName, bool) {
	switch s {
	case SignalMemoryAvailable:
		return corev1.ResourceMemory, true
	case SignalNodeFsAvailable, SignalImageFsAvailable:
		return corev1.ResourceEphemeralStorage, true
	case SignalNodeFsInodesFree, SignalImageFsInodesFree:
		return resourceInodes, true
	case SignalPIDAvailable:
		return resourcePids, true
	}
	return "", false
}

// signalToNodeCondition is the node condition a met threshold raises.
func signalToNodeCondition(s Signal) corev1.NodeConditionType {
	switch s {
	case SignalMemoryAvailable:
		return corev1.NodeMemoryPressure
	case SignalPIDAvailable:
		return corev1.NodePIDPressure
	}
	return corev1.NodeDiskPressure
}

// ignoredSignals are valid kubelet signals fleetlet accepts in a
// configuration and does not enforce: the kubelet overrides containerfs
// thresholds with the nodefs or imagefs ones (its UpdateContainerFsThresholds),
// so they add nothing, and allocatableMemory.available needs the pods
// cgroup, which an emulated node does not have.
var ignoredSignals = []string{"containerfs.available", "containerfs.inodesFree", "allocatableMemory.available"}

// DefaultEvictionHard is the kubelet's evictionHard on Linux when the
// configuration leaves it unset.
func DefaultEvictionHard() map[string]string {
	return map[string]string{
		string(SignalMemoryAvailable):   "100Mi",
		string(SignalNodeFsAvailable):   "10%",
		string(SignalNodeFsInodesFree):  "5%",
		string(SignalImageFsAvailable):  "15%",
		string(SignalImageFsInodesFree): "5%",
	}
}

// ThresholdValue is either a quantity or a fraction of the signal's
// capacity (Percentage 0.1 for "10%").
type ThresholdValue struct {
	Quantity   *resource.Quantity
	Percentage float32
}

// Threshold is one eviction threshold. A zero GracePeriod makes it hard.
type Threshold struct {
	Signal      Signal
	Value       ThresholdValue
	GracePeriod time.Duration
	MinReclaim  *ThresholdValue
}

// isHard says whether eviction follows as soon as the threshold is met.
func (t Threshold) isHard() bool { return t.GracePeriod == 0 }

// quantity is the threshold's value against the signal's capacity.
func (v ThresholdValue) quantity(capacity *resource.Quantity) *resource.Quantity {
	if v.Quantity != nil {
		q := v.Quantity.DeepCopy()
		return &q
	}
	return resource.NewQuantity(int64(float64(capacity.Value())*float64(v.Percentage)), resource.BinarySI)
}

func (v ThresholdValue) String() string {
	if v.Quantity != nil {
		return v.Quantity.String()
	}
	// Four significant digits hide float32 noise: 0.15 prints as 15%.
	return fmt.Sprintf("%.4g%%", float64(v.Percentage)*100)
}

// ParseThresholds reads the eviction settings of kc as the kubelet does:
// evictionHard defaults to DefaultEvictionHard when unset (merged into a
// partial map when mergeDefaultEvictionSettings is true); every soft
// threshold needs a grace period; minimum reclaims attach to both.
func ParseThresholds(kc *kubeletconfig.KubeletConfiguration) ([]Threshold, error) {
	hardStatements := kc.EvictionHard
	if hardStatements == nil {
		hardStatements = DefaultEvictionHard()
	} else if kc.MergeDefaultEvictionSettings != nil && *kc.MergeDefaultEvictionSettings {
		hardStatements = maps.Clone(hardStatements)
		for k, v := range DefaultEvictionHard() {
			if _, ok := hardStatements[k]; !ok {
				hardStatements[k] = v
			}
		}
	}
	hard, err := parseStatements("evictionHard", hardStatements)
	if err != nil {
		return nil, err
	}
	soft, err := parseStatements("evictionSoft", kc.EvictionSoft)
	if err != nil {
		return nil, err
	}
	graces, err := parseGracePeriods(kc.EvictionSoftGracePeriod)
	if err != nil {
		return nil, err
	}
	reclaims, err := parseMinimumReclaims(kc.EvictionMinimumReclaim)
	if err != nil {
		return nil, err
	}
	for i := range soft {
		g, ok := graces[soft[i].Signal]
		if !ok {
			return nil, fmt.Errorf("evictionSoftGracePeriod: grace period must be specified for the soft eviction threshold %v", soft[i].Signal)
		}
		soft[i].GracePeriod = g
	}
	all := append(hard, soft...)
	for i := range all {
		if r, ok := reclaims[all[i].Signal]; ok {
			all[i].MinReclaim = &r
		}
	}
	return all, nil
}

// signalKeys returns the signals of statements in a stable order, and an
// error naming the first unsupported one.
func signalKeys(field string, statements map[string]string) ([]Signal, error) {
	var out []Signal
	for _, k := range slices.Sorted(maps.Keys(statements)) {
		if slices.Contains(ignoredSignals, k) {
			continue
		}
		if _, ok := signalToResource(Signal(k)); !ok {
			return nil, fmt.Errorf("%s: unsupported eviction signal %v", field, k)
		}
		out = append(out, Signal(k))
	}
	return out, nil
}

func parseStatements(field string, statements map[string]string) ([]Threshold, error) {
	signals, err := signalKeys(field, statements)
	if err != nil {
		return nil, err
	}
	var out []Threshold
	for _, s := range signals {
		val := statements[string(s)]
		if strings.HasSuffix(val, "%") {
			// 0% and 100% disable the threshold, as in the kubelet.
			if val == "0%" || val == "100%" {
				continue
			}
			p, err := parsePercentage(val)
			if err != nil {
				return nil, fmt.Errorf("%s[%s]: %w", field, s, err)
			}
			if p < 0 || p > 1 {
				return nil, fmt.Errorf("%s[%s]: eviction percentage threshold must be within 0%% and 100%%: %s", field, s, val)
			}
			out = append(out, Threshold{Signal: s, Value: ThresholdValue{Percentage: p}})
			continue
		}
		q, err := resource.ParseQuantity(val)
		if err != nil {
			return nil, fmt.Errorf("%s[%s]: %w", field, s, err)
		}
		if q.Sign() <= 0 {
			return nil, fmt.Errorf("%s[%s]: eviction threshold must be positive: %s", field, s, &q)
		}
		out = append(out, Threshold{Signal: s, Value: ThresholdValue{Quantity: &q}})
	}
	return out, nil
}

func parsePercentage(val string) (float32, error) {
	v, err := strconv.ParseFloat(strings.TrimRight(val, "%"), 32)
	if err != nil {
		return 0, err
	}
	return float32(v) / 100, nil
}

func parseGracePeriods(statements map[string]string) (map[Signal]time.Duration, error) {
	signals, err := signalKeys("evictionSoftGracePeriod", statements)
	if err != nil {
		return nil, err
	}
	out := map[Signal]time.Duration{}
	for _, s := range signals {
		d, err := time.ParseDuration(statements[string(s)])
		if err != nil {
			return nil, fmt.Errorf("evictionSoftGracePeriod[%s]: %w", s, err)
		}
		if d < 0 {
			return nil, fmt.Errorf("evictionSoftGracePeriod[%s]: invalid eviction grace period %v, must be a positive value", s, d)
		}
		out[s] = d
	}
	return out, nil
}

func parseMinimumReclaims(statements map[string]string) (map[Signal]ThresholdValue, error) {
	signals, err := signalKeys("evictionMinimumReclaim", statements)
	if err != nil {
		return nil, err
	}
	out := map[Signal]ThresholdValue{}
	for _, s := range signals {
		val := statements[string(s)]
		if strings.HasSuffix(val, "%") {
			p, err := parsePercentage(val)
			if err != nil {
				return nil, fmt.Errorf("evictionMinimumReclaim[%s]: %w", s, err)
			}
			if p <= 0 {
				return nil, fmt.Errorf("evictionMinimumReclaim[%s]: eviction percentage minimum reclaim must be positive: %s", s, val)
			}
			out[s] = ThresholdValue{Percentage: p}
			continue
		}
		q, err := resource.ParseQuantity(val)
		if err != nil {
			return nil, fmt.Errorf("evictionMinimumReclaim[%s]: %w", s, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("evictionMinimumReclaim[%s]: negative eviction minimum reclaim %s", s, &q)
		}
		out[s] = ThresholdValue{Quantity: &q}
	}
	return out, nil
}
