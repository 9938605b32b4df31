package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

func TestCheckFleetFlags(t *testing.T) {
	cases := []struct {
		key, value, want string
	}{
		{"cri", "containerd", "unknown --cri"},
		{"first-ip", "10.1.0.1", "not an IPv4 loopback"},
		{"debug-addr", "0.0.0.0:6060", "--debug-addr"},
		{"debug-addr", "6060", "--debug-addr"},
		{"debug-addr", "127.0.0.1:6060", ""},
	}
	for _, tc := range cases {
		v := viper.New()
		v.Set("cri", criInProc)
		v.Set("first-ip", "127.1.0.1")
		v.Set(tc.key, tc.value)
		err := checkFleetFlags(v)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s=%s: %v", tc.key, tc.value, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s=%s: err = %v, want it to say %q", tc.key, tc.value, err, tc.want)
		}
	}
}

func TestCheckCapacity(t *testing.T) {
	meminfo := filepath.Join(t.TempDir(), "meminfo")
	// 1 GiB available: 512 nodes at 2 MiB each.
	if err := os.WriteFile(meminfo, []byte("MemTotal: 4194304 kB\nMemAvailable: 1048576 kB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkCapacity(512, meminfo); err != nil {
		t.Errorf("512 nodes in 1 GiB: %v", err)
	}
	err := checkCapacity(513, meminfo)
	if err == nil || !strings.Contains(err.Error(), "at most 512 nodes here") || !strings.Contains(err.Error(), "1.0 GiB available") {
		t.Errorf("513 nodes in 1 GiB: err = %v, want the limit of 512 named", err)
	}
	if err := checkCapacity(1<<30, filepath.Join(t.TempDir(), "none")); err != nil {
		t.Errorf("without meminfo there is nothing to check against: %v", err)
	}
}

func TestParseSweep(t *testing.T) {
	sw, err := parseSweep("nodes=25,50,100")
	if err != nil || sw.Parameter != "nodes" || len(sw.Values) != 3 || sw.Values[2] != 100 {
		t.Errorf("parseSweep = %+v, %v", sw, err)
	}
	for _, bad := range []string{"pods=1,2", "nodes", "nodes=10,5", "qps=0,1", "qps=a"} {
		if _, err := parseSweep(bad); err == nil {
			t.Errorf("parseSweep(%q) accepted", bad)
		}
	}
}

// fleetSettings are the fleet flags of the tests: a small jitter, and node
// names of their own.
func fleetSettings(cri string) *viper.Viper {
	v := viper.New()
	v.Set("cri", cri)
	v.Set("node-prefix", "it-")
	v.Set("first-ip", "127.1.0.1")
	v.Set("start-jitter", 2*time.Second)
	v.Set("seed", uint64(1))
	v.Set("ready-timeout", 3*time.Minute)
	return v
}

// TestFlagUsageHasNoBackquotes: pflag takes a backquoted word of a usage
// string as the flag's value name, so `--flag cmd ...` would show in
// --help as the flag's type and vanish from its text.
func TestFlagUsageHasNoBackquotes(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: usage %q holds a backquote", c.CommandPath(), f.Name, f.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand())
}
