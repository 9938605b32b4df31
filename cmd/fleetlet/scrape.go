package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"github.com/prometheus/procfs"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// The kubelet endpoints a Prometheus set up for kubelets scrapes (the
// kube-prometheus and prometheus-operator defaults).
var defaultScrapePaths = []string{"/metrics", "/metrics/probes", "/metrics/cadvisor"}

// prometheusAccept is the Accept header of Prometheus 3 with its default
// scrape_protocols; the agent, as the kubelet, answers it in the text format.
const prometheusAccept = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5," +
	"application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3," +
	"text/plain;version=0.0.4;q=0.2,*/*;q=0.1"

// prometheusScrapeTimeout is Prometheus's default scrape_timeout.
const prometheusScrapeTimeout = 10 * time.Second

func newScrapeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "scrape",
		Short: "Scrape every node's kubelet metrics endpoints as Prometheus does, and report what the scrapes cost and returned",
		Long: "Finds the Nodes of --kubeconfig's cluster (those matching --selector), and scrapes each one's kubelet port " +
			"(its InternalIP and daemonEndpoints port) at --paths once every --interval for --duration, as a Prometheus " +
			"with kubelet jobs does: each target at its own offset in the interval, connections kept alive, Prometheus's " +
			"Accept header and its 10 s scrape timeout, the kubeconfig's credentials, the kubelet's serving certificate " +
			"not verified (kubelets' are self-signed). Prints scrapes, failures, bytes and latency per path. Run it in a " +
			"process of its own beside a fleet, so that the fleet's CPU is measured without the scraper's: " +
			"`fleetlet bench fleet --scrape-interval 30s` does. --target scrapes given kubelet ports instead (a kubemark hollow " +
			"kubelet's, say), and --cost-of PID measures what the scrapes cost the process serving them, for a side-by-side " +
			"with a real kubelet.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := settings(cmd)
			if err != nil {
				return err
			}
			return runScrape(cmd.Context(), v, os.Stdout)
		},
	}
	addFlags(cmd, func(fs *pflag.FlagSet) {
		fs.String("kubeconfig", "", "kubeconfig of the cluster whose nodes to scrape (also KUBECONFIG); its user must be allowed nodes/metrics")
		fs.String("selector", "", "label selector of the Nodes to scrape (default: all)")
		fs.Duration("interval", 30*time.Second, "time between two scrapes of one target (Prometheus scrape_interval)")
		fs.Duration("duration", time.Minute, "how long to scrape")
		fs.String("paths", strings.Join(defaultScrapePaths, ","), "comma-separated kubelet paths to scrape on every node")
		fs.StringSlice("target", nil, "kubelet ports to scrape instead of the cluster's Nodes, as base URLs such as http://127.0.0.1:10250 (repeatable); --kubeconfig then only lends its credentials, and may be left out")
		fs.Int("cost-of", 0, "PID of the process serving the targets (the fleet, or a kubelet to compare): measure its CPU over an idle window of --duration, then over the scrapes, and print the difference per scrape")
	})
	return cmd
}

// scrapeTarget is one node's kubelet port.
type scrapeTarget struct {
	node string
	base string // https://ip:port
}

// pathResult is what the scrapes of one path returned.
type pathResult struct {
	ok, failed int
	bytes      int64
	latency    *hdrhistogram.Histogram // microseconds
	samples    []string
}

// scrapeResult is a scrape run's outcome by path.
type scrapeResult struct {
	mu    sync.Mutex
	paths map[string]*pathResult
}

func (r *scrapeResult) record(path string, n int64, took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.paths[path]
	if p == nil {
		p = &pathResult{latency: hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)}
		r.paths[path] = p
	}
	if err != nil {
		p.failed++
		if len(p.samples) < 3 {
			p.samples = append(p.samples, err.Error())
		}
		return
	}
	p.ok++
	p.bytes += n
	_ = p.latency.RecordValue(took.Microseconds())
}

