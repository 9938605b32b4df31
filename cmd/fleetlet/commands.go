package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/fleet"
	"github.com/fleetlet/fleetlet/loadprofiles"
	"github.com/fleetlet/fleetlet/reports"
)

func newFleetCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Host a fleet of emulated nodes until interrupted, for another load tool to drive",
		Long: "Host a fleet of emulated nodes against --kubeconfig (or the embedded control plane) until " +
			"interrupted, so that clusterloader2, kube-burner or kubectl can drive it. The nodes come from " +
			"--nodes, or from the node pools of --profile.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := settings(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if v.GetBool("shard") {
				return runShard(ctx, v)
			}
			for _, f := range []string{"shard-ordinal", "pod-name", "pod-ip"} {
				if v.GetString(f) != "" {
					return fmt.Errorf("--%s is a shard's: add --shard, or leave it out", f)
				}
			}
			profile, err := fleetProfile(v.GetString("profile"), v.GetInt("nodes"))
			if err != nil {
				return err
			}
			if err := preflight(v, profile.TotalNodes(), true); err != nil {
				return err
			}
			dir, err := tempDir(v.GetString("dir"), "fleetlet-fleet-")
			if err != nil {
				return err
			}
			opts, err := optionsFrom(v, profile, filepath.Join(dir, "controlplane"))
			if err != nil {
				return err
			}
			s := newSession(opts)
			startErr := s.Start(ctx)
			if !s.fleetRunning() {
				return errors.Join(startErr, s.Close())
			}
			switch {
			case startErr == nil:
				fmt.Fprintf(os.Stderr, "fleetlet: %d nodes Ready; kubeconfig %s; Ctrl-C to stop\n", len(s.fleet.NodeNames()), s.cluster.kubeconfig)
			case errors.Is(startErr, context.Canceled):
				startErr = nil
			default:
				// The nodes that are up stay up for the load tool; the
				// error is the command's result once it is interrupted.
				fmt.Fprintf(os.Stderr, "fleetlet: %v; hosting the fleet until interrupted\n", startErr)
			}
			<-ctx.Done()
			return errors.Join(startErr, s.Close())
		},
	}
	addFlags(cmd, clusterFlags, fleetFlags, shardFlags, func(fs *pflag.FlagSet) {
		fs.Int("nodes", 0, "number of nodes in one default pool (8 CPU, 32Gi, 110 pods); overrides --profile's pools")
		fs.String("profile", "quickstart", "profile whose node pools to host")
		fs.String("dir", "", "directory for the embedded control plane's data and logs (default: a new temporary directory)")
		fs.Duration("ready-timeout", 0, "how long to wait for every node to be Ready before reporting it (default: wait until interrupted)")
	})
	return cmd
}

// fleetProfile is the profile whose pools a fleet hosts: --nodes N makes a
// single default pool of N nodes.
func fleetProfile(name string, nodes int) (*loadprofiles.Profile, error) {
	if nodes < 0 {
		return nil, fmt.Errorf("--nodes %d: must be zero (use the profile's pools) or more", nodes)
	}
	p, err := loadprofiles.Load(name)
	if err != nil {
		return nil, err
	}
	if nodes > 0 {
		p.NodePools = []loadprofiles.NodePool{{Name: "default", Count: nodes}}
		p.Default()
	}
	return p, nil
}

func newControlPlaneCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "controlplane", Short: "Run only the embedded control plane"}
	up := &cobra.Command{
		Use:   "up",
		Short: "Start etcd, kube-apiserver, kube-scheduler and kube-controller-manager, print the kubeconfig path, run until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := settings(cmd)
			if err != nil {
				return err
			}
			dir := v.GetString("dir")
			if dir == "" {
				if dir, err = os.MkdirTemp("", "fleetlet-controlplane-"); err != nil {
					return err
				}
			}
			cl, err := openCluster(cmd.Context(), "", v.GetString("bin-dir"), dir)
			if err != nil {
				return err
			}
			fmt.Println(cl.kubeconfig)
			fmt.Fprintln(os.Stderr, "fleetlet: control plane up; Ctrl-C to stop")
			<-cmd.Context().Done()
			return cl.Stop()
		},
	}
	up.Flags().String("dir", "", "directory for certificates, kubeconfigs, etcd data and logs (default: a new temporary directory)")
	up.Flags().String("bin-dir", "", "directory holding the control plane binaries (default: the directory of the fleetlet binary)")
	cmd.AddCommand(up)
	return cmd
}

func newFakeRuntimeCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "fakeruntime", Short: "The fake CRI runtime on its own"}
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve the fake CRI runtime on a unix socket (for crictl or another kubelet), or one per node of a fleet, until interrupted",
		Long: "With --socket, serves one fake runtime on that socket. With --dir, serves one per node of --profile's pools " +
			"(or of --nodes), each at <dir>/<node>.sock under the names `fleetlet fleet` gives them with the same " +
			"--node-prefix, for a fleet run with --cri fake-socket --cri-socket-dir <dir>: the containers then outlive the " +
			"fleet's restarts, and a restarted fleet re-adopts them, as a restarted kubelet re-adopts containerd's.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := settings(cmd)
			if err != nil {
				return err
			}
			socket, dir := v.GetString("socket"), v.GetString("dir")
			switch {
			case socket == "" && dir == "":
				return errors.New("--socket or --dir is required: the path of the unix socket to serve on, or the directory for one socket per node")
			case socket != "" && dir != "":
				return errors.New("--socket and --dir: pass one, a single runtime's socket or a directory for one per node")
			case dir != "":
				profile, err := fleetProfile(v.GetString("profile"), v.GetInt("nodes"))
				if err != nil {
					return err
				}
				return serveFleetRuntimes(cmd.Context(), dir, v.GetString("node-prefix"), profile)
			}
			lis, path, err := fakeruntime.Listen(socket)
			if err != nil {
				return err
			}
			if abs, err := filepath.Abs(path); err == nil {
				path = abs
			}
			fmt.Fprintf(os.Stderr, "fleetlet: fake CRI runtime on unix://%s; Ctrl-C to stop\n", path)
			return fakeruntime.ServeListener(cmd.Context(), lis, fakeruntime.New(fakeruntime.Config{}))
		},
	}
	serve.Flags().String("socket", "", "path of the unix socket")
	serve.Flags().String("dir", "", "directory for one socket per node of the fleet, <dir>/<node>.sock")
	serve.Flags().String("profile", "quickstart", "with --dir: profile whose node pools (and runtime behaviour) to serve")
	serve.Flags().Int("nodes", 0, "with --dir: number of nodes in one default pool; overrides --profile's pools")
	serve.Flags().String("node-prefix", "fleetlet-", "with --dir: the fleet's --node-prefix")
	cmd.AddCommand(serve)
	return cmd
}

// serveFleetRuntimes serves a fake runtime per node of profile's pools in
// dir until ctx ends.
func serveFleetRuntimes(ctx context.Context, dir, prefix string, profile *loadprofiles.Profile) error {
	var names []string
	for _, pool := range profile.NodePools {
		for i := range pool.Count {
			names = append(names, fleet.NodeName(prefix, pool.Name, i))
		}
	}
	// Every path is checked before anything is made.
	for _, name := range names {
		if p := filepath.Join(dir, name+".sock"); len(p) > fakeruntime.MaxSocketPathLen {
			return fmt.Errorf("--dir %s: the socket %s is %d bytes, longer than the %d bytes a unix socket takes; choose a shorter directory, such as /tmp/fl-cri", dir, p, len(p), fakeruntime.MaxSocketPathLen)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--dir %s: %w", dir, err)
	}
	b := behaviour(profile.Runtime)
	var listeners []net.Listener
	closeAll := func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}
	for _, name := range names {
		lis, _, err := fakeruntime.Listen(filepath.Join(dir, name+".sock"))
		if err != nil {
			closeAll()
			return err
		}
		listeners = append(listeners, lis)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, lis := range listeners {
		rt := fakeruntime.New(fakeruntime.Config{Behaviour: b})
		g.Go(func() error { return fakeruntime.ServeListener(gctx, lis, rt) })
	}
	fmt.Fprintf(os.Stderr, "fleetlet: %d fake CRI runtimes in %s (%s.sock ...); Ctrl-C to stop\n", len(names), dir, names[0])
	return g.Wait()
}

func newReportCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "report", Short: "Read, render, merge and compare reports"}
	show := &cobra.Command{
		Use:   "show REPORT.json",
		Short: "Print a report's summary",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			rep, err := reports.ReadJSON(args[0])
			if err != nil {
				return err
			}
			reports.RenderSummary(os.Stdout, rep)
			return nil
		},
	}
	render := &cobra.Command{
		Use:   "render REPORT.json",
		Short: "Write REPORT.md and REPORT.html next to REPORT.json",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			rep, err := reports.ReadJSON(args[0])
			if err != nil {
				return err
			}
			// The renders are named after the report, so that rendering
			// other.json never touches the report.json beside it.
			stem := strings.TrimSuffix(args[0], filepath.Ext(args[0]))
			return renderReport(stem, rep)
		},
	}
	merge := &cobra.Command{
		Use:   "merge --out DIR REPORT.json...",
		Short: "Merge the reports of several fleetlet processes (shards of one run) exactly",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			out, _ := cmd.Flags().GetString("out")
			if out == "" {
				return errors.New("--out is required: the directory for the merged report")
			}
			if err := distinctFiles(args); err != nil {
				return err
			}
			var parts []*reports.Report
			for _, path := range args {
				rep, err := reports.ReadJSON(path)
				if err != nil {
					return err
				}
				parts = append(parts, rep)
			}
			merged, err := reports.Merge(parts...)
			if err != nil {
				return err
			}
			out, _, err = outputDir(out, "")
			if err != nil {
				return err
			}
			if err := writeReports(out, merged); err != nil {
				return err
			}
			reports.RenderSummary(os.Stdout, merged)
			return nil
		},
	}
	merge.Flags().String("out", "", "directory for the merged report.json, report.md and report.html")
	compare := &cobra.Command{
		Use:   "compare BASE.json NEW.json",
		Short: "Show two runs side by side with deltas and a verdict per SLO",
		Args:  cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			a, err := reports.ReadJSON(args[0])
			if err != nil {
				return err
			}
			b, err := reports.ReadJSON(args[1])
			if err != nil {
				return err
			}
			reports.RenderComparison(os.Stdout, reports.Compare(a, b))
			return nil
		},
	}
	cmd.AddCommand(show, render, merge, compare)
	return cmd
}

// distinctFiles refuses a file named twice (by any spelling): merging a
// shard's report twice would double its counts.
func distinctFiles(paths []string) error {
	infos := make([]os.FileInfo, len(paths))
	for i, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("reading report: %w", err)
		}
		for j := range i {
			if os.SameFile(infos[j], fi) {
				return fmt.Errorf("%s and %s are the same file: each shard's report is merged once", paths[j], p)
			}
		}
		infos[i] = fi
	}
	return nil
}
