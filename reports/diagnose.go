package reports

import (
	"fmt"
	"strings"
)

// agentBoundShare is the share of the pod startup p99 above which the
// agents' own work, rather than the control plane, is named as the cause of
// a failed pod startup SLO. Below it, nearly all of the time went to waiting
// on the API server and the scheduler.
const agentBoundShare = 0.25

// Diagnosis says in one line why the pod startup SLO failed, with the
// evidence, so that a user knows whether to shrink the load or to blame the
// agents; "" when it passed or was not checked.
//
// The agents' own part of a pod's startup is volumes_mounted_to_running_set:
// from the pod's volumes set up to Running held by the status manager, the
// agent calls no API for a plain pod, so that phase is its work and its
// runtime's. Everything else between the create and the driver's watch
// seeing Running waits on the control plane: the scheduler, the TokenRequest,
// the status GET and PATCH, the watch. When the agents' part is a small share
// of the startup p99, the control plane was saturated, and the line gives the
// API server's own p99 of its slowest busy mutating call and the agents'
// client-side p99 of the status patches.
func Diagnosis(r *Report) string {
	var startup *SLOResult
	for i := range r.SLOs {
		if s := &r.SLOs[i]; s.Name == SLOPodStartupLatency && !s.Pass && !s.Skipped {
			startup = s
		}
	}
	if startup == nil {
		return ""
	}
	own, ok := summaryByName(r.Phases, "volumes_mounted_to_running_set")
	if !ok || own.Count == 0 || startup.ObservedMs <= 0 {
		return ""
	}
	share := own.P99Ms / startup.ObservedMs
	head := fmt.Sprintf("pod startup p99 %s failed its %s SLO", fmtDurationMs(startup.ObservedMs), fmtDurationMs(startup.ThresholdMs))
	ownText := fmt.Sprintf("the agents' own work (volumes mounted to Running set) was %s at p99, %s of it", fmtDurationMs(own.P99Ms), fmtShare(share))
	if share >= agentBoundShare {
		return fmt.Sprintf("%s, and %s: the agents, not the control plane, are the bottleneck; see the agent_observed phases", head, ownText)
	}
	var evidence []string
	if c, ok := slowestMutating(r.APIServerLatency); ok {
		evidence = append(evidence, fmt.Sprintf("the API server's own p99 for %s %s was %s", c.Verb, c.Label(), fmtDurationMs(c.P99Ms)))
	}
	if s, ok := findAPIStat(r.API, "patch", "pods", "status"); ok && s.Count > 0 {
		evidence = append(evidence, fmt.Sprintf("the agents waited %s at p99 for their status patches", fmtDurationMs(s.P99Ms)))
	}
	evidence = append(evidence, ownText)
	return fmt.Sprintf("%s because the control plane was saturated: %s; lower the load's rate or give the control plane more cores",
		head, strings.Join(evidence, ", "))
}

// slowestMutating is the mutating call kind with the highest server-side
// p99 among those with at least 1 % of the mutating calls: a rare call's
// p99 is one slow request, not the API server's state.
func slowestMutating(rows []APICallLatency) (APICallLatency, bool) {
	var total int64
	for _, c := range rows {
		if mutatingVerbs[c.Verb] {
			total += c.Count
		}
	}
	var best APICallLatency
	found := false
	for _, c := range rows {
		if !mutatingVerbs[c.Verb] || c.Count*100 < total {
			continue
		}
		if !found || c.P99Ms > best.P99Ms {
			best, found = c, true
		}
	}
	return best, found
}

func summaryByName(phases []PhaseSummary, name string) (PhaseSummary, bool) {
	for _, p := range phases {
		if p.Name == name {
			return p, true
		}
	}
	return PhaseSummary{}, false
}

func findAPIStat(stats []APIStat, verb, resource, subresource string) (APIStat, bool) {
	for _, s := range stats {
		// The client-side table has the request verbs in lower case.
		if strings.EqualFold(s.Verb, verb) && s.Group == "" && s.Resource == resource && s.Subresource == subresource {
			return s, true
		}
	}
	return APIStat{}, false
}

// fmtDurationMs writes a duration in milliseconds the way people say it:
// "840 ms", "15.9 s".
func fmtDurationMs(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%.1f s", ms/1000)
	}
	if ms >= 10 {
		return fmt.Sprintf("%.0f ms", ms)
	}
	return fmt.Sprintf("%.1f ms", ms)
}

func fmtShare(f float64) string {
	if f < 0.01 {
		return "under 1 %"
	}
	return fmt.Sprintf("%.0f %%", 100*f)
}
