package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"golang.org/x/term"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleetlet/fleetlet/loadprofiles"
	"github.com/fleetlet/fleetlet/loadprofiles/objects"
	"github.com/fleetlet/fleetlet/nodeagent"
	"github.com/fleetlet/fleetlet/reports"
)

func newRunCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Start a control plane (or use --kubeconfig), a fleet and a load profile, and report",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := settings(cmd)
			if err != nil {
				return err
			}
			return run(cmd.Context(), v)
		},
	}
	addFlags(cmd, clusterFlags, fleetFlags, func(fs *pflag.FlagSet) {
		fs.String("profile", "quickstart", "built-in profile name ("+fmt.Sprint(loadprofiles.BuiltinNames())+") or path to a profile YAML file")
		fs.String("out", "", "directory for report.json and the control plane's logs (default out/<profile>-<time>)")
		fs.Duration("ready-timeout", 5*time.Minute, "how long to wait for every node to be Ready")
		fs.String("shards", "", "drive the load on the nodes of fleet shards (fleetlet fleet --shard) at these endpoints, host:port,…, instead of a fleet in this process; needs --kubeconfig, the shards' target cluster")
		fs.String("shards-from", "", "like --shards, the shards being the pods of this StatefulSet, <namespace>/<name>, on the host cluster of --shards-kubeconfig")
		fs.String("shards-kubeconfig", "", "with --shards-from: the kubeconfig of the cluster the shards run on (default: --kubeconfig, when one cluster is host and target)")
		fs.String("sweep", "", "capacity search: run the profile once per step, nodes=N1,N2,... (the first pool's count) or qps=Q1,Q2,... (every create and churn phase), until a step fails its SLOs; writes sweep.json with the largest passing step")
	})
	return cmd
}

// run executes one profile end to end. Once the fleet has started, the
// report measured so far is written whatever happens next. Everything that
// can be checked is checked before the output directory is made; a run that
// fails before writing anything into it takes it away again.
func run(ctx context.Context, v *viper.Viper) (err error) {
	profile, err := loadprofiles.Load(v.GetString("profile"))
	if err != nil {
		return err
	}
	sw := profile.Sweep
	if spec := v.GetString("sweep"); spec != "" {
		if sw, err = parseSweep(spec); err != nil {
			return err
		}
	}
	nodes := profileNodes(profile, sw)
	if v.GetString("shards") != "" || v.GetString("shards-from") != "" {
		if sw != nil {
			return errors.New("--sweep with --shards: a sweep starts a fleet per step, and the shards' fleet is theirs; sweep on one machine, or scale the shards' StatefulSet between runs")
		}
		// The nodes are the shards'; this process hosts none.
		nodes = 0
	}
	if err := preflight(v, nodes, false); err != nil {
		return err
	}
	out, created, err := outputDir(v.GetString("out"), profile.Name)
	if err != nil {
		return err
	}
	if created {
		defer func() {
			if err != nil {
				removeIfEmpty(out)
			}
		}()
	}
	if sw != nil {
		return runSweep(ctx, v, sw, out)
	}
	rep, err := runProfile(ctx, v, profile, out)
	if err == nil && rep.Failed() {
		return fmt.Errorf("the run failed its SLOs (%s); see %s", failedSLOs(rep), filepath.Join(out, "report.html"))
	}
	return err
}

