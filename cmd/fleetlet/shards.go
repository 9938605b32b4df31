package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/viper"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/fleet"
	"github.com/fleetlet/fleetlet/loadprofiles"
	"github.com/fleetlet/fleetlet/reports"
)

// shardSet is a fleet that lives in other processes: the shards that
// `fleetlet run --shards` or `--shards-from` drives a load on. It finds
// them, waits for their nodes, measures their clocks against the driver's
// and, at the end, reads what they measured.
type shardSet struct {
	// addrs are the shards' endpoints as given; or, from a StatefulSet,
	// found by find.
	addrs []string
	find  func(ctx context.Context) ([]string, error)
	// expected is how many shards there must be (the StatefulSet's
	// replicas, or len(addrs)).
	expected int
	http     *http.Client

	shards []*remoteShard
}

// remoteShard is one shard as the driver sees it.
type remoteShard struct {
	addr  string
	info  shardInfo
	start reports.ClockMeasurement
	// restarted is set once the shard answered as another process;
	// adopted counts the pods whose stamps from that process were left
	// out (dropAdopted).
	restarted bool
	adopted   int
}

// dropAdopted leaves out of stamps, from a shard whose process was
// replaced, the pods the driver had seen Running before that process
// began: its agents took them over already running and would stamp their
// start a second time, after the driver saw them run. The pods keep the
// driver's milestones and those of the process before, which are lost
// with it. It returns how many it left out.
func dropAdopted(stamps *reports.StampSet, c *reports.Collector, sc reports.ShardClock) int {
	began := stamps.Base.Add(-sc.RemoteOffsetAt(stamps.Base))
	before := len(stamps.Pods)
	stamps.Pods = slices.DeleteFunc(stamps.Pods, func(p reports.PodStamps) bool {
		running, ok := c.Stamp(p.UID, reports.RunningObserved)
		return ok && running.Before(began)
	})
	return before - len(stamps.Pods)
}

// name is how the report names the shard.
func (r *remoteShard) name() string {
	return fmt.Sprintf("shard-%d (%s)", r.info.Ordinal, r.addr)
}

// newShardSet takes the --shards list of host:port endpoints.
func newShardSet(list string) (*shardSet, error) {
	var addrs []string
	for a := range strings.SplitSeq(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return nil, fmt.Errorf("--shards: %q is not host:port; give each shard endpoint, such as 10.0.0.5:%d", a, defaultShardPort)
		}
		if slices.Contains(addrs, a) {
			return nil, fmt.Errorf("--shards: %s is given twice; give each shard once", a)
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return nil, errors.New("--shards is empty; give the shards' endpoints, host:port,host:port")
	}
	return &shardSet{addrs: addrs, expected: len(addrs), http: &http.Client{Timeout: time.Minute}}, nil
}

// newStatefulSetShards finds the shards as the pods of a StatefulSet on
// the host cluster, "<namespace>/<name>".
func newStatefulSetShards(host kubernetes.Interface, ref string) (*shardSet, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("--shards-from %q is not <namespace>/<statefulset>; give the shards' StatefulSet, such as fleetlet/fleetlet-shard", ref)
	}
	s := &shardSet{http: &http.Client{Timeout: time.Minute}}
	s.find = func(ctx context.Context) ([]string, error) {
		sts, err := host.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("--shards-from %s: %w", ref, err)
		}
		sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
		if err != nil {
			return nil, fmt.Errorf("--shards-from %s: its selector: %w", ref, err)
		}
		pods, err := host.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return nil, fmt.Errorf("--shards-from %s: listing its pods: %w", ref, err)
		}
		s.expected = int(ptr.Deref(sts.Spec.Replicas, 1))
		return shardAddrs(sts, pods.Items), nil
	}
	return s, nil
}

// shardAddrs are the shard endpoints of a StatefulSet's running pods: the
// pod's IP and the container port named "shard"; with host networking,
// where shards on one node share an address, that port plus the ordinal,
// as the shards listen (shardIdentityFrom).
func shardAddrs(sts *appsv1.StatefulSet, pods []corev1.Pod) []string {
	var addrs []string
	for _, p := range pods {
		if p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		if !metav1.IsControlledBy(&p, sts) {
			continue
		}
		port := defaultShardPort
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == "shard" {
					port = int(cp.ContainerPort)
				}
			}
		}
		if p.Spec.HostNetwork {
			ordinal, err := podOrdinal(p)
			if err != nil {
				continue
			}
			port += ordinal
		}
		addrs = append(addrs, net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port)))
	}
	slices.Sort(addrs)
	return addrs
}

