package fakeruntime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

const (
	// maxMsgSize matches k8s.io/cri-client's limit (16 MiB), so a list the
	// client accepts is never refused by the server.
	maxMsgSize = 16 << 20
	// gracefulStopTimeout bounds how long Serve waits for calls in flight
	// when its context ends. It is wall time, not the runtime's clock:
	// shutting a socket down is real I/O, not simulation.
	gracefulStopTimeout = 5 * time.Second
	// streamChunk is how many items one message of a streaming list holds.
	streamChunk = 256
)

// Serve serves rt as a CRI v1 runtime and image service on socketPath, a
// unix socket path or unix:// endpoint, until ctx is done, then stops
// gracefully and removes the socket. It is Listen followed by ServeListener:
// see Listen for which paths it refuses and when it replaces a stale socket.
// It returns nil after a clean stop.
func Serve(ctx context.Context, socketPath string, rt *Runtime) error {
	lis, _, err := Listen(socketPath)
	if err != nil {
		return err
	}
	return ServeListener(ctx, lis, rt)
}

// ServeListener serves rt as a CRI v1 runtime and image service on lis until
// ctx is done, then stops gracefully, letting calls in flight finish for a
// few seconds, and closes lis. It returns nil after a clean stop.
//
// A listener from Listen removes its socket file on close, unless another
// server has replaced the file since, which it then leaves alone. Any other
// listener is only closed.
func ServeListener(ctx context.Context, lis net.Listener, rt *Runtime) error {
	addr := lis.Addr().String()
	logger := klog.FromContext(ctx).WithValues("socket", addr)
	srv := grpc.NewServer(
		grpc.MaxRecvMsgSize(maxMsgSize),
		grpc.MaxSendMsgSize(maxMsgSize),
		// Calls carry Serve's logger, so their log lines name the node.
		// A Down node fails every call here too, the ones the fake does
		// not implement included, except ExecSync: its side channel is
		// not CRI, and it enters by itself past it.
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if info.FullMethod != runtimeapi.RuntimeService_ExecSync_FullMethodName {
				if err := rt.downError(); err != nil {
					return nil, err
				}
			}
			return handler(klog.NewContext(ctx, logger), req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			if err := rt.downError(); err != nil {
				return err
			}
			return handler(srv, ss)
		}),
	)
	runtimeapi.RegisterRuntimeServiceServer(srv, &runtimeServer{rt: rt, logger: logger, serveCtx: ctx})
	runtimeapi.RegisterImageServiceServer(srv, &imageServer{rt: rt, logger: logger})

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(lis) }()
	logger.V(2).Info("Serving the fake CRI runtime")

	var err error
	select {
	case <-ctx.Done():
		stopGracefully(srv)
		err = <-serveErr // nil once stopped
	case err = <-serveErr:
		srv.Stop()
		err = fmt.Errorf("fake CRI socket %s: serving stopped: %w; restart the fake runtime", addr, err)
	}
	// gRPC has closed lis already; closing again makes sure of it, and
	// removes Listen's socket file.
	_ = lis.Close()
	if sl, ok := lis.(*socketListener); ok {
		if rmErr := sl.removeSocket(); rmErr != nil {
			err = errors.Join(err, rmErr)
		} else if sl.replaced {
			logger.V(2).Info("Left the socket in place: another server replaced it")
		}
	}
	logger.V(2).Info("Stopped serving the fake CRI runtime")
	return err
}

// stopGracefully lets calls in flight finish, but not for ever: a client
// that keeps a stream open must not hang the fleet's shutdown.
func stopGracefully(srv *grpc.Server) {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(gracefulStopTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		srv.Stop()
		<-done
	}
}

// runtimeServer adapts gRPC requests to the Runtime's methods. Calls that
// the Runtime does not model fall through to the embedded server, which
// answers Unimplemented.
type runtimeServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	rt     *Runtime
	logger klog.Logger
	// serveCtx is Serve's context: its end also ends event streams, which
	// would otherwise hold a graceful stop until its timeout.
	serveCtx context.Context
}

func (s *runtimeServer) Version(ctx context.Context, req *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return s.rt.Version(ctx, req.GetVersion())
}

func (s *runtimeServer) Status(ctx context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return s.rt.Status(ctx, req.GetVerbose())
}

