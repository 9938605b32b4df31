package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/reports"
)

// runAsFleetlet makes this test binary act as the fleetlet command when the
// bad-input test starts it, so that each case runs the real CLI in a process
// of its own: exit code, stderr, files and child processes as a user sees
// them.
const runAsFleetlet = "FLEETLET_TEST_RUN_MAIN"

// afterTests are run once every test has: what tests share (the
// integration tests' control plane) is released there.
var afterTests []func()

func TestMain(m *testing.M) {
	if os.Getenv(runAsFleetlet) == "1" {
		main()
		os.Exit(0)
	}
	code := m.Run()
	for _, f := range afterTests {
		f()
	}
	os.Exit(code)
}

// badInputDeadline is how long a bad input may take to be refused: it must
// be refused before anything starts, not after a timeout.
const badInputDeadline = 5 * time.Second

// A profile that loads, for the cases that break one thing of it.
const goodPool = `nodePools: [{name: pool, count: 2}]
`
const goodPhases = `phases:
  - create: {count: 2, template: {spec: {containers: [{name: app, image: registry.k8s.io/pause:3.10}]}}}
`

func profileWith(pool, phases string) string {
	return "name: bad\n" + pool + phases
}

func podPhase(annotations string) string {
	return `phases:
  - create: {count: 2, template: {metadata: {annotations: {` + annotations + `}}, spec: {containers: [{name: app, image: registry.k8s.io/pause:3.10}]}}}
`
}

const kubeconfigHead = "apiVersion: v1\nkind: Config\n"

// tokenKubeconfig is a kubeconfig of an unreachable server with a bootstrap
// token: enough for the checks that read it.
const tokenKubeconfig = kubeconfigHead + "contexts: [{name: c, context: {cluster: x, user: u}}]\nclusters: [{name: x, cluster: {server: https://127.0.0.1:1}}]\nusers: [{name: u, user: {token: abcdef.0123456789abcdef}}]\ncurrent-context: c\n"

// kubeletConfigHead starts a kubelet config file.
const kubeletConfigHead = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// agentArgs runs `fleetlet agent` with the kubelet config file config: the
// file is read before the cluster or the runtime is reached.
func agentArgs(config string) []string {
	return []string{"agent", "--kubeconfig", "kc", "--config", config, "--node-ip", "192.0.2.10"}
}

