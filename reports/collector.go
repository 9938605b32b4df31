package reports

import (
	"hash/maphash"
	"slices"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"k8s.io/apimachinery/pkg/types"
)

// numShards splits the per-pod map so that thousands of agents stamping
// milestones at once rarely wait on the same lock. A power of two, so the
// shard is picked with a mask.
const numShards = 64

// Collector implements Recorder: it keeps the first stamp of every milestone of
// every pod, and at the end of a run turns them into phase histograms.
//
// Stamps are stored as offsets from a base time taken when the Collector is
// made, rather than as time.Time values: 8 bytes instead of 24 per milestone,
// and the difference of two offsets is exactly the difference of the two
// times. When both times carry Go's monotonic reading (the real clock), the
// offsets are monotonic; when they do not (a fake clock), they are wall-clock
// differences, as time.Time.Sub would give. A pod stamped from both kinds of
// clock gets a difference that is neither; the Recorder contract (one
// clock.Clock) rules that out, with one exception below.
//
// The Collector's clock is its base's wall reading advanced by the
// monotonic time since base: a stamp at offset d is at wall time
// base.Round(0).Add(d) on it, and Now reads it. A time given to Mark without
// a monotonic reading is taken as a reading of this clock (at.Sub(base) then
// subtracts wall readings, which is the same thing). That is how stamps of
// another process come in (Import): read on that process's clock, moved onto
// this one by the measured offset between the two (MeasureClock), and
// marked beside this process's own monotonic stamps. A phase between the two
// is then a difference on this clock, as exact as the offset; a phase
// within either process stays a monotonic difference. This clock and the
// machine's wall clock part when the latter is stepped after base; nothing
// here reads the machine's wall clock after base.
//
// Pods are never forgotten: each costs about 130 bytes here plus its UID
// string, about 180 MB per million pods.
type Collector struct {
	base time.Time
	seed maphash.Seed
	// shards has a power-of-two length; mask is that length minus one.
	shards []collectorShard
	mask   uint64

	// groups interns the names SetGroup is given: a pod holds the index
	// of its group plus one, 0 for none. Few callers set groups (the load
	// driver, once per pod), so one lock serves them.
	groupsMu sync.Mutex
	groups   []string
	groupIDs map[string]uint16
}

type collectorShard struct {
	mu   sync.Mutex
	pods map[types.UID]*podStamps
	// counts[m] is the number of pods in this shard that reached m, kept here
	// under the shard lock rather than in one shared atomic, which every
	// first stamp of every agent would otherwise contend on.
	counts [numMilestones]int
	// Keeps the hot fields of neighbouring shards off one cache line.
	_ [64]byte
}

type podStamps struct {
	set   uint16 // bit m is set when at[m] holds a stamp
	group uint16 // the Collector's groups index plus one; 0: no group
	at    [numMilestones]time.Duration
}

// Stamps fit in the bitmask.
var _ = [16 - numMilestones]struct{}{}

// NewCollector returns an empty Collector.
func NewCollector() *Collector {
	return newCollector(numShards)
}

// newCollector lets a benchmark compare shard counts; shards must be a power
// of two.
func newCollector(shards int) *Collector {
	c := &Collector{
		base:     time.Now(),
		seed:     maphash.MakeSeed(),
		shards:   make([]collectorShard, shards),
		mask:     uint64(shards - 1),
		groupIDs: map[string]uint16{},
	}
	for i := range c.shards {
		c.shards[i].pods = make(map[types.UID]*podStamps)
	}
	return c
}

// Mark implements Recorder. Only the earliest stamp of m for a pod is kept,
// so retries and resyncs do not move it, and when two observers stamp the
// same milestone (the driver's and the agent's watch both see Scheduled) the
// one that saw it first wins whichever called first. An unknown milestone or
// a zero time is a programming error in the caller; it is dropped rather than
// allowed to panic an agent or to poison every phase of the pod. A time
// without a monotonic reading is a reading of the Collector's clock (see
// Collector).
func (c *Collector) Mark(pod types.UID, m Milestone, at time.Time) {
	if m < 0 || m >= numMilestones || at.IsZero() {
		return
	}
	offset := at.Sub(c.base)
	s := &c.shards[maphash.String(c.seed, string(pod))&c.mask]
	bit := uint16(1) << m

	s.mu.Lock()
	p := s.pods[pod]
	if p == nil {
		p = new(podStamps)
		s.pods[pod] = p
	}
	switch {
	case p.set&bit == 0:
		p.set |= bit
		p.at[m] = offset
		s.counts[m]++
	case offset < p.at[m]:
		p.at[m] = offset
	}
	s.mu.Unlock()
}

// maxGroups bounds the distinct group names (they are numbered in a uint16);
// SetGroup ignores new names past it.
const maxGroups = 1<<16 - 1

