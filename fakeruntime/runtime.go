package fakeruntime

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/validation/field"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
)

// The in-process agent calls a *Runtime through the same interfaces the
// kubelet uses for a remote runtime; these assertions keep the two in step
// when cri-api grows a method.
var (
	_ internalapi.RuntimeService      = (*Runtime)(nil)
	_ internalapi.ImageManagerService = (*Runtime)(nil)
)

const (
	// RuntimeName is what Version reports as the runtime name.
	RuntimeName = "fleetlet-fake"
	// RuntimeVersion is what Version reports as the runtime version.
	RuntimeVersion = "0.1.0"
	// runtimeAPIVersion is the CRI API version we serve.
	runtimeAPIVersion = "v1"
	// kubeletAPIVersion is the legacy VersionResponse.version field; every
	// CRI runtime reports this constant.
	kubeletAPIVersion = "0.1.0"

	// defaultImageSizeBytes is the size reported for a pulled image when
	// Behaviour.ImageSizeBytes is unset: small, like a busybox image.
	defaultImageSizeBytes = 10 << 20
)

// Behaviour is the data that drives one node's simulation, so profiles can
// set it from YAML or JSON. The node-wide latencies are time.Durations, which
// JSON spells as integer nanoseconds (encoding/json's encoding); Containers
// and Images use the Duration strings pods use in their annotations.
// Negative durations are treated as zero; Validate reports them.
type Behaviour struct {
	// PullLatency is how long every PullImage takes, even of an image already
	// present (a real runtime still resolves the manifest).
	PullLatency time.Duration `json:"pullLatency"`
	// SandboxStartLatency is how long RunPodSandbox takes (sandbox container
	// plus CNI setup in a real runtime).
	SandboxStartLatency time.Duration `json:"sandboxStartLatency"`
	// ContainerCreateLatency is how long CreateContainer takes.
	ContainerCreateLatency time.Duration `json:"containerCreateLatency"`
	// ContainerStartLatency is how long StartContainer takes.
	ContainerStartLatency time.Duration `json:"containerStartLatency"`
	// StopLatency is how long a running container takes to exit after its
	// stop signal. If it exceeds the grace period of StopContainer, the
	// container is killed at the end of the grace period instead.
	StopLatency time.Duration `json:"stopLatency"`
	// ImageSizeBytes is the size reported for every pulled image; 0 means
	// 10 MiB.
	ImageSizeBytes int64 `json:"imageSizeBytes"`
	// Containers is the default behaviour of every container; a pod's
	// fleetlet.io/behaviour annotation overrides it field by field. Its
	// latencies, when set, override the node's latencies above.
	Containers ContainerBehaviour `json:"containers,omitzero"`
	// Images are per-image behaviours (pull errors, latencies, sizes), keyed
	// by image reference as written in the pod; a pull matches a key
	// exactly or after normalisation ("busybox" is
	// "docker.io/library/busybox:latest").
	Images map[string]ImageBehaviour `json:"images,omitempty"`
}

// Validate reports values New would silently correct, so that a profile with
// a typo fails loudly at load time instead. The error joins one
// *field.Error per problem, each with its path under "behaviour".
func (b Behaviour) Validate() error {
	path := field.NewPath("behaviour")
	var errs field.ErrorList
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"pullLatency", b.PullLatency},
		{"sandboxStartLatency", b.SandboxStartLatency},
		{"containerCreateLatency", b.ContainerCreateLatency},
		{"containerStartLatency", b.ContainerStartLatency},
		{"stopLatency", b.StopLatency},
	} {
		if d.v < 0 {
			errs = append(errs, field.Invalid(path.Child(d.name), d.v.String(), "a latency must not be negative"))
		}
	}
	if b.ImageSizeBytes < 0 {
		errs = append(errs, field.Invalid(path.Child("imageSizeBytes"), b.ImageSizeBytes, "a size must not be negative"))
	}
	errs = append(errs, b.Containers.Validate(path.Child("containers"))...)
	errs = append(errs, validateImages(b.Images, path.Child("images"))...)
	return joinFieldErrors(errs)
}

