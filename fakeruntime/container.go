package fakeruntime

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	utilexec "k8s.io/utils/exec"
)

const (
	// exitCodeKilled is 128+SIGKILL, what a container killed outright
	// exits with.
	exitCodeKilled = 137
	// reasonCompleted and reasonError are containerd's reasons for an exit
	// code of zero and of anything else.
	reasonCompleted = "Completed"
	reasonError     = "Error"
	// reasonOOMKilled is containerd's reason for a container the kernel
	// killed at its memory limit.
	reasonOOMKilled = "OOMKilled"
)

// container is the record of one container. Its maps and pointers are owned
// by the Runtime and never handed out: callers get fresh copies.
type container struct {
	id, sandboxID string
	seq           uint64
	name          string // the reserved name, see containerName

	metaName string
	attempt  uint32

	imageID          string
	imageName        string // the image's first repo tag (or digest), as containerd reports it
	userImage        string
	imageAnnotations map[string]string
	imageHandler     string

	labels      map[string]string
	annotations map[string]string
	logPath     string
	resources   *runtimeapi.ContainerResources
	// config is CreateContainer's, handed over as a gRPC request's decoded
	// copy would be: its mounts are in every status, and the whole of it in
	// a verbose one, as containerd keeps it for `crictl inspect`.
	config *runtimeapi.ContainerConfig

	createdAt int64
	runState  // state, startedAt, finishedAt, exitCode, reason
	message   string

	// model is the container's resolved behaviour, shared and read-only;
	// life is its RunFor (jittered) and exit code. (The jitter key is not
	// kept but hashed again from the ID when needed: a record a few bytes
	// larger would take the next allocation size class.)
	model *model
	life  lifecycle
}

// settle brings the record up to date at now, as the behaviour model says
// (see stateAt): a running container whose RunFor has elapsed is recorded as
// exited. Everything that reads or changes a container's state settles it
// first, so it never matters when, or whether, anyone looked in between.
func (c *container) settle(now int64) {
	// Most containers never exit by themselves: skip the copy for them, as
	// the PLEG settles every container of the node every second.
	if c.life.exits() && c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
		c.runState = stateAt(c.runState, c.life, now)
	}
}

// latency is one of c's latencies (or its RunFor), jittered for c.
func (r *Runtime) latency(c *container, d time.Duration, salt uint64) time.Duration {
	if c.model.jitter == 0 || d <= 0 {
		return d // skip hashing the ID
	}
	return jittered(d, c.model.jitter, jitterKey(r.seed, c.id), salt)
}

// containerName is the name containerd reserves for a container: one per
// container attempt in a sandbox.
func containerName(md *runtimeapi.ContainerMetadata, sb *sandbox) string {
	return md.GetName() + "_" + sb.name + "_" + strconv.FormatUint(uint64(md.GetAttempt()), 10)
}

// stopOutcome is the pure model of a graceful stop: the container asked to
// stop with a grace period of timeout seconds exits after stopLatency with
// exit code 0 and reason "Completed", as an application that handles SIGTERM
// does. If it would take longer than the grace period it is killed when the
// period ends (137, "Error"); with no grace period it is killed at once, as
// containerd does for a timeout of 0.
func stopOutcome(stopLatency time.Duration, timeout int64) (wait time.Duration, exitCode int32, reason string) {
	if timeout <= 0 {
		return 0, exitCodeKilled, reasonError
	}
	grace := time.Duration(timeout) * time.Second
	if stopLatency > grace {
		return grace, exitCodeKilled, reasonError
	}
	return stopLatency, 0, reasonCompleted
}

