package loadprofiles

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/loadprofiles/objects"
	"github.com/fleetlet/fleetlet/nodeagent"
	"github.com/fleetlet/fleetlet/nodeagent/staticpods"
)

// The watch modes a profile may ask for; the fleet package defines what
// they do (loadprofiles does not import it).
const (
	WatchPerNode = "per-node"
	WatchShared  = "shared"
)

// Static limits on what one fleetlet process can hold, checked when a profile
// loads so that a typo's extra zeros fail at once rather than as an
// out-of-memory kill minutes into the run. The machine's memory may allow
// less; the CLI checks that separately.
const (
	// MaxNodes is the most nodes one fleetlet process emulates, over all
	// of a profile's node pools and any sweep step: at about 1 MiB of RSS
	// per agent, 100,000 of them take about 100 GiB. Shard larger fleets
	// over several processes (fleetlet fleet --shard).
	MaxNodes = 100_000
	// MaxPodsPerPhase is the most pods one phase may create: a create
	// phase's count, or a churn's ⌈qps × duration⌉. The driver keeps a
	// record of every pod it creates for the run's measurements.
	MaxPodsPerPhase = 1_000_000
	// MaxServicesPerPhase is the most Services one services phase may
	// create. Every kube-proxy holds every Service and its EndpointSlices,
	// so each one costs the whole fleet memory and syncs; clusterloader2's
	// largest load tests stop at about this many per cluster.
	MaxServicesPerPhase = 10_000
)

// Validate checks a defaulted profile and reports every problem at once, one
// per line, each naming its field path, for example
//
//	nodePools[0].count: Invalid value: -1: must be greater than zero
//
// The error unwraps to the individual *field.Error values.
func (p *Profile) Validate() error {
	var errs field.ErrorList
	if p.Name == "" {
		errs = append(errs, field.Required(field.NewPath("name"), "a profile needs a name"))
	}
	errs = append(errs, validatePools(p.NodePools, field.NewPath("nodePools"))...)
	errs = append(errs, validateRuntime(&p.Runtime, field.NewPath("runtime"))...)
	if p.WatchMode != "" && p.WatchMode != WatchPerNode && p.WatchMode != WatchShared {
		errs = append(errs, field.NotSupported(field.NewPath("watchMode"), p.WatchMode, []string{WatchPerNode, WatchShared}))
	}
	if p.Sweep != nil {
		errs = append(errs, validateSweep(p, field.NewPath("sweep"))...)
	}
	phasesPath := field.NewPath("phases")
	if len(p.Phases) == 0 {
		errs = append(errs, field.Required(phasesPath,
			"a profile needs at least one phase; to only run the fleet for a while, use [{sleep: {duration: 10m}}]"))
	}
	for i := range p.Phases {
		errs = append(errs, validatePhase(&p.Phases[i], phasesPath.Index(i))...)
		if f := p.Phases[i].Fault; f != nil {
			errs = append(errs, validateFault(f, p.NodePools, phasesPath.Index(i))...)
		}
	}
	errs = append(errs, faultReferences(p.Phases, phasesPath)...)
	errs = append(errs, uniqueServiceNames(p.Phases, phasesPath)...)
	errs = append(errs, objectPhaseReferences(p.Phases, phasesPath)...)
	errs = append(errs, podStartupScope(p, field.NewPath("slos", "podStartupPhases"))...)
	// A waitRunning before any create, or a waitGone before any delete, waits
	// for nothing; that is pointless but harmless, so it is not an error.
	if len(errs) == 0 {
		return nil
	}
	return &invalidError{errs: errs}
}

// podStartupScope checks that slos.podStartupPhases names phases that make
// pods: a create (of pods, or of objects) or a churn.
func podStartupScope(p *Profile, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	makers := sets.New[string]()
	for _, ph := range p.Phases {
		if ph.Create != nil || ph.Churn != nil {
			makers.Insert(ph.Name)
		}
	}
	for i, name := range p.SLOs.PodStartupPhases {
		if !makers.Has(name) {
			errs = append(errs, field.Invalid(path.Index(i), name, fmt.Sprintf(
				"must name a create or churn phase of this profile, whose pods the pod startup SLO then judges (phases that make pods: %s)",
				strings.Join(sets.List(makers), ", "))))
		}
	}
	return errs
}

