package fakeruntime

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// sandbox is the record of one pod sandbox. Its maps and pointers are owned
// by the Runtime and never handed out: callers get fresh copies.
type sandbox struct {
	id   string
	seq  uint64
	name string // the reserved name, see sandboxName

	podName, podNamespace, podUID string
	attempt                       uint32

	state          runtimeapi.PodSandboxState
	createdAt      int64
	labels         map[string]string
	annotations    map[string]string
	logDirectory   string
	runtimeHandler string
	namespaces     *runtimeapi.NamespaceOption // nil when the config had none

	ips         []netip.Addr // primary first; none on the host network
	ipsReleased bool
	containers  []string // IDs of its containers, in creation order

	// behaviour is the pod's fleetlet.io/behaviour annotation, parsed once
	// for all the pod's containers and their restarts; nil without one. A
	// pointer, so that pods without it pay 8 bytes, not 24.
	behaviour *parsedBehaviour
}

// parsedBehaviour is a pod's behaviour annotation, or why it did not parse
// (CreateContainer reports it).
type parsedBehaviour struct {
	pod PodBehaviour
	err error
}

// sandboxName is the name containerd reserves for a sandbox: one per pod
// attempt.
func sandboxName(md *runtimeapi.PodSandboxMetadata) string {
	return md.GetName() + "_" + md.GetNamespace() + "_" + md.GetUid() + "_" + strconv.FormatUint(uint64(md.GetAttempt()), 10)
}

// RunPodSandbox creates a sandbox in the ready state after
// Behaviour.SandboxStartLatency. Unless the pod uses the host network it gets
// an IP from each pod CIDR set by UpdateRuntimeConfig, as CNI would give; with
// no pod CIDR, or with Fault.CNIMissing, it fails as CNI would. A second
// sandbox for the same pod attempt fails with AlreadyExists while the first
// exists, as in containerd.
func (r *Runtime) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error) {
	st, err := r.enter(ctx, "RunPodSandbox")
	if err != nil {
		return "", err
	}
	md := config.GetMetadata()
	if md.GetName() == "" || md.GetNamespace() == "" || md.GetUid() == "" {
		return "", status.Errorf(codes.InvalidArgument, "RunPodSandbox: the sandbox config must have metadata with a name, namespace and uid, got %v", md)
	}
	if err := r.wait(ctx, st.slowed(r.behaviour.SandboxStartLatency)); err != nil {
		return "", ctxError("RunPodSandbox for pod "+md.GetNamespace()+"/"+md.GetName(), err)
	}
	nsOpts := config.GetLinux().GetSecurityContext().GetNamespaceOptions()
	name := sandboxName(md)
	var behaviour *parsedBehaviour
	if v, ok := config.GetAnnotations()[AnnotationBehaviour]; ok {
		pb, err := ParsePodBehaviour(v)
		behaviour = &parsedBehaviour{pod: pb, err: err}
	}
	createdAt := r.now()

	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.rebootedLocked(st); err != nil {
		return "", err
	}
	if owner, ok := r.names[name]; ok {
		return "", status.Errorf(codes.AlreadyExists, "RunPodSandbox for pod %s/%s: name %q is reserved for sandbox %s; stop and remove that sandbox first", md.GetNamespace(), md.GetName(), name, owner)
	}
	var ips []netip.Addr
	if nsOpts.GetNetwork() != runtimeapi.NamespaceMode_NODE {
		if st.fault.CNIMissing {
			// containerd has picked the sandbox's ID by then, and names it;
			// it then releases the name and keeps nothing.
			return "", status.Errorf(codes.Unknown, cniMissingFormat, r.newIDLocked())
		}
		var err error
		if ips, err = r.network.allocate(); err != nil {
			code := codes.ResourceExhausted
			if errors.Is(err, errNoPodCIDR) {
				code = codes.FailedPrecondition
			}
			return "", status.Errorf(code, "RunPodSandbox for pod %s/%s: failed to set up the pod network: %v", md.GetNamespace(), md.GetName(), err)
		}
	}
	sb := &sandbox{
		id:             r.newIDLocked(),
		seq:            r.nextSeqLocked(),
		name:           name,
		podName:        md.GetName(),
		podNamespace:   md.GetNamespace(),
		podUID:         md.GetUid(),
		attempt:        md.GetAttempt(),
		state:          runtimeapi.PodSandboxState_SANDBOX_READY,
		createdAt:      createdAt,
		labels:         maps.Clone(config.GetLabels()),
		annotations:    maps.Clone(config.GetAnnotations()),
		logDirectory:   config.GetLogDirectory(),
		runtimeHandler: runtimeHandler,
		namespaces:     copyNamespaceOption(nsOpts),
		ips:            ips,
		behaviour:      behaviour,
	}
	r.sandboxes[sb.id] = sb
	r.names[name] = sb.id
	r.publishLocked(sb.id, sb, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, createdAt)
	r.publishLocked(sb.id, sb, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, createdAt)
	if logger := klog.FromContext(ctx).V(5); logger.Enabled() {
		logger.Info("Ran pod sandbox", "pod", klog.KRef(sb.podNamespace, sb.podName), "podSandboxID", sb.id, "ips", ips)
	}
	return sb.id, nil
}