func (s *runtimeServer) UpdateRuntimeConfig(ctx context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	if err := s.rt.UpdateRuntimeConfig(ctx, req.GetRuntimeConfig()); err != nil {
		return nil, err
	}
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

func (s *runtimeServer) RuntimeConfig(ctx context.Context, req *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	return s.rt.RuntimeConfig(ctx)
}

func (s *runtimeServer) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	id, err := s.rt.RunPodSandbox(ctx, req.GetConfig(), req.GetRuntimeHandler())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

func (s *runtimeServer) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	if err := s.rt.StopPodSandbox(ctx, req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (s *runtimeServer) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	if err := s.rt.RemovePodSandbox(ctx, req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

func (s *runtimeServer) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	return s.rt.PodSandboxStatus(ctx, req.GetPodSandboxId(), req.GetVerbose())
}

func (s *runtimeServer) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	items, err := s.rt.ListPodSandbox(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxResponse{Items: items}, nil
}

func (s *runtimeServer) StreamPodSandboxes(req *runtimeapi.StreamPodSandboxesRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxesResponse]) error {
	items, err := s.rt.ListPodSandbox(klog.NewContext(stream.Context(), s.logger), req.GetFilter())
	if err != nil {
		return err
	}
	return sendChunks(items, func(chunk []*runtimeapi.PodSandbox) error {
		return stream.Send(&runtimeapi.StreamPodSandboxesResponse{PodSandboxes: chunk})
	})
}

func (s *runtimeServer) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	id, err := s.rt.CreateContainer(ctx, req.GetPodSandboxId(), req.GetConfig(), req.GetSandboxConfig())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

func (s *runtimeServer) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	if err := s.rt.StartContainer(ctx, req.GetContainerId()); err != nil {
		return nil, err
	}
	return &runtimeapi.StartContainerResponse{}, nil
}

func (s *runtimeServer) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	if err := s.rt.StopContainer(ctx, req.GetContainerId(), req.GetTimeout()); err != nil {
		return nil, err
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

func (s *runtimeServer) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	if err := s.rt.RemoveContainer(ctx, req.GetContainerId()); err != nil {
		return nil, err
	}
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (s *runtimeServer) ListContainers(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	items, err := s.rt.ListContainers(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListContainersResponse{Containers: items}, nil
}

func (s *runtimeServer) StreamContainers(req *runtimeapi.StreamContainersRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamContainersResponse]) error {
	items, err := s.rt.ListContainers(klog.NewContext(stream.Context(), s.logger), req.GetFilter())
	if err != nil {
		return err
	}
	return sendChunks(items, func(chunk []*runtimeapi.Container) error {
		return stream.Send(&runtimeapi.StreamContainersResponse{Containers: chunk})
	})
}

func (s *runtimeServer) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	return s.rt.ContainerStatus(ctx, req.GetContainerId(), req.GetVerbose())
}

func (s *runtimeServer) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	res := &runtimeapi.ContainerResources{Linux: req.GetLinux(), Windows: req.GetWindows()}
	if err := s.rt.UpdateContainerResources(ctx, req.GetContainerId(), res); err != nil {
		return nil, err
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

// ExecSync answers the side channel (sidechannel.go) whatever the node's
// fault: it stands for the probes and log reads a kubelet makes without
// CRI. Every other command is a CRI exec, and sees the fault.
func (s *runtimeServer) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	if stdout, exitCode, ok, err := s.rt.sideChannel(req.GetContainerId(), req.GetCmd()); ok {
		if err != nil {
			return nil, err
		}
		return &runtimeapi.ExecSyncResponse{Stdout: stdout, ExitCode: exitCode}, nil
	}
	if _, err := s.rt.enter(ctx, "ExecSync"); err != nil {
		return nil, err
	}
	stdout, stderr, exitCode, err := s.rt.execSync(ctx, req.GetContainerId(), req.GetCmd(), time.Duration(req.GetTimeout())*time.Second)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ExecSyncResponse{Stdout: stdout, Stderr: stderr, ExitCode: exitCode}, nil
}