func validatePools(pools []NodePool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(pools) == 0 {
		return append(errs, field.Required(path, "at least one node pool is needed"))
	}
	seen := sets.New[string]()
	for i := range pools {
		pool, pp := &pools[i], path.Index(i)
		switch {
		case pool.Name == "":
			errs = append(errs, field.Required(pp.Child("name"), "node names are made from it"))
		case seen.Has(pool.Name):
			errs = append(errs, field.Duplicate(pp.Child("name"), pool.Name))
		default:
			errs = append(errs, dnsLabel(pool.Name, pp.Child("name"))...)
		}
		seen.Insert(pool.Name)
		errs = append(errs, positive(pool.Count, pp.Child("count"))...)
		if pool.Count > MaxNodes {
			errs = append(errs, tooManyNodes(pp.Child("count"), pool.Count, pool.Count))
		}
		errs = append(errs, positiveQuantity(pool.CPU, pp.Child("cpu"))...)
		errs = append(errs, positiveQuantity(pool.Memory, pp.Child("memory"))...)
		errs = append(errs, positive(pool.Pods, pp.Child("pods"))...)
		errs = append(errs, validateLabels(pool.Labels, pp.Child("labels"))...)
		for j, taint := range pool.Taints {
			errs = append(errs, validateTaint(taint, pp.Child("taints").Index(j))...)
		}
		if pool.Kubelet != nil {
			errs = append(errs, validateKubelet(pool, pp)...)
		}
		errs = append(errs, validateStaticPods(pool.StaticPods, pp.Child("staticPods"))...)
		errs = append(errs, validateSystemUsage(pool, pp.Child("systemUsage"))...)
		if kp := pool.KubeProxy; kp != nil && kp.MinSyncPeriod.Duration < 0 {
			errs = append(errs, field.Invalid(pp.Child("kubeProxy", "minSyncPeriod"), kp.MinSyncPeriod.Duration.String(),
				"must not be negative; leave it out for kube-proxy's default, 1s"))
		}
	}
	total := 0
	tooBig := false
	for _, pool := range pools {
		total += max(pool.Count, 0)
		tooBig = tooBig || pool.Count > MaxNodes
	}
	if total > MaxNodes && !tooBig { // a single pool's count over it is reported above
		errs = append(errs, field.Invalid(path, total, fmt.Sprintf(
			"the pools' counts add up to %d nodes, more than the %d one fleetlet process emulates; shard larger fleets over several processes (fleetlet fleet --shard; README, Past one machine)",
			total, MaxNodes)))
	}
	return errs
}

// validateSystemUsage checks a pool's usage outside pods: cpu and memory
// only, never negative, and less than the node's capacity.
func validateSystemUsage(pool *NodePool, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, name := range sets.List(sets.KeySet(pool.SystemUsage)) {
		q, p := pool.SystemUsage[name], path.Key(string(name))
		capacity := map[corev1.ResourceName]resource.Quantity{corev1.ResourceCPU: pool.CPU, corev1.ResourceMemory: pool.Memory}
		c, ok := capacity[name]
		switch {
		case !ok:
			errs = append(errs, field.NotSupported(path, string(name), []string{"cpu", "memory"}))
		case q.Sign() < 0:
			errs = append(errs, field.Invalid(p, q.String(), `must not be negative; "0" is none`))
		case c.Sign() > 0 && q.Cmp(c) >= 0:
			errs = append(errs, field.Invalid(p, q.String(), fmt.Sprintf("must be less than the node's %s, %s", name, c.String())))
		}
	}
	return errs
}

// tooManyNodes is the error for a count, or a sweep step, that makes more
// than MaxNodes nodes in all.
func tooManyNodes(path *field.Path, value, total int) *field.Error {
	return field.Invalid(path, value, fmt.Sprintf(
		"makes %d nodes, more than the %d one fleetlet process emulates; shard larger fleets over several processes (fleetlet fleet --shard; README, Past one machine)",
		total, MaxNodes))
}