func runScrape(ctx context.Context, v *viper.Viper, out io.Writer) error {
	interval, duration := v.GetDuration("interval"), v.GetDuration("duration")
	if interval <= 0 || duration <= 0 {
		return fmt.Errorf("--interval %v --duration %v: want both positive, such as --interval 30s --duration 2m", interval, duration)
	}
	paths, err := parseScrapePaths("--paths", v.GetString("paths"))
	if err != nil {
		return err
	}
	given, err := parseScrapeTargets(v.GetStringSlice("target"))
	if err != nil {
		return err
	}
	if len(given) > 0 && v.GetString("selector") != "" {
		return errors.New("--selector picks Nodes, and --target scrapes given ports instead: drop one of them")
	}
	var cost *procCPU
	if pid := v.GetInt("cost-of"); pid != 0 {
		if cost, err = newProcCPU(pid); err != nil {
			return err
		}
	}
	kubeconfig := v.GetString("kubeconfig")
	if kubeconfig == "" {
		kubeconfig = os.Getenv("KUBECONFIG")
	}
	if kubeconfig == "" && len(given) == 0 {
		return errors.New("no cluster to scrape: give --kubeconfig (or KUBECONFIG), or --target with a kubelet's base URL")
	}
	cfg := &rest.Config{}
	if kubeconfig != "" {
		if cfg, err = loadKubeconfig(kubeconfig); err != nil {
			return err
		}
	}
	targets := given
	if len(targets) == 0 {
		if targets, err = discoverScrapeTargets(ctx, cfg, v.GetString("selector")); err != nil {
			return err
		}
	}
	httpClient, err := kubeletScrapeClient(cfg)
	if err != nil {
		return err
	}
	var idle time.Duration
	if cost != nil {
		fmt.Fprintf(os.Stderr, "fleetlet: measuring process %d idle for %v before the scrapes\n", cost.pid, duration)
		if idle, err = cost.over(ctx, func() { _ = sleepCtx(ctx, duration) }); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "fleetlet: scraping %s on %d targets every %v for %v\n", strings.Join(paths, ", "), len(targets), interval, duration)
	var res *scrapeResult
	busy, err := cost.over(ctx, func() { res = scrape(ctx, httpClient, targets, paths, interval, duration) })
	if err != nil {
		return err
	}
	printScrape(out, res, paths)
	if cost != nil {
		printScrapeCost(out, cost.pid, idle, busy, res)
	}
	for _, p := range paths {
		if pr := res.paths[p]; pr == nil || pr.ok == 0 {
			return fmt.Errorf("no scrape of %s succeeded; see the failures above", p)
		}
	}
	return nil
}

// discoverScrapeTargets lists the cluster's Nodes matching selector and
// returns their kubelet ports.
func discoverScrapeTargets(ctx context.Context, cfg *rest.Config, selector string) ([]scrapeTarget, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	// Prometheus's service discovery retries a failed list; so does this,
	// for a minute, since a loaded API server may drop one.
	var nodes *corev1.NodeList
	var listErr error
	waitErr := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: time.Second, Factor: 2, Steps: 6, Cap: 30 * time.Second},
		func(ctx context.Context) (bool, error) {
			var lerr error
			nodes, lerr = client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
			if lerr != nil {
				listErr = lerr
				klog.FromContext(ctx).Info("Listing the Nodes to scrape failed; retrying", "err", lerr)
				return false, nil
			}
			return true, nil
		})
	if nodes == nil {
		return nil, fmt.Errorf("listing the Nodes to scrape: %w", errors.Join(listErr, waitErr))
	}
	targets := scrapeTargets(nodes.Items)
	if len(targets) == 0 {
		return nil, fmt.Errorf("no Node with an InternalIP and a kubelet port matches --selector %q", selector)
	}
	return targets, nil
}

// parseScrapeTargets reads --target's base URLs.
func parseScrapeTargets(list []string) ([]scrapeTarget, error) {
	var targets []scrapeTarget
	for _, raw := range list {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" {
			return nil, fmt.Errorf("--target %q: want a kubelet's base URL such as https://127.0.0.1:10250, without a path (the paths are --paths)", raw)
		}
		targets = append(targets, scrapeTarget{node: u.Host, base: u.Scheme + "://" + u.Host})
	}
	return targets, nil
}

// parseScrapePaths reads a comma-separated list of kubelet paths given as
// flag.
func parseScrapePaths(flag, list string) ([]string, error) {
	var paths []string
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p != "" {
			if !strings.HasPrefix(p, "/") {
				return nil, fmt.Errorf("%s: %q is not a path; give kubelet paths such as /metrics,/metrics/cadvisor", flag, p)
			}
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s is empty; give kubelet paths such as %s", flag, strings.Join(defaultScrapePaths, ","))
	}
	return paths, nil
}

// scrapeTargets are the nodes' kubelet ports, by InternalIP and the
// daemonEndpoints port, as Prometheus's node role discovers them.
func scrapeTargets(nodes []corev1.Node) []scrapeTarget {
	var targets []scrapeTarget
	for _, n := range nodes {
		port := n.Status.DaemonEndpoints.KubeletEndpoint.Port
		i := slices.IndexFunc(n.Status.Addresses, func(a corev1.NodeAddress) bool { return a.Type == corev1.NodeInternalIP })
		if port == 0 || i < 0 {
			continue
		}
		targets = append(targets, scrapeTarget{node: n.Name, base: "https://" + net.JoinHostPort(n.Status.Addresses[i].Address, strconv.Itoa(int(port)))})
	}
	return targets
}

// kubeletScrapeClient authenticates as cfg does and does not verify the
// kubelets' serving certificates, as Prometheus's kubelet jobs are set up
// (insecure_skip_verify: kubelets' certificates are self-signed). It
// speaks HTTP/1.1, as Prometheus does when prometheus-operator (the usual
// way kubelets are scraped) writes its scrape configs: enableHTTP2 is off
// by default there.
func kubeletScrapeClient(cfg *rest.Config) (*http.Client, error) {
	c := rest.CopyConfig(cfg)
	c.Insecure, c.CAData, c.CAFile = true, nil, ""
	tlsCfg, err := rest.TLSConfigFor(c)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		TLSClientConfig: tlsCfg, IdleConnTimeout: 90 * time.Second, MaxIdleConnsPerHost: 2,
		// An empty, non-nil TLSNextProto keeps the transport off HTTP/2.
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	rt, err := rest.HTTPWrappersForConfig(c, tr)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: rt, Timeout: prometheusScrapeTimeout}, nil
}

