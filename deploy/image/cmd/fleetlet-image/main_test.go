package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBadInputs(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "fleetlet-image.tar")
	missing := filepath.Join(dir, "bin", "image", "fleetlet")
	for _, tc := range []struct {
		what  string
		epoch string
		args  []string
		want  string
	}{
		{"missing binary", "", []string{"--binary", missing, "--out", out, "--tag", "fleetlet.io/fleetlet:latest"}, `not found: run "make image"`},
		{"bad SOURCE_DATE_EPOCH", "yesterday", []string{"--binary", missing, "--out", out}, "git log -1 --format=%ct"},
		{"stray argument", "", []string{"--out", out, "extra"}, "every input is a flag"},
	} {
		t.Setenv("SOURCE_DATE_EPOCH", tc.epoch)
		err := run(tc.args)
		if err == nil {
			t.Errorf("%s: no error", tc.what)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
			t.Errorf("%s: error %q, want one line with %q", tc.what, msg, tc.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a failed run wrote %s", out)
	}
}
