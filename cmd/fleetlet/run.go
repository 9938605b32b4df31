package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"golang.org/x/term"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleetlet/fleetlet/fleet"
	"github.com/fleetlet/fleetlet/loadprofiles"
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
		fs.String("sweep", "", "capacity search: run the profile once per step, nodes=N1,N2,... (the first pool's count) or qps=Q1,Q2,... (every create and churn phase), until a step fails its SLOs; writes sweep.json with the largest passing step")
	})
	return cmd
}

// run executes one profile end to end. Once the fleet has started, the
// report measured so far is written whatever happens next. Everything that
// can be checked is checked before the output directory is made; a run that
// fails before writing anything into it takes it away again.
func run(ctx context.Context, v *viper.Viper) (err error) {
	if err := checkFleetFlags(v); err != nil {
		return err
	}
	if err := checkWaits(v, false); err != nil {
		return err
	}
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
	if err := checkCapacity(profileNodes(profile, sw), "/proc/meminfo"); err != nil {
		return fmt.Errorf("profile %s: %w", profile.Name, err)
	}
	if path := kubeconfigPath(v); path != "" {
		if _, err := loadKubeconfig(path); err != nil {
			return err
		}
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
	fmt.Fprintf(os.Stderr, "fleetlet: profile %s, %d nodes; output in %s\n", profile.Name, profile.TotalNodes(), out)
	s, err := startSession(ctx, v, profile, out)
	if s != nil {
		defer func() { err = errors.Join(err, s.close()) }()
	}
	if err != nil {
		return nil, err
	}
	var metrics *reports.Metrics
	if s.runErr == nil {
		before := s.scrape(ctx)
		s.runErr = s.drive(ctx)
		metrics = reports.Diff(before, s.scrape(ctx))
	}
	if ctx.Err() != nil {
		s.runErr = fmt.Errorf("interrupted (%v); the report holds what was measured until then", s.runErr)
	}
	rep = s.report(metrics)
	if err := writeReports(out, rep); err != nil {
		return rep, errors.Join(s.runErr, err)
	}
	fmt.Println()
	reports.RenderSummary(os.Stdout, rep)
	fmt.Printf("\nreport: %s (and report.md, report.html)\n", filepath.Join(out, "report.json"))
	return rep, s.runErr
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

// scrape reads the control plane's metrics. A failed scrape is recorded in
// the report, never fatal: the run's own measurements stand without it.
func (s *session) scrape(ctx context.Context) *reports.Metrics {
	client, err := rest.HTTPClientFor(s.cluster.admin)
	if err != nil {
		s.scrapeErrs = append(s.scrapeErrs, err)
		return nil
	}
	m, err := reports.Scrape(ctx, client, s.cluster.metricsURLs...)
	if err != nil {
		s.scrapeErrs = append(s.scrapeErrs, err)
	}
	return m
}

// session is one run's wiring: the cluster, the fleet on it, and what
// measures them.
type session struct {
	profile   *loadprofiles.Profile
	started   time.Time
	cluster   *cluster
	fleet     *fleet.Fleet
	client    kubernetes.Interface
	collector *reports.Collector
	counter   *reports.APICounter
	lateness  *reports.LeaseLateness
	settings  map[string]string
	// runErr is the first failure after the fleet started; the report
	// carries it, and scrapeErrs the control plane metrics it could not read.
	runErr     error
	scrapeErrs []error

	cleanup   func()
	stopFleet context.CancelFunc
	fleetDone chan error
}

// startSession opens the cluster and starts the fleet on it. A session is
// returned, to be closed, as soon as the cluster is open; an error in
// waiting for the nodes is left in runErr so the report still gets written.
func startSession(ctx context.Context, v *viper.Viper, p *loadprofiles.Profile, out string) (*session, error) {
	s := &session{
		profile: p, started: time.Now(), collector: reports.NewCollector(), counter: reports.NewAPICounter(),
		lateness: reports.NewLeaseLateness(nodeagent.LeaseRenewInterval(nodeagent.DefaultKubeletConfiguration())),
	}
	cl, err := openCluster(ctx, v, filepath.Join(out, "controlplane"))
	if err != nil {
		return nil, err
	}
	s.cluster = cl
	fmt.Fprintf(os.Stderr, "fleetlet: control plane ready; kubeconfig %s\n", cl.kubeconfig)
	if s.client, err = kubernetes.NewForConfig(driverConfig(cl.admin, p)); err != nil {
		return s, err
	}
	wrap := func(rt http.RoundTripper) http.RoundTripper { return s.counter.Wrap(s.lateness.Wrap(rt)) }
	s.fleet, s.settings, s.cleanup, err = newFleet(ctx, v, p, cl, s.collector, wrap, s.lateness.Collectors()...)
	if err != nil {
		return s, err
	}
	fleetCtx, stop := context.WithCancel(ctx)
	s.stopFleet, s.fleetDone = stop, make(chan error, 1)
	go func() { s.fleetDone <- s.fleet.Run(fleetCtx) }()

	// As clusterloader2 does, the load starts once every node is Ready
	// and untainted: before, the scheduler would crowd the first nodes.
	if err := fleet.WaitForNodesSchedulable(ctx, s.client, s.fleet.NodeNames(), v.GetDuration("ready-timeout")); err != nil {
		hint := fmt.Sprintf("see the control plane logs in %s", filepath.Join(out, "controlplane", "logs"))
		if cl.cp == nil {
			hint = fmt.Sprintf("see `kubectl --kubeconfig %s get nodes` and the cluster's own logs", cl.kubeconfig)
		}
		s.runErr = fmt.Errorf("fleet did not come up: %w; %s", err, hint)
		return s, nil
	}
	fmt.Fprintf(os.Stderr, "fleetlet: %d nodes Ready and schedulable after %v\n", len(s.fleet.NodeNames()), time.Since(s.started).Round(time.Millisecond))
	return s, nil
}

// drive runs the profile's phases.
func (s *session) drive(ctx context.Context) error {
	d := &loadprofiles.Driver{Client: s.client, Recorder: s.collector, Progress: progressPrinter()}
	return d.Run(ctx, s.profile)
}

// close stops the fleet, then the cluster.
func (s *session) close() error {
	var err error
	if s.stopFleet != nil {
		s.stopFleet()
		err = <-s.fleetDone
	}
	if s.cleanup != nil {
		s.cleanup()
	}
	if s.cluster != nil {
		err = errors.Join(err, s.cluster.Stop())
	}
	return err
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
	}
	cfg.QPS = float32(2 * maxQPS)
	cfg.Burst = int(4 * maxQPS)
	cfg.UserAgent = "fleetlet/driver"
	return cfg
}

// report assembles what the session measured; metrics is the control
// plane's metrics over the load (nil if it never ran).
func (s *session) report(metrics *reports.Metrics) *reports.Report {
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
	rep.Scheduling = reports.SchedulingFrom(rep.Series.Pods, metrics)
	hb := reports.Heartbeat(s.lateness, rep.API, s.counter.OpenWatches(), rep.WallSeconds)
	rep.Heartbeat = &hb
	rep.EvaluateSLOs(s.profile.SLOs)
	for _, err := range s.scrapeErrs {
		rep.Errors = append(rep.Errors, "control plane metrics: "+err.Error())
	}
	if s.fleet != nil {
		rep.Nodes = len(s.fleet.NodeNames())
	}
	rep.Fleet.Goroutines = runtime.NumGoroutine()
	if rss, err := reports.ReadPeakRSS(); err == nil {
		rep.Fleet.PeakRSSBytes = rss
	}
	rep.Fleet.CPUSeconds = cpuTime().Seconds()
	if s.runErr != nil {
		rep.Errors = append(rep.Errors, s.runErr.Error())
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
		base  [3]int
	)
	return func(p loadprofiles.Progress) {
		now := time.Now()
		counts := [3]int{p.Created, p.Running, p.Gone}
		if p.Phase != phase {
			phase, start, base = p.Phase, now, counts
		}
		// The count this phase advances is the one that moved most since it
		// began: created for create, Running for a wait, gone for a delete.
		active := 0
		for i := range counts {
			if counts[i]-base[i] > counts[active]-base[active] {
				active = i
			}
		}
		line := fmt.Sprintf("%-14s running %d/%d  scheduled %d  gone %d", p.Phase, p.Running, p.Created, p.Scheduled, p.Gone)
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