// validateKubelet checks a pool's kubelet settings as an agent would when it
// starts: applied over the kubelet's defaults, as the fleet applies them.
func validateKubelet(pool *NodePool, path *field.Path) field.ErrorList {
	kp := path.Child("kubelet")
	if pool.Kubelet.has("maxPods") {
		return field.ErrorList{field.Forbidden(kp.Child("maxPods"), "a pool's pods is its nodes' maxPods: set "+path.Child("pods").String()+" instead")}
	}
	kc := nodeagent.DefaultKubeletConfiguration()
	kc.MaxPods = int32(min(pool.Pods, math.MaxInt32))
	if err := pool.Kubelet.ApplyTo(kc); err != nil {
		// checkFields has checked each value against its type already.
		return field.ErrorList{field.Invalid(kp, field.OmitValueType{}, err.Error())}
	}
	var errs field.ErrorList
	for _, e := range nodeagent.ValidateKubeletConfiguration(kc) {
		rebased := *e
		rebased.Field = kp.String() + "." + e.Field
		errs = append(errs, &rebased)
	}
	return errs
}

// validateStaticPods checks a pool's inline static pods as its nodes'
// kubelets will read them (staticpods.FromPod): a pod that one would skip
// fails the profile instead. Two of the same name and namespace would
// leave one of them out on every node.
func validateStaticPods(pods []corev1.Pod, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i := range pods {
		p := path.Index(i)
		m, err := staticpods.FromPod(staticpods.InlineSource(i), &pods[i])
		if err != nil {
			errs = append(errs, field.Invalid(p, pods[i].Name, strings.TrimPrefix(err.Error(), staticpods.InlineSource(i)+": ")))
			continue
		}
		if seen.Has(m.Key()) {
			errs = append(errs, field.Duplicate(p.Child("metadata", "name"), m.Key()))
		}
		seen.Insert(m.Key())
	}
	return errs
}

func validateRuntime(r *RuntimeBehaviour, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, notNegative(r.PullLatency, path.Child("pullLatency"))...)
	errs = append(errs, notNegative(r.SandboxStartLatency, path.Child("sandboxStartLatency"))...)
	errs = append(errs, notNegative(r.ContainerCreateLatency, path.Child("containerCreateLatency"))...)
	errs = append(errs, notNegative(r.ContainerStartLatency, path.Child("containerStartLatency"))...)
	errs = append(errs, notNegative(r.StopLatency, path.Child("stopLatency"))...)
	return errs
}