// CreateContainer creates a container in the CREATED state after its create
// latency, with the behaviour its pod's annotation and the node's default
// give it (see the package documentation). The sandbox must exist and be
// ready (NotFound otherwise), its behaviour annotation must parse
// (InvalidArgument otherwise) and the image must be present (NotFound "image
// X not found", as containerd): the kubelet passes the image ID PullImage
// returned, but a name or repo digest works too.
func (r *Runtime) CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	st, err := r.enter(ctx, "CreateContainer")
	if err != nil {
		return "", err
	}
	md := config.GetMetadata()
	if md.GetName() == "" {
		return "", status.Errorf(codes.InvalidArgument, "CreateContainer in sandbox %s: the container config must have metadata with a name, got %v", podSandboxID, md)
	}
	imageRef := config.GetImage().GetImage()
	if imageRef == "" {
		return "", status.Errorf(codes.InvalidArgument, "CreateContainer %q in sandbox %s: the container config names no image", md.GetName(), podSandboxID)
	}
	// The behaviour decides the create latency, so resolve it first; the
	// sandbox is checked again after the wait, as it may change meanwhile.
	r.mu.Lock()
	sb, err := lookupLocked(r.sandboxes, "pod sandbox", podSandboxID)
	if err != nil {
		r.mu.Unlock()
		return "", status.Errorf(status.Code(err), "CreateContainer %q: %s", md.GetName(), status.Convert(err).Message())
	}
	m, err := r.modelLocked(sb, md.GetName())
	sbID := sb.id
	r.mu.Unlock()
	if err != nil {
		return "", status.Errorf(codes.InvalidArgument, "CreateContainer %q: %v", md.GetName(), err)
	}
	createLatency := m.createLatency
	if m.jitter > 0 && createLatency > 0 {
		// There is no container ID yet: draw from the sandbox ID (seeded)
		// and the container's name and attempt instead.
		key := jitterKey(r.seed, sbID+"/"+md.GetName()+"/"+strconv.FormatUint(uint64(md.GetAttempt()), 10))
		createLatency = jittered(createLatency, m.jitter, key, saltCreate)
	}
	if err := r.wait(ctx, st.slowed(createLatency)); err != nil {
		return "", ctxError("CreateContainer "+md.GetName()+" in sandbox "+podSandboxID, err)
	}
	createdAt := r.now()

	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.rebootedLocked(st); err != nil {
		return "", err
	}
	if sb, err = lookupLocked(r.sandboxes, "pod sandbox", sbID); err != nil {
		return "", status.Errorf(status.Code(err), "CreateContainer %q: %s", md.GetName(), status.Convert(err).Message())
	}
	if sb.state != runtimeapi.PodSandboxState_SANDBOX_READY {
		return "", status.Errorf(codes.NotFound, "CreateContainer %q in pod %s/%s: sandbox %s is not ready (stopped); run a new sandbox", md.GetName(), sb.podNamespace, sb.podName, sb.id)
	}
	img := r.lookupImageLocked(imageRef)
	if img == nil {
		return "", status.Errorf(codes.NotFound, "CreateContainer %q in pod %s/%s: image %q not found; pull it first", md.GetName(), sb.podNamespace, sb.podName, imageRef)
	}
	name := containerName(md, sb)
	if owner, ok := r.names[name]; ok {
		return "", status.Errorf(codes.AlreadyExists, "CreateContainer %q in pod %s/%s: name %q is reserved for container %s; remove it first", md.GetName(), sb.podNamespace, sb.podName, name, owner)
	}
	c := &container{
		id:               r.newIDLocked(),
		sandboxID:        sb.id,
		seq:              r.nextSeqLocked(),
		name:             name,
		metaName:         md.GetName(),
		attempt:          md.GetAttempt(),
		imageID:          img.id,
		imageName:        img.displayName(),
		userImage:        config.GetImage().GetUserSpecifiedImage(),
		imageAnnotations: maps.Clone(config.GetImage().GetAnnotations()),
		imageHandler:     config.GetImage().GetRuntimeHandler(),
		labels:           maps.Clone(config.GetLabels()),
		annotations:      maps.Clone(config.GetAnnotations()),
		runState:         runState{state: runtimeapi.ContainerState_CONTAINER_CREATED},
		createdAt:        createdAt,
		model:            m,
	}
	c.life = lifecycle{runFor: r.latency(c, m.runFor, saltRunFor), exitCode: m.exitCode}
	// containerd joins the two only when both are set.
	if sb.logDirectory != "" && config.GetLogPath() != "" {
		c.logPath = filepath.Join(sb.logDirectory, config.GetLogPath())
	}
	if res := config.GetLinux().GetResources(); res != nil {
		c.resources = &runtimeapi.ContainerResources{Linux: proto.Clone(res).(*runtimeapi.LinuxContainerResources)}
	}
	c.config = config
	c.planOOM(0)
	r.containers[c.id] = c
	r.names[name] = c.id
	sb.containers = append(sb.containers, c.id)
	r.publishLocked(c.id, sb, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, createdAt)
	if logger := klog.FromContext(ctx).V(5); logger.Enabled() {
		logger.Info("Created container", "pod", klog.KRef(sb.podNamespace, sb.podName), "container", c.metaName, "containerID", c.id)
	}
	return c.id, nil
}

