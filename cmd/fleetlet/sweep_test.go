//go:build integration

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func sweepProfile(t *testing.T, dir, slos string) string {
	path := filepath.Join(dir, "sweep.yaml")
	if err := os.WriteFile(path, []byte(`name: step
nodePools: [{name: pool, count: 1}]
`+slos+`
phases:
  - create: {count: 4, qps: 20, template: {spec: {containers: [{name: app, image: registry.k8s.io/pause:3.10}]}}}
  - waitRunning: {timeout: 2m}
  - delete: {qps: 20}
  - waitGone: {timeout: 2m}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func readSweep(t *testing.T, dir string) sweepResult {
	data, err := os.ReadFile(filepath.Join(dir, "sweep.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res sweepResult
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

func TestSweepFindsTheLargestPassingStep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	v := testSettings(t, criInProc)
	v.Set("profile", sweepProfile(t, dir, ""))
	v.Set("out", filepath.Join(dir, "out"))
	v.Set("sweep", "nodes=1,2")
	if err := run(ctx, v); err != nil {
		t.Fatal(err)
	}
	res := readSweep(t, filepath.Join(dir, "out"))
	if len(res.Steps) != 2 || res.LargestPassing == nil || *res.LargestPassing != 2 {
		t.Fatalf("sweep = %+v, want both steps passing", res)
	}
	for _, s := range res.Steps {
		if _, err := os.Stat(s.Report); err != nil || s.PodStartupP99Ms <= 0 {
			t.Errorf("step %d: report %s (%v), pod_startup p99 %.1f ms", s.Value, s.Report, err, s.PodStartupP99Ms)
		}
	}
}

func TestSweepStopsAtTheFirstFailingStep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	v := testSettings(t, criInProc)
	v.Set("profile", sweepProfile(t, dir, "slos: {podStartupP99: 1us}"))
	v.Set("out", filepath.Join(dir, "out"))
	v.Set("sweep", "nodes=1,2")
	if err := run(ctx, v); err != nil {
		t.Fatal(err)
	}
	res := readSweep(t, filepath.Join(dir, "out"))
	if len(res.Steps) != 1 || res.Steps[0].Pass || len(res.Steps[0].Failed) == 0 || res.LargestPassing != nil {
		t.Fatalf("sweep = %+v, want one failing step and no answer", res)
	}
}