func validatePhase(ph *Phase, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	actions := ph.actions()
	switch len(actions) {
	case 0:
		return append(errs, field.Required(path, "a phase needs one action: create, scale, update, waitRunning, delete, waitGone, sleep, churn, services, fault or heal"))
	case 1:
	default:
		for _, extra := range actions[1:] {
			errs = append(errs, field.Forbidden(path.Child(extra),
				fmt.Sprintf("a phase has exactly one action, and this one already has %s", actions[0])))
		}
	}
	errs = append(errs, dnsLabel(ph.Name, path.Child("name"))...)

	if c := ph.Create; c != nil {
		cp := path.Child("create")
		errs = append(errs, positive(c.Count, cp.Child("count"))...)
		errs = append(errs, positiveRate(c.QPS, cp.Child("qps"))...)
		if c.Object == "" {
			if c.Count > MaxPodsPerPhase {
				errs = append(errs, field.Invalid(cp.Child("count"), c.Count, fmt.Sprintf(
					"must be at most %d, the pods one phase may create", MaxPodsPerPhase)))
			}
			errs = append(errs, validateTemplate(&c.Template, cp.Child("template"))...)
			if len(c.Params) > 0 {
				errs = append(errs, field.Forbidden(cp.Child("params"), "params fill an object template; a pod template takes none"))
			}
			if c.Namespaces > 1 {
				errs = append(errs, field.Forbidden(cp.Child("namespaces"), "pods are created in the run's namespace; spread objects with an object template instead"))
			}
		} else {
			errs = append(errs, validateObjectCreate(ph.Name, c, cp)...)
		}
	}
	if sc := ph.Scale; sc != nil {
		sp := path.Child("scale")
		errs = append(errs, positiveRate(sc.QPS, sp.Child("qps"))...)
		switch {
		case sc.Replicas == nil && sc.Factor == nil:
			errs = append(errs, field.Required(sp, "give replicas (the same for every object) or factor (two bounds, such as [0.5, 1.5])"))
		case sc.Replicas != nil && sc.Factor != nil:
			errs = append(errs, field.Forbidden(sp.Child("factor"), "give replicas or factor, not both"))
		case sc.Replicas != nil && *sc.Replicas < 0:
			errs = append(errs, field.Invalid(sp.Child("replicas"), *sc.Replicas, "must not be negative"))
		case sc.Factor != nil && (len(sc.Factor) != 2 || sc.Factor[0] < 0 || sc.Factor[0] > sc.Factor[1]):
			errs = append(errs, field.Invalid(sp.Child("factor"), sc.Factor, "must be two bounds, low then high, neither negative, such as [0.5, 1.5]"))
		}
	}
	if u := ph.Update; u != nil {
		up := path.Child("update")
		errs = append(errs, positiveRate(u.QPS, up.Child("qps"))...)
		if u.Object != "" {
			if _, err := objects.Parse(ph.Name, u.Object); err != nil {
				errs = append(errs, field.Invalid(up.Child("object"), field.OmitValueType{}, err.Error()))
			}
		}
	}
	if w := ph.WaitRunning; w != nil {
		errs = append(errs, notNegative(w.Timeout, path.Child("waitRunning", "timeout"))...)
	}
	if d := ph.Delete; d != nil {
		errs = append(errs, positiveRate(d.QPS, path.Child("delete", "qps"))...)
	}
	if w := ph.WaitGone; w != nil {
		errs = append(errs, notNegative(w.Timeout, path.Child("waitGone", "timeout"))...)
	}
	if s := ph.Sleep; s != nil {
		errs = append(errs, notNegative(s.Duration, path.Child("sleep", "duration"))...)
	}
	if c := ph.Churn; c != nil {
		cp := path.Child("churn")
		errs = append(errs, positiveRate(c.QPS, cp.Child("qps"))...)
		errs = append(errs, positiveDuration(c.Duration, cp.Child("duration"))...)
		errs = append(errs, notNegative(c.Lifetime, cp.Child("lifetime"))...)
		errs = append(errs, notNegative(c.Timeout, cp.Child("timeout"))...)
		if pods := churnPods(c.QPS, c.Duration.Duration); pods > MaxPodsPerPhase {
			errs = append(errs, field.Invalid(cp, field.OmitValueType{}, fmt.Sprintf(
				"qps %v for duration %s creates %.0f pods, more than the %d one phase may create; lower the rate or the duration",
				c.QPS, c.Duration.Duration, pods, MaxPodsPerPhase)))
		}
		errs = append(errs, validateTemplate(&c.Template, cp.Child("template"))...)
	}
	if s := ph.Services; s != nil {
		errs = append(errs, validateServices(ph.Name, s, path)...)
	}
	return errs
}