// planOOM sets when c's memory reaches its memory limit, looking from run
// time from on: a limit changed while c runs kills it from then, not in the
// past. Without a limit or a memory curve it is never OOM-killed.
func (c *container) planOOM(from time.Duration) {
	c.life.oom, c.life.oomAfter = false, 0
	if limit := c.resources.GetLinux().GetMemoryLimitInBytes(); limit > 0 && c.model.memory != nil {
		c.life.oomAfter, c.life.oom = c.model.memory.reaches(float64(limit), from)
	}
}

// modelLocked resolves the behaviour of the container named name in sb: the
// pod's entry for it (or its "*" entry) merged over the node's default. The
// many containers whose pods have no entry share the node's model.
func (r *Runtime) modelLocked(sb *sandbox, name string) (*model, error) {
	if sb.behaviour == nil {
		return r.defaultModel, nil
	}
	if sb.behaviour.err != nil {
		return nil, errPodBehaviour(sb.podNamespace, sb.podName, sb.behaviour.err)
	}
	cb, ok := sb.behaviour.pod.forContainer(name)
	if !ok {
		return r.defaultModel, nil
	}
	return resolveModel(cb.over(r.behaviour.Containers), r.behaviour), nil
}

// StartContainer moves a CREATED container to RUNNING after its start
// latency. Its sandbox must still be ready. From then on its behaviour's
// schedules (RunFor, probes, exec) run from its start time.
func (r *Runtime) StartContainer(ctx context.Context, containerID string) error {
	st, err := r.enter(ctx, "StartContainer")
	if err != nil {
		return err
	}
	// Check before the latency so that a bad call fails at once, and again
	// after it since the container may have changed meanwhile.
	r.mu.Lock()
	c, err := r.startableLocked(containerID)
	var latency time.Duration
	if err == nil {
		latency = r.latency(c, c.model.startLatency, saltStart)
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}
	id := c.id
	if err := r.wait(ctx, st.slowed(latency)); err != nil {
		return ctxError("StartContainer "+id, err)
	}
	startedAt := r.now()

	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.rebootedLocked(st); err != nil {
		return err
	}
	if c, err = r.startableLocked(id); err != nil {
		return err
	}
	c.state = runtimeapi.ContainerState_CONTAINER_RUNNING
	c.startedAt = startedAt
	r.publishLocked(c.id, r.sandboxes[c.sandboxID], runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, startedAt)
	r.scheduleExitLocked(c, startedAt)
	return nil
}

func (r *Runtime) startableLocked(containerID string) (*container, error) {
	c, err := lookupLocked(r.containers, "container", containerID)
	if err != nil {
		return nil, err
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_CREATED {
		return nil, status.Errorf(codes.FailedPrecondition, "StartContainer %s: container is in state %s; only a created container can start", c.id, c.state)
	}
	if sb := r.sandboxes[c.sandboxID]; sb == nil || sb.state != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, status.Errorf(codes.FailedPrecondition, "StartContainer %s: its sandbox %s is not ready", c.id, c.sandboxID)
	}
	return c, nil
}