// SetGroup puts pod in the named group, so that GroupPhases can split the
// phases by it; the load driver names a pod's group after the phase that
// created it, or its owning object, and that object's kind. A pod is in one
// group: the last SetGroup wins. An empty name takes the pod out of its
// group. It may come before or after the pod's first Mark.
func (c *Collector) SetGroup(pod types.UID, group string) {
	var id uint16
	if group != "" {
		c.groupsMu.Lock()
		id = c.groupIDs[group]
		if id == 0 && len(c.groups) < maxGroups {
			c.groups = append(c.groups, group)
			id = uint16(len(c.groups))
			c.groupIDs[group] = id
		}
		c.groupsMu.Unlock()
		if id == 0 {
			return
		}
	}
	s := &c.shards[maphash.String(c.seed, string(pod))&c.mask]
	s.mu.Lock()
	p := s.pods[pod]
	if p == nil {
		p = new(podStamps)
		s.pods[pod] = p
	}
	p.group = id
	s.mu.Unlock()
}

// A Grouper sorts pods into named groups; the Collector is one. The load
// driver groups the pods of a run when its Recorder is a Grouper.
type Grouper interface {
	SetGroup(pod types.UID, group string)
}

// Count returns the number of pods that reached m.
func (c *Collector) Count(m Milestone) int {
	if m < 0 || m >= numMilestones {
		return 0
	}
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += s.counts[m]
		s.mu.Unlock()
	}
	return n
}

// PodCounts returns the report's pod counts: pods created, seen Running by the
// driver, deleted, and gone.
func (c *Collector) PodCounts() PodCounts {
	return PodCounts{
		Created: c.Count(Created),
		Running: c.Count(RunningObserved),
		Deleted: c.Count(DeleteIssued),
		Gone:    c.Count(Gone),
	}
}

// PhaseSpec names the phase between two milestones of the same pod.
type PhaseSpec struct {
	Name     string
	From, To Milestone
	// ExcludeIf leaves out of the phase the pods that reached any of these
	// milestones, and counts them in Phase.Excluded instead. The pod_startup
	// SLI uses it to leave out pods that pulled an image (PullStarted), as
	// the upstream SLO does.
	ExcludeIf []Milestone
}

// DefaultPhases are the phases of a report, in the order a pod lives them.
// Their names are part of the report schema: renaming one is a schema change.
// Read-only.
var DefaultPhases = []PhaseSpec{
	{Name: "create_to_scheduled", From: Created, To: Scheduled},
	{Name: "scheduled_to_agent_observed", From: Scheduled, To: AgentObserved},
	{Name: "agent_observed_to_running_reported", From: AgentObserved, To: RunningReported},
	// The agent's inner steps, which add up to the phase above.
	{Name: "agent_observed_to_sandbox_ready", From: AgentObserved, To: SandboxReady},
	{Name: "sandbox_ready_to_containers_started", From: SandboxReady, To: ContainersStarted},
	{Name: "containers_started_to_running_reported", From: ContainersStarted, To: RunningReported},
	// The same phase cut at the status manager: the agent's work up to
	// holding Running (the kubelet's pod start duration), then the wait
	// for the status write, which the API server's latency sets.
	{Name: "agent_observed_to_running_set", From: AgentObserved, To: RunningSet},
	{Name: "running_set_to_running_reported", From: RunningSet, To: RunningReported},
	// And cut at the volume manager: before it, the pod's TokenRequest and
	// ConfigMap reads wait on the API server; after it, up to running_set,
	// only the agent and its runtime work.
	{Name: "agent_observed_to_volumes_mounted", From: AgentObserved, To: VolumesMounted},
	{Name: "volumes_mounted_to_running_set", From: VolumesMounted, To: RunningSet},
	{Name: "running_reported_to_running_observed", From: RunningReported, To: RunningObserved},
	{Name: "running_reported_to_ready_reported", From: RunningReported, To: ReadyReported},
	{Name: "create_to_running_observed", From: Created, To: RunningObserved},
	{Name: "delete_to_gone", From: DeleteIssued, To: Gone},
}

// Phase is the distribution of one phase over the pods that have both of its
// milestones.
type Phase struct {
	Name string
	// Count is the number of pods recorded in Hist.
	Count int
	// Anomalies counts pods whose To stamp is before their From stamp: a
	// caller stamped with the wrong clock or the wrong milestone. They are not
	// in Hist, where they would hide among real values.
	Anomalies int
	// Overflows counts differences above Hist's range (1 h), recorded as 1 h.
	Overflows int
	// Excluded counts pods that had both milestones but also one of the
	// spec's ExcludeIf milestones, and so are not in Hist.
	Excluded int
	// Hist holds the differences in microseconds, 1 µs to 1 h, 3 significant
	// figures (see NewHistogram).
	Hist *hdrhistogram.Histogram
}

// Phases builds one histogram per spec, in the order of specs, from the pods
// that have both stamps of it. It may run while Marks continue; each shard is
// then read at a slightly different moment, which only matters for pods
// stamped meanwhile.
func (c *Collector) Phases(specs []PhaseSpec) []Phase {
	return c.phases(specs, false)[0]
}