func (s *runtimeServer) ReopenContainerLog(ctx context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	if err := s.rt.ReopenContainerLog(ctx, req.GetContainerId()); err != nil {
		return nil, err
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}

func (s *runtimeServer) ContainerStats(ctx context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	st, err := s.rt.ContainerStats(ctx, req.GetContainerId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: st}, nil
}

func (s *runtimeServer) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	items, err := s.rt.ListContainerStats(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: items}, nil
}

func (s *runtimeServer) StreamContainerStats(req *runtimeapi.StreamContainerStatsRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamContainerStatsResponse]) error {
	items, err := s.rt.ListContainerStats(klog.NewContext(stream.Context(), s.logger), req.GetFilter())
	if err != nil {
		return err
	}
	return sendChunks(items, func(chunk []*runtimeapi.ContainerStats) error {
		return stream.Send(&runtimeapi.StreamContainerStatsResponse{ContainerStats: chunk})
	})
}

func (s *runtimeServer) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	st, err := s.rt.PodSandboxStats(ctx, req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: st}, nil
}

func (s *runtimeServer) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	items, err := s.rt.ListPodSandboxStats(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: items}, nil
}

func (s *runtimeServer) StreamPodSandboxStats(req *runtimeapi.StreamPodSandboxStatsRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxStatsResponse]) error {
	items, err := s.rt.ListPodSandboxStats(klog.NewContext(stream.Context(), s.logger), req.GetFilter())
	if err != nil {
		return err
	}
	return sendChunks(items, func(chunk []*runtimeapi.PodSandboxStats) error {
		return stream.Send(&runtimeapi.StreamPodSandboxStatsResponse{PodSandboxStats: chunk})
	})
}

// GetContainerEvents streams the runtime's container events (see
// Runtime.GetContainerEvents) until the client goes away or Serve's context
// ends.
func (s *runtimeServer) GetContainerEvents(req *runtimeapi.GetEventsRequest, stream grpc.ServerStreamingServer[runtimeapi.ContainerEventResponse]) error {
	ctx, cancel := context.WithCancel(klog.NewContext(stream.Context(), s.logger))
	defer cancel()
	defer context.AfterFunc(s.serveCtx, cancel)()
	if _, err := s.rt.enter(ctx, "GetContainerEvents"); err != nil {
		return err
	}
	err := s.rt.watchEvents(ctx, func() {}, stream.Send)
	if ctx.Err() != nil {
		return ctxError("GetContainerEvents", ctx.Err())
	}
	return err
}

// imageServer adapts gRPC requests to the Runtime's image methods.
type imageServer struct {
	runtimeapi.UnimplementedImageServiceServer
	rt     *Runtime
	logger klog.Logger
}

func (s *imageServer) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	items, err := s.rt.ListImages(ctx, req.GetFilter())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ListImagesResponse{Images: items}, nil
}

func (s *imageServer) StreamImages(req *runtimeapi.StreamImagesRequest, stream grpc.ServerStreamingServer[runtimeapi.StreamImagesResponse]) error {
	items, err := s.rt.ListImages(klog.NewContext(stream.Context(), s.logger), req.GetFilter())
	if err != nil {
		return err
	}
	return sendChunks(items, func(chunk []*runtimeapi.Image) error {
		return stream.Send(&runtimeapi.StreamImagesResponse{Images: chunk})
	})
}

func (s *imageServer) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	return s.rt.ImageStatus(ctx, req.GetImage(), req.GetVerbose())
}

func (s *imageServer) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	ref, err := s.rt.PullImage(ctx, req.GetImage(), req.GetAuth(), req.GetSandboxConfig())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PullImageResponse{ImageRef: ref}, nil
}

func (s *imageServer) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	if err := s.rt.RemoveImage(ctx, req.GetImage()); err != nil {
		return nil, err
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}

func (s *imageServer) ImageFsInfo(ctx context.Context, req *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return s.rt.ImageFsInfo(ctx)
}

// sendChunks sends items in messages of at most streamChunk items, and none
// at all when there are no items: CRI's streaming lists carry at least one
// item per message and end with EOF.
func sendChunks[T any](items []T, send func([]T) error) error {
	for len(items) > 0 {
		n := min(len(items), streamChunk)
		if err := send(items[:n]); err != nil {
			return err
		}
		items = items[n:]
	}
	return nil
}
