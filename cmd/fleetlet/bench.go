package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

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
			"is Ready and then schedulable (the controller-manager has lifted its registration taints), lets it settle, then measures this process over --idle: RSS and goroutines above the process before " +
			"the fleet started, CPU over the window, each divided by the nodes; lease renewal lateness and the lease PUTs' " +
			"latency; NodeNotReady events. With --pods-per-node, it then creates that many pods per node at --pod-qps, " +
			"waits for them Running, deletes them and waits for them gone, and adds the pods' phase p99s. With --repeat, " +
			"each size runs that many times on fresh control planes and the table shows the medians.",
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
		fs.Int("repeat", 1, "runs of each size; the table shows each figure's median over them")
		fs.Int("services", 0, "before the fleet starts, create this many ClusterIP Services (each with a selector, so the controller-manager makes an EndpointSlice for each) for the agents to watch")
		fs.Int("pods-per-node", 0, "after the idle window, create this many pods per node, wait Running, delete them and wait gone")
		fs.Float64("pod-qps", 100, "pods created (and deleted) per second with --pods-per-node")
		fs.Duration("pod-timeout", 10*time.Minute, "how long to wait for the pods Running, and then gone")
		fs.Duration("scrape-interval", 0, "after the idle window, measure a second one of the same length while another process (fleetlet bench scrape) scrapes every agent's --scrape-paths once per this interval, and show the fleet's CPU then and its increase")
		fs.String("scrape-paths", strings.Join(defaultScrapePaths, ","), "with --scrape-interval, the comma-separated kubelet paths scraped on every agent (/healthz alone measures what the transport costs: TLS, HTTP and authorization)")
	})
	cmd.AddCommand(fleetCmd, newSoakCommand(), newScrapeCommand())
	return cmd
}

// benchResult is one fleet size's figures.
type benchResult struct {
	nodes int
	// runs is how many runs the figures are the medians of.
	runs    int
	startup time.Duration
	// schedulable is when every node was also free of the taints the
	// control plane sets at registration.
	schedulable time.Duration
	rssPerNode  float64 // KiB
	cpuPerNode  float64 // millicores
	// cpuScrapedPerNode is cpuPerNode over a second window in which
	// another process scraped every agent's metrics; 0 when none did.
	cpuScrapedPerNode float64
	goroutinesPerNode float64
	watchesPerNode    float64
	// latenessP99Ms and latenessMax are over the measurement window, once
	// the fleet has registered and settled; startupLatenessP99Ms is over
	// the registration and the settling before it.
	latenessP99Ms, latenessMax float64
	startupLatenessP99Ms       float64
	// leasePutP99Ms is the lease PUTs' own latency over the window: the
	// API server's part of the lateness.
	leasePutP99Ms  float64
	notReadyEvents int
	// pods is 0 unless --pods-per-node ran a load; the phase p99s are then
	// over its pods.
	pods                                       int
	podStartupP99Ms, agentP99Ms, agentOwnP99Ms float64
	// mountedToRunningSetP99Ms is the agent's part with no API call on
	// its path: from its volumes mounted to Running held.
	mountedToRunningSetP99Ms float64
}

