package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetlet/fleetlet/fleet"
	"github.com/fleetlet/fleetlet/loadprofiles"
	"github.com/fleetlet/fleetlet/nodeagent"
	"github.com/fleetlet/fleetlet/reports"
)

func newBenchCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Measure fleetlet itself"}
	fleetCmd := &cobra.Command{
		Use:   "fleet",
		Short: "Cost of idle agents: RSS, CPU and goroutines per node, start-up time and lease lateness, for several fleet sizes",
		Long: "For each --nodes size, starts a fresh control plane and an idle fleet of that size, waits until every node " +
			"is Ready, lets it settle, then measures this process over --idle: RSS and goroutines above the process before " +
			"the fleet started, CPU over the window, each divided by the nodes; lease renewal lateness; NodeNotReady events.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := settings(cmd)
			if err != nil {
				return err
			}
			return benchFleet(cmd.Context(), v)
		},
	}
	addFlags(fleetCmd, clusterFlags, fleetFlags, func(fs *pflag.FlagSet) {
		fs.String("nodes", "500,1000,2000", "comma-separated fleet sizes")
		fs.Duration("settle", 30*time.Second, "wait after every node is Ready before measuring")
		fs.Duration("idle", 2*time.Minute, "measurement window")
		fs.Duration("ready-timeout", 10*time.Minute, "how long to wait for every node to be Ready")
		fs.String("dir", "", "directory for the control planes' data and logs (default: a new temporary directory)")
	})
	cmd.AddCommand(fleetCmd)
	return cmd
}

// benchResult is one fleet size's figures.
type benchResult struct {
	nodes             int
	startup           time.Duration
	rssPerNode        float64 // KiB
	cpuPerNode        float64 // millicores
	goroutinesPerNode float64
	// latenessP99Ms and latenessMax are over the measurement window, once
	// the fleet has registered and settled; startupLatenessP99Ms is over
	// the registration and the settling before it.
	latenessP99Ms, latenessMax float64
	startupLatenessP99Ms       float64
	notReadyEvents             int
}

func benchFleet(ctx context.Context, v *viper.Viper) error {
	if err := checkFleetFlags(v); err != nil {
		return err
	}
	var sizes []int
	for _, s := range strings.Split(v.GetString("nodes"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("--nodes %q: want comma-separated positive numbers such as 500,1000,2000", v.GetString("nodes"))
		}
		sizes = append(sizes, n)
	}
	dir := v.GetString("dir")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "fleetlet-bench-"); err != nil {
			return err
		}
	}
	var results []benchResult
	for _, n := range sizes {
		r, err := benchOne(ctx, v, n, filepath.Join(dir, fmt.Sprintf("nodes-%d", n)))
		if err != nil {
			return fmt.Errorf("%d nodes: %w", n, err)
		}
		results = append(results, r)
		printBench(os.Stdout, results)
	}
	return nil
}

func benchOne(ctx context.Context, v *viper.Viper, n int, dir string) (res benchResult, err error) {
	res.nodes = n
	cl, err := openCluster(ctx, v, dir)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, cl.Stop()) }()
	client, err := kubernetes.NewForConfig(cl.admin)
	if err != nil {
		return res, err
	}
	profile := &loadprofiles.Profile{Name: "bench", NodePools: []loadprofiles.NodePool{{Name: "bench", Count: n}}}
	profile.Default()

	debug.FreeOSMemory()
	rss0, g0 := currentRSS(), runtime.NumGoroutine()
	lateness := reports.NewLeaseLateness(nodeagent.LeaseRenewInterval(nodeagent.DefaultKubeletConfiguration()))
	f, _, cleanup, err := newFleet(ctx, v, profile, cl, reports.Discard{}, func(rt http.RoundTripper) http.RoundTripper { return lateness.Wrap(rt) })
	if err != nil {
		return res, err
	}
	defer cleanup()
	fleetCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- f.Run(fleetCtx) }()
	defer func() {
		stop()
		err = errors.Join(err, <-done)
	}()
	if err := fleet.WaitForNodesReady(ctx, client, f.NodeNames(), v.GetDuration("ready-timeout")); err != nil {
		return res, err
	}
	res.startup = time.Since(start)
	fmt.Fprintf(os.Stderr, "fleetlet: %d nodes Ready after %v; measuring\n", n, res.startup.Round(time.Millisecond))

	if err := sleepCtx(ctx, v.GetDuration("settle")); err != nil {
		return res, err
	}
	startupHB := reports.Heartbeat(lateness, nil, 0, 0)
	res.startupLatenessP99Ms = startupHB.Lateness.P99Ms
	lateness.Restart()
	cpu0, t0 := cpuTime(), time.Now()
	if err := sleepCtx(ctx, v.GetDuration("idle")); err != nil {
		return res, err
	}
	window := time.Since(t0)
	res.cpuPerNode = float64(cpuTime()-cpu0) / float64(window) * 1000 / float64(n)
	res.rssPerNode = float64(currentRSS()-rss0) / 1024 / float64(n)
	res.goroutinesPerNode = float64(runtime.NumGoroutine()-g0) / float64(n)
	hb := reports.Heartbeat(lateness, nil, 0, 0)
	res.latenessP99Ms, res.latenessMax = hb.Lateness.P99Ms, hb.Lateness.MaxMs
	events, err := client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "reason=NodeNotReady"})
	if err != nil {
		return res, err
	}
	res.notReadyEvents = len(events.Items)
	return res, nil
}

func printBench(w *os.File, results []benchResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\tready after\tRSS/node\tCPU/node\tgoroutines/node\tlease lateness p99\tmax\tstart-up lateness p99\tNodeNotReady\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%d\t%.1fs\t%.0f KiB\t%.3f mc\t%.1f\t%.0f ms\t%.0f ms\t%.0f ms\t%d\t\n",
			r.nodes, r.startup.Seconds(), r.rssPerNode, r.cpuPerNode, r.goroutinesPerNode, r.latenessP99Ms, r.latenessMax, r.startupLatenessP99Ms, r.notReadyEvents)
	}
	_ = tw.Flush()
}

// currentRSS is this process's resident set now, in bytes; 0 if unknown.
func currentRSS() int64 {
	rss, _ := reports.ReadRSS()
	return rss
}

// cpuTime is the user and system CPU this process has used.
func cpuTime() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
