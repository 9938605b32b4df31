//go:build integration

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/reports"
)

// workloadsProfile makes every kind of workload the load test makes, in two
// namespaces, then scales and rolls the Deployments and deletes everything.
const workloadsProfile = `name: workloads
nodePools: [{name: pool, count: 3}]
slos: {podStartupPhases: [latency]}
phases:
  - name: deploy
    create:
      count: 2
      qps: 10
      namespaces: 2
      params: {Replicas: 3}
      object: |
        apiVersion: apps/v1
        kind: Deployment
        spec:
          replicas: {{.Replicas}}
          selector: {matchLabels: {app: "{{.Name}}"}}
          template:
            metadata: {labels: {app: "{{.Name}}"}}
            spec:
              containers:
                - name: app
                  image: registry.k8s.io/pause:3.10
                  env: [{name: VERSION, value: "{{DefaultParam .Version "1"}}"}]
  - name: sts
    create:
      count: 1
      object: |
        apiVersion: apps/v1
        kind: StatefulSet
        spec:
          replicas: 2
          serviceName: "{{.Name}}"
          selector: {matchLabels: {app: "{{.Name}}"}}
          template:
            metadata: {labels: {app: "{{.Name}}"}}
            spec: {containers: [{name: app, image: registry.k8s.io/pause:3.10}]}
  - name: ds
    create:
      count: 1
      object: |
        apiVersion: apps/v1
        kind: DaemonSet
        spec:
          selector: {matchLabels: {app: "{{.Name}}"}}
          template:
            metadata: {labels: {app: "{{.Name}}"}}
            spec: {containers: [{name: app, image: registry.k8s.io/pause:3.10}]}
  - name: job
    create:
      count: 1
      object: |
        apiVersion: batch/v1
        kind: Job
        spec:
          parallelism: 2
          completions: 2
          template:
            spec:
              restartPolicy: Never
              containers: [{name: app, image: registry.k8s.io/pause:3.10}]
  - name: cm
    create:
      count: 3
      object: |
        apiVersion: v1
        kind: ConfigMap
        data: {index: "{{.Index}}"}
  - name: running
    waitRunning: {timeout: 3m}
  - name: latency
    create:
      count: 3
      template: {spec: {containers: [{name: app, image: registry.k8s.io/pause:3.10}]}}
  - waitRunning: {timeout: 3m}
  - name: scale-down
    scale: {phase: deploy, replicas: 1}
  - name: scaled
    waitRunning: {timeout: 3m}
  - name: roll
    update: {phase: deploy, params: {Replicas: 1, Version: "2"}}
  - name: rolled
    waitRunning: {timeout: 3m}
  - delete: {}
  - waitGone: {timeout: 3m}
`

// TestWorkloadsProfile runs Deployments, a StatefulSet, a DaemonSet, a Job
// and ConfigMaps through create, scale, a rolling update and delete against
// the real control plane's controllers, and checks that the report times
// each object to its pods running, per phase and kind, counts the
// controllers' pods as the run's, and that nothing is left behind.
func TestWorkloadsProfile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	rep, dir := runProfileYAML(ctx, t, criInProc, workloadsProfile)
	if len(rep.Errors) != 0 {
		t.Errorf("errors: %v", rep.Errors)
	}
	got := map[string]int{}
	for _, w := range rep.Workloads {
		got[w.Name] = w.Count
		if w.Count > 0 && (w.P50Ms <= 0 || w.MaxMs < w.P50Ms) {
			t.Errorf("workload row %s: p50 %.1f ms, max %.1f ms", w.Name, w.P50Ms, w.MaxMs)
		}
	}
	// Each wait reports the objects that converged since their last change:
	// after the scale and the update only the Deployments. ConfigMaps run
	// no pods and are never waited for.
	want := map[string]int{
		"running/Deployment": 2, "running/StatefulSet": 1, "running/DaemonSet": 1, "running/Job": 1,
		"scaled/Deployment": 2, "rolled/Deployment": 2,
	}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("workloads %s: %d objects, want %d (all rows: %v)", name, got[name], n, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("workload rows %v, want exactly %v", got, want)
	}
	// The controllers' pods are the run's: 2×3 + 2 + 3 (one a node) + 2
	// at least, and the rolling update made 2 more; each seen Running and
	// gone, none deleted by the driver.
	if p := rep.Pods; p.Created < 18 || p.Running != p.Created || p.Gone != p.Created || p.Deleted != 3 {
		t.Errorf("pods %+v: want at least 15 made by the controllers and 3 by the driver, every one Running and gone, the driver's 3 deleted by it", p)
	}
	if len(rep.SLIs) == 0 || rep.SLIs[0].Count+rep.SLIs[0].Excluded < 18 {
		t.Errorf("SLIs %+v do not cover the controllers' pods and the driver's", rep.SLIs)
	}
	// The pods by the phase that made them and their owning kind; the
	// Deployments' count their rolling update's pods too.
	groups := map[string]int{}
	for _, g := range rep.PodGroups {
		if s, ok := g.SLI(reports.SLICreateToSchedule); ok {
			groups[g.Name] = s.Count
		}
	}
	wantGroups := map[string]int{"deploy/Deployment": 8, "sts/StatefulSet": 2, "ds/DaemonSet": 3, "job/Job": 2, "latency/Pod": 3}
	for name, n := range wantGroups {
		if groups[name] < n || name != "deploy/Deployment" && groups[name] != n {
			t.Errorf("pod group %s: %d pods, want %d (all groups: %v)", name, groups[name], n, groups)
		}
	}
	if len(groups) != len(wantGroups) {
		t.Errorf("pod groups %v, want exactly the phases that made pods: %v", groups, wantGroups)
	}
	// The pod startup SLO judged the latency pods only (every node had the
	// image by then: the DaemonSet pulled it everywhere).
	for _, res := range rep.SLOs {
		if res.Name == reports.SLOPodStartupLatency && (res.Count != 3 || !strings.Contains(res.Detail, "of phase latency")) {
			t.Errorf("pod startup SLO over %d pods (%s); want the 3 pods of phase latency", res.Count, res.Detail)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "out", "report.md"))
	if err != nil || !strings.Contains(string(md), "## Workloads") || !strings.Contains(string(md), "`running/Deployment`") {
		t.Errorf("report.md has no workloads table (%v)", err)
	}
	if !strings.Contains(string(md), "## Pod startup by group") || !strings.Contains(string(md), "`ds/DaemonSet`") {
		t.Error("report.md has no table of pod startup by group")
	}
}
