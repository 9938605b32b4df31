// Package kubemark runs hollow nodes: the real kubelet and kube-proxy code
// of k8s.io/kubernetes (cmd/kubemark, --morph=kubelet and --morph=proxy) on
// fake runtimes, one child process each, against a control plane. They are
// the oracle fleetlet's agents are held against: what a real node costs the
// API server.
//
// A hollow kubelet here differs from kubemark's usual home, a pod of an
// existing cluster, in what it would touch on this host, and is run so that
// it touches nothing outside its own files:
//   - it finds no iptables binary (its PATH is an empty directory): a
//     kubelet running as root on the host would otherwise create the
//     KUBE-FIREWALL chain and its DROP rule in the host's own tables, and
//     re-create them every minute;
//   - it listens on 0.0.0.0 (kubemark hard-codes the address) at a port of
//     its own, and has no read-only port, as kubelets default to;
//   - its fake image service is its own (--use-host-image-service=false),
//     not the host's containerd;
//   - kubemark hard-codes its root directory (/tmp/hollow-kubelet.*) and its
//     fake CRI socket (/tmp/kubelet_remote_*.sock); Close removes both.
package kubemark

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
)

// The user agents kubemark gives its clients (cmd/kubemark/app), the same
// for every hollow node: an audit log tells a hollow kube-proxy from
// another kube-proxy sharing its user name by them.
const (
	KubeletUserAgent = "hollow-kubelet"
	ProxyUserAgent   = "hollow-proxy"
)

// Client limits: the kubelet's defaults (kubeAPIQPS 50, kubeAPIBurst 100)
// and kube-proxy's (clientConnection qps 5, burst 10), since kubemark's own
// default of 10 and 20 is neither's.
const (
	kubeletQPS, kubeletBurst = 50, 100
	proxyQPS, proxyBurst     = 5, 10
)

// DefaultStopTimeout bounds how long a hollow component may take to exit
// after SIGTERM before it gets SIGKILL. A hollow kubelet takes a second or
// two.
const DefaultStopTimeout = 10 * time.Second

// Node is one hollow node.
type Node struct {
	// Name is the Node's name.
	Name string
	// Kubeconfig is the kubelet's: a client certificate with
	// CN=system:node:<Name>, O=system:nodes, so that the Node authorizer
	// and NodeRestriction treat it as that node's kubelet.
	Kubeconfig string
	// ProxyKubeconfig is kube-proxy's (CN=system:kube-proxy); "" runs no
	// kube-proxy on this node.
	ProxyKubeconfig string
	// Labels are added to the Node's (--node-labels).
	Labels map[string]string
}

// Config says what to run.
type Config struct {
	// Binary is the kubemark executable.
	Binary string
	// Dir receives each component's log, <node>.kubelet.log and
	// <node>.proxy.log.
	Dir   string
	Nodes []Node
	// StopTimeout: 0 is DefaultStopTimeout.
	StopTimeout time.Duration
	// ExtraKubeletArgs are appended to every kubelet's command line.
	ExtraKubeletArgs []string
}

// Hollow is a running set of hollow nodes. Close it, also after an error.
type Hollow struct {
	cfg     Config
	spawner *spawner
	// kubelets[i] and proxies[i] (nil without a proxy) are cfg.Nodes[i]'s.
	kubelets, proxies []*process
	// socketsBefore are the fake CRI sockets in /tmp before we started, so
	// that Close removes only those our kubelets left.
	socketsBefore map[string]bool
	closed        bool
}

// Start starts every node's kubelet and kube-proxy. It does not wait for
// them: WaitReady does. On error, what it started has been stopped.
func Start(cfg Config) (*Hollow, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	// An empty directory as PATH: the hollow kubelet then finds no
	// iptables to program the host's tables with.
	emptyPath := filepath.Join(cfg.Dir, "empty-path")
	if err := os.MkdirAll(emptyPath, 0o755); err != nil {
		return nil, fmt.Errorf("kubemark: create %s: %w", emptyPath, err)
	}
	ports, err := freePorts(len(cfg.Nodes))
	if err != nil {
		return nil, err
	}
	env := childEnv(os.Environ(), emptyPath)
	h := &Hollow{cfg: cfg, spawner: newSpawner(), socketsBefore: fakeSockets()}
	for i, n := range cfg.Nodes {
		k, err := startProcess(h.spawner, n.Name+" kubelet", cfg.Binary, append(KubeletArgs(n, ports[i]), cfg.ExtraKubeletArgs...), env, filepath.Join(cfg.Dir, n.Name+".kubelet.log"))
		if err != nil {
			return nil, errors.Join(err, h.Close())
		}
		h.kubelets = append(h.kubelets, k)
		var p *process
		if n.ProxyKubeconfig != "" {
			if p, err = startProcess(h.spawner, n.Name+" kube-proxy", cfg.Binary, ProxyArgs(n), env, filepath.Join(cfg.Dir, n.Name+".proxy.log")); err != nil {
				return nil, errors.Join(err, h.Close())
			}
		}
		h.proxies = append(h.proxies, p)
	}
	return h, nil
}

