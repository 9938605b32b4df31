package reports

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The SLOs a report checks, named after the upstream Kubernetes scalability
// SLOs (sig-scalability's slos/api_call_latency.md and pod_startup_latency.md)
// whose definitions and thresholds they follow.
const (
	// SLOMutatingAPICallLatency: the p99 latency of mutating API calls for
	// every (resource, subresource, verb), as the apiserver measures them.
	SLOMutatingAPICallLatency = "mutating_api_call_latency"
	// SLOReadOnlyAPICallLatency: the p99 latency of non-streaming read-only
	// API calls (GET, LIST) for every (resource, subresource, verb, scope).
	SLOReadOnlyAPICallLatency = "read_only_api_call_latency"
	// SLOPodStartupLatency: the p99 of the pod_startup SLI.
	SLOPodStartupLatency = "pod_startup_latency"
	// SLONetworkProgrammingLatency: the p99 of the network_programming
	// SLI (slos/network_programming_latency.md).
	SLONetworkProgrammingLatency = "network_programming_latency"
)

// The upstream SLO thresholds, which an SLOThresholds field of 0 stands for.
const (
	DefaultMutatingAPICallP99          = time.Second
	DefaultReadOnlyResourceAPICallP99  = time.Second
	DefaultReadOnlyNamespaceAPICallP99 = 30 * time.Second
	DefaultReadOnlyClusterAPICallP99   = 30 * time.Second
	DefaultPodStartupP99               = 5 * time.Second
	DefaultNetworkProgrammingP99       = 30 * time.Second
)

// SLOThresholds are the limits the SLOs are checked against. A profile
// carries them (its "slos" key); every field is a duration such as "1s" or
// "500ms". A field left out or 0 means the upstream threshold (the Default*
// constants); a negative one turns that check off.
type SLOThresholds struct {
	// MutatingAPICallP99 bounds the p99 of every mutating call kind (create,
	// update, patch, apply, delete, deletecollection). Default 1s.
	MutatingAPICallP99 metav1.Duration `json:"mutatingAPICallP99,omitzero"`
	// ReadOnlyResourceAPICallP99 bounds the p99 of GET and LIST calls of
	// scope "resource" (one named object). Default 1s.
	ReadOnlyResourceAPICallP99 metav1.Duration `json:"readOnlyResourceAPICallP99,omitzero"`
	// ReadOnlyNamespaceAPICallP99 bounds the p99 of LIST calls of scope
	// "namespace". Default 30s.
	ReadOnlyNamespaceAPICallP99 metav1.Duration `json:"readOnlyNamespaceAPICallP99,omitzero"`
	// ReadOnlyClusterAPICallP99 bounds the p99 of LIST calls of scope
	// "cluster". Default 30s.
	ReadOnlyClusterAPICallP99 metav1.Duration `json:"readOnlyClusterAPICallP99,omitzero"`
	// PodStartupP99 bounds the p99 of the pod_startup SLI (created to seen
	// Running by the driver's watch, pods that pulled an image excluded).
	// Default 5s.
	PodStartupP99 metav1.Duration `json:"podStartupP99,omitzero"`
	// PodStartupPhases, when set, narrows the pod startup SLO to the pods
	// these profile phases created, or whose owning objects they created
	// (the report's PodGroups), as clusterloader2's load test holds only
	// its latency pods to the 5 s SLO and its saturation pods to 1 h. The
	// pod_startup SLI of every pod is still reported. Default: every pod.
	PodStartupPhases []string `json:"podStartupPhases,omitempty"`
	// NetworkProgrammingP99 bounds the p99 of the network_programming SLI
	// (EndpointSlice trigger time to applied by every node's kube-proxy).
	// Default 30s.
	NetworkProgrammingP99 metav1.Duration `json:"networkProgrammingP99,omitzero"`
}