// podOrdinal is a StatefulSet pod's ordinal: its pod-index label, else its
// name's suffix.
func podOrdinal(p corev1.Pod) (int, error) {
	if s, ok := p.Labels[appsv1.PodIndexLabel]; ok {
		return strconv.Atoi(s)
	}
	return fleet.OrdinalFromName(p.Name)
}

// wait finds the shards and waits, within timeout (0: until ctx ends),
// until every one answers and says its nodes are Ready; it returns every
// shard's node names.
func (s *shardSet) wait(ctx context.Context, timeout time.Duration) ([]string, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var last error
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		addrs := s.addrs
		if s.find != nil {
			found, err := s.find(ctx)
			if err != nil {
				last = err
				return false, nil
			}
			addrs = found
		}
		if len(addrs) < s.expected {
			last = fmt.Errorf("%d of %d shards running", len(addrs), s.expected)
			return false, nil
		}
		shards := make([]*remoteShard, 0, len(addrs))
		ordinals := map[int]string{}
		for _, a := range addrs {
			var info shardInfo
			if err := s.get(ctx, a, shardInfoPath, &info); err != nil {
				last = err
				return false, nil
			}
			if !info.Ready {
				last = fmt.Errorf("shard %d (%s): %d nodes, not all Ready yet", info.Ordinal, a, len(info.Nodes))
				return false, nil
			}
			if other, dup := ordinals[info.Ordinal]; dup {
				return false, fmt.Errorf("shards %s and %s both say they are ordinal %d; give each its own --shard-ordinal", other, a, info.Ordinal)
			}
			ordinals[info.Ordinal] = a
			shards = append(shards, &remoteShard{addr: a, info: info})
		}
		s.shards = shards
		return true, nil
	})
	if err != nil {
		if last != nil && !errors.Is(err, context.Canceled) {
			err = fmt.Errorf("%w: %w", err, last)
		}
		return nil, fmt.Errorf("waiting for the shards: %w; see each shard's log (kubectl logs) and that this process can reach them", err)
	}
	var names []string
	for _, sh := range s.shards {
		names = append(names, sh.info.Nodes...)
	}
	return names, nil
}

// get reads path of the shard at addr as JSON into v.
func (s *shardSet) get(ctx context.Context, addr, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return fmt.Errorf("shard %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("shard %s: %s %s: %s", addr, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("shard %s: reading %s: %w", addr, path, err)
	}
	return nil
}

// clockSamples is how many exchanges measure a shard's clock; the one
// with the shortest round trip is kept, as NTP's clock filter keeps.
const clockSamples = 8

// measureClock measures the shard at addr's Collector clock against now
// (the driver's Collector clock).
func (s *shardSet) measureClock(ctx context.Context, addr string, now func() time.Time) (reports.ClockMeasurement, error) {
	samples := make([]reports.ClockSample, 0, clockSamples)
	for range clockSamples {
		var c shardClock
		sent := now()
		if err := s.get(ctx, addr, shardClockPath, &c); err != nil {
			return reports.ClockMeasurement{}, err
		}
		samples = append(samples, reports.ClockSample{Sent: sent, Remote: c.Now, Received: now()})
	}
	return reports.MeasureClock(samples)
}

// measureStart measures every shard's clock before the load.
func (s *shardSet) measureStart(ctx context.Context, now func() time.Time) error {
	for _, sh := range s.shards {
		m, err := s.measureClock(ctx, sh.addr, now)
		if err != nil {
			return err
		}
		sh.start = m
	}
	return nil
}

// collect reads what every shard measured once the load is over: its
// clock again, its pods' stamps, imported into c on c's clock, and its
// report. A shard that cannot be read is an error in the list, and the
// others are still read.
func (s *shardSet) collect(ctx context.Context, c *reports.Collector) ([]*reports.Report, []reports.ShardClock, []error) {
	var reps []*reports.Report
	var clocks []reports.ShardClock
	var errs []error
	for _, sh := range s.shards {
		end, err := s.measureClock(ctx, sh.addr, c.Now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		sc := reports.ShardClock{Shard: sh.name(), Nodes: len(sh.info.Nodes), Start: sh.start, End: end}
		var stamps reports.StampSet
		if err := s.get(ctx, sh.addr, shardStampsPath, &stamps); err != nil {
			errs = append(errs, err)
			continue
		}
		if sh.restarted {
			sh.adopted = dropAdopted(&stamps, c, sc)
		}
		if err := c.Import(stamps, sc.RemoteOffsetAt); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", sh.name(), err))
		}
		sc.Pods = len(stamps.Pods)
		var rep reports.Report
		if err := s.get(ctx, sh.addr, shardReportPath, &rep); err != nil {
			errs = append(errs, err)
			continue
		}
		clocks = append(clocks, sc)
		reps = append(reps, &rep)
	}
	return reps, clocks, errs
}

