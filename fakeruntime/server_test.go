package fakeruntime

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/internal/testutil"
	"google.golang.org/grpc/codes"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
)

// serveForTest serves rt on a socket in a temporary directory until the test
// ends, and checks that Serve then returns nil and removes the socket.
func serveForTest(t testing.TB, rt *Runtime) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "cri.sock")
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, socket, rt) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve returned %v after its context ended, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after its context ended")
		}
		if _, err := os.Lstat(socket); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket left behind: %v", err)
		}
	})
	testutil.WaitFor(t, "the socket to appear", func() bool {
		fi, err := os.Lstat(socket)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	})
	return socket
}

func dialForTest(t testing.TB, socket string, streaming bool) (internalapi.RuntimeService, internalapi.ImageManagerService) {
	t.Helper()
	ctx := context.Background()
	endpoint := "unix://" + socket
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(10 * time.Second).
		WithTracerProvider(nil).WithUseStreaming(streaming).Build(ctx)
	if err != nil {
		t.Fatalf("connect runtime service: %v", err)
	}
	is, err := remote.NewRemoteImageServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(10 * time.Second).
		WithTracerProvider(nil).WithUseStreaming(streaming).Build(ctx)
	if err != nil {
		t.Fatalf("connect image service: %v", err)
	}
	t.Cleanup(func() {
		_ = rs.Close(ctx)
		_ = is.Close(ctx)
	})
	return rs, is
}

