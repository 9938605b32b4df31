//go:build integration

package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestBenchFleetMeasuresAnIdleFleet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	v := testSettings(t, criInProc)
	v.Set("settle", time.Second)
	v.Set("idle", 25*time.Second)
	v.Set("ready-timeout", 3*time.Minute)
	v.Set("pods-per-node", 2)
	v.Set("pod-qps", 20.0)
	v.Set("services", 5)
	v.Set("pod-timeout", 3*time.Minute)
	var rssBase int64
	r, err := benchOne(ctx, v, 4, t.TempDir(), &rssBase)
	if err != nil {
		t.Fatal(err)
	}
	if rssBase <= 0 {
		t.Errorf("RSS baseline %d: want the process's RSS before the fleet", rssBase)
	}
	if r.nodes != 4 || r.startup <= 0 || r.schedulable < r.startup || r.goroutinesPerNode <= 0 || r.cpuPerNode <= 0 {
		t.Errorf("result %+v: want the fleet's start-up, goroutines and CPU measured", r)
	}
	// A real node's watches: the kubelet's six (its pods and Node,
	// Services, RuntimeClasses, CSIDrivers, its PodCertificateRequests) and
	// kube-proxy's four (its Node, Services, EndpointSlices, ServiceCIDRs).
	if r.watchesPerNode != 10 {
		t.Errorf("an idle agent holds %.1f watches, want a real node's 10", r.watchesPerNode)
	}
	if r.notReadyEvents != 0 {
		t.Errorf("%d NodeNotReady events in an idle fleet", r.notReadyEvents)
	}
	t.Logf("result: %+v", r)
	// Every agent renews twice within 26 s, so lateness is measured. The
	// lease controller's own jitter is at most 4 % of the 10 s interval,
	// 400 ms; the rest is the PUT's latency on a loaded machine. A second
	// bounds both and still fails any renewal that missed its period.
	if r.latenessMax <= 0 || r.latenessMax > 1000 || r.leasePutP99Ms <= 0 {
		t.Errorf("lease lateness max %.0f ms, PUT p99 %.1f ms", r.latenessMax, r.leasePutP99Ms)
	}
	// The pod load ran after the window: its phases are measured, and the
	// agent's share before the status write is part of its whole share.
	if r.pods != 8 || r.podStartupP99Ms <= 0 || r.agentOwnP99Ms <= 0 || r.agentOwnP99Ms > r.agentP99Ms ||
		r.mountedToRunningSetP99Ms <= 0 || r.mountedToRunningSetP99Ms > r.agentOwnP99Ms {
		t.Errorf("pods %d, pod_startup p99 %.1f ms, agent p99 %.1f ms, to running_set %.1f ms, from volumes mounted %.1f ms",
			r.pods, r.podStartupP99Ms, r.agentP99Ms, r.agentOwnP99Ms, r.mountedToRunningSetP99Ms)
	}
	var table strings.Builder
	printBench(&table, []benchResult{r})
	if !strings.Contains(table.String(), "agent_observed→running_set p99") {
		t.Errorf("table without the pods' columns:\n%s", table.String())
	}
}