// runProfile runs one profile end to end into out and returns its report.
// Once the fleet has started, the report measured so far is written
// whatever happens next, and returned with the error.
func runProfile(ctx context.Context, v *viper.Viper, profile *loadprofiles.Profile, out string) (rep *reports.Report, err error) {
	if v.GetString("shards") != "" || v.GetString("shards-from") != "" {
		fmt.Fprintf(os.Stderr, "fleetlet: profile %s on the shards' nodes (its node pools are the shards' to host); output in %s\n", profile.Name, out)
	} else {
		fmt.Fprintf(os.Stderr, "fleetlet: profile %s, %d nodes; output in %s\n", profile.Name, profile.TotalNodes(), out)
	}
	opts, err := optionsFrom(v, profile, filepath.Join(out, "controlplane"))
	if err != nil {
		return nil, err
	}
	opts.Schedulable = true
	if opts.Shards, err = shardsFrom(v, profile); err != nil {
		return nil, err
	}
	r, err := startRun(ctx, opts)
	if r != nil {
		defer func() { err = errors.Join(err, r.Close()) }()
	}
	if r == nil || !r.fleetRunning() {
		return nil, err
	}
	// runErr is the first failure once the fleet runs: the report carries it.
	runErr := err
	var metrics *reports.Metrics
	var monitor *shardMonitor
	if runErr == nil {
		fmt.Fprintf(os.Stderr, "fleetlet: %d nodes Ready and schedulable after %v; kubeconfig %s\n",
			len(r.nodeNames()), time.Since(r.started).Round(time.Millisecond), r.cluster.kubeconfig)
		if opts.Shards != nil {
			if runErr = opts.Shards.measureStart(ctx, r.collector.Now); runErr == nil {
				monitor = opts.Shards.monitor(ctx, r.client, r.nodeNames())
			}
		}
		if runErr == nil {
			before := r.scrape(ctx)
			runErr = r.drive(ctx)
			metrics = reports.Diff(before, r.scrape(ctx))
		}
		if monitor != nil {
			monitor.stop()
		}
	}
	if ctx.Err() != nil {
		runErr = fmt.Errorf("interrupted (%v); the report holds what was measured until then", runErr)
	}
	var shardReps []*reports.Report
	var clocks []reports.ShardClock
	var shardErrs []error
	if opts.Shards != nil {
		// Read even when interrupted: what the shards measured is the run's.
		readCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		shardReps, clocks, shardErrs = opts.Shards.collect(readCtx, r.collector)
		cancel()
	}
	rep = r.report(metrics, runErr)
	if monitor != nil {
		rep.Faults = append(rep.Faults, monitor.reports(rep.FinishedAt)...)
	}
	if opts.Shards != nil {
		rep = mergeShardReports(rep, shardReps, clocks, shardErrs)
	}
	if err := writeReports(out, rep); err != nil {
		return rep, errors.Join(runErr, err)
	}
	fmt.Println()
	reports.RenderSummary(os.Stdout, rep)
	fmt.Printf("\nreport: %s (and report.md, report.html)\n", filepath.Join(out, "report.json"))
	return rep, runErr
}

// writeReports writes report.json, report.md and report.html into out.
func writeReports(out string, rep *reports.Report) error {
	if err := reports.WriteJSON(filepath.Join(out, "report.json"), rep); err != nil {
		return err
	}
	return renderReport(filepath.Join(out, "report"), rep)
}

