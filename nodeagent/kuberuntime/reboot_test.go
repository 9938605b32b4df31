package kuberuntime

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestAttemptAfterReboot(t *testing.T) {
	pod := &corev1.Pod{Status: corev1.PodStatus{
		InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", ContainerID: "fake://1", RestartCount: 0}},
		ContainerStatuses: []corev1.ContainerStatus{
			{Name: "ran", ContainerID: "fake://2", RestartCount: 3},
			{Name: "never-started", RestartCount: 0},
		},
	}}
	for name, want := range map[string]uint32{
		// The log directory of a container that ran holds N.log for its
		// last attempt N: the next is N+1.
		"init": 1, "ran": 4,
		// No container ID: it never ran here, nothing to count on from.
		"never-started": 0, "new": 0,
	} {
		if got := attemptAfterReboot(pod, name); got != want {
			t.Errorf("attemptAfterReboot(%s) = %d, want %d", name, got, want)
		}
	}
}
