package nodestatus

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/fleetlet/fleetlet/nodeagent/eviction"
)

// reservable says whether the kubelet's container manager knows resource
// name as node capacity, and so may reserve it: cpu, memory and hugepages
// from the machine, ephemeral-storage from the root filesystem. (It knows
// pid too, from the host's pid_max, but the Node's capacity does not carry
// it.) pods and extended resources are never reserved.
func reservable(name corev1.ResourceName) bool {
	switch name {
	case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return true
	}
	return isHugePages(name)
}

func isHugePages(name corev1.ResourceName) bool {
	return strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix)
}

// Reservation is what the kubelet keeps from scheduling, its container
// manager's GetNodeAllocatableReservation: for each resource of capacity it
// knows, systemReserved plus kubeReserved plus the hard eviction threshold
// that guards it. Only two thresholds count, as in the kubelet's
// hardEvictionReservation: memory.available against memory and
// nodefs.available against ephemeral-storage, a percentage being of that
// resource's capacity. evictionHard is read as the kubelet reads it: its
// defaults (memory.available<100Mi, nodefs.available<10%, ...) when unset,
// merged into a partial map with mergeDefaultEvictionSettings. Resources
// with nothing reserved are left out.
func Reservation(capacity corev1.ResourceList, kc *kubeletconfig.KubeletConfiguration) (corev1.ResourceList, error) {
	systemReserved, err := parseReserved(kc.SystemReserved)
	if err != nil {
		return nil, fmt.Errorf("systemReserved: %w", err)
	}
	kubeReserved, err := parseReserved(kc.KubeReserved)
	if err != nil {
		return nil, fmt.Errorf("kubeReserved: %w", err)
	}
	// The kubelet parses evictionHard alone for this (cmd/kubelet's
	// ParseThresholdConfig of evictionHard), so soft thresholds never count.
	hard, err := eviction.ParseThresholds(&kubeletconfig.KubeletConfiguration{
		EvictionHard: kc.EvictionHard, MergeDefaultEvictionSettings: kc.MergeDefaultEvictionSettings,
	})
	if err != nil {
		return nil, err
	}
	evictionReserved := corev1.ResourceList{}
	for _, t := range hard {
		var name corev1.ResourceName
		switch t.Signal {
		case eviction.SignalMemoryAvailable:
			name = corev1.ResourceMemory
		case eviction.SignalNodeFsAvailable:
			name = corev1.ResourceEphemeralStorage
		default:
			continue
		}
		c := capacity[name]
		evictionReserved[name] = thresholdQuantity(t.Value, &c)
	}
	out := corev1.ResourceList{}
	for name := range capacity {
		if !reservable(name) {
			continue
		}
		v := resource.NewQuantity(0, resource.DecimalSI)
		v.Add(systemReserved[name])
		v.Add(kubeReserved[name])
		v.Add(evictionReserved[name])
		if !v.IsZero() {
			out[name] = *v
		}
	}
	return out, nil
}

// thresholdQuantity is the kubelet's GetThresholdQuantity: the threshold's
// quantity, or its percentage of capacity in whole bytes.
func thresholdQuantity(v eviction.ThresholdValue, capacity *resource.Quantity) resource.Quantity {
	if v.Quantity != nil {
		return v.Quantity.DeepCopy()
	}
	return *resource.NewQuantity(int64(float64(capacity.Value())*float64(v.Percentage)), resource.BinarySI)
}

// parseReserved reads systemReserved or kubeReserved as the kubelet's
// parseResourceList: cpu, memory, ephemeral-storage and pid, none negative,
// cpu rounded to the millicore.
func parseReserved(m map[string]string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch corev1.ResourceName(k) {
		case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, "pid":
		default:
			return nil, fmt.Errorf("cannot reserve %q resource", k)
		}
		q, err := resource.ParseQuantity(m[k])
		if err != nil {
			return nil, fmt.Errorf("failed to parse quantity %q for %q resource: %w", m[k], k, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("resource quantity for %q cannot be negative: %v", k, m[k])
		}
		if k == string(corev1.ResourceCPU) {
			q.SetMilli((q.ScaledValue(resource.Micro) + 500) / 1000)
		}
		out[corev1.ResourceName(k)] = q
	}
	return out, nil
}

// ValidateReservation is the container manager's validateNodeAllocatable,
// which stops a kubelet at its start: nothing may reserve more than the
// node's capacity of it.
func ValidateReservation(capacity, reservation corev1.ResourceList) error {
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(reservation)) {
		v := capacity[name].DeepCopy()
		r := reservation[name]
		v.Sub(r)
		if v.Sign() < 0 {
			c := capacity[name]
			problems = append(problems, fmt.Sprintf("Resource %q has a reservation of %v but capacity of %v. Expected capacity >= reservation.", name, &r, &c))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("invalid Node Allocatable configuration. %s", strings.Join(problems, " "))
	}
	return nil
}

// Allocatable is capacity less reservation, never below zero, with every
// hugepages capacity also taken from memory, as the kubelet's MachineInfo
// setter computes status.allocatable. Resources not reserved (pods,
// extended resources) are their capacity.
func Allocatable(capacity, reservation corev1.ResourceList) corev1.ResourceList {
	out := make(corev1.ResourceList, len(capacity))
	for name, c := range capacity {
		v := c.DeepCopy()
		if r, ok := reservation[name]; ok {
			v.Sub(r)
		}
		if v.Sign() < 0 {
			v.Set(0)
		}
		out[name] = v
	}
	for name, c := range capacity {
		if !isHugePages(name) {
			continue
		}
		mem := out[corev1.ResourceMemory]
		mem.Sub(c)
		if mem.Sign() < 0 {
			mem.Set(0)
		}
		out[corev1.ResourceMemory] = mem
	}
	return out
}
