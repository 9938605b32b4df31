package fakeruntime

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The methods below are not modelled yet. They fail with codes.Unimplemented,
// which the kubelet already treats as "this runtime does not support it"
// (for example it skips UpdatePodSandboxResources); while the node is Down
// they fail as every call does.

func unimplemented(method string) error {
	return status.Errorf(codes.Unimplemented, "%s is not implemented by the %s runtime", method, RuntimeName)
}

// Exec is not implemented: nothing runs to attach a stream to.
func (r *Runtime) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if _, err := r.enter(ctx, "Exec"); err != nil {
		return nil, err
	}
	return nil, unimplemented("Exec")
}

// Attach is not implemented: nothing runs to attach a stream to.
func (r *Runtime) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if _, err := r.enter(ctx, "Attach"); err != nil {
		return nil, err
	}
	return nil, unimplemented("Attach")
}

// PortForward is not implemented: nothing listens in a fake sandbox.
func (r *Runtime) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	if _, err := r.enter(ctx, "PortForward"); err != nil {
		return nil, err
	}
	return nil, unimplemented("PortForward")
}

// CheckpointContainer is not implemented.
func (r *Runtime) CheckpointContainer(ctx context.Context, options *runtimeapi.CheckpointContainerRequest) error {
	if _, err := r.enter(ctx, "CheckpointContainer"); err != nil {
		return err
	}
	return unimplemented("CheckpointContainer")
}

// UpdatePodSandboxResources is not implemented; the kubelet treats it as best
// effort.
func (r *Runtime) UpdatePodSandboxResources(ctx context.Context, request *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	if _, err := r.enter(ctx, "UpdatePodSandboxResources"); err != nil {
		return nil, err
	}
	return nil, unimplemented("UpdatePodSandboxResources")
}

// CheckpointPod is not implemented.
func (r *Runtime) CheckpointPod(ctx context.Context, options *runtimeapi.CheckpointPodRequest) error {
	if _, err := r.enter(ctx, "CheckpointPod"); err != nil {
		return err
	}
	return unimplemented("CheckpointPod")
}

// RestorePod is not implemented.
func (r *Runtime) RestorePod(ctx context.Context, options *runtimeapi.RestorePodRequest) (*runtimeapi.RestorePodResponse, error) {
	if _, err := r.enter(ctx, "RestorePod"); err != nil {
		return nil, err
	}
	return nil, unimplemented("RestorePod")
}

// ListMetricDescriptors is not implemented yet (metrics are a later issue).
func (r *Runtime) ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error) {
	if _, err := r.enter(ctx, "ListMetricDescriptors"); err != nil {
		return nil, err
	}
	return nil, unimplemented("ListMetricDescriptors")
}

// ListPodSandboxMetrics is not implemented yet (metrics are a later issue).
func (r *Runtime) ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	if _, err := r.enter(ctx, "ListPodSandboxMetrics"); err != nil {
		return nil, err
	}
	return nil, unimplemented("ListPodSandboxMetrics")
}
