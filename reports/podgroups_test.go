package reports

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// startPods marks n pods of group (none when "") started in d each, from
// created to seen Running.
func startPods(c *Collector, group string, n int, d time.Duration) {
	for i := range n {
		pod := types.UID(fmt.Sprintf("%s-%d-%v", group, i, d))
		if group != "" && i%2 == 0 {
			c.SetGroup(pod, group) // before the first Mark for half of them
		}
		c.Mark(pod, Created, t0)
		c.Mark(pod, Scheduled, t0.Add(d/2))
		c.Mark(pod, RunningObserved, t0.Add(d))
		if group != "" && i%2 == 1 {
			c.SetGroup(pod, group) // and after it for the others
		}
	}
}

func TestCollectorGroupPhases(t *testing.T) {
	c := NewCollector()
	startPods(c, "latency/Deployment", 10, 100*time.Millisecond)
	startPods(c, "big/Deployment", 4, 3*time.Second)
	startPods(c, "", 3, time.Hour/2) // no group: in Phases, in no group
	moved := types.UID("moved")
	c.SetGroup(moved, "big/Deployment")
	c.SetGroup(moved, "latency/Deployment") // the last group wins
	c.Mark(moved, Created, t0)
	c.Mark(moved, RunningObserved, t0.Add(100*time.Millisecond))

	names, phases := c.GroupPhases(SLIPhases)
	if strings.Join(names, ",") != "latency/Deployment,big/Deployment" {
		t.Fatalf("groups %q, want latency/Deployment then big/Deployment, in the order first named", names)
	}
	want := map[string]struct {
		pods int
		p99  time.Duration
	}{"latency/Deployment": {11, 100 * time.Millisecond}, "big/Deployment": {4, 3 * time.Second}}
	for i, name := range names {
		p := phaseByName(t, phases[i], SLIPodStartup)
		w := want[name]
		if p.Count != w.pods {
			t.Errorf("%s: pod_startup over %d pods, want %d", name, p.Count, w.pods)
		}
		if got := time.Duration(p.Hist.ValueAtQuantile(99)) * time.Microsecond; got < w.p99*999/1000 || got > w.p99*1001/1000 {
			t.Errorf("%s: pod_startup p99 %v, want %v", name, got, w.p99)
		}
	}
	if all := phaseByName(t, c.Phases(SLIPhases), SLIPodStartup); all.Count != 18 {
		t.Errorf("Phases still counts every pod, grouped or not: got %d, want 18", all.Count)
	}
	// Out of its group, a pod is in Phases only.
	c.SetGroup(moved, "")
	_, phases = c.GroupPhases(SLIPhases)
	if p := phaseByName(t, phases[0], SLIPodStartup); p.Count != 10 {
		t.Errorf("latency/Deployment after SetGroup(\"\"): %d pods, want 10", p.Count)
	}
}

// groupReport is a report of two groups: 20 latency pods that start in
// 200 ms and 20 saturation pods in 8 s, and the SLIs over all 40.
func groupReport(t *testing.T) *Report {
	t.Helper()
	c := NewCollector()
	startPods(c, GroupName("latency", "Deployment"), 20, 200*time.Millisecond)
	startPods(c, GroupName("big", "Deployment"), 20, 8*time.Second)
	return &Report{Profile: "load", SLIs: Summaries(c.Phases(SLIPhases)), PodGroups: GroupSummaries(c)}
}

func TestPodStartupSLOOfSomePhases(t *testing.T) {
	r := groupReport(t)
	podSLO := func(th SLOThresholds) SLOResult {
		for _, res := range CheckSLOs(r, th) {
			if res.Name == SLOPodStartupLatency {
				return res
			}
		}
		t.Fatal("no pod startup SLO result")
		return SLOResult{}
	}
	if res := podSLO(SLOThresholds{}); res.Pass || res.Count != 40 {
		t.Errorf("every pod: pass %v over %d pods; want a fail over 40 (p99 8 s)", res.Pass, res.Count)
	}
	res := podSLO(SLOThresholds{PodStartupPhases: []string{"latency"}})
	if !res.Pass || res.Count != 20 || res.ObservedMs < 199 || res.ObservedMs > 201 {
		t.Errorf("latency pods only: pass %v over %d pods, p99 %v ms; want a pass over 20 at 200 ms", res.Pass, res.Count, res.ObservedMs)
	}
	if !strings.Contains(res.Detail, "of phase latency (slos.podStartupPhases)") {
		t.Errorf("the verdict does not say which pods it judged: %q", res.Detail)
	}
	res = podSLO(SLOThresholds{PodStartupPhases: []string{"latency", "big"}})
	if res.Pass || res.Count != 40 {
		t.Errorf("both phases: pass %v over %d pods; want a fail over 40", res.Pass, res.Count)
	}
	res = podSLO(SLOThresholds{PodStartupPhases: []string{"nothing"}})
	if !res.Skipped || !strings.Contains(res.Detail, "nothing") {
		t.Errorf("a phase with no pods: %+v; want a skipped check naming the phase", res)
	}
}

func TestMergePodGroups(t *testing.T) {
	a, b := groupReport(t), groupReport(t)
	b.StartedAt = t0.Add(time.Second) // another shard of the run
	th := SLOThresholds{PodStartupPhases: []string{"latency"}}
	a.EvaluateSLOs(th)
	b.EvaluateSLOs(th)
	m, err := Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.PodGroups) != 2 {
		t.Fatalf("merged %d groups, want 2", len(m.PodGroups))
	}
	for _, g := range m.PodGroups {
		s, ok := g.SLI(SLIPodStartup)
		if !ok || s.Count != 40 {
			t.Errorf("%s: pod_startup over %d pods, want 40 (20 from each shard)", g.Name, s.Count)
		}
	}
	for _, res := range m.SLOs {
		if res.Name == SLOPodStartupLatency && (res.Count != 40 || !res.Pass) {
			t.Errorf("the merged report judged %d pods (pass %v); want the 40 latency pods of both shards, passing", res.Count, res.Pass)
		}
	}
	if _, err := Merge(a, func() *Report { r := groupReport(t); r.StartedAt = t0; r.EvaluateSLOs(SLOThresholds{}); return r }()); err == nil {
		t.Error("reports judged over other pods merged; want an error")
	}
}

func TestPodGroupRows(t *testing.T) {
	r := groupReport(t)
	rows := podGroupRows(r)
	var names []string
	for _, row := range rows {
		names = append(names, row.Name+":"+row.Count)
	}
	if got := strings.Join(names, " "); got != "latency/Deployment:20 big/Deployment:20 Deployment (all):40" {
		t.Errorf("rows %s; want each group, then the kind over both", got)
	}
}