// renderReport writes stem.md and stem.html.
func renderReport(stem string, rep *reports.Report) error {
	for ext, render := range map[string]func(io.Writer, *reports.Report) error{
		".md": reports.RenderMarkdown, ".html": reports.RenderHTML,
	} {
		if err := writeFile(stem+ext, func(w io.Writer) error { return render(w, rep) }); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

func failedSLOs(rep *reports.Report) string {
	var names []string
	for _, r := range rep.SLOs {
		if !r.Pass && !r.Skipped {
			names = append(names, r.Name+" "+r.Subject)
		}
	}
	return strings.Join(names, ", ")
}

// profileRun is a profile's load on a session: the driver's client and
// what measures the run.
type profileRun struct {
	*session
	profile *loadprofiles.Profile
	// client is the load driver's: the admin's credentials with a limiter
	// loose enough for the profile's rates.
	client kubernetes.Interface
	// objects is the driver's client for objects of any kind.
	objects loadprofiles.ObjectClient
	// workloads are the objects' times to running, per waitRunning.
	workloads workloadTimes
	collector *reports.Collector
	counter   *reports.APICounter
	lateness  *reports.LeaseLateness
	netprog   *reports.NetworkProgramming
	settings  map[string]string
	// scrapeErrs are the control plane metrics the run could not read.
	scrapeErrs []error
	// readiness watches the fleet's Nodes for what an outage cost; nil
	// until the fleet runs.
	readiness *nodeReadiness
	// faults injects the profile's faults and keeps what they cost; nil
	// without fault phases.
	faults *faultInjector
}

// Close stops what the run watches, then the session.
func (r *profileRun) Close() error {
	if r.readiness != nil {
		r.readiness.close()
	}
	if r.faults != nil {
		r.faults.close()
	}
	return r.session.Close()
}

// startRun starts a session for opts.Profile with the run's measurements
// wired in. The run it returns, if any, is to be closed; it is returned
// with errNodesNotUp when the fleet runs but its nodes did not come up, so
// that the report can still be written.
func startRun(ctx context.Context, opts sessionOptions) (*profileRun, error) {
	settings, err := settingsOf(opts)
	if err != nil {
		return nil, err
	}
	r := &profileRun{
		profile: opts.Profile, settings: settings,
		collector: reports.NewCollector(), counter: reports.NewAPICounter(), netprog: reports.NewNetworkProgramming(),
		lateness: reports.NewLeaseLateness(nodeagent.LeaseRenewInterval(nodeagent.DefaultKubeletConfiguration())),
	}
	opts.Recorder = r.collector
	opts.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return r.counter.Wrap(r.lateness.Wrap(rt)) }
	opts.WrapProxyTransport = r.counter.WrapAs(reports.ComponentKubeProxy)
	opts.NetworkProgramming = r.netprog
	opts.DebugCollectors = append(opts.DebugCollectors, r.lateness.Collectors()...)
	r.session = newSession(opts)
	err = r.Start(ctx)
	if r.cluster != nil {
		client, cerr := kubernetes.NewForConfig(driverConfig(r.cluster.admin, opts.Profile))
		r.client, err = client, errors.Join(err, cerr)
		objs, oerr := objects.NewClient(driverConfig(r.cluster.admin, opts.Profile))
		r.objects, err = objs, errors.Join(err, oerr)
		if cerr == nil && r.fleetRunning() {
			r.readiness = watchReadiness(ctx, client, r.nodeNames())
			if hasFaults(opts.Profile) && r.fleet != nil {
				r.faults = newFaultInjector(ctx, r.fleet, client, r.cluster.cp != nil, r.lateness.Forget)
			}
		}
	}
	return r, err
}

// scrape reads the control plane's metrics. A failed scrape is recorded in
// the report, never fatal: the run's own measurements stand without it.
func (r *profileRun) scrape(ctx context.Context) *reports.Metrics {
	client, err := rest.HTTPClientFor(r.cluster.admin)
	if err != nil {
		r.scrapeErrs = append(r.scrapeErrs, err)
		return nil
	}
	m, err := reports.Scrape(ctx, client, r.cluster.metricsURLs...)
	if err != nil {
		r.scrapeErrs = append(r.scrapeErrs, err)
	}
	return m
}

// drive runs the profile's phases.
func (r *profileRun) drive(ctx context.Context) error {
	d := &loadprofiles.Driver{
		Client: r.client, Objects: r.objects, Recorder: r.collector, Progress: progressPrinter(),
		Workloads: r.workloads.add,
	}
	if r.faults != nil {
		d.Faults = r.faults
	}
	return d.Run(ctx, r.profile)
}

// hasFaults says whether p has fault phases.
func hasFaults(p *loadprofiles.Profile) bool {
	for _, ph := range p.Phases {
		if ph.Fault != nil {
			return true
		}
	}
	return false
}

// driverConfig is the load driver's client: the admin credentials, with a
// limiter loose enough never to throttle the profile's own rates.
func driverConfig(admin *rest.Config, p *loadprofiles.Profile) *rest.Config {
	cfg := rest.CopyConfig(admin)
	maxQPS := 50.0
	for _, ph := range p.Phases {
		if ph.Create != nil && ph.Create.QPS > maxQPS {
			maxQPS = ph.Create.QPS
		}
		if ph.Delete != nil && ph.Delete.QPS > maxQPS {
			maxQPS = ph.Delete.QPS
		}
		if ph.Churn != nil && ph.Churn.QPS > maxQPS {
			maxQPS = ph.Churn.QPS
		}
		if ph.Services != nil && ph.Services.QPS > maxQPS {
			maxQPS = ph.Services.QPS
		}
		if ph.Scale != nil && ph.Scale.QPS > maxQPS {
			maxQPS = ph.Scale.QPS
		}
		if ph.Update != nil && ph.Update.QPS > maxQPS {
			maxQPS = ph.Update.QPS
		}
	}
	cfg.QPS = float32(2 * maxQPS)
	cfg.Burst = int(4 * maxQPS)
	cfg.UserAgent = "fleetlet/driver"
	return cfg
}

// report assembles what the run measured; metrics is the control plane's
// metrics over the load (nil if it never ran), runErr the run's failure.
func (s *profileRun) report(metrics *reports.Metrics, runErr error) *reports.Report {
	finished := time.Now()
	rep := &reports.Report{
		Profile:          s.profile.Name,
		StartedAt:        s.started,
		FinishedAt:       finished,
		WallSeconds:      finished.Sub(s.started).Seconds(),
		Pods:             s.collector.PodCounts(),
		Phases:           reports.Summaries(s.collector.Phases(reports.DefaultPhases)),
		SLIs:             reports.Summaries(s.collector.Phases(reports.SLIPhases)),
		API:              s.counter.Snapshot(),
		APIServerLatency: metrics.APICallLatencies(),
		Series:           reports.Series{Pods: s.collector.PodSeries(), API: s.counter.RequestSeries()},
		Settings:         s.settings,
	}
	rep.Workloads = s.workloads.summaries()
	rep.PodGroups = reports.GroupSummaries(s.collector)
	if np := s.netprog.Summary(); np.Count > 0 {
		rep.SLIs = append(rep.SLIs, np)
		nodes := s.netprog.PerNode()
		rep.NetworkProgrammingNodes = &nodes
	}
	rep.Scheduling = reports.SchedulingFrom(rep.Series.Pods, metrics)
	hb := reports.Heartbeat(s.lateness, rep.API, s.counter.OpenWatches(), rep.WallSeconds)
	rep.Heartbeat = &hb
	rep.Outages = outages(context.Background(), s.counter, s.readiness, s.client, finished)
	if s.faults != nil {
		rep.Faults = s.faults.reports(finished)
	}
	rep.EvaluateSLOs(s.profile.SLOs)
	for _, err := range s.scrapeErrs {
		rep.Errors = append(rep.Errors, "control plane metrics: "+err.Error())
	}
	rep.Nodes = len(s.nodeNames())
	rep.Fleet.Goroutines = runtime.NumGoroutine()
	if rss, err := reports.ReadPeakRSS(); err == nil {
		rep.Fleet.PeakRSSBytes = rss
	}
	rep.Fleet.CPUSeconds = cpuTime().Seconds()
	rep.Fleet.GCPercent = reports.ReadGCPercent()
	if runErr != nil {
		rep.Errors = append(rep.Errors, runErr.Error())
	}
	return rep
}

// progressPrinter shows the driver's progress: the phase, pods Running of
// those created, the rate at which the phase advances and the time it has
// left at that rate. On a terminal the line is rewritten in place; otherwise
// (CI logs) a line is printed every ten seconds.
func progressPrinter() func(loadprofiles.Progress) {
	tty := term.IsTerminal(int(os.Stderr.Fd()))
	var (
		calls int
		phase string
		start time.Time
		base  [4]int
	)
	return func(p loadprofiles.Progress) {
		now := time.Now()
		counts := [4]int{p.Created, p.Running, p.Gone, p.ObjectPodsRunning}
		if p.Phase != phase {
			phase, start, base = p.Phase, now, counts
		}
		// The count this phase advances is the one that moved most since it
		// began: created for create, Running for a wait, gone for a delete,
		// controllers' pods Running for objects.
		active := 0
		for i := range counts {
			if counts[i]-base[i] > counts[active]-base[active] {
				active = i
			}
		}
		line := fmt.Sprintf("%-14s running %d/%d  scheduled %d  gone %d", p.Phase, p.Running, p.Created, p.Scheduled, p.Gone)
		if p.ObjectPods > 0 {
			// A profile of objects: their controllers' pods, which the
			// counts above (the driver's own pods) leave out.
			line = fmt.Sprintf("%-14s controllers' pods running %d/%d", p.Phase, p.ObjectPodsRunning, p.ObjectPods)
			if p.Created > 0 {
				line += fmt.Sprintf("  own pods running %d/%d  gone %d", p.Running, p.Created, p.Gone)
			}
		}
		if elapsed := now.Sub(start).Seconds(); elapsed > 0 && counts[active] > base[active] {
			rate := float64(counts[active]-base[active]) / elapsed
			line += fmt.Sprintf("  %.1f/s", rate)
			if left := p.Target - counts[active]; p.Target > 0 && left > 0 {
				line += fmt.Sprintf("  ~%v left", (time.Duration(float64(left)/rate) * time.Second).Round(time.Second))
			}
		}
		if tty {
			fmt.Fprintf(os.Stderr, "\r%-100s", line)
			return
		}
		if calls%10 == 0 {
			fmt.Fprintln(os.Stderr, line)
		}
		calls++
	}
}

// workloadTimes keeps what each waitRunning phase measured of the run's
// objects, in phase order, for the report's workloads table.
type workloadTimes struct {
	mu     sync.Mutex
	phases []string
	times  map[string]loadprofiles.WorkloadTimes
}

// add is the driver's Workloads callback.
func (w *workloadTimes) add(phase string, times loadprofiles.WorkloadTimes) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.times == nil {
		w.times = map[string]loadprofiles.WorkloadTimes{}
	}
	if _, ok := w.times[phase]; !ok {
		w.phases = append(w.phases, phase)
	}
	w.times[phase] = times
}

// summaries are the report's rows: per phase, per kind in name order.
func (w *workloadTimes) summaries() []reports.PhaseSummary {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []reports.PhaseSummary
	for _, phase := range w.phases {
		kinds := slices.Sorted(maps.Keys(w.times[phase]))
		for _, kind := range kinds {
			out = append(out, reports.DurationSummary(phase+"/"+kind, w.times[phase][kind]))
		}
	}
	return out
}
