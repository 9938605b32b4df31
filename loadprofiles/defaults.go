package loadprofiles

import (
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Defaults for fields a profile may leave out. Pool shape and rates follow the
// quickstart profile; maxPods is the kubelet's own default.
const (
	DefaultPodsPerNode = 110
	DefaultQPS         = 50
	DefaultWaitTimeout = 5 * time.Minute
	// DefaultServicePort and DefaultServiceTargetPort are a services
	// phase's port and the pods' port it forwards to.
	DefaultServicePort       = 80
	DefaultServiceTargetPort = 8080
)

// DefaultNodeCPU is a node's CPU capacity when its pool does not say: a
// common 8 vCPU machine. Quantities are not constants, hence a function.
func DefaultNodeCPU() resource.Quantity { return resource.MustParse("8") }

// DefaultNodeMemory is a node's memory capacity when its pool does not say.
func DefaultNodeMemory() resource.Quantity { return resource.MustParse("32Gi") }

// defaultPhaseName names a phase after its action, in DNS-label spelling so
// that it can prefix pod and Service names.
func defaultPhaseName(action string) string {
	switch action {
	case "waitRunning":
		return "wait-running"
	case "waitGone":
		return "wait-gone"
	}
	return action
}

// Default fills the fields left out: a pool's pods, cpu and memory, phase
// names, rates, wait and churn timeouts, and Service ports. For those fields zero means "not
// set": Parse rejects a zero the profile writes (explicitZeros) before it
// defaults, and a profile built in Go gets the default. Negative values
// are left for Validate to report. Counts are never defaulted: a profile must
// say how many nodes and pods it wants. Fake runtime latencies are not defaulted
// either (see RuntimeBehaviour).
func (p *Profile) Default() {
	for i := range p.NodePools {
		pool := &p.NodePools[i]
		if pool.Pods == 0 {
			pool.Pods = DefaultPodsPerNode
		}
		if pool.CPU.IsZero() {
			pool.CPU = DefaultNodeCPU()
		}
		if pool.Memory.IsZero() {
			pool.Memory = DefaultNodeMemory()
		}
	}
	for i := range p.Phases {
		ph := &p.Phases[i]
		if ph.Name == "" {
			ph.Name = defaultPhaseName(ph.action())
		}
		if c := ph.Create; c != nil && c.QPS == 0 {
			c.QPS = DefaultQPS
		}
		if d := ph.Delete; d != nil && d.QPS == 0 {
			d.QPS = DefaultQPS
		}
		if c := ph.Create; c != nil && c.Object != "" && c.Namespaces == 0 {
			c.Namespaces = 1
		}
		if sc := ph.Scale; sc != nil && sc.QPS == 0 {
			sc.QPS = DefaultQPS
		}
		if u := ph.Update; u != nil && u.QPS == 0 {
			u.QPS = DefaultQPS
		}
		for _, w := range []*WaitPhase{ph.WaitRunning, ph.WaitGone} {
			if w != nil && w.Timeout.Duration == 0 {
				w.Timeout.Duration = DefaultWaitTimeout
			}
		}
		// A churn's rate is not defaulted: unlike a create's count, nothing
		// else in the phase says how hard it should push.
		if c := ph.Churn; c != nil && c.Timeout.Duration == 0 {
			c.Timeout.Duration = DefaultWaitTimeout
		}
		if f := ph.Fault; f != nil {
			if f.Kind == FaultRegistryErrors && f.PullError == "" {
				f.PullError = DefaultPullError
			}
			if f.Duration.Duration > 0 && f.ReadyTimeout.Duration == 0 {
				f.ReadyTimeout.Duration = DefaultWaitTimeout
			}
		}
		if h := ph.Heal; h != nil && h.Timeout.Duration == 0 {
			h.Timeout.Duration = DefaultWaitTimeout
		}
		if s := ph.Services; s != nil {
			if s.QPS == 0 {
				s.QPS = DefaultQPS
			}
			if s.Port == 0 {
				s.Port = DefaultServicePort
			}
			if s.TargetPort == 0 {
				s.TargetPort = DefaultServiceTargetPort
			}
		}
	}
}

// explicitZeros reports the fields that Default would fill which the profile
// sets to zero, as tree (the decoded JSON that p was decoded from) shows
// them: a written "qps: 0" is a mistake, not a request for the default
// rate of 50, which is not what it says. A field left out, or written as
// null, is not set.
func explicitZeros(p *Profile, tree any) field.ErrorList {
	var errs field.ErrorList
	zero := func(path *field.Path, value any, def string) {
		errs = append(errs, field.Invalid(path, value, "must be greater than zero; leave it out for the default "+def))
	}
	defaultCPU, defaultMemory := DefaultNodeCPU(), DefaultNodeMemory()
	doc := asMapping(tree)
	pools := asList(doc["nodePools"])
	for i := range p.NodePools {
		pool, written, pp := &p.NodePools[i], asMapping(item(pools, i)), field.NewPath("nodePools").Index(i)
		if set(written, "cpu") && pool.CPU.IsZero() {
			zero(pp.Child("cpu"), pool.CPU.String(), defaultCPU.String())
		}
		if set(written, "memory") && pool.Memory.IsZero() {
			zero(pp.Child("memory"), pool.Memory.String(), defaultMemory.String())
		}
		if set(written, "pods") && pool.Pods == 0 {
			zero(pp.Child("pods"), pool.Pods, strconv.Itoa(DefaultPodsPerNode))
		}
	}
	phases := asList(doc["phases"])
	for i := range p.Phases {
		ph, written, pp := &p.Phases[i], asMapping(item(phases, i)), field.NewPath("phases").Index(i)
		if c := ph.Create; c != nil && c.QPS == 0 && set(asMapping(written["create"]), "qps") {
			zero(pp.Child("create", "qps"), c.QPS, strconv.Itoa(DefaultQPS))
		}
		if d := ph.Delete; d != nil && d.QPS == 0 && set(asMapping(written["delete"]), "qps") {
			zero(pp.Child("delete", "qps"), d.QPS, strconv.Itoa(DefaultQPS))
		}
		for _, w := range []struct {
			action string
			phase  *WaitPhase
		}{{"waitRunning", ph.WaitRunning}, {"waitGone", ph.WaitGone}} {
			if w.phase != nil && w.phase.Timeout.Duration == 0 && set(asMapping(written[w.action]), "timeout") {
				zero(pp.Child(w.action, "timeout"), w.phase.Timeout.Duration.String(), DefaultWaitTimeout.String())
			}
		}
		if c := ph.Churn; c != nil && c.Timeout.Duration == 0 && set(asMapping(written["churn"]), "timeout") {
			zero(pp.Child("churn", "timeout"), c.Timeout.Duration.String(), DefaultWaitTimeout.String())
		}
		if f := ph.Fault; f != nil && f.ReadyTimeout.Duration == 0 && set(asMapping(written["fault"]), "readyTimeout") {
			zero(pp.Child("fault", "readyTimeout"), f.ReadyTimeout.Duration.String(), DefaultWaitTimeout.String())
		}
		if h := ph.Heal; h != nil && h.Timeout.Duration == 0 && set(asMapping(written["heal"]), "timeout") {
			zero(pp.Child("heal", "timeout"), h.Timeout.Duration.String(), DefaultWaitTimeout.String())
		}
		if s := ph.Services; s != nil {
			w, sp := asMapping(written["services"]), pp.Child("services")
			if s.QPS == 0 && set(w, "qps") {
				zero(sp.Child("qps"), s.QPS, strconv.Itoa(DefaultQPS))
			}
			if s.Port == 0 && set(w, "port") {
				zero(sp.Child("port"), s.Port, strconv.Itoa(DefaultServicePort))
			}
			if s.TargetPort == 0 && set(w, "targetPort") {
				zero(sp.Child("targetPort"), s.TargetPort, strconv.Itoa(DefaultServiceTargetPort))
			}
		}
	}
	return errs
}

// asMapping, asList and item read the decoded JSON tree, giving nil where it
// has some other shape (checkFields has reported that already).
func asMapping(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func item(l []any, i int) any {
	if i < len(l) {
		return l[i]
	}
	return nil
}

// set reports whether m gives key a value other than null.
func set(m map[string]any, key string) bool {
	v, ok := m[key]
	return ok && v != nil
}