// TestServeThroughCRIClient runs a pod's whole life and an image pull
// through k8s.io/cri-client over the unix socket, with the unary and the
// streaming list calls.
func TestServeThroughCRIClient(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		name := "unary lists"
		if streaming {
			name = "streaming lists"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			rt := New(Config{Behaviour: Behaviour{ImageSizeBytes: 1234}, PreloadedImages: []string{pauseImage}, Seed: 7})
			rs, is := dialForTest(t, serveForTest(t, rt), streaming)

			v, err := rs.Version(ctx, "v1")
			if err != nil || v.RuntimeName != RuntimeName || v.RuntimeApiVersion != "v1" {
				t.Fatalf("Version = %v, %v", v, err)
			}
			if st, err := rs.Status(ctx, false); err != nil || len(st.GetStatus().GetConditions()) != 2 {
				t.Fatalf("Status = %v, %v", st, err)
			}
			if cfg, err := rs.RuntimeConfig(ctx); err != nil || cfg.GetLinux().GetCgroupDriver() != runtimeapi.CgroupDriver_CGROUPFS {
				t.Fatalf("RuntimeConfig = %v, %v", cfg, err)
			}
			pod := podConfig("web-0")
			_, err = rs.RunPodSandbox(ctx, pod, "")
			wantCode(t, "RunPodSandbox before the pod CIDR", err, codes.FailedPrecondition)
			if err := rs.UpdateRuntimeConfig(ctx, &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: testPodCIDR}}); err != nil {
				t.Fatal(err)
			}

			// Image service.
			if resp, err := is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}, false); err != nil || resp.GetImage() != nil {
				t.Fatalf("ImageStatus(absent) = %v, %v; want a nil image", resp, err)
			}
			imageRef, err := is.PullImage(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}, nil, pod)
			if err != nil {
				t.Fatal(err)
			}
			if resp, err := is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}, false); err != nil || resp.GetImage().GetId() != imageRef {
				t.Fatalf("ImageStatus = %v, %v", resp, err)
			}
			images, err := is.ListImages(ctx, nil)
			if err != nil || len(images) != 2 {
				t.Fatalf("ListImages = %v, %v; want pause and busybox", images, err)
			}
			fs, err := is.ImageFsInfo(ctx)
			if err != nil || fs.ImageFilesystems[0].GetUsedBytes().GetValue() != 2*1234 {
				t.Fatalf("ImageFsInfo = %v, %v", fs, err)
			}

			// A pod's life, as the kubelet drives it.
			sbID, err := rs.RunPodSandbox(ctx, pod, "")
			if err != nil {
				t.Fatal(err)
			}
			sbStatus, err := rs.PodSandboxStatus(ctx, sbID, false)
			if err != nil || sbStatus.GetStatus().GetNetwork().GetIp() != "10.244.1.2" {
				t.Fatalf("PodSandboxStatus = %v, %v", sbStatus, err)
			}
			cID, err := rs.CreateContainer(ctx, sbID, containerConfig(pod, "app", imageRef), pod)
			if err != nil {
				t.Fatal(err)
			}
			if err := rs.StartContainer(ctx, cID); err != nil {
				t.Fatal(err)
			}
			containers, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: sbID})
			if err != nil || len(containers) != 1 || containers[0].State != runtimeapi.ContainerState_CONTAINER_RUNNING {
				t.Fatalf("ListContainers = %v, %v", containers, err)
			}
			cStatus, err := rs.ContainerStatus(ctx, cID, false)
			if err != nil || cStatus.GetStatus().GetImageId() != imageRef || !strings.Contains(cStatus.GetStatus().GetImageRef(), "busybox@sha256:") {
				t.Fatalf("ContainerStatus = %v, %v", cStatus, err)
			}
			if _, _, err := rs.ExecSync(ctx, cID, []string{"true"}, time.Second); err != nil {
				t.Fatalf("ExecSync: %v", err)
			}
			if err := rs.UpdateContainerResources(ctx, cID, &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{CpuShares: 512}}); err != nil {
				t.Fatal(err)
			}
			if st, err := rs.ContainerStats(ctx, cID); err != nil || st.GetAttributes().GetId() != cID || st.GetCpu().GetUsageCoreNanoSeconds() == nil {
				t.Fatalf("ContainerStats = %v, %v", st, err)
			}
			if sts, err := rs.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{PodSandboxId: sbID}); err != nil || len(sts) != 1 {
				t.Fatalf("ListContainerStats = %v, %v", sts, err)
			}
			if st, err := rs.PodSandboxStats(ctx, sbID); err != nil || len(st.GetLinux().GetContainers()) != 1 || st.GetLinux().GetProcess().GetProcessCount().GetValue() != 2 {
				t.Fatalf("PodSandboxStats = %v, %v; want one container and two processes (pause and app)", st, err)
			}
			if sts, err := rs.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{Id: sbID}); err != nil || len(sts) != 1 {
				t.Fatalf("ListPodSandboxStats = %v, %v", sts, err)
			}
			if err := rs.ReopenContainerLog(ctx, cID); err != nil {
				t.Fatalf("ReopenContainerLog = %v", err)
			}
			if err := rs.StopContainer(ctx, cID, 30); err != nil {
				t.Fatal(err)
			}
			if st, _ := rs.ContainerStatus(ctx, cID, false); st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_EXITED || st.GetStatus().GetReason() != "Completed" {
				t.Fatalf("after stop: %v", st)
			}
			if err := rs.RemoveContainer(ctx, cID); err != nil {
				t.Fatal(err)
			}
			_, err = rs.ContainerStatus(ctx, cID, false)
			wantCode(t, "ContainerStatus after remove", err, codes.NotFound)
			if err := rs.StopPodSandbox(ctx, sbID); err != nil {
				t.Fatal(err)
			}
			sandboxes, err := rs.ListPodSandbox(ctx, nil)
			if err != nil || len(sandboxes) != 1 || sandboxes[0].State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
				t.Fatalf("ListPodSandbox = %v, %v", sandboxes, err)
			}
			if err := rs.RemovePodSandbox(ctx, sbID); err != nil {
				t.Fatal(err)
			}
			if err := rs.RemovePodSandbox(ctx, sbID); err != nil {
				t.Fatalf("second RemovePodSandbox: %v", err)
			}
			if sandboxes, err := rs.ListPodSandbox(ctx, nil); err != nil || len(sandboxes) != 0 {
				t.Fatalf("ListPodSandbox after remove = %v, %v", sandboxes, err)
			}
			if err := is.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: imageRef}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestServeRemovesStaleSocket(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "cri.sock")
	// A socket file left by a runtime that died.
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = lis.Close()

	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, socket, New(Config{})) }()
	testutil.WaitFor(t, "Serve to replace the stale socket", func() bool {
		conn, err := net.Dial("unix", socket)
		if err == nil {
			_ = conn.Close()
		}
		return err == nil
	})
	rs, _ := dialForTest(t, socket, false)
	if _, err := rs.Version(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve = %v", err)
	}
}

func TestServeRefusesNonSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cri.sock")
	if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Serve(context.Background(), path, New(Config{})); err == nil {
		t.Fatal("Serve replaced a regular file")
	}
	if data, _ := os.ReadFile(path); string(data) != "data" {
		t.Error("Serve changed a regular file")
	}
}