// Defaulted returns t with every zero field set to its upstream default.
func (t SLOThresholds) Defaulted() SLOThresholds {
	def := func(d *metav1.Duration, v time.Duration) {
		if d.Duration == 0 {
			d.Duration = v
		}
	}
	def(&t.MutatingAPICallP99, DefaultMutatingAPICallP99)
	def(&t.ReadOnlyResourceAPICallP99, DefaultReadOnlyResourceAPICallP99)
	def(&t.ReadOnlyNamespaceAPICallP99, DefaultReadOnlyNamespaceAPICallP99)
	def(&t.ReadOnlyClusterAPICallP99, DefaultReadOnlyClusterAPICallP99)
	def(&t.PodStartupP99, DefaultPodStartupP99)
	def(&t.NetworkProgrammingP99, DefaultNetworkProgrammingP99)
	return t
}

// SLOResult is the verdict of one SLO on one subject.
type SLOResult struct {
	// Name is the SLO: one of the SLO* constants.
	Name string `json:"name"`
	// Subject is what it was checked on: "PATCH pods/status" or "LIST pods
	// (cluster)" for the API call SLOs, "pod_startup" for pod startup. It is
	// empty for a check that was skipped as a whole.
	Subject string `json:"subject,omitempty"`
	// ThresholdMs is the limit and ObservedMs the p99 measured, both in
	// milliseconds.
	ThresholdMs float64 `json:"thresholdMs"`
	ObservedMs  float64 `json:"observedMs"`
	// Count is the number of calls or pods the p99 was computed from.
	Count int64 `json:"count"`
	// Pass is true when ObservedMs ≤ ThresholdMs, or the check was skipped.
	Pass bool `json:"pass"`
	// Skipped is true when the check could not be made (no data) or was
	// turned off; Detail says which.
	Skipped bool `json:"skipped,omitempty"`
	// Detail says how the number was obtained, or why it is missing.
	Detail string `json:"detail,omitempty"`
}

// mutatingVerbs are the apiserver's metric verbs of mutating calls, and the
// request verbs of the same calls, should a report carry those.
// DELETECOLLECTION is a mutating call on many objects; the upstream SLO
// speaks of single objects, but a slow deletecollection is a problem worth
// failing on, and clusterloader2 checks it too.
var mutatingVerbs = map[string]bool{
	"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true,
	"create": true, "update": true, "patch": true, "apply": true, "delete": true, "deletecollection": true,
}

// readOnlyVerbs are the non-streaming read-only verbs; WATCH and CONNECT are
// streams and out of the SLO.
var readOnlyVerbs = map[string]bool{"GET": true, "LIST": true, "get": true, "list": true}