func (c *Config) validate() error {
	if st, err := os.Stat(c.Binary); err != nil || st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("kubemark: binary %q is not an executable file: build it with `make kubemark` (bin/kubemark)", c.Binary)
	}
	if c.Dir == "" {
		return errors.New("kubemark: Config.Dir is empty: set it to a directory for the hollow nodes' logs")
	}
	if len(c.Nodes) == 0 {
		return errors.New("kubemark: Config.Nodes is empty")
	}
	seen := map[string]bool{}
	for _, n := range c.Nodes {
		if errs := validation.IsDNS1123Subdomain(n.Name); len(errs) > 0 {
			return fmt.Errorf("kubemark: node name %q: %s", n.Name, strings.Join(errs, "; "))
		}
		if seen[n.Name] {
			return fmt.Errorf("kubemark: node %s given twice", n.Name)
		}
		seen[n.Name] = true
		if n.Kubeconfig == "" {
			return fmt.Errorf("kubemark: node %s has no kubeconfig", n.Name)
		}
	}
	return nil
}

// KubeletArgs is the command line of n's hollow kubelet, serving the
// kubelet API on port.
func KubeletArgs(n Node, port int) []string {
	args := []string{
		"--morph=kubelet",
		"--name=" + n.Name,
		"--kubeconfig=" + n.Kubeconfig,
		"--kubelet-port=" + strconv.Itoa(port),
		// Off, as kubelets default to since kubeadm, rather than kubemark's
		// 10255, which every hollow kubelet would fight for.
		"--kubelet-read-only-port=0",
		// Images from the fake CRI runtime, not the host's containerd.
		"--use-host-image-service=false",
		"--kube-api-qps=" + strconv.Itoa(kubeletQPS),
		"--kube-api-burst=" + strconv.Itoa(kubeletBurst),
	}
	if len(n.Labels) > 0 {
		args = append(args, "--node-labels="+joinLabels(n.Labels))
	}
	return args
}

// ProxyArgs is the command line of n's hollow kube-proxy.
func ProxyArgs(n Node) []string {
	return []string{
		"--morph=proxy",
		"--name=" + n.Name,
		"--kubeconfig=" + n.ProxyKubeconfig,
		"--kube-api-qps=" + strconv.Itoa(proxyQPS),
		"--kube-api-burst=" + strconv.Itoa(proxyBurst),
	}
}

func joinLabels(labels map[string]string) string {
	keys := slices.Sorted(maps.Keys(labels))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return strings.Join(parts, ",")
}

// childEnv is env with PATH replaced by path.
func childEnv(env []string, path string) []string {
	out := make([]string, 0, len(env)+1)
	for _, e := range env {
		if !strings.HasPrefix(e, "PATH=") {
			out = append(out, e)
		}
	}
	return append(out, "PATH="+path)
}