// mergeShardReports makes the run's one report of a sharded fleet: the
// driver's (every pod's phases, from its stamps and the shards' imported
// ones; what the driver measured of the control plane and of the nodes'
// readiness) merged exactly with the shards' (their agents' requests,
// watches, heartbeats, network programming and costs). What only the
// driver measures is kept from its report; the merge would drop it.
func mergeShardReports(driver *reports.Report, shards []*reports.Report, clocks []reports.ShardClock, errs []error) *reports.Report {
	for _, err := range errs {
		driver.Errors = append(driver.Errors, "shards: "+err.Error())
	}
	// The fleet's cost is the shards'; the driver hosts no node.
	driver.Fleet = reports.FleetStats{}
	for _, r := range shards {
		r.Profile, r.SLOThresholds = driver.Profile, driver.SLOThresholds
	}
	merged, err := reports.Merge(append([]*reports.Report{driver}, shards...)...)
	if err != nil {
		driver.Errors = append(driver.Errors, "merging the shards' reports: "+err.Error())
		driver.Shards = clocks
		return driver
	}
	merged.Workloads, merged.Outages, merged.Faults = driver.Workloads, driver.Outages, driver.Faults
	merged.NetworkProgrammingNodes = mergeNetworkProgrammingNodes(shards)
	merged.Shards = clocks
	merged.Nodes = driver.Nodes
	return merged
}

// mergeNetworkProgrammingNodes adds up the shards' per-node network
// programming: the node count and the worst node exactly; the median of
// the nodes' p99s is the shards' median at the middle node, close to
// but not exactly the median over every node (a shard reports only its
// own median).
func mergeNetworkProgrammingNodes(shards []*reports.Report) *reports.NetworkProgrammingNodes {
	var out reports.NetworkProgrammingNodes
	var parts []reports.NetworkProgrammingNodes
	for _, r := range shards {
		n := r.NetworkProgrammingNodes
		if n == nil || n.Nodes == 0 {
			continue
		}
		parts = append(parts, *n)
		out.Nodes += n.Nodes
		if n.P99MaxMs > out.P99MaxMs || out.WorstNode == "" {
			out.P99MaxMs, out.WorstNode = n.P99MaxMs, n.WorstNode
		}
	}
	if out.Nodes == 0 {
		return nil
	}
	slices.SortFunc(parts, func(a, b reports.NetworkProgrammingNodes) int {
		switch {
		case a.P99MedianMs < b.P99MedianMs:
			return -1
		case a.P99MedianMs > b.P99MedianMs:
			return 1
		}
		return 0
	})
	seen := 0
	for _, p := range parts {
		seen += p.Nodes
		if 2*seen >= out.Nodes {
			out.P99MedianMs = p.P99MedianMs
			break
		}
	}
	return &out
}

// shardsFrom is the run's --shards or --shards-from, nil when the fleet is
// this process's.
func shardsFrom(v *viper.Viper, profile *loadprofiles.Profile) (*shardSet, error) {
	list, sts := v.GetString("shards"), v.GetString("shards-from")
	if list == "" && sts == "" {
		if v.GetString("shards-kubeconfig") != "" {
			return nil, errors.New("--shards-kubeconfig needs --shards-from; give the shards' StatefulSet")
		}
		return nil, nil
	}
	if list != "" && sts != "" {
		return nil, errors.New("--shards and --shards-from both name the shards; give one")
	}
	if kubeconfigPath(v) == "" {
		return nil, errors.New("--shards and --shards-from drive a load on the shards' target cluster: give its kubeconfig with --kubeconfig")
	}
	if hasFaults(profile) {
		return nil, fmt.Errorf("profile %s has fault phases, which act on the nodes of this process's fleet; with --shards the nodes are the shards' (delete a shard's pod to fail a shard), so run the profile without its fault phases", profile.Name)
	}
	if list != "" {
		return newShardSet(list)
	}
	hostPath := cmp.Or(v.GetString("shards-kubeconfig"), kubeconfigPath(v))
	cfg, err := loadKubeconfig(hostPath)
	if err != nil {
		return nil, fmt.Errorf("--shards-kubeconfig: %w", err)
	}
	host, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return newStatefulSetShards(host, sts)
}

