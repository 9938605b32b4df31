package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetlet/fleetlet/fleet"
	"github.com/fleetlet/fleetlet/loadprofiles"
	"github.com/fleetlet/fleetlet/reports"
)

func newSoakCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Run a fleet under a steady churn for a long time, sample the process every interval, and judge its growth",
		Long: "Runs --profile (default: soak, 1,000 nodes under 5 pods/s for 1 hour) and samples this process every " +
			"--interval: RSS, live heap, goroutines, open file descriptors, the latest lease renewal, nodes not Ready. " +
			"Passes when none of the four grew by more than --max-growth from the start of the run's last three " +
			"quarters to its end, no lease renewal came later than --max-lease-lateness, and no node was ever NotReady. " +
			"Writes soak.json, soak.md and soak.html (after every sample, so an interrupted soak keeps its samples), " +
			"and the run's report.json beside them.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := settings(cmd)
			if err != nil {
				return err
			}
			return benchSoak(cmd.Context(), v)
		},
	}
	addFlags(cmd, clusterFlags, fleetFlags, func(fs *pflag.FlagSet) {
		fs.String("profile", "soak", "profile with one churn phase: a built-in name or a YAML file")
		fs.Int("nodes", 0, "nodes in the profile's first pool (default: the profile's)")
		fs.Duration("duration", 0, "how long the churn creates pods (default: the profile's)")
		fs.Float64("qps", 0, "pods created per second by the churn (default: the profile's)")
		fs.Duration("interval", time.Minute, "time between samples")
		fs.Float64("max-growth", reports.DefaultSoakLimits.MaxGrowth, "largest growth allowed of RSS, live heap, goroutines and open file descriptors, as a fraction")
		fs.Duration("max-lease-lateness", time.Duration(reports.DefaultSoakLimits.MaxLeaseLatenessMs)*time.Millisecond, "latest a lease renewal may come after its interval")
		fs.String("out", "", "directory for soak.json, soak.md, soak.html, report.json and the control plane's logs (default out/soak-<time>)")
		fs.Duration("ready-timeout", 10*time.Minute, "how long to wait for every node to be Ready")
	})
	return cmd
}

// soakProfile loads the soak's profile with the command's overrides. It
// must have exactly one churn phase: that is the load the samples are
// taken under.
func soakProfile(v *viper.Viper) (*loadprofiles.Profile, *loadprofiles.ChurnPhase, error) {
	p, err := loadprofiles.Load(v.GetString("profile"))
	if err != nil {
		return nil, nil, err
	}
	var churn *loadprofiles.ChurnPhase
	for _, ph := range p.Phases {
		if ph.Churn == nil {
			continue
		}
		if churn != nil {
			return nil, nil, fmt.Errorf("profile %s has more than one churn phase; a soak samples under one: use the built-in soak profile as a model", p.Name)
		}
		churn = ph.Churn
	}
	if churn == nil {
		return nil, nil, fmt.Errorf("profile %s has no churn phase; a soak samples under one: use the built-in soak profile as a model", p.Name)
	}
	if n := v.GetInt("nodes"); n < 0 {
		return nil, nil, fmt.Errorf("--nodes %d: want 0 (the profile's) or more", n)
	} else if n > 0 {
		p.NodePools[0].Count = n
	}
	if d := v.GetDuration("duration"); d < 0 {
		return nil, nil, fmt.Errorf("--duration %v: want 0 (the profile's) or more", d)
	} else if d > 0 {
		churn.Duration = metav1.Duration{Duration: d}
	}
	if q := v.GetFloat64("qps"); q < 0 {
		return nil, nil, fmt.Errorf("--qps %v: want 0 (the profile's) or more", q)
	} else if q > 0 {
		churn.QPS = q
	}
	if i := v.GetDuration("interval"); i < time.Second {
		return nil, nil, fmt.Errorf("--interval %v: want 1s or more", i)
	}
	if g := v.GetFloat64("max-growth"); g <= 0 {
		return nil, nil, fmt.Errorf("--max-growth %v: want a positive fraction such as 0.05", g)
	}
	if l := v.GetDuration("max-lease-lateness"); l <= 0 {
		return nil, nil, fmt.Errorf("--max-lease-lateness %v: want a positive duration such as 10s", l)
	}
	return p, churn, p.Validate()
}

