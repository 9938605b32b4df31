//go:build integration

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/fleetlet/fleetlet/reports"
)

// TestSoakSamples runs a short soak on the shared control plane: every
// interval's sample must be taken and the files kept current. A run this
// short measures no growth worth judging (caches still fill in its first
// minute), so the test checks the checks that hold whatever the length:
// no lease late by 10 s and no node NotReady. The hour-long soak runs
// outside make test, by its own command (README, "Soak").
func TestSoakSamples(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	profilePath := filepath.Join(dir, "soak.yaml")
	if err := os.WriteFile(profilePath, []byte(`name: short-soak
nodePools: [{name: pool, count: 5}]
phases:
  - churn:
      qps: 2
      duration: 40s
      lifetime: 5s
      template: {spec: {containers: [{name: app, image: registry.k8s.io/pause:3.10}]}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	v, opts := sharedFleetSettings(t, "soak")
	v.Set("profile", profilePath)
	v.Set("interval", "5s")
	v.Set("max-growth", 0.05)
	v.Set("max-lease-lateness", "10s")
	v.Set("ready-timeout", "3m")
	out := filepath.Join(dir, "out")
	v.Set("out", out)
	err := benchSoak(ctx, v)
	t.Cleanup(func() {
		client, err := kubernetes.NewForConfig(opts.ControlPlane.AdminRESTConfig())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var nodes []string
		for i := range 5 {
			nodes = append(nodes, fmt.Sprintf("%spool-%d", opts.NodePrefix, i))
		}
		removeFleet(ctx, t, client, nodes)
	})
	raw, rerr := os.ReadFile(filepath.Join(out, "soak.json"))
	if rerr != nil {
		t.Fatalf("no soak.json (soak: %v): %v", err, rerr)
	}
	var soak reports.Soak
	if err := json.Unmarshal(raw, &soak); err != nil {
		t.Fatal(err)
	}
	if len(soak.Errors) > 0 {
		t.Fatalf("the soak's load failed: %v", soak.Errors)
	}
	// 40 s of creates and the last pods' lifetime: 9 samples at least.
	if len(soak.Samples) < 9 || soak.Nodes != 5 || soak.ChurnQPS != 2 {
		t.Fatalf("soak: %d samples, %d nodes, %v pods/s; want 9 or more of 5 nodes at 2/s", len(soak.Samples), soak.Nodes, soak.ChurnQPS)
	}
	for _, x := range soak.Samples {
		if x.RSSBytes <= 0 || x.HeapLiveBytes <= 0 || x.Goroutines <= 0 || x.OpenFDs <= 0 || x.NodesNotReady != 0 {
			t.Errorf("sample %+v: want every quantity read and every node Ready", x)
		}
	}
	last := soak.Samples[len(soak.Samples)-1]
	if last.PodsCreated < 70 || last.PodsGone != last.PodsCreated {
		t.Errorf("last sample: %d pods created, %d gone; want about 80, all gone", last.PodsCreated, last.PodsGone)
	}
	if len(soak.Checks) != 6 {
		t.Fatalf("checks %+v, want four growths, lateness and NotReady", soak.Checks)
	}
	for _, c := range soak.Checks[4:] {
		if !c.Pass {
			t.Errorf("check %+v failed", c)
		}
	}
	if soak.Pass != (err == nil) {
		t.Errorf("soak pass %v, but the command returned %v", soak.Pass, err)
	}
	for _, name := range []string{"soak.md", "soak.html", "report.json"} {
		if fi, err := os.Stat(filepath.Join(out, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s not written: %v", name, err)
		}
	}
}