// StopContainer stops a RUNNING container as stopOutcome decides: after its
// stop latency with exit code 0 ("Completed"), or killed (137, "Error") when
// the grace period of timeout seconds runs out first. Stopping a container
// that is not running, including one that has exited by itself, does nothing
// and is not an error; a container that never started stays CREATED, as in
// containerd. A container whose RunFor ends while it is being stopped exits
// by itself, with its own exit code.
func (r *Runtime) StopContainer(ctx context.Context, containerID string, timeout int64) error {
	st, err := r.enter(ctx, "StopContainer")
	if err != nil {
		return err
	}
	r.mu.Lock()
	c, err := lookupLocked(r.containers, "container", containerID)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	c.settle(r.now())
	id, running := c.id, c.state == runtimeapi.ContainerState_CONTAINER_RUNNING
	stopLatency := r.latency(c, c.model.stopLatency, saltStop)
	r.mu.Unlock()
	if !running {
		return nil
	}
	// A slow node stretches the application's shutdown, not the kubelet's
	// grace period: slowed enough, a graceful stop ends in a kill.
	wait, exitCode, reason := stopOutcome(st.slowed(stopLatency), timeout)
	if err := r.wait(ctx, wait); err != nil {
		return ctxError("StopContainer "+id, err)
	}
	finishedAt := r.now()

	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.rebootedLocked(st); err != nil {
		return err
	}
	// It may have been removed, killed with its sandbox, or exited by itself
	// meanwhile.
	if c := r.containers[id]; c != nil {
		r.cancelExitLocked(c, finishedAt)
		c.settle(finishedAt)
		if c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
			c.exit(finishedAt, exitCode, reason)
			r.publishLocked(c.id, r.sandboxes[c.sandboxID], runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, finishedAt)
		}
	}
	return nil
}

func (c *container) exit(finishedAt int64, exitCode int32, reason string) {
	c.state = runtimeapi.ContainerState_CONTAINER_EXITED
	c.finishedAt = finishedAt
	c.exitCode = exitCode
	c.reason = reason
}

// RemoveContainer removes a container in any state, as CRI asks. Removing an
// unknown container is not an error.
func (r *Runtime) RemoveContainer(ctx context.Context, containerID string) error {
	if _, err := r.enter(ctx, "RemoveContainer"); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := lookupLocked(r.containers, "container", containerID)
	if err != nil {
		return ignoreNotFound(err)
	}
	now := r.now()
	r.cancelExitLocked(c, now)
	delete(r.containers, c.id)
	delete(r.names, c.name)
	sb := r.sandboxes[c.sandboxID]
	if sb != nil {
		if i := slices.Index(sb.containers, c.id); i >= 0 {
			sb.containers = slices.Delete(sb.containers, i, i+1)
		}
	}
	r.publishLocked(c.id, sb, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, now)
	return nil
}

// ListContainers returns the containers that match filter, oldest first. The
// ID and sandbox ID filters match prefixes, as containerd's do.
func (r *Runtime) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	if _, err := r.enter(ctx, "ListContainers"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	selector := compileSelector(filter.GetLabelSelector())
	matched := make([]*container, 0, len(r.containers))
	for _, c := range r.containers {
		c.settle(now) // before matching: the filter may name a state
		if c.matches(filter, selector) {
			matched = append(matched, c)
		}
	}
	slices.SortFunc(matched, func(a, b *container) int { return cmp.Compare(a.seq, b.seq) })
	// The kubelet's PLEG lists every container every second on every node:
	// allocate the items' structs in three blocks rather than three per item.
	out := make([]*runtimeapi.Container, len(matched))
	items := make([]runtimeapi.Container, len(matched))
	metas := make([]runtimeapi.ContainerMetadata, len(matched))
	specs := make([]runtimeapi.ImageSpec, len(matched))
	for i, c := range matched {
		c.fillListItem(&items[i], &metas[i], &specs[i])
		out[i] = &items[i]
	}
	return out, nil
}

