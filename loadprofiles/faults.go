package loadprofiles

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
)

// The kinds of fault a fault phase injects.
const (
	// FaultPartition cuts the nodes' network to the API server: their
	// agents and kube-proxies keep running their pods, and every request
	// fails to connect until the fault ends.
	FaultPartition = "partition"
	// FaultNodeDown powers the nodes off: no lease, no status, no kubelet
	// API, their pods left in the API server. When the fault ends they boot
	// as rebooted machines: their runtimes hold no containers.
	FaultNodeDown = "nodeDown"
	// FaultRuntimeDown makes every CRI call of the nodes' runtimes fail
	// with Unavailable, as a kubelet sees a dead containerd.
	FaultRuntimeDown = "runtimeDown"
	// FaultRuntimeSlow multiplies the runtimes' latencies by SlowFactor
	// and adds CallLatency to every CRI call.
	FaultRuntimeSlow = "runtimeSlow"
	// FaultRegistryErrors fails every image pull on the nodes with
	// PullError.
	FaultRegistryErrors = "registryErrors"
	// FaultCNIMissing fails RunPodSandbox of every pod network sandbox on
	// the nodes as a missing CNI plugin does.
	FaultCNIMissing = "cniMissing"
	// FaultSyncLoopStall stops the nodes' pod workers while their leases,
	// statuses and /healthz stay healthy.
	FaultSyncLoopStall = "syncLoopStall"
)

// FaultKinds are the kinds a fault phase may name, in documentation order.
var FaultKinds = []string{FaultPartition, FaultNodeDown, FaultRuntimeDown, FaultRuntimeSlow, FaultRegistryErrors, FaultCNIMissing, FaultSyncLoopStall}

// FaultPhase injects one fault into the nodes Nodes selects. With a
// Duration the phase lasts that long, then ends the fault and waits for the
// nodes to be Ready again; without one it returns as soon as the fault is
// in place, so that the next phases run during it, until a later heal phase
// names it (or the run ends, which ends every fault it started).
type FaultPhase struct {
	// Kind is one of FaultKinds; required.
	Kind string `json:"kind"`
	// Nodes selects the nodes to fail; required, and {} selects them all.
	Nodes NodeSelector `json:"nodes"`
	// Duration, if set, is how long the fault lasts.
	Duration metav1.Duration `json:"duration,omitempty"`
	// ReadyTimeout bounds the wait for the nodes to be Ready again once a
	// fault with a Duration ends; default DefaultWaitTimeout.
	ReadyTimeout metav1.Duration `json:"readyTimeout,omitempty"`
	// SlowFactor (at least 1) and CallLatency shape runtimeSlow: every
	// simulated runtime latency times SlowFactor, and CallLatency added to
	// every CRI call; a CallLatency over 3 min stalls the kubelet's PLEG.
	SlowFactor  float64         `json:"slowFactor,omitempty"`
	CallLatency metav1.Duration `json:"callLatency,omitempty"`
	// PullError is registryErrors' error: "unauthorized" (expired pull
	// credentials, the default) or "notfound".
	PullError string `json:"pullError,omitempty"`
}