// freePorts returns n distinct TCP ports free on every address a moment
// ago (a hollow kubelet binds 0.0.0.0). Another process may take one in
// between; that kubelet then exits and WaitReady says so.
func freePorts(n int) ([]int, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return nil, fmt.Errorf("kubemark: find a free port for a hollow kubelet: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Names returns the nodes' names.
func (h *Hollow) Names() []string {
	names := make([]string, len(h.cfg.Nodes))
	for i, n := range h.cfg.Nodes {
		names[i] = n.Name
	}
	return names
}

// PIDs returns the process id of every component started.
func (h *Hollow) PIDs() []int {
	var pids []int
	for _, p := range h.all() {
		pids = append(pids, p.pid())
	}
	return pids
}

func (h *Hollow) all() []*process {
	var all []*process
	for i, k := range h.kubelets {
		all = append(all, k)
		if i < len(h.proxies) && h.proxies[i] != nil {
			all = append(all, h.proxies[i])
		}
	}
	return all
}

// pollInterval is how often WaitReady looks.
const pollInterval = 500 * time.Millisecond

// WaitReady waits until every hollow Node is Ready, as seen by client,
// for at most timeout. It fails at once, with the end of its log, if a
// component exits.
func (h *Hollow) WaitReady(ctx context.Context, client kubernetes.Interface, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var notReady []string
	for {
		if err := h.checkRunning(); err != nil {
			return err
		}
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil {
			notReady = h.notReady(nodes.Items)
			if len(notReady) == 0 {
				return nil
			}
		} else {
			notReady = []string{fmt.Sprintf("(listing nodes: %v)", err)}
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			fmt.Fprintf(&b, "kubemark: hollow nodes not Ready after %s: %s", timeout, strings.Join(notReady, "; "))
			for i, k := range h.kubelets {
				fmt.Fprintf(&b, "\n--- %s, last lines of %s:\n%s", h.cfg.Nodes[i].Name, k.logPath, logTail(k.logPath, 10))
			}
			return errors.New(b.String())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubemark: waiting for hollow nodes to be Ready: %w", ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// checkRunning fails, with the end of its log, for a component that exited.
func (h *Hollow) checkRunning() error {
	for _, p := range h.all() {
		if p.exited() {
			return fmt.Errorf("kubemark: hollow %s exited (%v); see %s, last lines:\n%s", p.name, p.waitErr, p.logPath, logTail(p.logPath, 20))
		}
	}
	return nil
}

// notReady names each of our nodes missing from nodes or not Ready, with
// its Ready condition's reason.
func (h *Hollow) notReady(nodes []corev1.Node) []string {
	byName := map[string]*corev1.Node{}
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	var out []string
	for _, name := range h.Names() {
		n := byName[name]
		if n == nil {
			out = append(out, name+" not registered")
			continue
		}
		ready := false
		reason := "no Ready condition"
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = c.Status == corev1.ConditionTrue
				reason = fmt.Sprintf("Ready=%s (%s: %s)", c.Status, c.Reason, c.Message)
			}
		}
		if !ready {
			out = append(out, name+" "+reason)
		}
	}
	sort.Strings(out)
	return out
}

// Close stops every component (SIGTERM to its process group, SIGKILL after
// StopTimeout), waits until each is reaped, then removes the root
// directories and fake CRI sockets the kubelets left in /tmp. It is safe to
// call more than once.
func (h *Hollow) Close() error {
	if h.closed {
		return nil
	}
	h.closed = true
	all := h.all()
	errs := make([]error, len(all))
	done := make(chan int)
	for i, p := range all {
		go func() { errs[i] = p.stop(h.cfg.StopTimeout); done <- i }()
	}
	for range all {
		<-done
	}
	for _, k := range h.kubelets {
		if dir := rootDirFromLog(k.logPath); dir != "" {
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, fmt.Errorf("kubemark: remove the root directory of %s: %w", k.name, err))
			}
		}
	}
	errs = append(errs, removeStaleSockets(h.socketsBefore))
	h.spawner.close()
	return errors.Join(errs...)
}

// kubemark's hard-coded paths (pkg/kubemark/hollow_kubelet.go and
// k8s.io/cri-client/pkg/fake).
var (
	rootDirLine = regexp.MustCompile(`Using (/tmp/hollow-kubelet\.[0-9]+) as root dir for hollow-kubelet`)
	socketGlob  = "/tmp/kubelet_remote_*.sock"
)

// rootDirFromLog is the root directory a hollow kubelet logged at start,
// or "" if its log does not say. Only a path of kubemark's own pattern is
// returned, so that a log's contents cannot make Close remove another
// directory.
func rootDirFromLog(logPath string) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	// The line is among the first few; the log may be large.
	head := make([]byte, 64<<10)
	n, _ := f.Read(head)
	if m := rootDirLine.FindSubmatch(head[:n]); m != nil {
		return string(m[1])
	}
	return ""
}

// fakeSockets lists the fake CRI sockets in /tmp.
func fakeSockets() map[string]bool {
	paths, _ := filepath.Glob(socketGlob)
	set := map[string]bool{}
	for _, p := range paths {
		set[p] = true
	}
	return set
}

// removeStaleSockets removes the fake CRI sockets that appeared since
// before and that no one listens on any more: ours, now that our kubelets
// are gone, and not another run's live ones. kubemark names the socket at
// random and never logs it, hence the comparison.
func removeStaleSockets(before map[string]bool) error {
	var errs []error
	for p := range fakeSockets() {
		if before[p] {
			continue
		}
		conn, err := net.DialTimeout("unix", p, time.Second)
		if err == nil {
			conn.Close()
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("kubemark: remove stale socket: %w", err))
		}
	}
	return errors.Join(errs...)
}

// KubeconfigWriter mints a kubeconfig for an identity;
// *controlplane.ControlPlane is one.
type KubeconfigWriter interface {
	WriteKubeconfig(path, commonName string, orgs ...string) error
}

// NodesWithCredentials returns nodes named names, each with a kubelet
// kubeconfig (system:node:<name>) and, if withProxy, a kube-proxy one
// (system:kube-proxy), written by w into dir.
func NodesWithCredentials(w KubeconfigWriter, dir string, names []string, withProxy bool, labels map[string]string) ([]Node, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("kubemark: create %s: %w", dir, err)
	}
	var proxy string
	if withProxy {
		proxy = filepath.Join(dir, "kube-proxy.kubeconfig")
		if err := w.WriteKubeconfig(proxy, "system:kube-proxy"); err != nil {
			return nil, err
		}
	}
	nodes := make([]Node, len(names))
	for i, name := range names {
		path := filepath.Join(dir, name+".kubeconfig")
		if err := w.WriteKubeconfig(path, "system:node:"+name, "system:nodes"); err != nil {
			return nil, err
		}
		nodes[i] = Node{Name: name, Kubeconfig: path, ProxyKubeconfig: proxy, Labels: maps.Clone(labels)}
	}
	return nodes, nil
}