func benchFleet(ctx context.Context, v *viper.Viper) error {
	var sizes []int
	for _, s := range strings.Split(v.GetString("nodes"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("--nodes %q: want comma-separated positive numbers such as 500,1000,2000", v.GetString("nodes"))
		}
		sizes = append(sizes, n)
	}
	repeat := v.GetInt("repeat")
	if repeat < 1 {
		return fmt.Errorf("--repeat %d: want 1 or more runs of each size", repeat)
	}
	if v.GetInt("pods-per-node") < 0 || v.GetFloat64("pod-qps") <= 0 {
		return fmt.Errorf("--pods-per-node %d --pod-qps %v: want a count of 0 or more and a positive rate", v.GetInt("pods-per-node"), v.GetFloat64("pod-qps"))
	}
	if every := v.GetDuration("scrape-interval"); every < 0 {
		return fmt.Errorf("--scrape-interval %v: want a positive interval such as 30s (Prometheus's usual), or 0 for no scrapes", every)
	}
	if _, err := parseScrapePaths("--scrape-paths", v.GetString("scrape-paths")); err != nil {
		return err
	}
	if err := preflight(v, slices.Max(sizes), false); err != nil {
		return err
	}
	dir := v.GetString("dir")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "fleetlet-bench-"); err != nil {
			return err
		}
	}
	var medians []benchResult
	var rssBase int64
	for _, n := range sizes {
		var runs []benchResult
		for i := range repeat {
			r, err := benchOne(ctx, v, n, filepath.Join(dir, fmt.Sprintf("nodes-%d-run-%d", n, i+1)), &rssBase)
			if err != nil {
				// What the run measured before it failed (an idle window
				// before a failed scrape or load) is a result: print it.
				if r.cpuPerNode > 0 {
					fmt.Fprintf(os.Stderr, "fleetlet: %d nodes, run %d, measured before it failed:\n", n, i+1)
					printBench(os.Stderr, []benchResult{r})
				}
				return fmt.Errorf("%d nodes, run %d: %w", n, i+1, err)
			}
			runs = append(runs, r)
			if repeat > 1 {
				fmt.Fprintf(os.Stderr, "fleetlet: %d nodes, run %d of %d:\n", n, i+1, repeat)
				printBench(os.Stderr, runs[i:])
			}
		}
		medians = append(medians, medianResult(runs))
		printBench(os.Stdout, medians)
	}
	return nil
}

// medianResult is each figure's median over runs of one size, and the
// NodeNotReady events of them all: one in any run is one too many.
func medianResult(runs []benchResult) benchResult {
	field := func(get func(*benchResult) float64) float64 {
		vals := make([]float64, len(runs))
		for i := range runs {
			vals[i] = get(&runs[i])
		}
		slices.Sort(vals)
		if n := len(vals); n%2 == 0 {
			return (vals[n/2-1] + vals[n/2]) / 2
		}
		return vals[len(vals)/2]
	}
	m := benchResult{nodes: runs[0].nodes, runs: len(runs), pods: runs[0].pods}
	m.startup = time.Duration(field(func(r *benchResult) float64 { return float64(r.startup) }))
	m.schedulable = time.Duration(field(func(r *benchResult) float64 { return float64(r.schedulable) }))
	m.rssPerNode = field(func(r *benchResult) float64 { return r.rssPerNode })
	m.cpuPerNode = field(func(r *benchResult) float64 { return r.cpuPerNode })
	m.cpuScrapedPerNode = field(func(r *benchResult) float64 { return r.cpuScrapedPerNode })
	m.goroutinesPerNode = field(func(r *benchResult) float64 { return r.goroutinesPerNode })
	m.watchesPerNode = field(func(r *benchResult) float64 { return r.watchesPerNode })
	m.latenessP99Ms = field(func(r *benchResult) float64 { return r.latenessP99Ms })
	m.latenessMax = field(func(r *benchResult) float64 { return r.latenessMax })
	m.startupLatenessP99Ms = field(func(r *benchResult) float64 { return r.startupLatenessP99Ms })
	m.leasePutP99Ms = field(func(r *benchResult) float64 { return r.leasePutP99Ms })
	m.podStartupP99Ms = field(func(r *benchResult) float64 { return r.podStartupP99Ms })
	m.agentP99Ms = field(func(r *benchResult) float64 { return r.agentP99Ms })
	m.agentOwnP99Ms = field(func(r *benchResult) float64 { return r.agentOwnP99Ms })
	m.mountedToRunningSetP99Ms = field(func(r *benchResult) float64 { return r.mountedToRunningSetP99Ms })
	for _, r := range runs {
		m.notReadyEvents += r.notReadyEvents
	}
	return m
}