// withDefaults returns b with zero values replaced by defaults and negative
// durations clamped to zero.
func (b Behaviour) withDefaults() Behaviour {
	for _, d := range []*time.Duration{&b.PullLatency, &b.SandboxStartLatency, &b.ContainerCreateLatency, &b.ContainerStartLatency, &b.StopLatency} {
		*d = max(*d, 0)
	}
	if b.ImageSizeBytes <= 0 {
		b.ImageSizeBytes = defaultImageSizeBytes
	}
	return b
}

// Config configures one Runtime.
type Config struct {
	// Clock measures every simulated latency and stamps every timestamp;
	// nil means clock.RealClock{}. Its AfterFunc times the exit events of
	// containers that exit by themselves, while GetContainerEvents has a
	// subscriber.
	Clock clock.WithTickerAndDelayedExecution
	// Behaviour holds the simulated durations and sizes.
	Behaviour Behaviour
	// PreloadedImages are present without a pull, e.g. the pause image.
	// They are pinned, as containerd pins its sandbox image, so image
	// garbage collection leaves them alone.
	PreloadedImages []string
	// Seed seeds the generator of sandbox and container IDs and the
	// behaviours' jitter, so that a run can be replayed. 0 picks a random
	// seed. Give each node its own seed: IDs are unique within a Runtime,
	// not across Runtimes with one seed.
	Seed uint64
}

// Validate reports configuration errors New would otherwise correct or skip.
func (c Config) Validate() error {
	errs := []error{c.Behaviour.Validate()}
	for _, ref := range c.PreloadedImages {
		if _, err := normaliseImageRef(ref); err != nil {
			errs = append(errs, fmt.Errorf("preloaded image: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Runtime is one node's container runtime and image service, held in memory.
// It is safe for concurrent use. One mutex guards all state: a node has at
// most a few hundred pods, and the mutex is never held while a latency is
// simulated.
type Runtime struct {
	clock     clock.WithTickerAndDelayedExecution
	behaviour Behaviour
	seed      uint64
	// defaultModel is the node's container behaviour, resolved once and
	// shared by every container whose pod has no annotation of its own.
	defaultModel *model
	// imageBehaviours holds Behaviour.Images under their keys as written and
	// as normalised; nil when there are none.
	imageBehaviours map[string]ImageBehaviour
	// fault is the node's fault and boot (see fault.go), read by every call
	// without r.mu and replaced under it; never nil.
	fault atomic.Pointer[faultState]

	mu  sync.Mutex
	rng *mathrand.Rand // not safe for concurrent use: guarded by mu
	// seq orders objects by creation, so that lists come out in a stable
	// order however the maps iterate.
	seq        uint64
	sandboxes  map[string]*sandbox
	containers map[string]*container
	// names holds the names reserved by live sandboxes and containers, as
	// containerd reserves them, so that a double create for one pod attempt
	// fails instead of leaking a sandbox.
	names      map[string]string
	images     map[string]*image // by image ID
	imageNames map[string]string // repo tag or repo digest to image ID
	network    ipPool
	// subscribers are the GetContainerEvents calls listening; exitTimers
	// the timers of containers' own exits, kept only while there are
	// subscribers (see events.go).
	subscribers map[*eventSubscriber]struct{}
	exitTimers  map[string]*exitTimer
}

// New returns a Runtime with no sandboxes or containers and the preloaded
// images present. Call Config.Validate first for input from users: New
// applies defaults, clamps negative durations to zero and skips preloaded
// images it cannot parse.
func New(cfg Config) *Runtime {
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	seed := cfg.Seed
	if seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		seed = binary.LittleEndian.Uint64(b[:])
	}
	b := cfg.Behaviour.withDefaults()
	b.Containers = b.Containers.deepCopy()
	r := &Runtime{
		clock:           clk,
		behaviour:       b,
		seed:            seed,
		defaultModel:    resolveModel(b.Containers, b),
		imageBehaviours: indexImageBehaviours(b.Images),
		rng:             mathrand.New(mathrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		sandboxes:       make(map[string]*sandbox),
		containers:      make(map[string]*container),
		names:           make(map[string]string),
		images:          make(map[string]*image),
		imageNames:      make(map[string]string),
		subscribers:     make(map[*eventSubscriber]struct{}),
		exitTimers:      make(map[string]*exitTimer),
	}
	r.fault.Store(&faultState{})
	for _, ref := range cfg.PreloadedImages {
		if img, err := r.newImage(ref); err == nil {
			img.pinned = true
			r.addImageLocked(img)
		}
	}
	return r
}

// Version returns the runtime name, runtime version and CRI API version.
func (r *Runtime) Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error) {
	if _, err := r.enter(ctx, "Version"); err != nil {
		return nil, err
	}
	return &runtimeapi.VersionResponse{
		Version:           kubeletAPIVersion,
		RuntimeName:       RuntimeName,
		RuntimeVersion:    RuntimeVersion,
		RuntimeApiVersion: runtimeAPIVersion,
	}, nil
}

// Status reports the runtime and its network ready. The network is reported
// ready even before UpdateRuntimeConfig sets a pod CIDR; RunPodSandbox then
// fails for pods that need a pod IP, as a CNI plugin without a range would.
func (r *Runtime) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	if _, err := r.enter(ctx, "Status"); err != nil {
		return nil, err
	}
	return &runtimeapi.StatusResponse{
		Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Status: true},
			{Type: runtimeapi.NetworkReady, Status: true},
		}},
		// The default handler, named "" as containerd names it.
		RuntimeHandlers: []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{}}},
		Features:        &runtimeapi.RuntimeFeatures{},
	}, nil
}

