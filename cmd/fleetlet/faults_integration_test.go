//go:build integration

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// faultsProfile takes a node's runtime down, partitions 5 of 12 other
// nodes for 70 s meanwhile, past the node lifecycle controller's 50 s
// grace period, brings the runtime back, then stalls the pod workers of a
// node of its own pool while pods are bound to it. 6 of 14 nodes down keeps
// the one zone under the controller's 55 % unhealthy threshold: above it,
// in a zone of fewer than 50 nodes, the controller stops tainting
// altogether.
const faultsProfile = `name: faults
# The stalled node's pods wait 20 s: the pod startup SLO judges the pods
# made before the faults.
slos: {podStartupPhases: [app, bare]}
nodePools:
  - {name: pool, count: 12}
  - {name: stall, count: 1}
  - {name: runtime, count: 1}
phases:
  - name: app
    create:
      count: 1
      object: |
        apiVersion: apps/v1
        kind: Deployment
        spec:
          replicas: 24
          selector: {matchLabels: {app: "{{.Name}}"}}
          template:
            metadata: {labels: {app: "{{.Name}}"}}
            spec:
              nodeSelector: {fleetlet.io/pool: pool}
              tolerations:
                - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 5}
              containers: [{name: app, image: registry.k8s.io/pause:3.10}]
  - name: bare
    create:
      count: 12
      template:
        spec:
          nodeSelector: {fleetlet.io/pool: pool}
          containers: [{name: app, image: registry.k8s.io/pause:3.10}]
  - name: running
    waitRunning: {timeout: 3m}
  - name: rt
    fault: {kind: runtimeDown, nodes: {pool: runtime}}
  - name: cut
    fault:
      kind: partition
      nodes: {pool: pool, count: 5}
      duration: 70s
      readyTimeout: 30s
  - name: rt-back
    heal: {phase: rt, timeout: 1m}
  - name: stall
    fault: {kind: syncLoopStall, nodes: {pool: stall}}
  - name: pinned
    create:
      count: 3
      template:
        spec:
          nodeSelector: {fleetlet.io/pool: stall}
          containers: [{name: app, image: registry.k8s.io/pause:3.10}]
  - name: stalled
    sleep: {duration: 20s}
  - name: unstall
    heal: {phase: stall}
  - name: recovered
    waitRunning: {timeout: 3m}
  - delete: {}
  - waitGone: {timeout: 3m}
`

// TestFaultPartitionAndStall runs faultsProfile against the real control
// plane and checks what its report says the control plane did: the node
// whose runtime is down NotReady as the kubelet says it, and Ready again
// once it is back; the
// partitioned nodes NotReady and tainted unreachable, pods that tolerate
// that for 5 s evicted and rescheduled elsewhere, none of the nodes' own
// containers restarted by their agents, every node Ready again within 30 s
// of the partition's end; and the stalled node Ready throughout while the
// pods bound to it did not run until the stall ended.
func TestFaultPartitionAndStall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	rep, dir := runProfileYAML(ctx, t, criInProc, faultsProfile)
	if len(rep.Faults) != 3 {
		t.Fatalf("report has %d faults, want the runtime down, the partition and the stall: %+v", len(rep.Faults), rep.Faults)
	}
	rt, cut, stall := rep.Faults[0], rep.Faults[1], rep.Faults[2]
	// The kubelet says its runtime is down 30 s after its last good Status
	// (checked every 5 s) at its next status update (every 10 s).
	if rt.Kind != "runtimeDown" || rt.NotReady.Count != 1 || rt.NotReady.MaxSeconds < 25 || rt.NotReady.MaxSeconds > 50 {
		t.Errorf("runtime down %+v: want its node NotReady 30 to 45 s in", rt.NotReady)
	}
	if rt.ReadyAgain.Count != 1 || rt.ReadyAgain.MaxSeconds > 20 {
		t.Errorf("runtime back: Ready again %+v, want within the next status updates", rt.ReadyAgain)
	}
	if cut.Phase != "cut" || cut.Kind != "partition" || cut.Nodes != 5 || cut.End.IsZero() {
		t.Fatalf("first fault %+v, want the partition of 5 nodes, ended", cut)
	}
	if cut.Seconds < 70 {
		t.Errorf("the partition lasted %.1f s, want at least its 70 s", cut.Seconds)
	}
	if cut.NotReady.Count != 5 || cut.NotReady.MaxSeconds > 70 {
		t.Errorf("NotReady %+v: want all 5 nodes, within the partition", cut.NotReady)
	}
	if cut.UnreachableTaint.Count == 0 {
		t.Errorf("no partitioned node got the unreachable taint: %+v", cut)
	}
	if cut.PodsEvicted == 0 || cut.PodsRescheduled < cut.PodsEvicted {
		t.Errorf("%d pods evicted and %d rescheduled: want some evicted (5 s toleration) and every one replaced", cut.PodsEvicted, cut.PodsRescheduled)
	}
	if cut.RescheduledStartup.Count == 0 {
		t.Errorf("no rescheduled pod's startup measured: %+v", cut.RescheduledStartup)
	}
	if cut.ContainerRestarts != 0 || cut.PodsLost != 0 || cut.PodsDuplicated != 0 {
		t.Errorf("%d container restarts, %d pods lost, %d duplicated on the partitioned nodes: want none (bare pods tolerate 300 s)",
			cut.ContainerRestarts, cut.PodsLost, cut.PodsDuplicated)
	}
	if cut.ReadyAgain.Count != 5 || cut.ReadyAgain.MaxSeconds > 30 || cut.NotReadyAtReport != 0 {
		t.Errorf("Ready again %+v (%d still not Ready): want all 5 within 30 s of the end", cut.ReadyAgain, cut.NotReadyAtReport)
	}
	if cut.NodeEvictionRate != 0.1 {
		t.Errorf("configured eviction rate %v, want the controller-manager's 0.1", cut.NodeEvictionRate)
	}

	if stall.Kind != "syncLoopStall" || stall.Nodes != 1 || stall.NotReady.Count != 0 {
		t.Errorf("stall %+v: want 1 node that never went NotReady", stall)
	}
	if len(stall.Notes) == 0 || !strings.HasPrefix(stall.Notes[0], "3 pods bound to these nodes while the fault lasted did not run") {
		t.Errorf("stall notes %q: want the 3 pinned pods counted as not run during the stall", stall.Notes)
	}
	md, err := os.ReadFile(filepath.Join(dir, "out", "report.md"))
	if err != nil || !strings.Contains(string(md), "## Faults") || !strings.Contains(string(md), "cut (partition) on 5 nodes") {
		t.Errorf("report.md has no fault section for the partition (%v)", err)
	}
}
