package fakeruntime

import (
	"context"
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Node-level faults, which a load profile sets and clears while the node
// runs, and the node's power cycle. Unlike a behaviour, which a container
// gets once when it is created, a fault reaches every call that starts while
// it is set, whichever pod the call is for.

// Fault is what is wrong with a node's runtime, its registry or its network
// plugin, set and cleared while it runs (SetFault); the zero Fault is a
// healthy node. Call Validate on input from users: SetFault does not check.
type Fault struct {
	// Down fails every CRI call of both services (Version, Status, the
	// lists, PullImage, ...) with codes.Unavailable and the error a kubelet
	// sees when containerd's socket is gone: `connection error: desc =
	// "transport: Error while dialing: dial unix
	// /run/containerd/containerd.sock: connect: connection refused"`.
	// Containers keep running meanwhile, as they do under their shims, so
	// network probes (ProbeNetwork, and the socket's side channel) and
	// computed logs still answer: a kubelet reaches neither through CRI.
	Down bool `json:"down,omitempty"`
	// SlowFactor > 1 multiplies every simulated latency (pull, sandbox
	// start, container create/start, stop); 0 and 1 leave them alone. A
	// slowed stop that outlasts its grace period ends in a kill, as on a
	// node too loaded to let the application shut down in time.
	SlowFactor float64 `json:"slowFactor,omitempty"`
	// CallLatency is added to every CRI call, the relist's ListPodSandbox
	// and ListContainers included, so a long one stalls the kubelet's PLEG.
	// It is waited before the call does anything, and is not multiplied by
	// SlowFactor.
	CallLatency time.Duration `json:"callLatency,omitempty"`
	// PullError makes every PullImage fail, after its latency, with that
	// containerd error (PullErrorUnauthorized or PullErrorNotFound, the same
	// errors image behaviours produce), whatever the image behaviours and
	// the pod's annotation say: expired registry credentials, or a registry
	// that lost the images.
	PullError string `json:"pullError,omitempty"`
	// CNIMissing makes RunPodSandbox of every pod that is not host-network
	// fail as containerd fails when the CNI plugin binary is missing, after
	// the sandbox latency and with nothing left behind (no sandbox, name
	// released, no IP held): code Unknown, `failed to setup network for
	// sandbox "<64-hex id>": plugin type="bridge" failed (add): failed to
	// find plugin "bridge" in path [/opt/cni/bin]`. Status still reports the
	// network ready, as containerd does while the CNI config is in place.
	CNIMissing bool `json:"cniMissing,omitempty"`
}

const (
	// downMessage is how grpc-go reports a dial of a unix socket nobody
	// listens on, as the kubelet logs it when containerd is down.
	downMessage = `connection error: desc = "transport: Error while dialing: dial unix /run/containerd/containerd.sock: connect: connection refused"`
	// rebootMessage is how grpc-go reports a call whose connection closed
	// under it, as a power cut closes it.
	rebootMessage = "error reading from server: EOF"
	// cniMissingFormat is containerd's error, with the sandbox ID it had
	// picked, when the CNI plugin binary the network config names is absent.
	cniMissingFormat = `failed to setup network for sandbox %q: plugin type="bridge" failed (add): failed to find plugin "bridge" in path [/opt/cni/bin]`
)

// Validate reports values SetFault would take as something else: a
// SlowFactor between 0 and 1 (or not a finite number), a negative
// CallLatency, an unknown PullError. The error joins one *field.Error per
// problem, each with its path under "fault".
func (f Fault) Validate() error {
	path := field.NewPath("fault")
	var errs field.ErrorList
	switch {
	case math.IsNaN(f.SlowFactor) || math.IsInf(f.SlowFactor, 0):
		errs = append(errs, field.Invalid(path.Child("slowFactor"), f.SlowFactor, "must be a finite number: 0 for no slowdown, or a factor of at least 1"))
	case f.SlowFactor != 0 && f.SlowFactor < 1:
		errs = append(errs, field.Invalid(path.Child("slowFactor"), f.SlowFactor, "must be 0 for no slowdown, or a factor of at least 1 (a fault cannot make the node faster)"))
	}
	if f.CallLatency < 0 {
		errs = append(errs, field.Invalid(path.Child("callLatency"), f.CallLatency.String(), "a latency must not be negative"))
	}
	if !validPullError(f.PullError) {
		errs = append(errs, field.NotSupported(path.Child("pullError"), f.PullError, []string{PullErrorUnauthorized, PullErrorNotFound}))
	}
	return joinFieldErrors(errs)
}

// faultState is what a call sees of the node when it starts: the fault, and
// which boot of the node it started in, so that a call that Reboot
// interrupts does not commit into the node's next life. It is replaced
// whole, never changed, so that calls read it with one atomic load.
type faultState struct {
	fault Fault
	boot  uint64
}

// SetFault sets the node's fault; the zero Fault clears it. It takes effect
// for calls that start after it: a call already waiting out its latencies
// finishes under the fault it started with (use Reboot to lose the work in
// flight). Values Validate rejects are taken as the nearest sensible ones:
// a SlowFactor below 1 slows nothing, a negative CallLatency adds nothing,
// and an unknown PullError fails pulls as PullErrorUnauthorized does.
func (r *Runtime) SetFault(f Fault) {
	// Under r.mu so that it cannot undo a concurrent Reboot's new boot;
	// calls read the state without the lock.
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fault.Store(&faultState{fault: f, boot: r.fault.Load().boot})
}

// Fault returns the fault SetFault set last, or the zero Fault after New and
// Reboot.
func (r *Runtime) Fault() Fault { return r.fault.Load().fault }

// Reboot empties the runtime as a node's power cycle does: every sandbox and
// container is gone (their names released, pod IPs returned to the pool,
// exit timers stopped, GetContainerEvents subscribers see nothing more for
// them), images stay (they are on disk), the pod CIDR stays, and the fault is
// cleared. The kubelet that starts after it finds no containers and
// recreates its pods' sandboxes.
//
// Calls in flight, waiting out a latency, fail with codes.Unavailable when
// they come to commit, as calls whose connection the power cut broke, and
// leave nothing behind. Event streams stay open: events queued and not yet
// taken are dropped, and no DELETED events are sent, since a node that
// loses power tells no one.
func (r *Runtime) Reboot() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, e := range r.exitTimers {
		e.t.Stop()
		delete(r.exitTimers, id)
	}
	for _, sb := range r.sandboxes {
		r.releaseIPsLocked(sb)
	}
	clear(r.sandboxes)
	clear(r.containers)
	clear(r.names)
	for sub := range r.subscribers {
		sub.take()
	}
	r.fault.Store(&faultState{boot: r.fault.Load().boot + 1})
}