// StopPodSandbox kills the sandbox's running containers at once (exit code
// 137, reason "Error", as containerd's forced stop), sets the sandbox not
// ready and releases its pod IPs, as CRI asks ("reclaims network resources").
// Containers that never started stay CREATED, as in containerd. Stopping a
// stopped or unknown sandbox is not an error.
func (r *Runtime) StopPodSandbox(ctx context.Context, podSandboxID string) error {
	if _, err := r.enter(ctx, "StopPodSandbox"); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, err := lookupLocked(r.sandboxes, "pod sandbox", podSandboxID)
	if err != nil {
		return ignoreNotFound(err)
	}
	now := r.now()
	for _, cid := range sb.containers {
		c := r.containers[cid]
		if c == nil {
			continue
		}
		r.cancelExitLocked(c, now)
		c.settle(now) // one that has exited by itself keeps its own exit
		if c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
			c.exit(now, exitCodeKilled, reasonError)
			r.publishLocked(c.id, sb, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, now)
		}
	}
	wasReady := sb.state == runtimeapi.PodSandboxState_SANDBOX_READY
	sb.state = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	r.releaseIPsLocked(sb)
	if wasReady {
		r.publishLocked(sb.id, sb, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, now)
	}
	return nil
}

// RemovePodSandbox removes the sandbox and all its containers, running or
// not, and releases its pod IPs. Removing an unknown sandbox is not an error.
func (r *Runtime) RemovePodSandbox(ctx context.Context, podSandboxID string) error {
	if _, err := r.enter(ctx, "RemovePodSandbox"); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, err := lookupLocked(r.sandboxes, "pod sandbox", podSandboxID)
	if err != nil {
		return ignoreNotFound(err)
	}
	now := r.now()
	// Pop each container before its DELETED event, so that the event lists
	// the containers still there, as containerd's do.
	for len(sb.containers) > 0 {
		cid := sb.containers[0]
		sb.containers = sb.containers[1:]
		if c := r.containers[cid]; c != nil {
			r.cancelExitLocked(c, now)
			delete(r.names, c.name)
			delete(r.containers, cid)
			r.publishLocked(cid, sb, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, now)
		}
	}
	r.releaseIPsLocked(sb)
	delete(r.names, sb.name)
	delete(r.sandboxes, sb.id)
	r.publishLocked(sb.id, sb, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, now)
	return nil
}

func (r *Runtime) releaseIPsLocked(sb *sandbox) {
	if !sb.ipsReleased {
		r.network.release(sb.ips)
		sb.ipsReleased = true
	}
}

// PodSandboxStatus returns the sandbox's status, or NotFound. A stopped
// sandbox still reports the IPs it had, as containerd does. The response has
// no container statuses and no timestamp, as without evented PLEG: the
// kubelet lists containers, and GetContainerEvents carries the statuses.
func (r *Runtime) PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	if _, err := r.enter(ctx, "PodSandboxStatus"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, err := lookupLocked(r.sandboxes, "pod sandbox", podSandboxID)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: sb.toStatus()}, nil
}

// ListPodSandbox returns the sandboxes that match filter, oldest first. The
// ID filter matches an ID prefix, as containerd's does.
func (r *Runtime) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	if _, err := r.enter(ctx, "ListPodSandbox"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	selector := compileSelector(filter.GetLabelSelector())
	matched := make([]*sandbox, 0, len(r.sandboxes))
	for _, sb := range r.sandboxes {
		if sb.matches(filter, selector) {
			matched = append(matched, sb)
		}
	}
	slices.SortFunc(matched, func(a, b *sandbox) int { return cmp.Compare(a.seq, b.seq) })
	// Relisted every second like containers: allocate in blocks.
	out := make([]*runtimeapi.PodSandbox, len(matched))
	items := make([]runtimeapi.PodSandbox, len(matched))
	metas := make([]runtimeapi.PodSandboxMetadata, len(matched))
	for i, sb := range matched {
		sb.fillListItem(&items[i], &metas[i])
		out[i] = &items[i]
	}
	return out, nil
}

