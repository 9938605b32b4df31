package nodestatus

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

func machine() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"), corev1.ResourcePods: resource.MustParse("110"),
		"example.com/gpu": resource.MustParse("2"),
	}
}

// TestAllocatable checks status.allocatable against what a 1.37 kubelet
// reports for the same capacity and configuration.
func TestAllocatable(t *testing.T) {
	for _, tc := range []struct {
		name string
		kc   *kubeletconfig.KubeletConfiguration
		// capacity overrides machine() when set.
		capacity corev1.ResourceList
		want     map[corev1.ResourceName]string
	}{{
		// evictionHard unset: the kubelet's defaults. memory.available<100Mi
		// and nodefs.available<10% reserve; the inodes and imagefs ones do
		// not. 10% is a float32, as in the kubelet: 10737418400 bytes of 100Gi.
		name: "defaults",
		kc:   &kubeletconfig.KubeletConfiguration{},
		want: map[corev1.ResourceName]string{
			corev1.ResourceCPU: "8", corev1.ResourceMemory: "32668Mi", corev1.ResourceEphemeralStorage: "96636764000",
			corev1.ResourcePods: "110", "example.com/gpu": "2",
		},
	}, {
		name: "reserved and explicit thresholds",
		kc: &kubeletconfig.KubeletConfiguration{
			SystemReserved: map[string]string{"cpu": "500m", "memory": "1Gi", "pid": "1000"},
			KubeReserved:   map[string]string{"cpu": "250m", "memory": "512Mi", "ephemeral-storage": "1Gi"},
			// imagefs and soft thresholds never reserve.
			EvictionHard:            map[string]string{"memory.available": "500Mi", "nodefs.available": "5Gi", "imagefs.available": "20%"},
			EvictionSoft:            map[string]string{"memory.available": "2Gi"},
			EvictionSoftGracePeriod: map[string]string{"memory.available": "1m"},
		},
		want: map[corev1.ResourceName]string{
			corev1.ResourceCPU: "7250m", corev1.ResourceMemory: "30732Mi", corev1.ResourceEphemeralStorage: "94Gi",
			corev1.ResourcePods: "110", "example.com/gpu": "2",
		},
	}, {
		name: "an empty evictionHard reserves nothing",
		kc:   &kubeletconfig.KubeletConfiguration{EvictionHard: map[string]string{}},
		want: map[corev1.ResourceName]string{
			corev1.ResourceCPU: "8", corev1.ResourceMemory: "32Gi", corev1.ResourceEphemeralStorage: "100Gi", corev1.ResourcePods: "110",
		},
	}, {
		name: "merged with the defaults",
		kc: &kubeletconfig.KubeletConfiguration{
			EvictionHard: map[string]string{"memory.available": "1Gi"}, MergeDefaultEvictionSettings: ptr.To(true),
		},
		want: map[corev1.ResourceName]string{corev1.ResourceMemory: "31Gi", corev1.ResourceEphemeralStorage: "96636764000"},
	}, {
		// The kubelet's parseResourceList rounds cpu to the millicore.
		name: "cpu rounded to the millicore",
		kc:   &kubeletconfig.KubeletConfiguration{SystemReserved: map[string]string{"cpu": "0.0005"}, KubeReserved: map[string]string{"cpu": "0.0004"}},
		want: map[corev1.ResourceName]string{corev1.ResourceCPU: "7999m"},
	}, {
		name: "hugepages come out of memory too",
		kc:   &kubeletconfig.KubeletConfiguration{},
		capacity: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
			"hugepages-2Mi": resource.MustParse("1Gi"),
		},
		want: map[corev1.ResourceName]string{corev1.ResourceMemory: "31644Mi", "hugepages-2Mi": "1Gi"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			capacity := machine()
			if tc.capacity != nil {
				capacity = tc.capacity
			}
			reserved, err := Reservation(capacity, tc.kc)
			if err != nil {
				t.Fatal(err)
			}
			if err := ValidateReservation(capacity, reserved); err != nil {
				t.Fatal(err)
			}
			got := Allocatable(capacity, reserved)
			if len(got) != len(capacity) {
				t.Errorf("allocatable has %d resources, capacity %d: %v", len(got), len(capacity), got)
			}
			for name, want := range tc.want {
				if q := got[name]; q.String() != want {
					t.Errorf("allocatable %s = %s, want %s", name, q.String(), want)
				}
			}
		})
	}
}

// TestAllocatableNeverNegative: a reservation larger than capacity is an
// error for the container manager, and the setter clamps at zero anyway.
func TestAllocatableNeverNegative(t *testing.T) {
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	reserved, err := Reservation(capacity, &kubeletconfig.KubeletConfiguration{KubeReserved: map[string]string{"cpu": "2"}})
	if err != nil {
		t.Fatal(err)
	}
	err = ValidateReservation(capacity, reserved)
	for _, want := range []string{`"cpu" has a reservation of 2 but capacity of 1`, `"memory" has a reservation of 100Mi but capacity of 64Mi`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateReservation = %v, want it to say %s", err, want)
		}
	}
	got := Allocatable(capacity, reserved)
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q := got[name]; !q.IsZero() {
			t.Errorf("allocatable %s = %s, want 0", name, q.String())
		}
	}
}

func TestReservationRejectsBadSettings(t *testing.T) {
	for _, kc := range []*kubeletconfig.KubeletConfiguration{
		{SystemReserved: map[string]string{"pods": "10"}},
		{KubeReserved: map[string]string{"memory": "-1Gi"}},
		{KubeReserved: map[string]string{"cpu": "lots"}},
		{EvictionHard: map[string]string{"memory.available": "-1"}},
	} {
		if _, err := Reservation(machine(), kc); err == nil {
			t.Errorf("Reservation accepted %+v", kc)
		}
	}
}