func benchSoak(ctx context.Context, v *viper.Viper) (err error) {
	profile, churn, err := soakProfile(v)
	if err != nil {
		return err
	}
	if err := preflight(v, profile.TotalNodes(), false); err != nil {
		return err
	}
	out, created, err := outputDir(v.GetString("out"), "soak")
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
	fmt.Fprintf(os.Stderr, "fleetlet: soak of profile %s, %d nodes, %v at %v pods/s; output in %s\n",
		profile.Name, profile.TotalNodes(), churn.Duration.Duration, churn.QPS, out)
	opts, err := optionsFrom(v, profile, filepath.Join(out, "controlplane"))
	if err != nil {
		return err
	}
	opts.Schedulable = true
	r, err := startRun(ctx, opts)
	if r != nil {
		defer func() { err = errors.Join(err, r.Close()) }()
	}
	if r == nil || !r.fleetRunning() {
		return err
	}
	if err != nil {
		// The nodes did not all come up: there is no steady state to soak.
		return err
	}
	soak := &reports.Soak{
		Profile: profile.Name, Nodes: profile.TotalNodes(), ChurnQPS: churn.QPS,
		IntervalSeconds: v.GetDuration("interval").Seconds(),
		Limits: reports.SoakLimits{
			MaxGrowth:          v.GetFloat64("max-growth"),
			MaxLeaseLatenessMs: float64(v.GetDuration("max-lease-lateness").Milliseconds()),
		},
	}
	s := &soakSampler{run: r, soak: soak, out: out, nodes: map[string]bool{}, events: map[types.UID]bool{}}
	for _, n := range r.fleet.NodeNames() {
		s.nodes[n] = true
	}
	// The registration's lateness is not the soak's: the fleet has settled
	// once it is schedulable.
	r.lateness.TakeLatest()
	soak.StartedAt = time.Now()
	before := r.scrape(ctx)
	runErr := s.during(ctx, v.GetDuration("interval"), func() error { return r.drive(ctx) })
	metrics := reports.Diff(before, r.scrape(ctx))
	if ctx.Err() != nil {
		runErr = fmt.Errorf("interrupted (%v); the soak holds the samples taken until then", runErr)
	}
	if runErr != nil {
		soak.Errors = append(soak.Errors, runErr.Error())
	}
	rep := r.report(metrics, runErr)
	werr := errors.Join(writeReports(out, rep), s.write())
	fmt.Println()
	printSoak(os.Stdout, soak)
	fmt.Printf("\nsoak: %s (and soak.md, soak.html, report.json)\n", filepath.Join(out, "soak.json"))
	if werr != nil {
		return errors.Join(runErr, werr)
	}
	if runErr != nil {
		return runErr
	}
	if !soak.Pass {
		return fmt.Errorf("the soak failed its checks; see %s", filepath.Join(out, "soak.html"))
	}
	return nil
}

// soakSampler takes a soak's samples and keeps its files current.
type soakSampler struct {
	run   *profileRun
	soak  *reports.Soak
	out   string
	nodes map[string]bool
	// events are the NodeNotReady events seen so far, by UID: the API
	// server keeps events for an hour only, so a soak counts them as it
	// goes.
	events map[types.UID]bool
}

// during runs load, sampling every interval while it runs and once when it
// is done.
func (s *soakSampler) during(ctx context.Context, interval time.Duration, load func() error) error {
	done := make(chan error, 1)
	go func() { done <- load() }()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	sample := func() {
		s.take(ctx)
		if err := s.write(); err != nil {
			fmt.Fprintf(os.Stderr, "fleetlet: soak: %v\n", err)
		}
	}
	for {
		select {
		case err := <-done:
			sample()
			return err
		case <-tick.C:
			sample()
		}
	}
}

