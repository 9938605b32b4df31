package fakeruntime

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestConcurrentPods runs many pod lifecycles at once, with readers listing
// and an events subscriber all the while, so that -race sees every path the
// agents will take together. The containers would exit by themselves after
// an hour, so that each arms and disarms an exit timer.
func TestConcurrentPods(t *testing.T) {
	const (
		workers       = 32
		podsPerWorker = 25
	)
	rt, _ := newTestRuntime(t, Behaviour{Containers: ContainerBehaviour{
		RunFor: new(Duration(time.Hour)),
		Memory: &UsageCurve{Start: new(resource.MustParse("10Mi")), PerSecond: new(resource.MustParse("1Ki"))},
	}})
	ctx := context.Background()
	imageRef := pull(t, rt, busyboxImage)
	events := watchEvents(t, rt, 16)
	var received int
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for range events.ch {
			received++
		}
	}()

	var wg sync.WaitGroup
	errs := make(chan error, workers+2)
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"io.kubernetes.container.name": "app"}}); err != nil {
					errs <- err
					return
				}
				if _, err := rt.ListPodSandbox(ctx, nil); err != nil {
					errs <- err
					return
				}
				if _, err := rt.ImageFsInfo(ctx); err != nil {
					errs <- err
					return
				}
				if _, err := rt.ListPodSandboxStats(ctx, nil); err != nil {
					errs <- err
					return
				}
				if _, err := rt.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{LabelSelector: map[string]string{"io.kubernetes.container.name": "app"}}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range podsPerWorker {
				if err := podLifecycle(ctx, rt, podConfig(fmt.Sprintf("pod-%d-%d", w, i)), imageRef); err != nil {
					errs <- fmt.Errorf("worker %d pod %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	if sbs, _ := rt.ListPodSandbox(ctx, nil); len(sbs) != 0 {
		t.Errorf("%d sandboxes left", len(sbs))
	}
	if cs, _ := rt.ListContainers(ctx, nil); len(cs) != 0 {
		t.Errorf("%d containers left", len(cs))
	}
	if len(rt.network.used) != 0 || len(rt.names) != 0 || len(rt.exitTimers) != 0 {
		t.Errorf("%d IPs and %d names still reserved, %d exit timers armed", len(rt.network.used), len(rt.names), len(rt.exitTimers))
	}
	_ = events.stop(t)
	close(events.ch) // GetContainerEvents has returned: nothing sends any more
	<-drained
	if received == 0 {
		t.Error("the subscriber received no events")
	}
}

// podLifecycle is one pod's life as the kubelet drives it, with the status
// reads in between.
func podLifecycle(ctx context.Context, rt *Runtime, pod *runtimeapi.PodSandboxConfig, imageRef string) error {
	sbID, err := rt.RunPodSandbox(ctx, pod, "")
	if err != nil {
		return err
	}
	if _, err := rt.PodSandboxStatus(ctx, sbID, false); err != nil {
		return err
	}
	cID, err := rt.CreateContainer(ctx, sbID, containerConfig(pod, "app", imageRef), pod)
	if err != nil {
		return err
	}
	if err := rt.StartContainer(ctx, cID); err != nil {
		return err
	}
	if _, err := rt.ContainerStatus(ctx, cID, false); err != nil {
		return err
	}
	if err := rt.StopContainer(ctx, cID, 30); err != nil {
		return err
	}
	if err := rt.RemoveContainer(ctx, cID); err != nil {
		return err
	}
	if err := rt.StopPodSandbox(ctx, sbID); err != nil {
		return err
	}
	return rt.RemovePodSandbox(ctx, sbID)
}