// benchOne measures one idle fleet of n nodes on a fresh control plane in
// dir. rssBase, shared by the runs, is the lowest RSS the process had before
// any run's fleet; benchOne lowers it (or sets it, when 0) before its own.
func benchOne(ctx context.Context, v *viper.Viper, n int, dir string, rssBase *int64) (res benchResult, err error) {
	res.nodes, res.runs = n, 1
	profile := &loadprofiles.Profile{Name: "bench", NodePools: []loadprofiles.NodePool{{Name: "bench", Count: n}}}
	profile.Default()
	opts, err := optionsFrom(v, profile, dir)
	if err != nil {
		return res, err
	}
	lateness := reports.NewLeaseLateness(nodeagent.LeaseRenewInterval(nodeagent.DefaultKubeletConfiguration()))
	collector := reports.NewCollector()
	// The window must not overlap the controller-manager's work on fresh
	// nodes (lifting their not-ready taints), which loads the API server
	// for as long as it lasts.
	opts.Schedulable = true
	counter := reports.NewAPICounter()
	opts.Recorder, opts.DebugCollectors = collector, lateness.Collectors()
	opts.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return counter.Wrap(lateness.Wrap(rt)) }
	opts.WrapProxyTransport = counter.WrapAs(reports.ComponentKubeProxy)
	if services := v.GetInt("services"); services > 0 {
		// Created before the fleet, as in a cluster that already runs its
		// Services when nodes join: each agent lists them once. Created
		// after, each create would fan out as an event to every node's
		// three watches of them, which on a small machine holds the API
		// server back for longer than the window measures (at 2,000 nodes,
		// 266 of 1,000 Services in 10 minutes).
		opts.BeforeFleet = func(ctx context.Context, admin *rest.Config) error {
			return benchServices(ctx, admin, services, v.GetDuration("ready-timeout"))
		}
	}

	// A run's fleet leaves the process's RSS higher than it found it, even
	// after FreeOSMemory (pages the Go runtime keeps or cannot return), so
	// a later run would start higher and look cheaper: by a quarter at
	// 2,000 nodes. Every run is measured from the lowest baseline seen.
	debug.FreeOSMemory()
	if rss := currentRSS(); *rssBase == 0 || rss < *rssBase {
		*rssBase = rss
	}
	rss0, g0 := *rssBase, runtime.NumGoroutine()
	s := newSession(opts)
	defer func() { err = errors.Join(err, s.Close()) }()
	if err := s.Start(ctx); err != nil {
		return res, err
	}
	cl, client := s.cluster, s.admin
	res.startup, res.schedulable = s.readyAfter, s.schedulableAfter
	fmt.Fprintf(os.Stderr, "fleetlet: %d nodes Ready after %v, schedulable after %v; measuring\n", n,
		res.startup.Round(time.Millisecond), res.schedulable.Round(time.Millisecond))

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
	res.watchesPerNode = float64(counter.OpenWatches()) / float64(n)
	hb := reports.Heartbeat(lateness, nil, 0, 0)
	res.latenessP99Ms, res.latenessMax = hb.Lateness.P99Ms, hb.Lateness.MaxMs
	res.leasePutP99Ms = hb.LeaseWriteLatency.P99Ms
	if every := v.GetDuration("scrape-interval"); every > 0 {
		busy, err := benchScraped(ctx, cl, every, v.GetDuration("idle"), v.GetString("scrape-paths"))
		if err != nil {
			return res, err
		}
		res.cpuScrapedPerNode = busy.Seconds() * 1000 / float64(n)
	}
	if perNode := v.GetInt("pods-per-node"); perNode > 0 {
		if err := benchPods(ctx, v, cl, profile, collector, n*perNode); err != nil {
			return res, err
		}
		res.pods = n * perNode
		phases := map[string]float64{}
		for _, p := range reports.Summaries(collector.Phases(append(slices.Clone(reports.DefaultPhases), reports.SLIPhases...))) {
			phases[p.Name] = p.P99Ms
		}
		res.podStartupP99Ms = phases[reports.SLIPodStartup]
		res.agentP99Ms = phases["agent_observed_to_running_reported"]
		res.agentOwnP99Ms = phases["agent_observed_to_running_set"]
		res.mountedToRunningSetP99Ms = phases["volumes_mounted_to_running_set"]
	}
	events, err := client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "reason=NodeNotReady"})
	if err != nil {
		return res, err
	}
	res.notReadyEvents = len(events.Items)
	return res, nil
}

