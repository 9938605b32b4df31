package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/viper"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleetlet/fleetlet/loadprofiles"
)

// The checks here run before anything starts: a typo must cost neither a
// control plane start nor a directory left behind.

// preflight makes every check that needs neither a cluster nor a fleet,
// for `run`, `fleet` and `bench`: the fleet flags, the waits (zeroWaits as
// for checkWaits), a fleet of nodes nodes against this machine's memory, and
// the kubeconfig, if one is named.
func preflight(v *viper.Viper, nodes int, zeroWaits bool) error {
	if err := checkFleetFlags(v); err != nil {
		return err
	}
	if err := checkWaits(v, zeroWaits); err != nil {
		return err
	}
	if err := checkCapacity(nodes, "/proc/meminfo"); err != nil {
		return err
	}
	if path := kubeconfigPath(v); path != "" {
		if _, err := loadKubeconfig(path); err != nil {
			return err
		}
	}
	return nil
}

// maxStartJitter bounds --start-jitter. Spreading starts over more than the
// lease duration already gains nothing; an hour is a typo.
const maxStartJitter = time.Hour

// checkWaits rejects a negative --ready-timeout (it would wait for ever) and
// a --start-jitter outside [0, maxStartJitter] or longer than the wait for
// Ready. zeroWaits says whether --ready-timeout 0 means "wait until
// interrupted", as it does for `fleet`; elsewhere it must be positive.
func checkWaits(v *viper.Viper, zeroWaits bool) error {
	ready := v.GetDuration("ready-timeout")
	switch {
	case ready < 0, ready == 0 && !zeroWaits:
		want := "a positive duration such as 5m"
		if zeroWaits {
			want = "0 (wait until interrupted) or a positive duration such as 5m"
		}
		return fmt.Errorf("--ready-timeout %v: want %s", ready, want)
	}
	jitter := v.GetDuration("start-jitter")
	switch {
	case jitter < 0:
		return fmt.Errorf("--start-jitter %v: want 0 (start every agent at once) or a positive spread such as 5s", jitter)
	case jitter > maxStartJitter:
		return fmt.Errorf("--start-jitter %v is over the %v limit: the spread only needs to cover a lease period, such as 5s", jitter, maxStartJitter)
	case ready > 0 && jitter >= ready:
		return fmt.Errorf("--start-jitter %v is not shorter than --ready-timeout %v: the last agents would start after the wait for Ready gave up; shorten the jitter or lengthen the timeout", jitter, ready)
	}
	return nil
}

// bytesPerNode is what one emulated node costs this machine when its
// control plane runs here too: an idle agent measured 0.93 MiB of RSS in
// per-node watch mode (README, density table), and the API server, etcd and
// the controllers about half as much again per node at 2,000 nodes. Twice
// the agent's figure leaves room for the start-up, when every agent lists.
const bytesPerNode = 2 << 20

// checkCapacity refuses a fleet this machine's memory cannot hold, naming
// the limit, instead of letting the process die of it minutes later.
// meminfo is /proc/meminfo, or a file of its shape in tests.
func checkCapacity(nodes int, meminfo string) error {
	avail, err := memAvailable(meminfo)
	if err != nil {
		return nil // not Linux, or no meminfo: nothing to check against
	}
	if limit := avail / bytesPerNode; int64(nodes) > limit {
		return fmt.Errorf("%d nodes need about %s at %s each (agent and control plane), and this machine has %s available: at most %d nodes here; lower the node count, or shard the fleet over machines (fleetlet fleet --shard; README, Past one machine)",
			nodes, gib(int64(nodes)*bytesPerNode), gib(bytesPerNode), gib(avail), limit)
	}
	return nil
}