// TestBadInputs feeds the CLI inputs a user gets wrong. Each must be refused
// with exit code 1 and one line on stderr that names the problem and its fix,
// within badInputDeadline, without a panic, leaving no file behind but the
// case's own inputs (unchanged) and no process running.
func TestBadInputs(t *testing.T) {
	started := time.Now()
	report := reportStartedAt(t, started)
	// Another shard of the same run: it started a moment later.
	otherShard := reportStartedAt(t, started.Add(time.Millisecond))
	cases := []struct {
		name  string
		args  []string
		files map[string]string
		// want are substrings of the message, in any order.
		want []string
		// live names a unix socket a server listens on during the case.
		live string
	}{
		// Profiles.
		{name: "unknown profile", args: []string{"run", "--profile", "nosuch"}, want: []string{`unknown profile "nosuch"`, "built-in profiles are"}},
		{name: "profile file missing", args: []string{"run", "--profile", "./nosuch.yaml"}, want: []string{"reading profile", "no such file"}},
		{name: "negative node count", args: []string{"run", "--profile", "p.yaml"},
			files: map[string]string{"p.yaml": profileWith("nodePools: [{name: pool, count: -1}]\n", goodPhases)},
			want:  []string{"nodePools[0].count", "greater than zero"}},
		{name: "node count the process cannot hold", args: []string{"run", "--profile", "p.yaml"},
			files: map[string]string{"p.yaml": profileWith("nodePools: [{name: pool, count: 10000000}]\n", goodPhases)},
			want:  []string{"nodePools", "100000"}},
		{name: "unknown profile field", args: []string{"run", "--profile", "p.yaml"},
			files: map[string]string{"p.yaml": profileWith(goodPool, goodPhases) + "nodepools: []\n"},
			want:  []string{`unknown field "nodepools"`}},
		{name: "explicit zero qps", args: []string{"run", "--profile", "p.yaml"},
			files: map[string]string{"p.yaml": profileWith(goodPool, `phases: [{create: {count: 2, qps: 0, template: {spec: {containers: [{name: a, image: i}]}}}}]
`)},
			want: []string{"phases[0].create.qps", "greater than zero"}},
		{name: "explicit zero cpu", args: []string{"run", "--profile", "p.yaml"},
			files: map[string]string{"p.yaml": profileWith(`nodePools: [{name: pool, count: 2, cpu: "0"}]
`, goodPhases)},
			want: []string{"nodePools[0].cpu", "greater than zero"}},
		{name: "no phases", args: []string{"run", "--profile", "p.yaml"},
			files: map[string]string{"p.yaml": profileWith(goodPool, "phases: []\n")},
			want:  []string{"phases"}},
		{name: "unknown eviction signal", args: []string{"run", "--profile", "p.yaml"},
			files: map[string]string{"p.yaml": profileWith(`nodePools: [{name: pool, count: 2, kubelet: {evictionHard: {memory.avialable: 100Mi}}}]
`, goodPhases)},
			want: []string{"nodePools[0].kubelet", "evictionHard", "memory.avialable"}},
		{name: "bad eviction quantity", args: []string{"run", "--profile", "p.yaml"},
			files: map[string]string{"p.yaml": profileWith(`nodePools: [{name: pool, count: 2, kubelet: {evictionHard: {memory.available: lots}}}]
`, goodPhases)},
			want: []string{"nodePools[0].kubelet", "evictionHard", "lots"}},
		{name: "unknown feature gate", args: []string{"run", "--profile", "p.yaml"},
			files: map[string]string{"p.yaml": profileWith(`nodePools: [{name: pool, count: 2, kubelet: {featureGates: {NoSuchGate: true}}}]
`, goodPhases)},
			want: []string{"featureGates", "NoSuchGate", "EventedPLEG"}},
		{name: "feature gate not a boolean", args: []string{"run", "--profile", "p.yaml"},
			files: map[string]string{"p.yaml": profileWith(`nodePools: [{name: pool, count: 2, kubelet: {featureGates: {EventedPLEG: "yes"}}}]
`, goodPhases)},
			want: []string{"nodePools[0].kubelet.featureGates[EventedPLEG]", "true or false"}},
		{name: "bad behaviour annotation", args: []string{"run", "--profile", "p.yaml"},
			files: map[string]string{"p.yaml": profileWith(goodPool, podPhase(`fleetlet.io/behaviour: "*: {exitCode: lots}"`))},
			want:  []string{"phases[0].create.template.metadata.annotations[fleetlet.io/behaviour]"}},
		{name: "bad pull-error annotation", args: []string{"run", "--profile", "p.yaml"},
			files: map[string]string{"p.yaml": profileWith(goodPool, podPhase(`fleetlet.io/pull-error: sometimes`))},
			want:  []string{"annotations[fleetlet.io/pull-error]"}},

		// Flags of run.
		{name: "negative ready timeout", args: []string{"run", "--ready-timeout", "-1s"}, want: []string{"--ready-timeout -1s", "positive duration"}},
		{name: "negative start jitter", args: []string{"run", "--start-jitter", "-5s"}, want: []string{"--start-jitter -5s", "positive spread"}},
		{name: "huge start jitter", args: []string{"run", "--start-jitter", "1000000h"}, want: []string{"--start-jitter", "limit"}},
		{name: "start jitter past the ready timeout", args: []string{"run", "--start-jitter", "10m", "--ready-timeout", "5m"}, want: []string{"--start-jitter 10m0s", "--ready-timeout 5m0s"}},
		{name: "unknown cri", args: []string{"run", "--cri", "containerd"}, want: []string{`unknown --cri "containerd"`, "inproc"}},
		{name: "first ip off loopback", args: []string{"run", "--first-ip", "10.1.0.1"}, want: []string{"--first-ip", "127.0.0.0/8"}},
		{name: "kubelet port out of range", args: []string{"run", "--kubelet-port", "70000"}, want: []string{"--kubelet-port 70000", "0 to 65535"}},
		{name: "unknown watch mode", args: []string{"run", "--watch-mode", "both"}, want: []string{`unknown --watch-mode "both"`, "per-node"}},
		{name: "debug address off loopback", args: []string{"run", "--debug-addr", "0.0.0.0:6060"}, want: []string{"--debug-addr", "loopback"}},
		{name: "sweep not increasing", args: []string{"run", "--sweep", "nodes=10,5"}, want: []string{"--sweep", "increasing"}},
		{name: "unknown flag", args: []string{"run", "--nodez", "5"}, want: []string{"unknown flag: --nodez", "--help"}},
		{name: "missing config file", args: []string{"run", "--config", "nosuch.yaml"}, want: []string{"reading config file nosuch.yaml"}},
		{name: "output directory holds a report", args: []string{"run", "--profile", "smoke", "--out", "old"},
			files: map[string]string{"old/report.json": report},
			want:  []string{"already holds report.json", "new directory"}},

		// Kubeconfigs.
		{name: "kubeconfig missing", args: []string{"run", "--kubeconfig", "nosuch"}, want: []string{"kubeconfig nosuch does not exist"}},
		{name: "kubeconfig empty", args: []string{"run", "--kubeconfig", "kc"}, files: map[string]string{"kc": ""}, want: []string{"kubeconfig kc", "no contexts"}},
		{name: "kubeconfig context names a missing cluster", args: []string{"run", "--kubeconfig", "kc"},
			files: map[string]string{"kc": kubeconfigHead + "contexts: [{name: c, context: {cluster: gone, user: u}}]\nusers: [{name: u, user: {token: t}}]\ncurrent-context: c\n"},
			want:  []string{`context "c" names cluster "gone"`}},
		{name: "kubeconfig current context missing", args: []string{"fleet", "--kubeconfig", "kc"},
			files: map[string]string{"kc": kubeconfigHead + "contexts: [{name: c, context: {cluster: x}}]\nclusters: [{name: x, cluster: {server: https://127.0.0.1:1}}]\ncurrent-context: other\n"},
			want:  []string{`current-context "other" is not among its contexts (c)`}},
		{name: "kubeconfig not YAML", args: []string{"bench", "fleet", "--kubeconfig", "kc"}, files: map[string]string{"kc": "{{{"},
			want: []string{"kubeconfig kc does not parse"}},

		// The agent's kubelet config file (--config), decoded strictly,
		// then validated with the flags given applied.
		{name: "agent config file missing", args: agentArgs("nosuch.yaml"), want: []string{"kubelet config file nosuch.yaml", "no such file", "/var/lib/kubelet/config.yaml"}},
		{name: "agent config file empty", args: agentArgs("c.yaml"), files: map[string]string{"c.yaml": "\n"},
			want: []string{"kubelet config file c.yaml", "empty", "kind: KubeletConfiguration"}},
		{name: "agent config of another kind", args: agentArgs("c.yaml"),
			files: map[string]string{"c.yaml": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"},
			want:  []string{"kubelet config file c.yaml", `kind "KubeProxyConfiguration"`, "want apiVersion: kubelet.config.k8s.io/v1beta1 and kind: KubeletConfiguration"}},
		{name: "agent config unknown field", args: agentArgs("c.yaml"), files: map[string]string{"c.yaml": kubeletConfigHead + "maxPod: 10\n"},
			want: []string{"kubelet config file c.yaml", `unknown field "maxPod"`, "remove or correct it"}},
		{name: "agent config unknown nested fields", args: agentArgs("c.yaml"),
			files: map[string]string{"c.yaml": kubeletConfigHead + "authentication: {x509: {clientCAFle: ca.crt}}\nfoo: 1\n"},
			want:  []string{`unknown fields "authentication.x509.clientCAFle", "foo"`}},
		{name: "agent config duplicate field", args: agentArgs("c.yaml"), files: map[string]string{"c.yaml": kubeletConfigHead + "maxPods: 10\nmaxPods: 20\n"},
			want: []string{"kubelet config file c.yaml", "line 4", `duplicate field "maxPods"`, "give each field once"}},
		{name: "agent config bad duration", args: agentArgs("c.yaml"), files: map[string]string{"c.yaml": kubeletConfigHead + "fileCheckFrequency: soon\n"},
			want: []string{"kubelet config file c.yaml", `fileCheckFrequency: invalid duration "soon": want a duration such as 20s`}},
		{name: "agent config wrong type", args: agentArgs("c.yaml"), files: map[string]string{"c.yaml": kubeletConfigHead + "maxPods: lots\n"},
			want: []string{"kubelet config file c.yaml", "maxPods: a string, want an integer"}},
		{name: "agent config invalid value", args: agentArgs("c.yaml"),
			files: map[string]string{"c.yaml": kubeletConfigHead + "evictionHard: {memory.avialable: 100Mi}\nport: 70000\n"},
			want:  []string{"kubelet config file c.yaml", "evictionHard[memory.avialable]", "port: Invalid value: 70000"}},
		{name: "agent config static pod path without a period", args: agentArgs("c.yaml"),
			files: map[string]string{"c.yaml": kubeletConfigHead + "staticPodPath: manifests\nfileCheckFrequency: -1s\n"},
			want:  []string{"fileCheckFrequency", "must be greater than zero"}},
		{name: "agent flag over the config file", args: append(agentArgs("c.yaml"), "--max-pods", "-1"),
			files: map[string]string{"c.yaml": kubeletConfigHead + "maxPods: 10\n"},
			want:  []string{"kubelet config file c.yaml", "--max-pods maxPods: Invalid value: -1"}},

		// fleet and bench.
		{name: "fleet negative nodes", args: []string{"fleet", "--nodes", "-1"}, want: []string{"--nodes -1"}},
		{name: "fleet negative ready timeout", args: []string{"fleet", "--ready-timeout", "-1s"}, want: []string{"--ready-timeout -1s", "wait until interrupted"}},
		{name: "bench no sizes", args: []string{"bench", "fleet", "--nodes", "0"}, want: []string{`--nodes "0"`, "positive numbers"}},
		{name: "bench no runs", args: []string{"bench", "fleet", "--repeat", "0"}, want: []string{"--repeat 0"}},
		{name: "bench negative scrape interval", args: []string{"bench", "fleet", "--scrape-interval", "-1s"}, want: []string{"--scrape-interval -1s", "30s"}},
		{name: "bench scrape paths without a slash", args: []string{"bench", "fleet", "--scrape-interval", "30s", "--scrape-paths", "healthz"}, want: []string{`--scrape-paths: "healthz" is not a path`, "/metrics/cadvisor"}},
		{name: "scrape without a cluster", args: []string{"bench", "scrape"}, want: []string{"no cluster to scrape", "--kubeconfig"}},
		{name: "scrape a name, not a path", args: []string{"bench", "scrape", "--paths", "/metrics,metrics"}, want: []string{`--paths: "metrics" is not a path`, "/metrics/cadvisor"}},
		{name: "scrape no interval", args: []string{"bench", "scrape", "--interval", "0s"}, want: []string{"--interval 0s", "both positive"}},
		{name: "scrape a target with a path", args: []string{"bench", "scrape", "--target", "https://127.0.0.1:10250/metrics"}, want: []string{`--target "https://127.0.0.1:10250/metrics"`, "without a path"}},
		{name: "scrape a target and a selector", args: []string{"bench", "scrape", "--target", "https://127.0.0.1:10250", "--selector", "a=b"}, want: []string{"--selector", "drop one"}},
		{name: "scrape the cost of no process", args: []string{"bench", "scrape", "--target", "https://127.0.0.1:10250", "--cost-of", "999999999"}, want: []string{"--cost-of 999999999", "pgrep"}},
		{name: "soak without churn", args: []string{"bench", "soak", "--profile", "smoke"}, want: []string{"profile smoke has no churn phase", "built-in soak profile"}},
		{name: "soak interval too short", args: []string{"bench", "soak", "--interval", "10ms"}, want: []string{"--interval 10ms", "1s or more"}},
		{name: "soak zero growth", args: []string{"bench", "soak", "--max-growth", "0"}, want: []string{"--max-growth 0", "positive fraction"}},
		{name: "soak over an earlier soak", args: []string{"bench", "soak", "--out", "o"}, files: map[string]string{"o/soak.json": "{}"},
			want: []string{"already holds soak.json", "new directory"}},

		// TLS bootstrap.
		{name: "bootstrap kubeconfig without a cluster", args: []string{"fleet", "--bootstrap-kubeconfig", "b"},
			want: []string{"--bootstrap-kubeconfig b needs --kubeconfig", "embedded control plane bootstraps its nodes"}},
		{name: "bootstrap kubeconfig without a cert dir", args: []string{"fleet", "--kubeconfig", "kc", "--bootstrap-kubeconfig", "kc"},
			files: map[string]string{"kc": tokenKubeconfig},
			want:  []string{"--bootstrap-kubeconfig kc needs --cert-dir", "a restart reuses it"}},
		{name: "bootstrap kubeconfig without a token", args: []string{"fleet", "--kubeconfig", "kc", "--bootstrap-kubeconfig", "b", "--cert-dir", "certs"},
			files: map[string]string{"kc": tokenKubeconfig, "b": kubeconfigHead + "contexts: [{name: c, context: {cluster: x, user: u}}]\nclusters: [{name: x, cluster: {server: https://127.0.0.1:1}}]\nusers: [{name: u, user: {username: a, password: b}}]\ncurrent-context: c\n"},
			want:  []string{"--bootstrap-kubeconfig b holds no token", "kubeadm token create"}},
		{name: "cert dir under a file", args: []string{"fleet", "--cert-dir", "f/certs"}, files: map[string]string{"f": ""},
			want: []string{"--cert-dir f/certs cannot be made", "not a directory", "a directory this user may write"}},

		// The fake runtime's socket.
		{name: "serve without a socket", args: []string{"fakeruntime", "serve"}, want: []string{"--socket or --dir is required"}},
		{name: "serve on a socket and a directory", args: []string{"fakeruntime", "serve", "--socket", "s", "--dir", "d"}, want: []string{"--socket and --dir", "pass one"}},
		{name: "serve a fleet of an unknown profile", args: []string{"fakeruntime", "serve", "--dir", "d", "--profile", "nosuch"}, want: []string{`unknown profile "nosuch"`}},
		{name: "serve a fleet's sockets too long", args: []string{"fakeruntime", "serve", "--dir", strings.Repeat("d", 100), "--nodes", "1"}, want: []string{"107 bytes"}},
		{name: "socket dir with the in-process runtime", args: []string{"fleet", "--cri-socket-dir", "d"}, want: []string{"--cri-socket-dir d needs --cri fake-socket"}},
		{name: "socket dir missing", args: []string{"fleet", "--cri", "fake-socket", "--cri-socket-dir", "nosuch"}, want: []string{"--cri-socket-dir nosuch: no such directory", "fleetlet fakeruntime serve --dir nosuch"}},
		{name: "serve on a regular file", args: []string{"fakeruntime", "serve", "--socket", "notes.txt"},
			files: map[string]string{"notes.txt": "keep me"}, want: []string{"socket notes.txt is a regular file"}},
		{name: "serve on a directory", args: []string{"fakeruntime", "serve", "--socket", "d"},
			files: map[string]string{"d/keep": "x"}, want: []string{"socket d is a directory"}},
		{name: "serve on a path too long", args: []string{"fakeruntime", "serve", "--socket", strings.Repeat("s", 120)},
			want: []string{"longer than the 107", "/tmp/fleetlet.sock"}},
		{name: "serve on another scheme", args: []string{"fakeruntime", "serve", "--socket", "http://x"}, want: []string{`scheme "http"`, "unix://"}},
		{name: "serve on a socket in use", args: []string{"fakeruntime", "serve", "--socket", "live.sock"}, live: "live.sock",
			want: []string{"socket live.sock is in use by another server"}},

		// Reports.
		{name: "show a JSON array", args: []string{"report", "show", "a.json"}, files: map[string]string{"a.json": "[1, 2]"},
			want: []string{"reading report a.json", "array"}},
		{name: "show a truncated report", args: []string{"report", "show", "a.json"}, files: map[string]string{"a.json": report[:len(report)/2]},
			want: []string{"reading report a.json"}},
		{name: "show a corrupt histogram", args: []string{"report", "show", "a.json"},
			files: map[string]string{"a.json": corruptHistogram(t, report)}, want: []string{"reading report a.json", "histogram"}},
		{name: "compare a missing report", args: []string{"report", "compare", "a.json", "nosuch.json"}, files: map[string]string{"a.json": report},
			want: []string{"nosuch.json", "no such file"}},
		{name: "merge one file twice", args: []string{"report", "merge", "--out", "m", "a.json", "./a.json"}, files: map[string]string{"a.json": report},
			want: []string{"a.json and ./a.json are the same file"}},
		{name: "merge two copies of one run", args: []string{"report", "merge", "--out", "m", "a.json", "b.json"},
			files: map[string]string{"a.json": report, "b.json": report}, want: []string{"same run"}},
		{name: "merge without --out", args: []string{"report", "merge", "a.json", "b.json"}, want: []string{"--out is required"}},
		{name: "merge into a directory holding a report", args: []string{"report", "merge", "--out", ".", "a.json", "b.json"},
			files: map[string]string{"a.json": report, "b.json": otherShard, "report.json": report}, want: []string{"already holds report.json"}},
	}
	if len(cases) < 30 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for name, content := range tc.files {
				path := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.live != "" {
				lis, err := net.Listen("unix", filepath.Join(dir, tc.live))
				if err != nil {
					t.Fatal(err)
				}
				defer lis.Close()
				go func() {
					for {
						c, err := lis.Accept()
						if err != nil {
							return
						}
						_ = c.Close()
					}
				}()
			}
			before := snapshot(t, dir)
			code, stderr := runFleetlet(t, dir, tc.args...)
			msg := strings.TrimSpace(stderr)
			if code != 1 {
				t.Errorf("exit code %d, want 1; stderr:\n%s", code, stderr)
			}
			if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "fleetlet: ") {
				t.Errorf("want one line starting with 'fleetlet: ', got:\n%s", stderr)
			}
			if strings.Contains(msg, "panic") || strings.Contains(msg, "goroutine ") {
				t.Errorf("panicked:\n%s", stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not say %q", msg, w)
				}
			}
			if after := snapshot(t, dir); !equalSnapshots(before, after) {
				t.Errorf("files changed: before %v, after %v", keys(before), keys(after))
			}
			if tc.live != "" {
				c, err := net.Dial("unix", filepath.Join(dir, tc.live))
				if err != nil {
					t.Errorf("the live server's socket was taken away: %v", err)
				} else {
					_ = c.Close()
				}
			}
		})
	}
}