// benchScraped measures this process's CPU, in cores, over a window of
// length window while `fleetlet bench scrape` scrapes every fleet node's
// paths once per every from a process of its own, so that its
// side of the scrapes is not counted. The window starts one interval
// after the scraper, once every target has been scraped once (its TLS
// connection up, its credentials' review cached), as in a Prometheus that
// has been running for a while.
func benchScraped(ctx context.Context, cl *cluster, every, window time.Duration, paths string) (time.Duration, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	const margin = 5 * time.Second
	scraper := exec.CommandContext(ctx, exe, "bench", "scrape", "--kubeconfig", cl.kubeconfig, "--selector", fleet.PoolLabel,
		"--interval", every.String(), "--duration", (every + window + margin).String(), "--paths", paths)
	scraper.Stdout, scraper.Stderr = os.Stderr, os.Stderr
	if err := scraper.Start(); err != nil {
		return 0, fmt.Errorf("starting the scraper: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- scraper.Wait() }()
	measure := func() (time.Duration, error) {
		if err := sleepCtx(ctx, every); err != nil {
			return 0, err
		}
		cpu0, t0 := cpuTime(), time.Now()
		if err := sleepCtx(ctx, window); err != nil {
			return 0, err
		}
		return time.Duration(float64(cpuTime()-cpu0) / float64(time.Since(t0)) * float64(time.Second)), nil
	}
	busy, err := measure()
	if err != nil {
		return 0, err
	}
	if err := <-done; err != nil {
		return 0, fmt.Errorf("the scraper (fleetlet bench scrape) failed: %w", err)
	}
	return busy, nil
}

// benchServices creates count ClusterIP Services in the default namespace,
// each selecting pods that do not exist, and waits until the
// controller-manager has made an EndpointSlice for each: what every agent's
// kubelet and kube-proxy then hold in their watches.
func benchServices(ctx context.Context, admin *rest.Config, count int, timeout time.Duration) error {
	// Made before any node watches them, a create costs the API server
	// one write and the controller-manager's EndpointSlice; 50 a second
	// keeps that well inside a small machine's request timeout. The
	// client's own limit (client-go's default is 5 QPS) must not be the
	// one that holds them back.
	const qps = 50
	cfg := rest.CopyConfig(admin)
	cfg.QPS, cfg.Burst, cfg.UserAgent = 2*qps, 4*qps, "fleetlet/driver"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	limiter := rate.NewLimiter(qps, 1)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for i := range count {
		if err := limiter.Wait(gctx); err != nil {
			break
		}
		g.Go(func() error {
			name := fmt.Sprintf("bench-svc-%d", i)
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"fleetlet.io/bench": "true"}},
				Spec: corev1.ServiceSpec{
					Selector: map[string]string{"app": name},
					Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
				},
			}
			// A create the API server timed out may still have been
			// stored: retried, it is AlreadyExists, which is done.
			return retry.OnError(wait.Backoff{Duration: time.Second, Factor: 2, Steps: 5}, func(err error) bool {
				return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err)
			}, func() error {
				_, err := client.CoreV1().Services(metav1.NamespaceDefault).Create(gctx, svc, metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					return fmt.Errorf("creating Service %s: %w", name, err)
				}
				return nil
			})
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	var n int
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name"})
		if err != nil {
			return false, nil
		}
		n = len(list.Items)
		return n >= count, nil
	})
	if err != nil {
		return fmt.Errorf("%d Services created, but the controller-manager made only %d of their EndpointSlices in %v", count, n, timeout)
	}
	fmt.Fprintf(os.Stderr, "fleetlet: %d Services and their EndpointSlices created\n", count)
	return nil
}