// NodeSelector picks a fault's nodes: those of Pool (any pool when empty)
// that carry every one of Labels, then, of those, Count of them or a
// Fraction (rounded up), drawn with the run's seed; all of them when
// neither is set.
type NodeSelector struct {
	Pool     string            `json:"pool,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Count    int               `json:"count,omitempty"`
	Fraction float64           `json:"fraction,omitempty"`
}

// HealPhase ends a fault an earlier fault phase without a Duration
// started, and waits for its nodes to be Ready again (a nodeDown's nodes
// boot first).
type HealPhase struct {
	// Phase names the fault phase; required.
	Phase string `json:"phase"`
	// Timeout bounds the wait for the nodes to be Ready; default
	// DefaultWaitTimeout.
	Timeout metav1.Duration `json:"timeout,omitempty"`
}

// DefaultPullError is registryErrors' default: expired pull credentials.
const DefaultPullError = "unauthorized"

// FaultNode is a node a fault may select.
type FaultNode struct {
	Name, Pool string
	Labels     map[string]string
}

// Fault is one fault as the driver injects it: its phase, what it does, the
// nodes it hits and how they were selected, in words.
type Fault struct {
	Phase    string
	Spec     *FaultPhase
	Selector string
	Nodes    []string
}

// FaultInjector fails and heals a fleet's nodes, for fault phases: the
// fleet implements it, since only the fleet can reach its agents.
type FaultInjector interface {
	// Nodes are the nodes a fault may select, in a stable order.
	Nodes() []FaultNode
	// Inject puts f in place on f.Nodes; Heal ends it.
	Inject(ctx context.Context, f Fault) error
	Heal(ctx context.Context, f Fault) error
	// WaitReady returns when every one of nodes is Ready, or an error
	// naming those that are not once timeout has passed.
	WaitReady(ctx context.Context, nodes []string, timeout time.Duration) error
}

// describe says in words which nodes s selects, for logs and reports.
func (s NodeSelector) describe() string {
	var of []string
	if s.Pool != "" {
		of = append(of, "pool "+s.Pool)
	}
	if len(s.Labels) > 0 {
		of = append(of, "label "+labels.SelectorFromSet(s.Labels).String())
	}
	where := cmp.Or(strings.Join(of, ", "), "the fleet")
	switch {
	case s.Count > 0:
		return fmt.Sprintf("%d nodes of %s", s.Count, where)
	case s.Fraction > 0:
		return fmt.Sprintf("%s%% of %s", trimFloat(s.Fraction*100), where)
	case len(of) == 0:
		return "every node"
	}
	return where
}

func trimFloat(f float64) string { return strings.TrimSuffix(fmt.Sprintf("%.2f", f), ".00") }

// matches reports whether node n is one of the selector's candidates.
func (s NodeSelector) matches(n FaultNode) bool {
	if s.Pool != "" && n.Pool != s.Pool {
		return false
	}
	for k, v := range s.Labels {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// selectNodes is the nodes s picks among nodes, in nodes' order. The draw
// of Count or Fraction depends only on the seed and the phase's name, so a
// run replays with the same nodes failing.
func selectNodes(nodes []FaultNode, s NodeSelector, seed uint64, phase string) ([]string, error) {
	var candidates []int
	for i, n := range nodes {
		if s.matches(n) {
			candidates = append(candidates, i)
		}
	}
	want := len(candidates)
	switch {
	case s.Count > 0:
		want = s.Count
	case s.Fraction > 0:
		want = int(math.Ceil(s.Fraction * float64(len(candidates))))
	}
	switch {
	case len(candidates) == 0:
		return nil, fmt.Errorf("nodes: %s matches none of the fleet's nodes", s.describe())
	case want > len(candidates):
		return nil, fmt.Errorf("nodes: %s, but only %d nodes match", s.describe(), len(candidates))
	}
	if want < len(candidates) {
		h := fnv.New64a()
		_, _ = h.Write([]byte(phase))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()))
		rng.Shuffle(len(candidates), func(i, j int) { candidates[i], candidates[j] = candidates[j], candidates[i] })
		candidates = candidates[:want]
		sort.Ints(candidates)
	}
	names := make([]string, len(candidates))
	for i, c := range candidates {
		names[i] = nodes[c].Name
	}
	return names, nil
}

// faultLedger is the faults a run has in place, by phase name.
type faultLedger struct {
	active map[string]Fault
	order  []string
}

func (l *faultLedger) add(f Fault) {
	if l.active == nil {
		l.active = map[string]Fault{}
	}
	l.active[f.Phase] = f
	l.order = append(l.order, f.Phase)
}

func (l *faultLedger) remove(phase string) (Fault, bool) {
	f, ok := l.active[phase]
	delete(l.active, phase)
	l.order = slices.DeleteFunc(l.order, func(p string) bool { return p == phase })
	return f, ok
}

// fault runs a fault phase.
func (r *run) fault(ctx context.Context, phase string, spec *FaultPhase) error {
	r.pods.setPhase(phase, 0)
	inj := r.d.Faults
	if inj == nil {
		return errors.New("fault phases need the fleet's agents, and this driver has none: run the profile with `fleetlet run`")
	}
	nodes, err := selectNodes(inj.Nodes(), spec.Nodes, r.d.Seed, phase)
	if err != nil {
		return err
	}
	f := Fault{Phase: phase, Spec: spec, Selector: spec.Nodes.describe(), Nodes: nodes}
	logger := klog.FromContext(ctx)
	logger.Info("Fault starting", "phase", phase, "kind", spec.Kind, "nodes", len(nodes), "selector", f.Selector, "duration", spec.Duration.Duration)
	// In the ledger before it is injected: a half-injected fault is healed
	// at the run's end too.
	r.faults.add(f)
	if err := inj.Inject(ctx, f); err != nil {
		return fmt.Errorf("injecting %s into %s: %w", spec.Kind, f.Selector, err)
	}
	if spec.Duration.Duration == 0 {
		return nil
	}
	timer := r.clock.NewTimer(spec.Duration.Duration)
	defer timer.Stop()
	select {
	case <-timer.C():
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.healFault(ctx, phase, phase, spec.ReadyTimeout.Duration)
}

// healFault, for phase, ends the fault that phase fault started and waits
// for its nodes to be Ready again.
func (r *run) healFault(ctx context.Context, phase, fault string, timeout time.Duration) error {
	r.pods.setPhase(phase, 0)
	f, ok := r.faults.remove(fault)
	if !ok {
		return fmt.Errorf("no fault of phase %q is in place", fault) // Validate rejects this first
	}
	klog.FromContext(ctx).Info("Fault ending", "phase", f.Phase, "kind", f.Spec.Kind, "nodes", len(f.Nodes))
	if err := r.d.Faults.Heal(ctx, f); err != nil {
		return fmt.Errorf("ending %s of %s: %w", f.Spec.Kind, f.Selector, err)
	}
	if err := r.d.Faults.WaitReady(ctx, f.Nodes, timeout); err != nil {
		return fmt.Errorf("after the %s of %s ended: %w", f.Spec.Kind, f.Selector, err)
	}
	return nil
}

// faultCleanupTimeout bounds the healing of the faults a run leaves in
// place when it ends.
const faultCleanupTimeout = time.Minute

// healAll ends every fault still in place, in reverse order of their start,
// without waiting for the nodes: the run is over, and a fleet left broken
// would break whatever runs on it next. Its context keeps ctx's values, not
// its cancellation.
func (r *run) healAll(ctx context.Context) error {
	if len(r.faults.order) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), faultCleanupTimeout)
	defer cancel()
	var errs []error
	for _, phase := range slices.Backward(slices.Clone(r.faults.order)) {
		f, _ := r.faults.remove(phase)
		klog.FromContext(ctx).Info("Fault ending with the run", "phase", f.Phase, "kind", f.Spec.Kind, "nodes", len(f.Nodes))
		if err := r.d.Faults.Heal(ctx, f); err != nil {
			errs = append(errs, fmt.Errorf("ending the %s of phase %q: %w", f.Spec.Kind, phase, err))
		}
	}
	return errors.Join(errs...)
}

// validateFault checks a fault phase against the profile's pools; path is
// the phase's.
func validateFault(f *FaultPhase, pools []NodePool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	fp := path.Child("fault")
	switch {
	case f.Kind == "":
		errs = append(errs, field.Required(fp.Child("kind"), "one of "+strings.Join(FaultKinds, ", ")))
	case !slices.Contains(FaultKinds, f.Kind):
		errs = append(errs, field.NotSupported(fp.Child("kind"), f.Kind, FaultKinds))
	}
	errs = append(errs, notNegative(f.Duration, fp.Child("duration"))...)
	errs = append(errs, notNegative(f.ReadyTimeout, fp.Child("readyTimeout"))...)
	errs = append(errs, notNegative(f.CallLatency, fp.Child("callLatency"))...)
	if f.Kind == FaultRuntimeSlow {
		if f.SlowFactor != 0 && f.SlowFactor < 1 {
			errs = append(errs, field.Invalid(fp.Child("slowFactor"), f.SlowFactor, "must be at least 1: how many times slower the runtime is"))
		}
		if f.SlowFactor <= 1 && f.CallLatency.Duration == 0 {
			errs = append(errs, field.Required(fp.Child("slowFactor"), "runtimeSlow needs slowFactor above 1, callLatency, or both"))
		}
	} else {
		if f.SlowFactor != 0 {
			errs = append(errs, field.Forbidden(fp.Child("slowFactor"), "only runtimeSlow takes slowFactor"))
		}
		if f.CallLatency.Duration != 0 {
			errs = append(errs, field.Forbidden(fp.Child("callLatency"), "only runtimeSlow takes callLatency"))
		}
	}
	if f.Kind == FaultRegistryErrors {
		if f.PullError != "unauthorized" && f.PullError != "notfound" {
			errs = append(errs, field.NotSupported(fp.Child("pullError"), f.PullError, []string{"unauthorized", "notfound"}))
		}
	} else if f.PullError != "" {
		errs = append(errs, field.Forbidden(fp.Child("pullError"), "only registryErrors takes pullError"))
	}
	if f.ReadyTimeout.Duration != 0 && f.Duration.Duration == 0 {
		errs = append(errs, field.Forbidden(fp.Child("readyTimeout"), "a fault without a duration ends in a heal phase, whose timeout bounds the wait"))
	}
	return append(errs, validateSelector(f.Nodes, pools, fp.Child("nodes"))...)
}

// validateSelector checks that s can select nodes of pools: at least one
// pool's nodes match it, and Count is no more than they are.
func validateSelector(s NodeSelector, pools []NodePool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := make([]string, len(pools))
	for i, p := range pools {
		names[i] = p.Name
	}
	if s.Pool != "" && !slices.Contains(names, s.Pool) {
		errs = append(errs, field.NotSupported(path.Child("pool"), s.Pool, names))
	}
	errs = append(errs, validateLabels(s.Labels, path.Child("labels"))...)
	switch {
	case s.Count < 0:
		errs = append(errs, field.Invalid(path.Child("count"), s.Count, "must not be negative"))
	case s.Fraction < 0 || s.Fraction > 1:
		errs = append(errs, field.Invalid(path.Child("fraction"), s.Fraction, "must be between 0 and 1: the share of the matching nodes to fail"))
	case s.Count > 0 && s.Fraction > 0:
		errs = append(errs, field.Forbidden(path.Child("fraction"), "give count or fraction, not both"))
	}
	if len(errs) > 0 {
		return errs
	}
	matching := 0
	for _, p := range pools {
		node := FaultNode{Pool: p.Name, Labels: poolLabels(p)}
		if s.matches(node) {
			matching += p.Count
		}
	}
	switch {
	case matching == 0:
		errs = append(errs, field.Invalid(path, s.describe(), "matches no node of the profile's pools; pools carry their labels and fleetlet.io/pool=<name>"))
	case s.Count > matching:
		errs = append(errs, field.Invalid(path.Child("count"), s.Count, fmt.Sprintf("is more than the %d nodes that match", matching)))
	}
	return errs
}

// poolLabels are the labels a pool's nodes carry that a selector may use:
// the pool's own and fleetlet.io/pool (fleet.PoolLabel, which this package
// cannot import).
func poolLabels(p NodePool) map[string]string {
	l := make(map[string]string, len(p.Labels)+1)
	for k, v := range p.Labels {
		l[k] = v
	}
	l["fleetlet.io/pool"] = p.Name
	return l
}

// faultReferences checks fault phase names and what heal phases name: each
// heal names an earlier fault phase without a duration, not healed before,
// and fault phases have names of their own.
func faultReferences(phases []Phase, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	faults := map[string]*FaultPhase{}
	healed := sets.New[string]()
	names := sets.New[string]()
	for i, ph := range phases {
		if ph.Fault != nil {
			if names.Has(ph.Name) {
				errs = append(errs, field.Duplicate(path.Index(i).Child("name"), ph.Name))
			}
			faults[ph.Name] = ph.Fault
		}
		names.Insert(ph.Name)
		h := ph.Heal
		if h == nil {
			continue
		}
		hp := path.Index(i).Child("heal", "phase")
		f, ok := faults[h.Phase]
		switch {
		case h.Phase == "":
			errs = append(errs, field.Required(hp, "name the fault phase to end"))
		case !ok:
			errs = append(errs, field.Invalid(hp, h.Phase, "must name an earlier fault phase"))
		case f.Duration.Duration > 0:
			errs = append(errs, field.Invalid(hp, h.Phase, fmt.Sprintf("that fault ends by itself after its duration (%s); drop its duration to end it here", f.Duration.Duration)))
		case healed.Has(h.Phase):
			errs = append(errs, field.Duplicate(hp, h.Phase))
		}
		healed.Insert(h.Phase)
		errs = append(errs, notNegative(h.Timeout, path.Index(i).Child("heal", "timeout"))...)
	}
	return errs
}