// validateServices checks a services phase; path is the phase's.
func validateServices(name string, s *ServicesPhase, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	sp := path.Child("services")
	errs = append(errs, positive(s.Count, sp.Child("count"))...)
	if s.Count > MaxServicesPerPhase {
		errs = append(errs, field.Invalid(sp.Child("count"), s.Count, fmt.Sprintf(
			"must be at most %d, the Services one phase may create: every kube-proxy of the fleet holds each of them", MaxServicesPerPhase)))
	}
	errs = append(errs, positiveRate(s.QPS, sp.Child("qps"))...)
	selector := sp.Child("selector")
	if len(s.Selector) == 0 {
		errs = append(errs, field.Required(selector,
			"the Services select the run's pods by label, for example {app: web}: without a selector they get no endpoints"))
	}
	errs = append(errs, validateLabels(s.Selector, selector)...)
	if _, ok := s.Selector[LabelRun]; ok {
		errs = append(errs, field.Forbidden(selector.Key(LabelRun),
			"the driver adds this key, so that the Services select only the run's own pods"))
	}
	errs = append(errs, portNumber(s.Port, sp.Child("port"))...)
	errs = append(errs, portNumber(s.TargetPort, sp.Child("targetPort"))...)

	// The Services are named <name>-<i>, and a Service's name is a
	// DNS-1035 label: it starts with a letter. The longest is the last's.
	if len(dnsLabel(name, path.Child("name"))) == 0 && s.Count > 0 {
		last := fmt.Sprintf("%s-%d", name, min(s.Count, MaxServicesPerPhase)-1)
		switch {
		case name[0] < 'a' || name[0] > 'z':
			errs = append(errs, field.Invalid(path.Child("name"), name,
				"names the phase's Services <name>-<i>, and a Service's name must start with a letter: rename the phase"))
		case len(last) > validation.DNS1035LabelMaxLength:
			errs = append(errs, field.Invalid(path.Child("name"), name, fmt.Sprintf(
				"names the phase's Services up to %s, %d characters, and a Service's name is at most %d: shorten the phase name",
				last, len(last), validation.DNS1035LabelMaxLength)))
		}
	}
	return errs
}

// uniqueServiceNames reports a services phase named as an earlier one:
// their Services would have the same names, and the second phase's creates
// would all fail. (Names <name>-<i> of phases named differently never
// collide: i is all digits, so the last "-" tells the name.)
// MaxObjectsPerPhase is the most objects one create phase may make from an
// object template: clusterloader2's load test at 5,000 nodes makes about
// this many Deployments, StatefulSets, Jobs, Services and ConfigMaps in all.
const MaxObjectsPerPhase = 100_000

// validateObjectCreate checks a create phase with an object template: the
// template parses, and the count and namespaces are within bounds. What the
// template renders to is checked when the run renders it, with each index.
func validateObjectCreate(name string, c *CreatePhase, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.Count > MaxObjectsPerPhase {
		errs = append(errs, field.Invalid(path.Child("count"), c.Count, fmt.Sprintf(
			"must be at most %d, the objects one phase may create", MaxObjectsPerPhase)))
	}
	if !reflect.DeepEqual(c.Template, corev1.PodTemplateSpec{}) {
		errs = append(errs, field.Forbidden(path.Child("template"), "give a pod template or an object template, not both"))
	}
	if c.Namespaces < 0 {
		errs = append(errs, field.Invalid(path.Child("namespaces"), c.Namespaces, "must be at least 1; leave it out for the run's namespace alone"))
	}
	if c.Namespaces > c.Count {
		errs = append(errs, field.Invalid(path.Child("namespaces"), c.Namespaces, fmt.Sprintf(
			"must be at most count (%d): a namespace with none of the phase's objects in it is never made", c.Count)))
	}
	if _, err := objects.Parse(name, c.Object); err != nil {
		errs = append(errs, field.Invalid(path.Child("object"), field.OmitValueType{}, err.Error()))
	}
	return errs
}

// objectPhaseReferences checks the phase names that scale, update and
// delete give: each must be an earlier create phase with an object
// template, and create phases with object templates have names of their
// own, since their objects are named after them.
func objectPhaseReferences(phases []Phase, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	creates := map[string]int{}
	for i, ph := range phases {
		refer := func(action, name string) {
			if name == "" {
				return
			}
			if _, ok := creates[name]; !ok {
				errs = append(errs, field.Invalid(path.Index(i).Child(action, "phase"), name,
					"must name an earlier create phase with an object template"))
			}
		}
		switch {
		case ph.Create != nil && ph.Create.Object != "":
			if j, ok := creates[ph.Name]; ok {
				errs = append(errs, field.Invalid(path.Index(i).Child("name"), ph.Name, fmt.Sprintf(
					"%s is a create phase of this name already, and objects are named after their phase: give each create phase its own name",
					path.Index(j))))
				continue
			}
			creates[ph.Name] = i
		case ph.Scale != nil:
			if ph.Scale.Phase == "" {
				errs = append(errs, field.Required(path.Index(i).Child("scale", "phase"), "name the create phase whose objects to scale"))
			}
			refer("scale", ph.Scale.Phase)
		case ph.Update != nil:
			if ph.Update.Phase == "" {
				errs = append(errs, field.Required(path.Index(i).Child("update", "phase"), "name the create phase whose objects to update"))
			}
			refer("update", ph.Update.Phase)
		case ph.Delete != nil:
			refer("delete", ph.Delete.Phase)
		}
	}
	return errs
}

