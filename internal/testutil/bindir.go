package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// BinDir is where `make` puts the binaries the integration tests run:
// FLEETLET_BIN_DIR, else bin/ at the root of the module the test runs in.
// A missing binary fails the test, naming the make target that builds it,
// rather than skipping it: `make test` builds them all first.
func BinDir(t testing.TB, binary, makeTarget string) string {
	t.Helper()
	dir := os.Getenv("FLEETLET_BIN_DIR")
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, "bin")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, binary)); err != nil {
		t.Fatalf("%s not found in %s: run `make %s` (or `make test`, which builds it), or set FLEETLET_BIN_DIR", binary, dir, makeTarget)
	}
	return dir
}

// moduleRoot is the nearest directory at or above the working directory
// that holds a go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
