package reports

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// StampSet is a Collector's stamps, for another process's Collector to
// import: a shard's agents stamp their milestones in the shard's process,
// and the load driver imports them at the end of the run, so that phases
// that cross the two (scheduled_to_agent_observed,
// running_reported_to_running_observed) are computed. It is sent as JSON.
type StampSet struct {
	// Base is the wall reading of the exporter's base (RFC 3339 with
	// nanoseconds in JSON): the origin of its clock (see Collector).
	Base time.Time `json:"base"`
	// Pods are sorted by UID.
	Pods []PodStamps `json:"pods"`
}

// PodStamps are one pod's stamps in a StampSet.
type PodStamps struct {
	UID types.UID `json:"uid"`
	// Stamps maps a milestone's name (Milestone.String()) to its stamp, in
	// nanoseconds after the StampSet's Base on the exporter's clock.
	Stamps map[string]int64 `json:"stamps"`
}

// Export returns every pod's stamps, pods sorted by UID so that the output
// is stable. Pods with no stamp (only a group) are left out, and so is group
// membership: the importer groups the pods itself. It may run while Marks
// continue; each shard of the Collector is then read at a slightly different
// moment.
func (c *Collector) Export() StampSet {
	out := StampSet{Base: wallTime(c.base), Pods: []PodStamps{}}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for uid, p := range s.pods {
			if p.set == 0 {
				continue
			}
			ps := PodStamps{UID: uid, Stamps: make(map[string]int64, numMilestones)}
			for m := range numMilestones {
				if p.set&(1<<m) != 0 {
					ps.Stamps[m.String()] = int64(p.at[m])
				}
			}
			out.Pods = append(out.Pods, ps)
		}
		s.mu.Unlock()
	}
	slices.SortFunc(out.Pods, func(a, b PodStamps) int { return cmp.Compare(a.UID, b.UID) })
	return out
}

// Now returns the Collector's clock now (see Collector): its base's wall
// reading advanced by the monotonic time since base. It has no monotonic
// reading, so it can be sent to another process and compared there; Mark
// takes it (and any time derived from it) as a reading of this clock. A
// process that exchanges times with another for ClockSamples reads them
// here, not from time.Now, whose wall reading may have been stepped since
// the Collector was made.
func (c *Collector) Now() time.Time {
	return c.base.Round(0).Add(time.Since(c.base))
}

// Import marks every stamp of s on c, each moved onto c's clock: a stamp at
// time t on the exporter's clock is marked at t - offset(t), where offset is
// the exporter's clock minus c's as a function of the time on the
// exporter's clock, so that a drift between the two can be interpolated
// (ShardClock.RemoteOffsetAt is one). A nil offset means the two clocks
// agree. As with Mark, the earliest stamp of a milestone wins, whichever
// process stamped it. The imported stamps are wall-only times, which Mark
// takes as readings of c's clock (see Collector).
//
// A milestone name this build does not know is an error naming it, returned
// after the rest of s is imported; so is a StampSet with pods and no Base,
// of which nothing is imported.
func (c *Collector) Import(s StampSet, offset func(time.Time) time.Duration) error {
	if len(s.Pods) == 0 {
		return nil
	}
	if s.Base.IsZero() {
		return fmt.Errorf("importing stamps of %d pods: the stamp set has no base time, so its stamps cannot be placed; export them again", len(s.Pods))
	}
	base := s.Base.Round(0)
	unknown := map[string]types.UID{} // name -> first pod that had it
	for _, p := range s.Pods {
		for name, ns := range p.Stamps {
			m, ok := milestoneNamed(name)
			if !ok {
				if _, seen := unknown[name]; !seen {
					unknown[name] = p.UID
				}
				continue
			}
			t := base.Add(time.Duration(ns))
			if offset != nil {
				t = t.Add(-offset(t))
			}
			c.Mark(p.UID, m, t)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	names := make([]string, 0, len(unknown))
	for name, uid := range unknown {
		names = append(names, fmt.Sprintf("%q (pod %s first)", name, uid))
	}
	slices.Sort(names)
	return fmt.Errorf("importing stamps: unknown milestones %s left out, the rest imported; the exporting process is of another fleetlet release: run the same release everywhere",
		strings.Join(names, ", "))
}

// milestoneNamed is the milestone whose String is name.
func milestoneNamed(name string) (Milestone, bool) {
	for m, n := range milestoneNames {
		if n == name {
			return Milestone(m), true
		}
	}
	return 0, false
}

// Stamp is the time on c's clock at which pod reached m, if it did.
func (c *Collector) Stamp(pod types.UID, m Milestone) (time.Time, bool) {
	if m < 0 || m >= numMilestones {
		return time.Time{}, false
	}
	s := &c.shards[maphash.String(c.seed, string(pod))&c.mask]
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pods[pod]
	if p == nil || p.set&(1<<m) == 0 {
		return time.Time{}, false
	}
	return c.base.Round(0).Add(p.at[m]), true
}