func uniqueServiceNames(phases []Phase, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	first := map[string]int{}
	for i, ph := range phases {
		if ph.Services == nil {
			continue
		}
		if j, ok := first[ph.Name]; ok {
			errs = append(errs, field.Invalid(path.Index(i).Child("name"), ph.Name, fmt.Sprintf(
				"%s is a services phase of this name already, and Services are named after their phase: give each services phase its own name",
				path.Index(j))))
			continue
		}
		first[ph.Name] = i
	}
	return errs
}

// validateTemplate checks what the driver needs to create pods from the
// template; the API server validates the rest when the pods are created.
func validateTemplate(t *corev1.PodTemplateSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	meta := path.Child("metadata")
	const named = "the driver names pods after the phase"
	if t.Name != "" {
		errs = append(errs, field.Forbidden(meta.Child("name"), named))
	}
	if t.GenerateName != "" {
		errs = append(errs, field.Forbidden(meta.Child("generateName"), named))
	}
	if t.Namespace != "" {
		errs = append(errs, field.Forbidden(meta.Child("namespace"), "the driver creates pods in its own namespace"))
	}
	errs = append(errs, validateLabels(t.Labels, meta.Child("labels"))...)
	for _, key := range []string{LabelRun, LabelPhase} {
		if _, ok := t.Labels[key]; ok {
			errs = append(errs, field.Forbidden(meta.Child("labels").Key(key), "the driver sets this label"))
		}
	}
	// The fake runtime's annotations, checked by the runtime's own parser:
	// otherwise a typo shows only as pods failing in the run.
	annotations := meta.Child("annotations")
	if v, ok := t.Annotations[fakeruntime.AnnotationBehaviour]; ok {
		if _, err := fakeruntime.ParsePodBehaviour(v); err != nil {
			errs = append(errs, field.Invalid(annotations.Key(fakeruntime.AnnotationBehaviour), field.OmitValueType{}, yamlProblem(err)))
		}
	}
	if v, ok := t.Annotations[fakeruntime.AnnotationPullError]; ok {
		errs = append(errs, fakeruntime.ValidatePullError(v, annotations.Key(fakeruntime.AnnotationPullError))...)
	}

	containers := path.Child("spec", "containers")
	if len(t.Spec.Containers) == 0 {
		return append(errs, field.Required(containers, "a pod needs at least one container"))
	}
	for i, c := range t.Spec.Containers {
		cp := containers.Index(i)
		if c.Name == "" {
			errs = append(errs, field.Required(cp.Child("name"), ""))
		} else {
			errs = append(errs, dnsLabel(c.Name, cp.Child("name"))...)
		}
		if c.Image == "" {
			errs = append(errs, field.Required(cp.Child("image"), ""))
		}
	}
	return errs
}

func validateLabels(labels map[string]string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys) // map order would make the error text differ run to run
	for _, k := range keys {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(path, k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(labels[k]) {
			errs = append(errs, field.Invalid(path.Key(k), labels[k], msg))
		}
	}
	return errs
}

func validateTaint(t corev1.Taint, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(t.Key) {
		errs = append(errs, field.Invalid(path.Child("key"), t.Key, msg))
	}
	for _, msg := range validation.IsValidLabelValue(t.Value) {
		errs = append(errs, field.Invalid(path.Child("value"), t.Value, msg))
	}
	effects := []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}
	switch t.Effect {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	case "":
		errs = append(errs, field.Required(path.Child("effect"), ""))
	default:
		errs = append(errs, field.NotSupported(path.Child("effect"), t.Effect, effects))
	}
	return errs
}