// GroupPhases builds Phases(specs) for each group of pods (SetGroup), by
// group name, in the order the groups were first named. Pods in no group
// are left out. A group whose pods have no phase's milestones yet still
// has its (empty) phases.
func (c *Collector) GroupPhases(specs []PhaseSpec) (names []string, phases [][]Phase) {
	c.groupsMu.Lock()
	names = slices.Clone(c.groups)
	c.groupsMu.Unlock()
	all := c.phases(specs, true)
	// Groups named after the read of names have pods counted in all, but
	// no name to show: leave them for the next call.
	return names, all[1 : len(names)+1]
}

// phases builds the histograms of specs over every pod (out[0]), or, when
// byGroup, one set per group: out[g] for the pods of group index g-1, out[0]
// for pods in no group.
func (c *Collector) phases(specs []PhaseSpec, byGroup bool) [][]Phase {
	masks := make([]uint16, len(specs))
	excludes := make([]uint16, len(specs))
	for i, sp := range specs {
		if sp.From < 0 || sp.From >= numMilestones || sp.To < 0 || sp.To >= numMilestones {
			continue // a mask of 0 matches no pod: the phase stays empty
		}
		masks[i] = 1<<sp.From | 1<<sp.To
		for _, m := range sp.ExcludeIf {
			if m >= 0 && m < numMilestones { // an unknown milestone excludes no pod
				excludes[i] |= 1 << m
			}
		}
	}
	var out [][]Phase
	set := func(g int) []Phase {
		for len(out) <= g {
			ps := make([]Phase, len(specs))
			for i, sp := range specs {
				ps[i] = Phase{Name: sp.Name, Hist: NewHistogram()}
			}
			out = append(out, ps)
		}
		return out[g]
	}
	set(0)
	if byGroup {
		c.groupsMu.Lock()
		set(len(c.groups))
		c.groupsMu.Unlock()
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for _, p := range s.pods {
			ps := out[0]
			if byGroup {
				ps = set(int(p.group))
			}
			for j, sp := range specs {
				if masks[j] == 0 || p.set&masks[j] != masks[j] {
					continue
				}
				ph := &ps[j]
				if p.set&excludes[j] != 0 {
					ph.Excluded++
					continue
				}
				d := p.at[sp.To] - p.at[sp.From]
				if d < 0 {
					ph.Anomalies++
					continue
				}
				if recordMicros(ph.Hist, d) {
					ph.Overflows++
				}
				ph.Count++
			}
		}
		s.mu.Unlock()
	}
	return out
}

// PhaseSummary is a phase as it stands in the report. Times are in
// milliseconds with microsecond resolution, and carry HdrHistogram's error of
// at most 0.1%. Histogram is the full distribution, so that reports of several
// processes can be merged exactly (DecodeHistogram, then Merge).
type PhaseSummary struct {
	// Name is the PhaseSpec's: one of DefaultPhases or SLIPhases.
	Name string `json:"name"`
	// Count is the number of pods in the distribution.
	Count int `json:"count"`
	// MinMs to MaxMs summarize the distribution; all 0 when Count is 0.
	MinMs  float64 `json:"minMs"`
	MeanMs float64 `json:"meanMs"`
	P50Ms  float64 `json:"p50Ms"`
	P90Ms  float64 `json:"p90Ms"`
	P99Ms  float64 `json:"p99Ms"`
	MaxMs  float64 `json:"maxMs"`
	// Anomalies counts pods whose end was stamped before their start (a
	// clock or milestone bug); they are not in the distribution.
	Anomalies int `json:"anomalies"`
	// Overflows (optional) counts pods above 1 h, counted as 1 h.
	Overflows int `json:"overflows,omitempty"`
	// Excluded (optional) counts pods left out by the spec's ExcludeIf:
	// for pod_startup, pods that pulled an image.
	Excluded int `json:"excluded,omitempty"`
	// Histogram is the HdrHistogram V2 compressed encoding, base64, values in
	// microseconds (see NewHistogram).
	Histogram string `json:"histogram"`
}

// Summary returns the phase as it stands in the report.
func (p Phase) Summary() PhaseSummary {
	st := statsOf(p.Hist)
	return PhaseSummary{
		Name:      p.Name,
		Count:     p.Count,
		MinMs:     st.min,
		MeanMs:    st.mean,
		P50Ms:     st.p50,
		P90Ms:     st.p90,
		P99Ms:     st.p99,
		MaxMs:     st.max,
		Anomalies: p.Anomalies,
		Overflows: p.Overflows,
		Excluded:  p.Excluded,
		Histogram: encodeHistogram(p.Hist),
	}
}

// DurationSummary summarizes durations measured outside the collector,
// such as the time each of a run's Deployments took to run all its pods,
// as a PhaseSummary named name.
func DurationSummary(name string, ds []time.Duration) PhaseSummary {
	p := Phase{Name: name, Hist: NewHistogram()}
	for _, d := range ds {
		if d < 0 {
			p.Anomalies++
			continue
		}
		if recordMicros(p.Hist, d) {
			p.Overflows++
		}
		p.Count++
	}
	return p.Summary()
}

// Summaries returns the summaries of phases, in order, for Report.Phases.
func Summaries(phases []Phase) []PhaseSummary {
	out := make([]PhaseSummary, len(phases))
	for i, p := range phases {
		out[i] = p.Summary()
	}
	return out
}