// UpdateRuntimeConfig stores the node's pod CIDR: the kubelet hands it to the
// runtime this way, and RunPodSandbox allocates pod IPs from it. A dual-stack
// node sends two CIDRs separated by a comma. Pods keep the IPs they have when
// the CIDR changes.
func (r *Runtime) UpdateRuntimeConfig(ctx context.Context, runtimeConfig *runtimeapi.RuntimeConfig) error {
	if _, err := r.enter(ctx, "UpdateRuntimeConfig"); err != nil {
		return err
	}
	cidrs := runtimeConfig.GetNetworkConfig().GetPodCidr()
	if cidrs == "" {
		return nil // the kubelet never clears the pod CIDR; neither do we
	}
	prefixes, err := parsePodCIDRs(cidrs)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "UpdateRuntimeConfig: %v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.network.setPrefixes(prefixes)
	return nil
}

// RuntimeConfig reports the cgroupfs driver: the fake creates no cgroups, and
// cgroupfs asks nothing of systemd on the host.
func (r *Runtime) RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	if _, err := r.enter(ctx, "RuntimeConfig"); err != nil {
		return nil, err
	}
	return &runtimeapi.RuntimeConfigResponse{
		Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS},
	}, nil
}

// Close satisfies both CRI interfaces; there is no connection to close.
func (r *Runtime) Close(ctx context.Context) error { return nil }

// wait simulates a latency of d on the runtime's clock. It returns ctx's error
// early when ctx is done; callers turn it into a gRPC status with ctxError, as
// a real runtime's call would fail. Callers must not hold r.mu.
func (r *Runtime) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := r.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ctxError turns a context error into the gRPC status (Canceled or
// DeadlineExceeded) a remote call would have failed with.
func ctxError(op string, err error) error {
	return status.Errorf(status.FromContextError(err).Code(), "%s: %v", op, err)
}

// now is the runtime clock's time in Unix nanoseconds, as CRI timestamps are.
func (r *Runtime) now() int64 { return r.clock.Now().UnixNano() }

// newIDLocked returns a random 64-hex-digit ID, the form containerd uses,
// unused by any sandbox or container of this Runtime.
func (r *Runtime) newIDLocked() string {
	for {
		var b [32]byte
		for i := 0; i < len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], r.rng.Uint64())
		}
		id := hex.EncodeToString(b[:])
		_, isSandbox := r.sandboxes[id]
		_, isContainer := r.containers[id]
		if !isSandbox && !isContainer {
			return id
		}
	}
}

// nextSeqLocked returns the next creation sequence number.
func (r *Runtime) nextSeqLocked() uint64 {
	r.seq++
	return r.seq
}