// enter admits a CRI call op: it fails at once while the node is Down, as a
// dial of a dead socket does, and otherwise waits out the fault's
// CallLatency on the runtime's clock, honouring ctx. It returns the state
// the call runs under, so that a fault set meanwhile does not reach it
// halfway. Every method of both services calls it first. Without a
// CallLatency it needs no timer and ignores ctx, as the calls did before.
func (r *Runtime) enter(ctx context.Context, op string) (*faultState, error) {
	st := r.fault.Load()
	if st.fault.Down {
		return st, errDown()
	}
	if d := st.fault.CallLatency; d > 0 {
		if err := r.wait(ctx, d); err != nil {
			return st, ctxError(op, err)
		}
	}
	return st, nil
}

// downError is the error of a call while the node is Down, else nil.
func (r *Runtime) downError() error {
	if r.fault.Load().fault.Down {
		return errDown()
	}
	return nil
}

func errDown() error { return status.Error(codes.Unavailable, downMessage) }

// slowed is the simulated latency d as the fault's SlowFactor stretches it,
// saturating rather than overflowing.
func (st *faultState) slowed(d time.Duration) time.Duration {
	f := st.fault.SlowFactor
	if !(f > 1) || d <= 0 { // also NaN
		return d
	}
	s := float64(d) * f
	if s >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(s)
}

// rebootedLocked fails a call that was in flight when Reboot ran, at the
// point where it would commit: what it did must not appear in the node's
// next life. The caller holds r.mu, under which Reboot changes the boot.
func (r *Runtime) rebootedLocked(st *faultState) error {
	if r.fault.Load().boot != st.boot {
		return status.Error(codes.Unavailable, rebootMessage)
	}
	return nil
}