func dnsLabel(name string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(name) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	return errs
}

func positive(n int, path *field.Path) field.ErrorList {
	if n > 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(path, n, "must be greater than zero")}
}

func portNumber(port int32, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsValidPortNum(int(port)) {
		errs = append(errs, field.Invalid(path, port, msg))
	}
	return errs
}

func positiveRate(qps float64, path *field.Path) field.ErrorList {
	if qps > 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(path, qps, "must be greater than zero")}
}

func positiveQuantity(q resource.Quantity, path *field.Path) field.ErrorList {
	if q.Sign() > 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(path, q.String(), "must be greater than zero")}
}

func positiveDuration(d metav1.Duration, path *field.Path) field.ErrorList {
	if d.Duration > 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(path, d.Duration.String(), "must be greater than zero")}
}

func notNegative(d metav1.Duration, path *field.Path) field.ErrorList {
	if d.Duration >= 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(path, d.Duration.String(), "must not be negative")}
}

// invalidError is a profile's validation problems, one per line. source, when
// set, names the profile in the first line.
type invalidError struct {
	source string
	errs   field.ErrorList
}

func (e *invalidError) Error() string {
	lines := make([]string, len(e.errs))
	for i, err := range e.errs {
		lines[i] = err.Error()
	}
	switch {
	case e.source == "":
		return strings.Join(lines, "\n")
	case len(lines) == 1:
		return fmt.Sprintf("profile %s: %s", e.source, lines[0])
	default:
		return fmt.Sprintf("profile %s has %d problems:\n  %s", e.source, len(lines), strings.Join(lines, "\n  "))
	}
}

// Unwrap gives errors.As access to each *field.Error.
func (e *invalidError) Unwrap() []error {
	errs := make([]error, len(e.errs))
	for i, err := range e.errs {
		errs[i] = err
	}
	return errs
}

// withSource names the profile in a validation error.
func withSource(err error, source string) error {
	var inv *invalidError
	if errors.As(err, &inv) {
		return &invalidError{source: source, errs: inv.errs}
	}
	return fmt.Errorf("profile %s: %w", source, err)
}

func validateSweep(p *Profile, path *field.Path) field.ErrorList {
	sw := p.Sweep
	var errs field.ErrorList
	if sw.Parameter != "nodes" && sw.Parameter != "qps" {
		errs = append(errs, field.NotSupported(path.Child("parameter"), sw.Parameter, []string{"nodes", "qps"}))
	}
	if len(sw.Values) == 0 {
		errs = append(errs, field.Required(path.Child("values"), "a sweep needs at least one step"))
	}
	for i, v := range sw.Values {
		vp := path.Child("values").Index(i)
		if v <= 0 || (i > 0 && v <= sw.Values[i-1]) {
			errs = append(errs, field.Invalid(vp, v, "steps must be positive and increasing"))
			continue
		}
		switch {
		case sw.Parameter == "nodes" && len(p.NodePools) > 0:
			// The step replaces the first pool's count.
			if total := p.TotalNodes() - p.NodePools[0].Count + v; total > MaxNodes {
				errs = append(errs, tooManyNodes(vp, v, total))
			}
		case sw.Parameter == "qps":
			for j, ph := range p.Phases {
				if c := ph.Churn; c != nil {
					if pods := churnPods(float64(v), c.Duration.Duration); pods > MaxPodsPerPhase {
						errs = append(errs, field.Invalid(vp, v, fmt.Sprintf(
							"makes phases[%d].churn create %.0f pods in its %s, more than the %d one phase may create",
							j, pods, c.Duration.Duration, MaxPodsPerPhase)))
					}
				}
			}
		}
	}
	return errs
}

// churnPods is churnCount in floats, which a rate too high for an int does
// not overflow.
func churnPods(qps float64, d time.Duration) float64 {
	return math.Ceil(qps*d.Seconds() - 1e-6)
}