func (c *container) matches(f *runtimeapi.ContainerFilter, selector []labelPair) bool {
	if f == nil {
		return true
	}
	if f.Id != "" && !strings.HasPrefix(c.id, f.Id) {
		return false
	}
	if f.State != nil && f.State.State != c.state {
		return false
	}
	if f.PodSandboxId != "" && !strings.HasPrefix(c.sandboxID, f.PodSandboxId) {
		return false
	}
	return matchLabels(c.labels, selector)
}

// ContainerStatus returns the container's status, or NotFound.
func (r *Runtime) ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	if _, err := r.enter(ctx, "ContainerStatus"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := lookupLocked(r.containers, "container", containerID)
	if err != nil {
		return nil, err
	}
	c.settle(r.now())
	resp := &runtimeapi.ContainerStatusResponse{Status: c.toStatus(r.imageRefLocked(c))}
	if verbose {
		// containerd's verbose info: one JSON document under "info" with,
		// among others, the sandbox and the config the container was
		// created from (its environment, mounts, command).
		config, err := protojson.Marshal(c.config)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "ContainerStatus %s: encoding its config: %v", c.id, err)
		}
		info, err := json.Marshal(struct {
			SandboxID string          `json:"sandboxID"`
			Config    json.RawMessage `json:"config"`
		}{c.sandboxID, config})
		if err != nil {
			return nil, status.Errorf(codes.Internal, "ContainerStatus %s: encoding its info: %v", c.id, err)
		}
		resp.Info = map[string]string{"info": string(info)}
	}
	return resp, nil
}

// UpdateContainerResources replaces the container's resources; ContainerStatus
// reports them. Like containerd it refuses a container that has exited. A
// new memory limit moves the container's OOM kill (see planOOM).
func (r *Runtime) UpdateContainerResources(ctx context.Context, containerID string, resources *runtimeapi.ContainerResources) error {
	if _, err := r.enter(ctx, "UpdateContainerResources"); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := lookupLocked(r.containers, "container", containerID)
	if err != nil {
		return err
	}
	now := r.now()
	c.settle(now)
	if c.state != runtimeapi.ContainerState_CONTAINER_CREATED && c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return status.Errorf(codes.FailedPrecondition, "UpdateContainerResources %s: container is in state %s; only a created or running container can be updated", c.id, c.state)
	}
	if resources != nil {
		c.resources = proto.Clone(resources).(*runtimeapi.ContainerResources)
	}
	if c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
		c.planOOM(time.Duration(now - c.startedAt))
		r.scheduleExitLocked(c, now)
	} else {
		c.planOOM(0)
	}
	return nil
}

// ExecSync runs nothing: the command of a RUNNING container exits and prints
// as the container's exec behaviours say at this moment (by default 0, with
// no output). A non-zero exit code comes back as a utilexec.CodeExitError,
// as k8s.io/cri-client returns it for a real runtime, so that callers handle
// the in-process and the socket paths alike. A container that is not running
// (including one that has exited by itself) fails the call, as in containerd.
func (r *Runtime) ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout []byte, stderr []byte, err error) {
	if _, err := r.enter(ctx, "ExecSync"); err != nil {
		return nil, nil, err
	}
	stdout, stderr, exitCode, err := r.execSync(ctx, containerID, cmd, timeout)
	if err == nil && exitCode != 0 {
		err = utilexec.CodeExitError{
			Err:  fmt.Errorf("command '%s' exited with %d: %s", strings.Join(cmd, " "), exitCode, stderr),
			Code: int(exitCode),
		}
	}
	return stdout, stderr, err
}