// scrape scrapes every target's paths once per interval until duration
// has passed, each target from its own offset in the interval (from a
// hash of its address, as Prometheus spreads its targets) over a
// connection kept alive.
func scrape(ctx context.Context, client *http.Client, targets []scrapeTarget, paths []string, interval, duration time.Duration) *scrapeResult {
	res := &scrapeResult{paths: map[string]*pathResult{}}
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for _, t := range targets {
		h := fnv.New64a()
		_, _ = h.Write([]byte(t.base))
		offset := time.Duration(h.Sum64() % uint64(interval))
		wg.Go(func() {
			timer := time.NewTimer(offset)
			defer timer.Stop()
			for next := start.Add(offset); ; next = next.Add(interval) {
				timer.Reset(time.Until(next))
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
				for _, p := range paths {
					n, took, err := scrapeOnce(ctx, client, t.base+p)
					if ctx.Err() != nil {
						return
					}
					if err != nil {
						err = fmt.Errorf("%s%s: %w", t.node, p, err)
					}
					res.record(p, n, took, err)
				}
			}
		})
	}
	wg.Wait()
	return res
}

// scrapeOnce GETs url as Prometheus does and reads the body whole.
func scrapeOnce(ctx context.Context, client *http.Client, url string) (int64, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Accept", prometheusAccept)
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", strconv.FormatFloat(prometheusScrapeTimeout.Seconds(), 'f', -1, 64))
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return 0, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return n, time.Since(start), nil
}

// printScrape writes one row per path; a path given more than once (to
// scrape it several times per interval) is one row of all its scrapes.
func printScrape(w io.Writer, res *scrapeResult, paths []string) {
	seen := map[string]bool{}
	paths = slices.DeleteFunc(slices.Clone(paths), func(p string) bool {
		dup := seen[p]
		seen[p] = true
		return dup
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tscrapes\tfailed\tbytes/scrape\tlatency p50\tp99\tmax\t")
	for _, p := range paths {
		pr := res.paths[p]
		if pr == nil {
			fmt.Fprintf(tw, "%s\t0\t0\t\t\t\t\t\n", p)
			continue
		}
		var per int64
		if pr.ok > 0 {
			per = pr.bytes / int64(pr.ok)
		}
		ms := func(q float64) float64 { return float64(pr.latency.ValueAtQuantile(q)) / 1000 }
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.2f ms\t%.2f ms\t%.2f ms\t\n", p, pr.ok, pr.failed, per, ms(50), ms(99), float64(pr.latency.Max())/1000)
	}
	_ = tw.Flush()
	for _, p := range paths {
		if pr := res.paths[p]; pr != nil && len(pr.samples) > 0 {
			fmt.Fprintf(w, "%s failures, such as: %s\n", p, strings.Join(pr.samples, "; "))
		}
	}
}

// procCPU reads another process's CPU time, from /proc through
// prometheus/procfs (what client_golang's process collector reads).
type procCPU struct {
	pid  int
	proc procfs.Proc
}

func newProcCPU(pid int) (*procCPU, error) {
	p, err := procfs.NewProc(pid)
	if err == nil {
		_, err = p.Stat()
	}
	if err != nil {
		return nil, fmt.Errorf("--cost-of %d: cannot read that process's CPU (%v); give the PID of the process serving the targets, such as $(pgrep -f 'fleetlet fleet')", pid, err)
	}
	return &procCPU{pid: pid, proc: p}, nil
}

func (c *procCPU) cpu() (time.Duration, error) {
	st, err := c.proc.Stat()
	if err != nil {
		return 0, fmt.Errorf("reading process %d's CPU: %w (did it exit?)", c.pid, err)
	}
	return time.Duration(st.CPUTime() * float64(time.Second)), nil
}

// over returns the CPU the process used while f ran; with no process to
// measure (c nil) it only runs f.
func (c *procCPU) over(ctx context.Context, f func()) (time.Duration, error) {
	if c == nil {
		f()
		return 0, nil
	}
	before, err := c.cpu()
	if err != nil {
		return 0, err
	}
	f()
	after, err := c.cpu()
	if err != nil {
		return 0, err
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return after - before, nil
}

// printScrapeCost writes what the scrapes cost process pid: its CPU while
// scraped less its CPU over an idle window as long, per scrape.
func printScrapeCost(w io.Writer, pid int, idle, busy time.Duration, res *scrapeResult) {
	scrapes := 0
	for _, pr := range res.paths {
		scrapes += pr.ok + pr.failed
	}
	fmt.Fprintf(w, "process %d: CPU %.2f s idle, %.2f s while scraped (%d scrapes)", pid, idle.Seconds(), busy.Seconds(), scrapes)
	if scrapes > 0 {
		fmt.Fprintf(w, ": %.0f µs a scrape", float64((busy-idle).Microseconds())/float64(scrapes))
	}
	fmt.Fprintln(w)
}
