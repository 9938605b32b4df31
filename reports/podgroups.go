package reports

import (
	"fmt"
	"slices"
	"strings"
)

// GroupSummaries returns the report's PodGroups: c's groups (SetGroup),
// each with its phases and SLIs.
func GroupSummaries(c *Collector) []PodGroup {
	names, phases := c.GroupPhases(DefaultPhases)
	_, slis := c.GroupPhases(SLIPhases)
	out := make([]PodGroup, len(names))
	for i, name := range names {
		out[i] = PodGroup{Name: name, Phases: Summaries(phases[i])}
		if i < len(slis) {
			out[i].SLIs = Summaries(slis[i])
		}
	}
	return out
}

// GroupName is the name of the group of pods that the profile phase created,
// or whose owning object of that kind it created.
func GroupName(phase, kind string) string { return phase + "/" + kind }

// PhaseName is the profile phase of the group: its name up to the last "/".
func (g PodGroup) PhaseName() string {
	if i := strings.LastIndexByte(g.Name, '/'); i >= 0 {
		return g.Name[:i]
	}
	return g.Name
}

// Kind is the owning kind of the group's pods: its name after the last "/".
func (g PodGroup) Kind() string {
	if i := strings.LastIndexByte(g.Name, '/'); i >= 0 {
		return g.Name[i+1:]
	}
	return ""
}

// SLI returns the group's SLI of that name, and whether it has it.
func (g PodGroup) SLI(name string) (PhaseSummary, bool) {
	for _, s := range g.SLIs {
		if s.Name == name {
			return s, true
		}
	}
	return PhaseSummary{}, false
}

// groupSLI merges the SLI named name over the groups that keep says to,
// exactly (through their histograms). It also returns how many groups it
// took.
func groupSLI(groups []PodGroup, name string, keep func(PodGroup) bool) (PhaseSummary, int, error) {
	var parts []*Report
	for _, g := range groups {
		if !keep(g) {
			continue
		}
		if s, ok := g.SLI(name); ok {
			parts = append(parts, &Report{SLIs: []PhaseSummary{s}})
		}
	}
	if len(parts) == 0 {
		return PhaseSummary{Name: name}, 0, nil
	}
	merged, err := mergePhases(parts, func(r *Report) []PhaseSummary { return r.SLIs })
	if err != nil {
		return PhaseSummary{}, 0, err
	}
	return merged[0], len(parts), nil
}

// kindSummaries is the pod_startup SLI per owning kind, for kinds that more
// than one group has (a kind with one group is that group's row already):
// named "<Kind> (all)".
func kindSummaries(groups []PodGroup) []PhaseSummary {
	n := map[string]int{}
	var kinds []string
	for _, g := range groups {
		if n[g.Kind()] == 0 {
			kinds = append(kinds, g.Kind())
		}
		n[g.Kind()]++
	}
	var out []PhaseSummary
	for _, kind := range kinds {
		if n[kind] < 2 {
			continue
		}
		s, _, err := groupSLI(groups, SLIPodStartup, func(g PodGroup) bool { return g.Kind() == kind })
		if err != nil {
			continue // a histogram that does not decode: the groups' own rows still stand
		}
		s.Name = kind + " (all)"
		out = append(out, s)
	}
	return out
}

// mergePodGroups merges the shards' groups by name, in the order they first
// appear.
func mergePodGroups(reports []*Report) ([]PodGroup, error) {
	var order []string
	byName := map[string][]*Report{}
	for _, r := range reports {
		for _, g := range r.PodGroups {
			if _, ok := byName[g.Name]; !ok {
				order = append(order, g.Name)
			}
			byName[g.Name] = append(byName[g.Name], &Report{Phases: g.Phases, SLIs: g.SLIs})
		}
	}
	out := make([]PodGroup, 0, len(order))
	for _, name := range order {
		parts := byName[name]
		phases, err := mergePhases(parts, func(r *Report) []PhaseSummary { return r.Phases })
		if err != nil {
			return nil, fmt.Errorf("pod group %s: %w", name, err)
		}
		slis, err := mergePhases(parts, func(r *Report) []PhaseSummary { return r.SLIs })
		if err != nil {
			return nil, fmt.Errorf("pod group %s: %w", name, err)
		}
		out = append(out, PodGroup{Name: name, Phases: phases, SLIs: slis})
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// inPhases says whether the group was created by one of phases.
func inPhases(phases []string) func(PodGroup) bool {
	return func(g PodGroup) bool { return slices.Contains(phases, g.PhaseName()) }
}
