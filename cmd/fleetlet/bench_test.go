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
	r, err := benchOne(ctx, v, 4, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if r.nodes != 4 || r.startup <= 0 || r.goroutinesPerNode <= 0 || r.cpuPerNode <= 0 {
		t.Errorf("result %+v: want the fleet's start-up, goroutines and CPU measured", r)
	}
	if r.notReadyEvents != 0 {
		t.Errorf("%d NodeNotReady events in an idle fleet", r.notReadyEvents)
	}
	// Every agent renews twice within 26 s, so lateness is measured;
	// the lease controller's own jitter keeps it under half a second.
	if r.latenessMax <= 0 || r.latenessMax > 5000 {
		t.Errorf("lease lateness max %.0f ms", r.latenessMax)
	}
}

func TestBenchFleetRejectsBadSizes(t *testing.T) {
	v := testSettings(t, criInProc)
	v.Set("nodes", "500,lots")
	if err := benchFleet(context.Background(), v); err == nil || !strings.Contains(err.Error(), "--nodes") {
		t.Fatalf("err = %v, want one naming --nodes", err)
	}
}