func (sb *sandbox) matches(f *runtimeapi.PodSandboxFilter, selector []labelPair) bool {
	if f == nil {
		return true
	}
	if f.Id != "" && !strings.HasPrefix(sb.id, f.Id) {
		return false
	}
	if f.State != nil && f.State.State != sb.state {
		return false
	}
	return matchLabels(sb.labels, selector)
}

func (sb *sandbox) fillMetadata(md *runtimeapi.PodSandboxMetadata) *runtimeapi.PodSandboxMetadata {
	md.Name, md.Uid, md.Namespace, md.Attempt = sb.podName, sb.podUID, sb.podNamespace, sb.attempt
	return md
}

// fillListItem fills the fresh structs item and md as sb's list item.
func (sb *sandbox) fillListItem(item *runtimeapi.PodSandbox, md *runtimeapi.PodSandboxMetadata) {
	item.Id = sb.id
	item.Metadata = sb.fillMetadata(md)
	item.State = sb.state
	item.CreatedAt = sb.createdAt
	item.Labels = sb.labels
	item.Annotations = sb.annotations
	item.RuntimeHandler = sb.runtimeHandler
}

func (sb *sandbox) toStatus() *runtimeapi.PodSandboxStatus {
	st := &runtimeapi.PodSandboxStatus{
		Id:             sb.id,
		Metadata:       sb.fillMetadata(&runtimeapi.PodSandboxMetadata{}),
		State:          sb.state,
		CreatedAt:      sb.createdAt,
		Network:        &runtimeapi.PodSandboxNetworkStatus{},
		Linux:          &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: copyNamespaceOption(sb.namespaces)}},
		Labels:         sb.labels,
		Annotations:    sb.annotations,
		RuntimeHandler: sb.runtimeHandler,
	}
	if st.Linux.Namespaces.Options == nil {
		st.Linux.Namespaces.Options = &runtimeapi.NamespaceOption{}
	}
	for i, ip := range sb.ips {
		if i == 0 {
			st.Network.Ip = ip.String()
		} else {
			st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip.String()})
		}
	}
	return st
}

// copyNamespaceOption copies by hand what is cheap to copy and leaves the
// rare user namespace options to proto.Clone.
func copyNamespaceOption(o *runtimeapi.NamespaceOption) *runtimeapi.NamespaceOption {
	if o == nil {
		return nil
	}
	c := &runtimeapi.NamespaceOption{Network: o.Network, Pid: o.Pid, Ipc: o.Ipc, TargetId: o.TargetId}
	if o.UsernsOptions != nil {
		c.UsernsOptions = proto.Clone(o.UsernsOptions).(*runtimeapi.UserNamespace)
	}
	return c
}

// idLength is the length of the IDs the Runtime gives out.
const idLength = 64

// lookupLocked finds an object by its full ID or, as containerd's stores
// allow and crictl users expect, by a unique prefix of it.
func lookupLocked[T any](m map[string]*T, kind, id string) (*T, error) {
	if obj, ok := m[id]; ok {
		return obj, nil
	}
	if id != "" && len(id) < idLength {
		var found *T
		n := 0
		for k, v := range m {
			if strings.HasPrefix(k, id) {
				found = v
				n++
			}
		}
		switch {
		case n == 1:
			return found, nil
		case n > 1:
			return nil, status.Errorf(codes.InvalidArgument, "%s ID prefix %q is ambiguous: it matches %d of them; give more of the ID", kind, id, n)
		}
	}
	return nil, status.Errorf(codes.NotFound, "%s %q not found", kind, id)
}

// ignoreNotFound makes removes and stops idempotent, as CRI requires.
func ignoreNotFound(err error) error {
	if status.Code(err) == codes.NotFound {
		return nil
	}
	return err
}

// labelPair is one key and value of a label selector.
type labelPair struct{ key, value string }

// compileSelector turns a label selector into a slice once per list call:
// ranging over a map costs far more than over a slice, and a list matches the
// selector against every object.
func compileSelector(selector map[string]string) []labelPair {
	if len(selector) == 0 {
		return nil
	}
	pairs := make([]labelPair, 0, len(selector))
	for k, v := range selector {
		pairs = append(pairs, labelPair{k, v})
	}
	return pairs
}

func matchLabels(labels map[string]string, selector []labelPair) bool {
	for _, p := range selector {
		if got, ok := labels[p.key]; !ok || got != p.value {
			return false
		}
	}
	return true
}
