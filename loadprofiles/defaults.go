package loadprofiles

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Defaults for fields a profile may leave out. Pool shape and rates follow the
// quickstart profile; maxPods is the kubelet's own default.
const (
	DefaultPodsPerNode = 110
	DefaultQPS         = 50
	DefaultWaitTimeout = 5 * time.Minute
)

// DefaultNodeCPU is a node's CPU capacity when its pool does not say: a
// common 8 vCPU machine. Quantities are not constants, hence a function.
func DefaultNodeCPU() resource.Quantity { return resource.MustParse("8") }

// DefaultNodeMemory is a node's memory capacity when its pool does not say.
func DefaultNodeMemory() resource.Quantity { return resource.MustParse("32Gi") }

// defaultPhaseName names a phase after its action, in DNS-label spelling so
// that it can prefix pod names.
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
// names, rates, and wait and churn timeouts. For those fields zero means "not
// set", so an explicit zero is defaulted rather than rejected; negative values
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
	}
}