// shardDownKind is the Fault kind of a shard that stopped answering or came
// back as another process: its pod deleted, killed or evicted.
const shardDownKind = "shardDown"

// shardMonitorPeriod is how often the driver asks each shard how it is,
// during the load.
const shardMonitorPeriod = 2 * time.Second

// shardMonitor watches the shards during the load: a shard that stops
// answering, or answers as another process (a new lease holder: its pod
// was replaced between two looks), is a fault like those a profile
// throws, and the report says what it cost, from the Nodes' and pods'
// watch, as for any other fault.
type shardMonitor struct {
	set   *shardSet
	watch *faultWatch
	// open are the shards down now, by ordinal.
	mu     sync.Mutex
	open   map[int]*injectedFault
	faults []*injectedFault
	// replaced are the faults that ended with another process: the shard.
	replaced map[*injectedFault]*remoteShard
	cancel   context.CancelFunc
	done     chan struct{}
}

// monitor starts watching the shards and their nodes until stop.
func (s *shardSet) monitor(ctx context.Context, client kubernetes.Interface, names []string) *shardMonitor {
	ctx, cancel := context.WithCancel(ctx)
	m := &shardMonitor{set: s, watch: startFaultWatch(ctx, client, names), open: map[int]*injectedFault{}, replaced: map[*injectedFault]*remoteShard{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		ticker := time.NewTicker(shardMonitorPeriod)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			for _, sh := range s.shards {
				m.look(ctx, sh)
			}
		}
	}()
	return m
}

// look asks sh how it is and opens or closes its fault.
func (m *shardMonitor) look(ctx context.Context, sh *remoteShard) {
	ctx, cancel := context.WithTimeout(ctx, shardMonitorPeriod*2)
	defer cancel()
	var info shardInfo
	err := m.set.get(ctx, sh.addr, shardInfoPath, &info)
	now := time.Now()
	if ctx.Err() != nil && err != nil && errors.Is(ctx.Err(), context.Canceled) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	open := m.open[sh.info.Ordinal]
	switch {
	case err != nil && open == nil:
		m.openFault(sh, now)
	case err == nil && info.Holder != sh.info.Holder:
		if open == nil {
			// Replaced between two looks: down since the last one at most.
			open = m.openFault(sh, now.Add(-shardMonitorPeriod))
		}
		open.end = now
		m.replaced[open] = sh
		delete(m.open, sh.info.Ordinal)
		sh.info.Holder = info.Holder
		sh.restarted = true
	case err == nil && open != nil:
		// The same process answers again: it was unreachable, not gone.
		open.end = now
		delete(m.open, sh.info.Ordinal)
	}
}

func (m *shardMonitor) openFault(sh *remoteShard, at time.Time) *injectedFault {
	f := &injectedFault{
		fault: loadprofiles.Fault{
			Phase: fmt.Sprintf("shard-%d", sh.info.Ordinal), Spec: &loadprofiles.FaultPhase{Kind: shardDownKind},
			Selector: sh.name(), Nodes: sh.info.Nodes,
		},
		start:           at,
		restartsAtStart: m.watch.restarts(sh.info.Nodes),
	}
	m.open[sh.info.Ordinal] = f
	m.faults = append(m.faults, f)
	return f
}

// stop ends the watching.
func (m *shardMonitor) stop() {
	m.cancel()
	<-m.done
}

// reports are what the shards' failures cost, as seen until now.
func (m *shardMonitor) reports(now time.Time) []reports.Fault {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []reports.Fault
	for _, f := range m.faults {
		r := m.watch.cost(f, now)
		switch sh := m.replaced[f]; {
		case sh != nil:
			r.Notes = append(r.Notes, fmt.Sprintf("the shard's process was replaced (its pod deleted or killed): its agents stopped with it and the milestones they had stamped are lost with it; its successor under the same ordinal adopted the same nodes, and the end is when it first answered; %d pods it took over already Running keep only the driver's milestones, since its agents would stamp their start a second time", sh.adopted))
		case f.end.IsZero():
			r.Notes = append(r.Notes, "the shard did not answer again before the report was made")
		default:
			r.Notes = append(r.Notes, "the shard did not answer the driver for a while, but the same process answered again: its nodes may have run on")
		}
		out = append(out, r)
	}
	return out
}
