package fakeruntime

import (
	"context"
	"fmt"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// BenchmarkPodLifecycle is one pod's whole life in-process with zero
// latencies: the runtime's own cost per pod, which bounds pods per second
// per core.
func BenchmarkPodLifecycle(b *testing.B) {
	ctx := context.Background()
	rt := New(Config{PreloadedImages: []string{pauseImage}, Seed: 1})
	setPodCIDR(b, rt, testPodCIDR)
	pod := podConfig("web-0")
	imageRef, err := rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}, nil, pod)
	if err != nil {
		b.Fatal(err)
	}
	cfg := containerConfig(pod, "app", imageRef)
	b.ReportAllocs()
	for b.Loop() {
		sbID, err := rt.RunPodSandbox(ctx, pod, "")
		if err != nil {
			b.Fatal(err)
		}
		cID, err := rt.CreateContainer(ctx, sbID, cfg, pod)
		if err != nil {
			b.Fatal(err)
		}
		if err := rt.StartContainer(ctx, cID); err != nil {
			b.Fatal(err)
		}
		if _, err := rt.ContainerStatus(ctx, cID, false); err != nil {
			b.Fatal(err)
		}
		if err := rt.StopContainer(ctx, cID, 30); err != nil {
			b.Fatal(err)
		}
		if err := rt.RemoveContainer(ctx, cID); err != nil {
			b.Fatal(err)
		}
		if err := rt.StopPodSandbox(ctx, sbID); err != nil {
			b.Fatal(err)
		}
		if err := rt.RemovePodSandbox(ctx, sbID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPodLifecycleSocket is the same life through k8s.io/cri-client
// and the unix socket: the price of the fake-socket endpoint.
func BenchmarkPodLifecycleSocket(b *testing.B) {
	ctx := context.Background()
	rt := New(Config{PreloadedImages: []string{pauseImage}, Seed: 1})
	setPodCIDR(b, rt, testPodCIDR)
	rs, is := dialForTest(b, serveForTest(b, rt), false)
	pod := podConfig("web-0")
	imageRef, err := is.PullImage(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}, nil, pod)
	if err != nil {
		b.Fatal(err)
	}
	cfg := containerConfig(pod, "app", imageRef)
	b.ReportAllocs()
	for b.Loop() {
		sbID, err := rs.RunPodSandbox(ctx, pod, "")
		if err != nil {
			b.Fatal(err)
		}
		cID, err := rs.CreateContainer(ctx, sbID, cfg, pod)
		if err != nil {
			b.Fatal(err)
		}
		if err := rs.StartContainer(ctx, cID); err != nil {
			b.Fatal(err)
		}
		if _, err := rs.ContainerStatus(ctx, cID, false); err != nil {
			b.Fatal(err)
		}
		if err := rs.StopContainer(ctx, cID, 30); err != nil {
			b.Fatal(err)
		}
		if err := rs.RemoveContainer(ctx, cID); err != nil {
			b.Fatal(err)
		}
		if err := rs.StopPodSandbox(ctx, sbID); err != nil {
			b.Fatal(err)
		}
		if err := rs.RemovePodSandbox(ctx, sbID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkListContainers lists on a full node (110 pods, the kubelet's
// default maxPods, one running container each): "all" is the PLEG relist,
// "onePod" the per-pod query of the kubelet's GetPodStatus.
func BenchmarkListContainers(b *testing.B) {
	ctx := context.Background()
	rt := New(Config{PreloadedImages: []string{pauseImage}, Seed: 1})
	setPodCIDR(b, rt, testPodCIDR)
	for i := range 110 {
		pod := podConfig(fmt.Sprintf("pod-%d", i))
		runContainer(b, rt, runPod(b, rt, pod), pod, "app", pauseImage)
	}
	for _, bc := range []struct {
		name   string
		filter *runtimeapi.ContainerFilter
		want   int
	}{
		{"all", nil, 110},
		{"onePod", &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": "uid-pod-42"}}, 1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				cs, err := rt.ListContainers(ctx, bc.filter)
				if err != nil || len(cs) != bc.want {
					b.Fatalf("ListContainers = %d containers, %v; want %d", len(cs), err, bc.want)
				}
			}
		})
	}
}

// BenchmarkListContainersWithBehaviour is the PLEG relist of a full node
// whose containers all have a behaviour (a RunFor that has not elapsed, and
// probe schedules): the cost the behaviour model adds to every relist.
func BenchmarkListContainersWithBehaviour(b *testing.B) {
	ctx := context.Background()
	rt := New(Config{PreloadedImages: []string{pauseImage}, Seed: 1, Behaviour: Behaviour{Containers: ContainerBehaviour{
		RunFor: new(Duration(time.Hour)), Jitter: new(0.1), Readiness: []ProbeStep{{After: 0, Succeed: true}},
	}}})
	setPodCIDR(b, rt, testPodCIDR)
	for i := range 110 {
		pod := podWithBehaviour(fmt.Sprintf("pod-%d", i), `{"*": {"exitCode": 1}}`)
		runContainer(b, rt, runPod(b, rt, pod), pod, "app", pauseImage)
	}
	b.ReportAllocs()
	for b.Loop() {
		if cs, err := rt.ListContainers(ctx, nil); err != nil || len(cs) != 110 {
			b.Fatalf("ListContainers = %d containers, %v; want 110", len(cs), err)
		}
	}
}

// BenchmarkListPodSandboxStats is the kubelet's stats query on a full node
// (110 pods, one running container each) whose containers all have usage
// curves: the price of a summary API scrape or an eviction check.
func BenchmarkListPodSandboxStats(b *testing.B) {
	ctx := context.Background()
	rt := New(Config{PreloadedImages: []string{pauseImage}, Seed: 1})
	setPodCIDR(b, rt, testPodCIDR)
	for i := range 110 {
		pod := podWithBehaviour(fmt.Sprintf("pod-%d", i), `"*":
  cpu: {start: 100m, steps: [{after: 1m, value: 500m}]}
  memory: {start: 32Mi, perSecond: 1Ki, max: 100Mi}
  writableLayer: {start: 1Mi}
`)
		runContainer(b, rt, runPod(b, rt, pod), pod, "app", pauseImage)
	}
	b.ReportAllocs()
	for b.Loop() {
		if st, err := rt.ListPodSandboxStats(ctx, nil); err != nil || len(st) != 110 {
			b.Fatalf("ListPodSandboxStats = %d pods, %v; want 110", len(st), err)
		}
	}
}
