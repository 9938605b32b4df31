package status

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
	"github.com/fleetlet/fleetlet/reports"
)

// runningPod is a running two-container pod, its runtime status and the
// status the agent generates for it.
func runningPod() (*corev1.Pod, *kuberuntime.PodStatus, corev1.PodStatus) {
	running := runtimeapi.ContainerState_CONTAINER_RUNNING
	pod := testPod(corev1.RestartPolicyAlways, false, "app", "sidecar")
	rt := &kuberuntime.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox(true)},
		Containers: []*kuberuntime.ContainerStatus{ctr("app", running, 0), ctr("sidecar", running, 0)}}
	return pod, rt, Generate(Input{Pod: pod, Runtime: rt, NodeIP: nodeIP, RuntimeName: "fake", Now: t0, Previous: pod.Status})
}

// BenchmarkGenerate is the status every sync of a running pod computes.
func BenchmarkGenerate(b *testing.B) {
	pod, rt, prev := runningPod()
	b.ReportAllocs()
	for b.Loop() {
		Generate(Input{Pod: pod, Runtime: rt, NodeIP: nodeIP, RuntimeName: "fake", Now: t0, Previous: prev})
	}
}

// BenchmarkSetPodStatusUnchanged is the status diff after every sync of a
// pod whose status did not change: the common case, which must not send.
func BenchmarkSetPodStatusUnchanged(b *testing.B) {
	pod, _, st := runningPod()
	m := NewManager(Config{Clock: clocktesting.NewFakeClock(t0), Recorder: reports.Discard{}})
	m.SetPodStatus(pod, st)
	<-m.notify
	same := *st.DeepCopy()
	b.ReportAllocs()
	for b.Loop() {
		m.SetPodStatus(pod, same)
	}
	if len(m.notify) != 0 {
		b.Fatal("an unchanged status asked for a sync")
	}
}

// BenchmarkStatusPatch is the patch the status manager sends when a
// pod's status changed against the API's: here, Pending to Running.
func BenchmarkStatusPatch(b *testing.B) {
	pod, _, st := runningPod()
	api := corev1.PodStatus{Phase: corev1.PodPending, Conditions: pod.Status.Conditions, QOSClass: pod.Status.QOSClass}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := statusPatch(pod.UID, api, mergeStatus(api, st, false, t0)); err != nil {
			b.Fatal(err)
		}
	}
}