// benchPods runs the pod load of --pods-per-node: count pods stamped from
// the density-1k profile's template (a pause container with the default
// service account's token, as a kubelet mounts it), created at --pod-qps,
// waited Running, deleted at the same rate and waited gone.
func benchPods(ctx context.Context, v *viper.Viper, cl *cluster, fleetProfile *loadprofiles.Profile, rec reports.Recorder, count int) error {
	density, err := loadprofiles.Load("density-1k")
	if err != nil {
		return err
	}
	timeout := metav1.Duration{Duration: v.GetDuration("pod-timeout")}
	qps := v.GetFloat64("pod-qps")
	load := &loadprofiles.Profile{Name: fleetProfile.Name, NodePools: fleetProfile.NodePools, Phases: []loadprofiles.Phase{
		{Create: &loadprofiles.CreatePhase{Count: count, QPS: qps, Template: density.Phases[0].Create.Template}},
		{WaitRunning: &loadprofiles.WaitPhase{Timeout: timeout}},
		{Delete: &loadprofiles.DeletePhase{QPS: qps}},
		{WaitGone: &loadprofiles.WaitPhase{Timeout: timeout}},
	}}
	load.Default()
	client, err := kubernetes.NewForConfig(driverConfig(cl.admin, load))
	if err != nil {
		return err
	}
	d := &loadprofiles.Driver{Client: client, Recorder: rec, Progress: progressPrinter()}
	return d.Run(ctx, load)
}

// printBench writes results as a table; the pods' columns only if a
// load ran.
func printBench(w io.Writer, results []benchResult) {
	withPods := slices.ContainsFunc(results, func(r benchResult) bool { return r.pods > 0 })
	withScrapes := slices.ContainsFunc(results, func(r benchResult) bool { return r.cpuScrapedPerNode > 0 })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "nodes\truns\tready after\tschedulable after\tRSS/node\tCPU/node\tgoroutines/node\twatches/node\tlease lateness p99\tmax\tlease PUT p99\tstart-up lateness p99\tNodeNotReady\t"
	if withScrapes {
		header += "CPU/node scraped\tscrapes' cost\t"
	}
	if withPods {
		header += "pods\tpod_startup p99\tagent_observed→running_reported p99\tagent_observed→running_set p99\tvolumes_mounted→running_set p99\t"
	}
	fmt.Fprintln(tw, header)
	for _, r := range results {
		fmt.Fprintf(tw, "%d\t%d\t%.1fs\t%.1fs\t%.0f KiB\t%.3f mc\t%.1f\t%.1f\t%.0f ms\t%.0f ms\t%.0f ms\t%.0f ms\t%d\t",
			r.nodes, r.runs, r.startup.Seconds(), r.schedulable.Seconds(), r.rssPerNode, r.cpuPerNode, r.goroutinesPerNode, r.watchesPerNode, r.latenessP99Ms, r.latenessMax,
			r.leasePutP99Ms, r.startupLatenessP99Ms, r.notReadyEvents)
		if withScrapes {
			fmt.Fprintf(tw, "%.3f mc\t%+.1f %%\t", r.cpuScrapedPerNode, (r.cpuScrapedPerNode/r.cpuPerNode-1)*100)
		}
		if withPods {
			fmt.Fprintf(tw, "%d\t%.0f ms\t%.0f ms\t%.0f ms\t%.1f ms\t", r.pods, r.podStartupP99Ms, r.agentP99Ms, r.agentOwnP99Ms, r.mountedToRunningSetP99Ms)
		}
		fmt.Fprintln(tw)
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