// runFleetlet runs the CLI in dir, in a process group of its own, with a
// private temporary directory, and returns its exit code and stderr. It
// fails the test if the command outlives badInputDeadline or leaves a
// process or a temporary file behind.
func runFleetlet(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), badInputDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	env := []string{runAsFleetlet + "=1", "TMPDIR=" + tmp, "HOME=" + dir}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name != "KUBECONFIG" && name != "TMPDIR" && name != "HOME" && !strings.HasPrefix(name, "FLEETLET_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("still running after %v: a bad input must be refused at once; stderr:\n%s", badInputDeadline, stderr.String())
	}
	// Nothing of the group may outlive it: signal 0 only asks.
	if err := syscall.Kill(-cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Errorf("a process of the command is still running (kill -0: %v)", err)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("left %d files in the temporary directory, such as %s", len(left), left[0].Name())
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stderr.String()
	}
	t.Fatalf("running the command: %v", err)
	return 0, ""
}

// snapshot maps every file and directory under dir to its content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case d.Type().IsRegular():
			data, err := os.ReadFile(path)
			files[rel] = string(data)
			return err
		case d.IsDir():
			files[rel+"/"] = ""
		default:
			files[rel] = d.Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func equalSnapshots(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// reportStartedAt is a small report as a run started at writes it: one
// pod's phases, with their histograms.
func reportStartedAt(t *testing.T, at time.Time) string {
	t.Helper()
	c := reports.NewCollector()
	for i, m := range []reports.Milestone{reports.Created, reports.Scheduled, reports.AgentObserved, reports.RunningReported, reports.RunningObserved} {
		c.Mark(types.UID("pod-1"), m, at.Add(time.Duration(i)*time.Millisecond))
	}
	rep := &reports.Report{
		Profile: "bad-input", StartedAt: at, FinishedAt: at.Add(time.Second), WallSeconds: 1, Nodes: 1,
		Pods:   c.PodCounts(),
		Phases: reports.Summaries(c.Phases(reports.DefaultPhases)),
		SLIs:   reports.Summaries(c.Phases(reports.SLIPhases)),
	}
	path := filepath.Join(t.TempDir(), "report.json")
	if err := reports.WriteJSON(path, rep); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// corruptHistogram damages the first encoded histogram of report.
func corruptHistogram(t *testing.T, report string) string {
	t.Helper()
	const key = `"histogram": "`
	i := strings.Index(report, key)
	if i < 0 {
		t.Fatalf("no histogram in the report:\n%s", report)
	}
	start := i + len(key)
	return report[:start] + "AAAA" + report[start+8:]
}