// CheckSLOs checks r against the SLOs with thresholds t (zero fields
// defaulted) and returns one result per SLO and subject: one for pod startup
// from r.SLIs, then one per API call kind in r.APIServerLatency for the API
// call SLOs. A check with no data at all gives one skipped result, so that the
// report says so instead of passing in silence. The API call SLOs are over
// the window between the run's two scrapes, not over sliding 5-minute
// windows as upstream; a run shorter than that sees the same thing.
func CheckSLOs(r *Report, t SLOThresholds) []SLOResult {
	t = t.Defaulted()
	var out []SLOResult
	mutLimit := t.MutatingAPICallP99.Duration
	readLimits := map[string]time.Duration{
		"resource":  t.ReadOnlyResourceAPICallP99.Duration,
		"namespace": t.ReadOnlyNamespaceAPICallP99.Duration,
		"cluster":   t.ReadOnlyClusterAPICallP99.Duration,
	}
	var mut, read []SLOResult
	readOff := true
	for _, l := range readLimits {
		readOff = readOff && l < 0
	}
	for _, c := range r.APIServerLatency {
		if c.Resource == "" || c.Count == 0 {
			continue // non-resource requests are not API calls of the SLOs
		}
		switch {
		case mutatingVerbs[c.Verb] && mutLimit >= 0:
			mut = append(mut, apiSLOResult(SLOMutatingAPICallLatency, c, mutLimit))
		case readOnlyVerbs[c.Verb]:
			limit, ok := readLimits[c.Scope]
			if !ok || limit < 0 {
				continue
			}
			read = append(read, apiSLOResult(SLOReadOnlyAPICallLatency, c, limit))
		}
	}
	noAPI := "no apiserver request latencies in the report (the apiserver's /metrics was not scraped, or the scrape failed)"

	podLimit := t.PodStartupP99.Duration
	var pod []SLOResult
	noPods := "no pods in the pod_startup SLI (no pod reached Running without pulling an image)"
	if podLimit >= 0 {
		s, scope, ok := podStartupSLI(r, t.PodStartupPhases)
		if len(t.PodStartupPhases) > 0 {
			noPods = fmt.Sprintf("no pods of the phases the profile's slos.podStartupPhases names (%s) in the pod_startup SLI", strings.Join(t.PodStartupPhases, ", "))
		}
		if ok && s.Count > 0 {
			res := SLOResult{
				Name: SLOPodStartupLatency, Subject: SLIPodStartup,
				ThresholdMs: durationMs(podLimit), ObservedMs: s.P99Ms, Count: int64(s.Count),
				Detail: fmt.Sprintf("p99 over %s%s, from created to seen Running by the load driver's watch", plural(s.Count, "pod"), scope),
			}
			if s.Excluded > 0 {
				res.Detail += fmt.Sprintf("; %s that pulled an image left out", plural(s.Excluded, "pod"))
			}
			res.Pass = res.ObservedMs <= res.ThresholdMs
			pod = append(pod, res)
		}
	}
	netLimit := t.NetworkProgrammingP99.Duration
	var net []SLOResult
	for _, s := range r.SLIs {
		if s.Name != SLINetworkProgramming || netLimit < 0 || s.Count == 0 {
			continue
		}
		res := SLOResult{
			Name: SLONetworkProgrammingLatency, Subject: SLINetworkProgramming,
			ThresholdMs: durationMs(netLimit), ObservedMs: s.P99Ms, Count: int64(s.Count),
			Detail: fmt.Sprintf("p99 over %s of EndpointSlice changes by the nodes' kube-proxies, from the slice's last-change-trigger-time", plural(s.Count, "application")),
		}
		res.Pass = res.ObservedMs <= res.ThresholdMs
		net = append(net, res)
	}
	// Pod startup first: it is the SLO a fleet's load is about.
	out = append(out, orSkipped(SLOPodStartupLatency, pod, podLimit, noPods)...)
	out = append(out, orSkipped(SLOMutatingAPICallLatency, mut, mutLimit, noAPI)...)
	out = append(out, orSkipped(SLOReadOnlyAPICallLatency, read, ifOff(readOff), noAPI)...)
	// A run without Services has nothing to program: the check says so only
	// when it has data, rather than print a skip in every pods-only report.
	out = append(out, net...)
	return out
}

// podStartupSLI is the pod_startup SLI the SLO judges: the report's, or,
// with phases, the merge of the groups those phases created, with words
// saying which.
func podStartupSLI(r *Report, phases []string) (PhaseSummary, string, bool) {
	if len(phases) == 0 {
		for _, s := range r.SLIs {
			if s.Name == SLIPodStartup {
				return s, "", true
			}
		}
		return PhaseSummary{}, "", false
	}
	s, n, err := groupSLI(r.PodGroups, SLIPodStartup, inPhases(phases))
	if err != nil || n == 0 {
		return PhaseSummary{}, "", false
	}
	word := "phase"
	if len(phases) > 1 {
		word = "phases"
	}
	return s, fmt.Sprintf(" of %s %s (slos.podStartupPhases)", word, strings.Join(phases, ", ")), true
}

