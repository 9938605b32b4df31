package fakeruntime

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testclock "k8s.io/utils/clock/testing"
)

const (
	testPodCIDR  = "10.244.1.0/24"
	pauseImage   = "registry.k8s.io/pause:3.10"
	busyboxImage = "busybox:1.36"
)

// testEpoch is a fixed, non-zero start for fake clocks: CRI rejects a zero
// created_at.
var testEpoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// newTestRuntime returns a Runtime on a fake clock, with the pause image
// preloaded and testPodCIDR configured.
func newTestRuntime(t testing.TB, b Behaviour) (*Runtime, *testclock.FakeClock) {
	t.Helper()
	clk := testclock.NewFakeClock(testEpoch)
	rt := New(Config{Clock: clk, Behaviour: b, PreloadedImages: []string{pauseImage}, Seed: 42})
	setPodCIDR(t, rt, testPodCIDR)
	return rt, clk
}

func setPodCIDR(t testing.TB, rt *Runtime, cidr string) {
	t.Helper()
	err := rt.UpdateRuntimeConfig(context.Background(), &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: cidr}})
	if err != nil {
		t.Fatalf("UpdateRuntimeConfig(%q): %v", cidr, err)
	}
}

// podConfig is a sandbox config shaped like the kubelet's.
func podConfig(name string) *runtimeapi.PodSandboxConfig {
	uid := "uid-" + name
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: uid},
		Hostname: name,
		Labels: map[string]string{
			"io.kubernetes.pod.name":      name,
			"io.kubernetes.pod.namespace": "default",
			"io.kubernetes.pod.uid":       uid,
			"app":                         "web",
		},
		Annotations:  map[string]string{"kubernetes.io/config.source": "api"},
		LogDirectory: "/var/log/pods/default_" + name + "_" + uid,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{
					Network: runtimeapi.NamespaceMode_POD,
					Pid:     runtimeapi.NamespaceMode_CONTAINER,
					Ipc:     runtimeapi.NamespaceMode_POD,
				},
			},
		},
	}
}

func hostNetworkPodConfig(name string) *runtimeapi.PodSandboxConfig {
	cfg := podConfig(name)
	cfg.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
	return cfg
}

// containerConfig is a container config shaped like the kubelet's.
func containerConfig(pod *runtimeapi.PodSandboxConfig, name, image string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: image},
		Command:  []string{"sleep", "3600"},
		Labels: map[string]string{
			"io.kubernetes.container.name": name,
			"io.kubernetes.pod.name":       pod.Metadata.Name,
			"io.kubernetes.pod.namespace":  pod.Metadata.Namespace,
			"io.kubernetes.pod.uid":        pod.Metadata.Uid,
		},
		Annotations: map[string]string{"io.kubernetes.container.restartCount": "0"},
		LogPath:     name + "/0.log",
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 102, MemoryLimitInBytes: 128 << 20, OomScoreAdj: 1000},
		},
	}
}

// wantCode fails the test unless err carries the gRPC code want (OK: nil).
func wantCode(t testing.TB, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: got code %v (err %v), want %v", what, got, err, want)
	}
}

func wantErrContains(t testing.TB, what string, err error, substr string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), substr) {
		t.Fatalf("%s: got err %v, want one containing %q", what, err, substr)
	}
}

// runPod runs a sandbox for name and fails the test on error.
func runPod(t testing.TB, rt *Runtime, cfg *runtimeapi.PodSandboxConfig) string {
	t.Helper()
	id, err := rt.RunPodSandbox(context.Background(), cfg, "")
	if err != nil {
		t.Fatalf("RunPodSandbox(%s): %v", cfg.Metadata.Name, err)
	}
	return id
}

// pull pulls image and fails the test on error.
func pull(t testing.TB, rt *Runtime, image string) string {
	t.Helper()
	ref, err := rt.PullImage(context.Background(), &runtimeapi.ImageSpec{Image: image}, nil, nil)
	if err != nil {
		t.Fatalf("PullImage(%s): %v", image, err)
	}
	return ref
}

// runContainer creates and starts a container and fails the test on error.
func runContainer(t testing.TB, rt *Runtime, sbID string, pod *runtimeapi.PodSandboxConfig, name, image string) string {
	t.Helper()
	ctx := context.Background()
	id, err := rt.CreateContainer(ctx, sbID, containerConfig(pod, name, image), pod)
	if err != nil {
		t.Fatalf("CreateContainer(%s): %v", name, err)
	}
	if err := rt.StartContainer(ctx, id); err != nil {
		t.Fatalf("StartContainer(%s): %v", name, err)
	}
	return id
}

func containerStatus(t testing.TB, rt *Runtime, id string) *runtimeapi.ContainerStatus {
	t.Helper()
	resp, err := rt.ContainerStatus(context.Background(), id, false)
	if err != nil {
		t.Fatalf("ContainerStatus(%s): %v", id, err)
	}
	return resp.Status
}

func sandboxStatus(t testing.TB, rt *Runtime, id string) *runtimeapi.PodSandboxStatus {
	t.Helper()
	resp, err := rt.PodSandboxStatus(context.Background(), id, false)
	if err != nil {
		t.Fatalf("PodSandboxStatus(%s): %v", id, err)
	}
	return resp.Status
}
