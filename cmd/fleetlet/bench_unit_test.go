package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestMedianResult(t *testing.T) {
	runs := []benchResult{
		{nodes: 10, runs: 1, startup: 3 * time.Second, rssPerNode: 700, latenessP99Ms: 900, notReadyEvents: 0},
		{nodes: 10, runs: 1, startup: 9 * time.Second, rssPerNode: 650, latenessP99Ms: 1500, notReadyEvents: 2},
		{nodes: 10, runs: 1, startup: 4 * time.Second, rssPerNode: 800, latenessP99Ms: 400, notReadyEvents: 0},
	}
	m := medianResult(runs)
	if m.runs != 3 || m.startup != 4*time.Second || m.rssPerNode != 700 || m.latenessP99Ms != 900 {
		t.Errorf("medians %+v, want 3 runs, 4 s, 700 KiB, 900 ms", m)
	}
	if m.notReadyEvents != 2 {
		t.Errorf("NodeNotReady %d, want every run's counted", m.notReadyEvents)
	}
	if m := medianResult(runs[:2]); m.startup != 6*time.Second {
		t.Errorf("median of two: %v, want their mean", m.startup)
	}
}

func TestBenchFleetRejectsBadFlags(t *testing.T) {
	for flag, value := range map[string]any{"nodes": "500,lots", "repeat": 0, "pods-per-node": -1, "pod-qps": 0.0} {
		v := fleetSettings(criInProc)
		v.Set("nodes", "5")
		v.Set("repeat", 1)
		v.Set("pod-qps", 100.0)
		v.Set(flag, value)
		if err := benchFleet(context.Background(), v); err == nil || !strings.Contains(err.Error(), "--"+flag) {
			t.Errorf("--%s %v: err = %v, want one naming the flag", flag, value, err)
		}
	}
}