func apiSLOResult(name string, c APICallLatency, limit time.Duration) SLOResult {
	res := SLOResult{
		Name: name, Subject: apiSubject(c),
		ThresholdMs: durationMs(limit), ObservedMs: c.P99Ms, Count: c.Count,
		Detail: fmt.Sprintf("p99 over %s, from apiserver_request_duration_seconds buckets", plural(int(c.Count), "call")),
	}
	res.Pass = res.ObservedMs <= res.ThresholdMs
	return res
}

// apiSubject names an API call kind: "PATCH pods/status", with the scope for
// reads, whose threshold depends on it: "LIST pods (cluster)".
func apiSubject(c APICallLatency) string {
	s := c.Verb + " " + c.Label()
	if readOnlyVerbs[c.Verb] {
		s += " (" + c.Scope + ")"
	}
	return s
}

// ifOff gives the limit to pass orSkipped: negative when a check is off.
func ifOff(off bool) time.Duration {
	if off {
		return -1
	}
	return 0
}

// orSkipped returns results, or a single skipped result saying why there are
// none: the check is off (a negative limit) or there was no data.
func orSkipped(name string, results []SLOResult, limit time.Duration, noData string) []SLOResult {
	if len(results) > 0 {
		return results
	}
	res := SLOResult{Name: name, Pass: true, Skipped: true, Detail: noData}
	if limit < 0 {
		res.Detail = "turned off by the profile's slos"
	} else {
		res.ThresholdMs = durationMs(limit)
	}
	return []SLOResult{res}
}

func durationMs(d time.Duration) float64 {
	return microsToMs(float64(d.Microseconds()))
}

// EvaluateSLOs checks r's SLOs against t and stores the verdicts in r.SLOs,
// and the thresholds used (defaulted) in r.SLOThresholds so that a later
// Merge can check the merged report the same way. Call it once the rest of
// the report is filled in.
func (r *Report) EvaluateSLOs(t SLOThresholds) {
	t = t.Defaulted()
	r.SLOThresholds = &t
	r.SLOs = CheckSLOs(r, t)
}

// Failed reports whether any SLO check failed. Skipped checks do not fail a
// report, and neither do Errors: a run that stopped early says so through
// its own error.
func (r *Report) Failed() bool {
	for _, s := range r.SLOs {
		if !s.Pass && !s.Skipped {
			return true
		}
	}
	return false
}

// sloVerdicts summarizes r.SLOs per SLO name, in the order of first
// appearance, for the renderers.
type sloVerdict struct {
	name          string
	checked, fail int
	skipped       bool
	// worst is the result closest to (or furthest over) its threshold.
	worst   SLOResult
	failing []SLOResult
}

func sloVerdicts(results []SLOResult) []sloVerdict {
	var out []sloVerdict
	idx := map[string]int{}
	for _, s := range results {
		i, ok := idx[s.Name]
		if !ok {
			i = len(out)
			idx[s.Name] = i
			out = append(out, sloVerdict{name: s.Name, skipped: true})
		}
		v := &out[i]
		if s.Skipped {
			if v.checked == 0 {
				v.worst = s
			}
			continue
		}
		if v.skipped || ratio(s) > ratio(v.worst) {
			v.worst = s
		}
		v.skipped = false
		v.checked++
		if !s.Pass {
			v.fail++
			v.failing = append(v.failing, s)
		}
	}
	return out
}

func ratio(s SLOResult) float64 {
	if s.ThresholdMs <= 0 {
		return 0
	}
	return s.ObservedMs / s.ThresholdMs
}

// sloTitle is an SLO's name for people.
func sloTitle(name string) string {
	switch name {
	case SLOMutatingAPICallLatency:
		return "Mutating API call latency"
	case SLOReadOnlyAPICallLatency:
		return "Read-only API call latency"
	case SLOPodStartupLatency:
		return "Pod startup latency"
	case SLONetworkProgrammingLatency:
		return "Network programming latency"
	}
	return strings.ReplaceAll(name, "_", " ")
}