// take adds one sample.
func (s *soakSampler) take(ctx context.Context) {
	x := reports.SoakSample{
		AtSeconds:          time.Since(s.soak.StartedAt).Seconds(),
		RSSBytes:           currentRSS(),
		HeapLiveBytes:      heapLive(),
		Goroutines:         runtime.NumGoroutine(),
		OpenFDs:            openFDs(),
		LeaseLatenessMaxMs: float64(s.run.lateness.TakeLatest().Microseconds()) / 1000,
	}
	counts := s.run.collector.PodCounts()
	x.PodsCreated, x.PodsGone = counts.Created, counts.Gone
	// Both lists are served from the API server's watch cache
	// (resourceVersion 0): a sample must not load what it measures.
	mine := s.nodes
	if nodes, err := s.run.admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: fleet.PoolLabel, ResourceVersion: "0"}); err == nil {
		for i := range nodes.Items {
			if n := &nodes.Items[i]; mine[n.Name] && !nodeIsReady(n) {
				x.NodesNotReady++
			}
		}
	} else {
		x.NodesNotReady = -1
		fmt.Fprintf(os.Stderr, "fleetlet: soak: listing nodes: %v\n", err)
	}
	if events, err := s.run.admin.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "reason=NodeNotReady", ResourceVersion: "0"}); err == nil {
		for _, e := range events.Items {
			if mine[e.InvolvedObject.Name] && e.InvolvedObject.Kind == "Node" {
				s.events[e.UID] = true
			}
		}
	} else {
		fmt.Fprintf(os.Stderr, "fleetlet: soak: listing events: %v\n", err)
	}
	x.NodeNotReadyEvents = len(s.events)
	s.soak.Samples = append(s.soak.Samples, x)
	s.soak.DurationSeconds = x.AtSeconds
	fmt.Fprintf(os.Stderr, "fleetlet: soak %v: RSS %.0f MiB, live heap %.0f MiB, %d goroutines, %d fds, latest lease %.0f ms, %d not Ready, pods %d created %d gone\n",
		time.Duration(x.AtSeconds*float64(time.Second)).Round(time.Second), float64(x.RSSBytes)/(1<<20), float64(x.HeapLiveBytes)/(1<<20),
		x.Goroutines, x.OpenFDs, x.LeaseLatenessMaxMs, x.NodesNotReady, x.PodsCreated, x.PodsGone)
}

// write evaluates the soak so far and writes its three files.
func (s *soakSampler) write() error {
	s.soak.Evaluate()
	if err := reports.WriteSoak(filepath.Join(s.out, "soak.json"), s.soak); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(s.out, "soak.md"), func(w io.Writer) error { return reports.RenderSoakMarkdown(w, s.soak) }); err != nil {
		return err
	}
	return writeFile(filepath.Join(s.out, "soak.html"), func(w io.Writer) error { return reports.RenderSoakHTML(w, s.soak) })
}

func nodeIsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// heapLive is the heap the last garbage collection kept, read without
// stopping the world (runtime.ReadMemStats would).
func heapLive() int64 { return int64(reports.ReadRuntimeUint64("/gc/heap/live:bytes")) }

// openFDs counts this process's open file descriptors; -1 if unknown.
func openFDs() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(entries)
}

// printSoak writes the verdict for the terminal.
func printSoak(w io.Writer, s *reports.Soak) {
	verdict := "PASS"
	if !s.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "soak %s: %d nodes, %v, %d samples: %s\n", s.Profile, s.Nodes,
		(time.Duration(s.DurationSeconds) * time.Second).Round(time.Second), len(s.Samples), verdict)
	for _, c := range s.Checks {
		mark := "pass"
		if !c.Pass {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %-4s %-30s %-28s limit %s\n", mark, c.Name, c.Value, c.Limit)
	}
	for _, e := range s.Errors {
		fmt.Fprintf(w, "  error: %s\n", e)
	}
}