func gib(n int64) string {
	if n < 1<<30 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// memAvailable reads MemAvailable, in bytes, from a meminfo file.
func memAvailable(path string) (int64, error) {
	return meminfoField(path, "MemAvailable:")
}

// profileNodes is the most nodes a run of p asks for at once: its pools,
// or the largest step of a sweep of the node count.
func profileNodes(p *loadprofiles.Profile, sw *loadprofiles.Sweep) int {
	n := p.TotalNodes()
	if sw != nil && sw.Parameter == "nodes" && len(sw.Values) > 0 {
		rest := n - p.NodePools[0].Count
		n = max(n, rest+slices.Max(sw.Values))
	}
	return n
}

// kubeconfigPath is the kubeconfig the flags or the environment name, or ""
// for the embedded control plane.
func kubeconfigPath(v *viper.Viper) string {
	_ = v.BindEnv("kubeconfig", "FLEETLET_KUBECONFIG", "KUBECONFIG")
	return v.GetString("kubeconfig")
}

// loadKubeconfig reads the kubeconfig at path and checks that its current
// context leads to a server, so that a broken file is named with its fault
// rather than with client-go's "no configuration has been provided".
func loadKubeconfig(path string) (*rest.Config, error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("kubeconfig %s does not exist; pass the path of an existing kubeconfig, or drop --kubeconfig/KUBECONFIG to start the embedded control plane", path)
		}
		return nil, fmt.Errorf("kubeconfig %s does not parse: %s; fix the file or pass another", path, oneLine(err))
	}
	if err := checkKubeconfig(cfg); err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %s; fix the file or pass another", path, oneLine(err))
	}
	return rc, nil
}

// checkKubeconfig follows the current context to its cluster and user.
func checkKubeconfig(cfg *clientcmdapi.Config) error {
	names := func(m map[string]struct{}) string {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if len(keys) == 0 {
			return "none"
		}
		return strings.Join(keys, ", ")
	}
	contexts := map[string]struct{}{}
	for k := range cfg.Contexts {
		contexts[k] = struct{}{}
	}
	if cfg.CurrentContext == "" {
		if len(cfg.Contexts) == 0 {
			return errors.New("holds no contexts (is it empty?); pass a kubeconfig with a cluster, or drop --kubeconfig/KUBECONFIG to start the embedded control plane")
		}
		return fmt.Errorf("has no current-context; set one of its contexts (%s) with kubectl config use-context", names(contexts))
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return fmt.Errorf("current-context %q is not among its contexts (%s); fix current-context", cfg.CurrentContext, names(contexts))
	}
	cluster, ok := cfg.Clusters[ctx.Cluster]
	if !ok {
		return fmt.Errorf("context %q names cluster %q, which the file does not define; fix the context's cluster", cfg.CurrentContext, ctx.Cluster)
	}
	if cluster.Server == "" {
		return fmt.Errorf("cluster %q has no server; set its server to the API server's URL", ctx.Cluster)
	}
	if _, ok := cfg.AuthInfos[ctx.AuthInfo]; ctx.AuthInfo != "" && !ok {
		return fmt.Errorf("context %q names user %q, which the file does not define; fix the context's user", cfg.CurrentContext, ctx.AuthInfo)
	}
	return nil
}

// oneLine joins a multi-line error into one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// outputDir resolves the run's output directory, default
// out/<profile>-<time>, and creates it. A directory that already holds a
// report is refused: no file the user did not name is overwritten. created
// says whether this call made it, so that a run that fails before writing
// anything can take it away again (see removeIfEmpty).
func outputDir(out, profile string) (dir string, created bool, err error) {
	if out == "" {
		out = filepath.Join("out", profile+"-"+time.Now().Format("20060102-150405"))
	}
	if out, err = filepath.Abs(out); err != nil {
		return "", false, err
	}
	for _, name := range []string{"report.json", "sweep.json", "soak.json"} {
		if _, err := os.Stat(filepath.Join(out, name)); err == nil {
			return "", false, fmt.Errorf("--out %s already holds %s, which this run would overwrite; pass a new directory", out, name)
		}
	}
	if _, err := os.Stat(out); errors.Is(err, fs.ErrNotExist) {
		created = true
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", false, fmt.Errorf("creating the output directory: %w", err)
	}
	return out, created, nil
}

// removeIfEmpty removes dir if it is empty: os.Remove refuses a directory
// that holds anything, so a report or a log written so far stays.
func removeIfEmpty(dir string) {
	_ = os.Remove(dir)
}