// execSync is ExecSync with the exit code apart, for the gRPC server. It
// does not enter: its callers do.
func (r *Runtime) execSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout, stderr []byte, exitCode int32, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := lookupLocked(r.containers, "container", containerID)
	if err != nil {
		return nil, nil, 0, err
	}
	now := r.now()
	c.settle(now)
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		// containerd's words, with the command and container for context.
		return nil, nil, 0, status.Errorf(codes.FailedPrecondition, "ExecSync %q in container %s: failed to exec in container: container is in %s state", cmd, c.id, c.state)
	}
	out, exitCode := execAt(c.model.exec, cmd, time.Duration(now-c.startedAt))
	if out != "" {
		stdout = []byte(out)
	}
	return stdout, nil, exitCode, nil
}

func (c *container) fillMetadata(md *runtimeapi.ContainerMetadata) *runtimeapi.ContainerMetadata {
	md.Name, md.Attempt = c.metaName, c.attempt
	return md
}

func (c *container) fillImageSpec(spec *runtimeapi.ImageSpec) *runtimeapi.ImageSpec {
	spec.Image = c.imageName
	spec.Annotations = c.imageAnnotations
	spec.UserSpecifiedImage = c.userImage
	spec.RuntimeHandler = c.imageHandler
	return spec
}

// fillListItem fills the fresh structs item, md and spec as c's list item.
func (c *container) fillListItem(item *runtimeapi.Container, md *runtimeapi.ContainerMetadata, spec *runtimeapi.ImageSpec) {
	item.Id = c.id
	item.PodSandboxId = c.sandboxID
	item.Metadata = c.fillMetadata(md)
	item.Image = c.fillImageSpec(spec)
	item.ImageRef = c.imageID
	item.State = c.state
	item.CreatedAt = c.createdAt
	item.Labels = c.labels
	item.Annotations = c.annotations
	item.ImageId = c.imageID
}

// imageRefLocked is the image_ref of c's status, as containerd gives it:
// the first repo digest of its image, or the image ID once the image is
// gone or has no digest. ListContainers keeps the ID.
func (r *Runtime) imageRefLocked(c *container) string {
	if img := r.images[c.imageID]; img != nil && len(img.repoDigests) > 0 {
		return img.repoDigests[0]
	}
	return c.imageID
}

// user is whom c's first process runs as, as containerd 2 reports it from
// the OCI spec it made: the config's user and group, else those of an image
// without a USER (root, group 0, as the fake's images are), and as
// supplemental groups the primary group and the config's groups (the pod's
// fsGroup and supplementalGroups), sorted and without duplicates, as
// containerd merges them. The fake's images list their user in no other
// group in /etc/group, so the Merge and Strict policies give the same.
func (c *container) user() *runtimeapi.ContainerUser {
	sc := c.config.GetLinux().GetSecurityContext()
	u := &runtimeapi.LinuxContainerUser{Uid: sc.GetRunAsUser().GetValue(), Gid: sc.GetRunAsGroup().GetValue()}
	groups := append([]int64{u.Gid}, sc.GetSupplementalGroups()...)
	slices.Sort(groups)
	u.SupplementalGroups = slices.Compact(groups)
	return &runtimeapi.ContainerUser{Linux: u}
}

func (c *container) toStatus(imageRef string) *runtimeapi.ContainerStatus {
	st := &runtimeapi.ContainerStatus{
		Id:          c.id,
		Metadata:    c.fillMetadata(&runtimeapi.ContainerMetadata{}),
		State:       c.state,
		CreatedAt:   c.createdAt,
		StartedAt:   c.startedAt,
		FinishedAt:  c.finishedAt,
		ExitCode:    c.exitCode,
		Image:       c.fillImageSpec(&runtimeapi.ImageSpec{}),
		ImageRef:    imageRef,
		Reason:      c.reason,
		Message:     c.message,
		Labels:      c.labels,
		Annotations: c.annotations,
		LogPath:     c.logPath,
		ImageId:     c.imageID,
		Mounts:      c.config.GetMounts(),
		User:        c.user(),
	}
	if c.resources != nil {
		st.Resources = proto.Clone(c.resources).(*runtimeapi.ContainerResources)
	}
	return st
}
