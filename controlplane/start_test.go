package controlplane

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

// fakeBinDir makes a BinDir whose four binaries all run script, to drive
// Start's failure paths without the real control plane.
func fakeBinDir(t *testing.T, script string) string {
	t.Helper()
	dir := t.TempDir()
	for _, c := range startOrder() {
		if err := os.WriteFile(filepath.Join(dir, binaryName(c)), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func testContext(t *testing.T) context.Context {
	_, ctx := ktesting.NewTestContext(t)
	return ctx
}

func TestStartMissingBinaries(t *testing.T) {
	binDir := t.TempDir()
	_, err := Start(testContext(t), Config{BinDir: binDir, Dir: t.TempDir()})
	if err == nil {
		t.Fatal("Start succeeded without binaries")
	}
	for _, want := range []string{filepath.Join(binDir, "etcd"), filepath.Join(binDir, "kube-apiserver"), filepath.Join(binDir, "kube-controller-manager"), "make controlplane"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestStartComponentExits(t *testing.T) {
	binDir := fakeBinDir(t, `echo "fatal: cannot open data dir"; exit 3`)
	dir := t.TempDir()
	_, err := Start(testContext(t), Config{BinDir: binDir, Dir: dir})
	if err == nil {
		t.Fatal("Start succeeded with an etcd that exits")
	}
	for _, want := range []string{"etcd exited before it was ready", "exit status 3", filepath.Join(dir, "logs", "etcd.log"), "fatal: cannot open data dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestStartRetriesTakenPort(t *testing.T) {
	binDir := fakeBinDir(t, `echo attempt >> "$(dirname "$0")/attempts"; echo "listen tcp 127.0.0.1:2380: bind: address already in use"; exit 1`)
	_, err := Start(testContext(t), Config{BinDir: binDir, Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start error = %v, want the port conflict", err)
	}
	data, err := os.ReadFile(filepath.Join(binDir, "attempts"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(data), "attempt"); got != maxPortAttempts {
		t.Errorf("etcd started %d times, want %d", got, maxPortAttempts)
	}
}

func TestStartComponentNeverReady(t *testing.T) {
	binDir := fakeBinDir(t, `echo $$ > "$(dirname "$0")/pid"; echo "waiting forever"; exec sleep 600`)
	_, err := Start(testContext(t), Config{BinDir: binDir, Dir: t.TempDir(), StartTimeout: time.Second, StopTimeout: time.Minute})
	if err == nil {
		t.Fatal("Start succeeded with an etcd that never answers")
	}
	for _, want := range []string{"etcd not ready after 1s", "waiting forever", "StartTimeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	data, err := os.ReadFile(filepath.Join(binDir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	// Start stops what it started before returning, so the child is reaped.
	assertGone(t, pid)
}

func TestStartCancelled(t *testing.T) {
	binDir := fakeBinDir(t, `exec sleep 600`)
	ctx, cancel := context.WithCancel(testContext(t))
	cancel()
	_, err := Start(ctx, Config{BinDir: binDir, Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "cancel") {
		t.Fatalf("Start error = %v, want cancellation", err)
	}
}

func TestStartRefusesUsedDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "etcd"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), Config{BinDir: fakeBinDir(t, "exit 1"), Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "earlier run") {
		t.Fatalf("Start error = %v, want a refusal of the used directory", err)
	}
}
