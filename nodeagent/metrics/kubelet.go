// Package metrics is the kubelet's Prometheus metrics for one node agent,
// as pkg/kubelet/metrics defines them (names, types, help with the
// stability prefix, labels and buckets), and their exposition.
//
// A fleet runs thousands of agents and most are never scraped, so nothing
// here registers with a prometheus.Registry or holds a series per pod:
// counters and histograms are atomics in a struct per node, histograms
// allocate their buckets at their first observation, and a scrape builds
// its families from that state and from what the agent knows (its pods,
// its runtime) at that moment. The pods a node is starting are tracked
// only until their start is recorded. Families are written in the text
// format directly, identical to what client_golang's expfmt writes, since
// its types cost an allocation per label and per bucket; the protobuf
// format, when asked for, goes through them.
package metrics

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The families of the kubelet's /metrics that an agent records.
var (
	nodeNameDesc = NewDesc("kubelet_node_name", "[ALPHA] The node's name. The count is always 1.",
		dto.MetricType_GAUGE, nil, "node")
	runningPodsDesc = NewDesc("kubelet_running_pods", "[ALPHA] Number of pods that have a running pod sandbox",
		dto.MetricType_GAUGE, nil)
	runningContainersDesc = NewDesc("kubelet_running_containers", "[ALPHA] Number of containers currently running",
		dto.MetricType_GAUGE, nil, "container_state")
	podStartDesc = NewDesc("kubelet_pod_start_duration_seconds",
		"[ALPHA] Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
		dto.MetricType_HISTOGRAM, PodStartupBuckets)
	podStartSLIDesc = NewDesc("kubelet_pod_start_sli_duration_seconds",
		"[ALPHA] Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
		dto.MetricType_HISTOGRAM, PodStartupBuckets)
	podStartTotalDesc = NewDesc("kubelet_pod_start_total_duration_seconds",
		"[ALPHA] Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
		dto.MetricType_HISTOGRAM, PodStartupBuckets)
	firstNetworkPodStartSLIDesc = NewDesc("kubelet_first_network_pod_start_sli_duration_seconds",
		"[INTERNAL] Duration in seconds to start the first network pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch",
		dto.MetricType_GAUGE, nil)
	podWorkerDesc = NewDesc("kubelet_pod_worker_duration_seconds",
		"[ALPHA] Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
		dto.MetricType_HISTOGRAM, DefBuckets, "operation_type")
	podWorkerStartDesc = NewDesc("kubelet_pod_worker_start_duration_seconds",
		"[ALPHA] Duration in seconds from kubelet seeing a pod to starting a worker.",
		dto.MetricType_HISTOGRAM, DefBuckets)
	containersPerPodDesc = NewDesc("kubelet_containers_per_pod_count", "[ALPHA] The number of containers per pod.",
		dto.MetricType_HISTOGRAM, ContainersPerPodBuckets)
	plegRelistDesc = NewDesc("kubelet_pleg_relist_duration_seconds", "[ALPHA] Duration in seconds for relisting pods in PLEG.",
		dto.MetricType_HISTOGRAM, DefBuckets)
	plegIntervalDesc = NewDesc("kubelet_pleg_relist_interval_seconds", "[ALPHA] Interval in seconds between relisting in PLEG.",
		dto.MetricType_HISTOGRAM, DefBuckets)
	plegPodRelistDesc = NewDesc("kubelet_pleg_pod_relist_duration_seconds", "[ALPHA] Duration in seconds for relisting a single pod in PLEG.",
		dto.MetricType_HISTOGRAM, DefBuckets)
	plegLastSeenDesc = NewDesc("kubelet_pleg_last_seen_seconds", "[ALPHA] Timestamp in seconds when PLEG was last seen active.",
		dto.MetricType_GAUGE, nil)
	plegDiscardDesc = NewDesc("kubelet_pleg_discard_events", "[ALPHA] The number of discard events in PLEG.",
		dto.MetricType_COUNTER, nil)
	evictionsDesc = NewDesc("kubelet_evictions", "[ALPHA] Cumulative number of pod evictions by eviction signal",
		dto.MetricType_COUNTER, nil, "eviction_signal")
	startedPodsDesc = NewDesc("kubelet_started_pods_total", "[ALPHA] Cumulative number of pods started",
		dto.MetricType_COUNTER, nil)
	startedPodsErrorsDesc = NewDesc("kubelet_started_pods_errors_total", "[ALPHA] Cumulative number of errors when starting pods",
		dto.MetricType_COUNTER, nil)
	startedContainersDesc = NewDesc("kubelet_started_containers_total", "[ALPHA] Cumulative number of containers started",
		dto.MetricType_COUNTER, nil, "container_type")
	startedContainersErrorsDesc = NewDesc("kubelet_started_containers_errors_total", "[ALPHA] Cumulative number of errors when starting containers",
		dto.MetricType_COUNTER, nil, "container_type", "code")
)

// PodWorkerOp is a pod worker's operation_type: the kubelet's SyncPodType,
// or "terminated" for the clean-up of a terminated pod.
type PodWorkerOp uint8

// The operation types, in the kubelet's words.
const (
	OpSync PodWorkerOp = iota
	OpUpdate
	OpCreate
	OpKill
	OpTerminated
	numOps
)

var opNames = [numOps]string{"sync", "update", "create", "kill", "terminated"}

func (o PodWorkerOp) String() string { return opNames[o] }

// ContainerType is the container_type label: the kubelet's metrics.Container,
// InitContainer and EphemeralContainer.
type ContainerType int

// The container types.
const (
	Container ContainerType = iota
	InitContainer
	EphemeralContainer
	numContainerTypes
)

var containerTypeNames = [numContainerTypes]string{"container", "init_container", "ephemeral_container"}

// ContainerState is a container's state as the kubelet's
// kubelet_running_containers labels it (kubecontainer.State).
type ContainerState int

// The states, in the kubelet's words.
const (
	StateCreated ContainerState = iota
	StateRunning
	StateExited
	StateUnknown
	NumContainerStates
)

// CRIState is the kubelet's state of a CRI container state.
func CRIState(s runtimeapi.ContainerState) ContainerState {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return StateCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return StateRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return StateExited
	}
	return StateUnknown
}

var stateNames = [NumContainerStates]string{"created", "running", "exited", "unknown"}

// Kubelet is one node's kubelet metrics. Its methods are safe for
// concurrent use, allocate nothing on the recording paths (but a
// histogram's first observation and the rare labelled counters), and do
// nothing on a nil *Kubelet, so that parts built without metrics (tests)
// need no checks.
type Kubelet struct {
	nodeName string
	started  time.Time

	podStart, podStartSLI, podStartTotal Histogram
	podWorkerStart, containersPerPod     Histogram
	podWorker                            [numOps]Histogram
	plegRelist, plegInterval, plegPod    Histogram

	plegLastSeen      atomic.Int64 // unix seconds; 0 until the first relist
	plegDiscard       atomic.Uint64
	startedPods       atomic.Uint64
	startedPodsErrors atomic.Uint64
	startedContainers [numContainerTypes]atomic.Uint64
	firstNetworkSLI   atomic.Uint64 // float64 bits of the gauge
	// containers counts the containers by state at the last relist;
	// statesSeen has bit s set once a relist saw a container in state s,
	// as the kubelet's gauge keeps a label it once set.
	containers [NumContainerStates]atomic.Int64
	statesSeen atomic.Uint32

	mu sync.Mutex
	// rare are the counters whose labels are only known when they count:
	// evictions and container start errors. Nil until the first.
	rare []rareCounter
	// starting tracks the pods between first sight and their recorded
	// start; nil when there are none.
	starting map[podKey]*podStartup
	// firstNetworkPodSeen: the first network pod's SLI was recorded.
	firstNetworkPodSeen bool
}

type rareCounter struct {
	desc   *Desc
	labels [2]string
	n      uint64
}

// NewKubelet returns the metrics of node nodeName, whose kubelet started
// at started (process_start_time_seconds).
func NewKubelet(nodeName string, started time.Time) *Kubelet {
	return &Kubelet{
		nodeName:         nodeName,
		started:          started,
		podStart:         Histogram{buckets: PodStartupBuckets},
		podStartSLI:      Histogram{buckets: PodStartupBuckets},
		podStartTotal:    Histogram{buckets: PodStartupBuckets},
		podWorkerStart:   Histogram{buckets: DefBuckets},
		containersPerPod: Histogram{buckets: ContainersPerPodBuckets},
		podWorker: [numOps]Histogram{
			{buckets: DefBuckets}, {buckets: DefBuckets}, {buckets: DefBuckets}, {buckets: DefBuckets}, {buckets: DefBuckets},
		},
		plegRelist:   Histogram{buckets: DefBuckets},
		plegInterval: Histogram{buckets: DefBuckets},
		plegPod:      Histogram{buckets: DefBuckets},
	}
}

// ObservePodWorker records one pod worker iteration of the given type.
func (k *Kubelet) ObservePodWorker(op PodWorkerOp, d time.Duration) {
	if k == nil || op >= numOps {
		return
	}
	k.podWorker[op].ObserveDuration(d)
}

// ObservePLEGRelist records a relist of every pod that took d.
func (k *Kubelet) ObservePLEGRelist(d time.Duration) {
	if k != nil {
		k.plegRelist.ObserveDuration(d)
	}
}

// ObservePLEGRelistInterval records the time since the previous successful
// relist, measured as a relist starts.
func (k *Kubelet) ObservePLEGRelistInterval(d time.Duration) {
	if k != nil {
		k.plegInterval.ObserveDuration(d)
	}
}

// ObservePLEGPodRelist records an on-demand relist of one pod.
func (k *Kubelet) ObservePLEGPodRelist(d time.Duration) {
	if k != nil {
		k.plegPod.ObserveDuration(d)
	}
}

// SetPLEGLastSeen records the start of the latest successful relist.
func (k *Kubelet) SetPLEGLastSeen(t time.Time) {
	if k != nil {
		k.plegLastSeen.Store(t.Unix())
	}
}

// SetContainerStates records the containers a full relist found, by
// state: kubelet_running_containers, as the kubelet's PLEG sets it.
func (k *Kubelet) SetContainerStates(counts [NumContainerStates]int) {
	if k == nil {
		return
	}
	var seen uint32
	for s, n := range counts {
		k.containers[s].Store(int64(n))
		if n > 0 {
			seen |= 1 << s
		}
	}
	k.statesSeen.Or(seen)
}

// IncPLEGDiscardEvents counts an event the PLEG dropped, its channel full.
func (k *Kubelet) IncPLEGDiscardEvents() {
	if k != nil {
		k.plegDiscard.Add(1)
	}
}

// IncStartedPods counts a sandbox creation attempt.
func (k *Kubelet) IncStartedPods() {
	if k != nil {
		k.startedPods.Add(1)
	}
}

// IncStartedPodsErrors counts a sandbox creation that failed.
func (k *Kubelet) IncStartedPodsErrors() {
	if k != nil {
		k.startedPodsErrors.Add(1)
	}
}

// IncStartedContainers counts a container start attempt, past its crash
// back-off, as the kubelet counts it before it ensures the image.
func (k *Kubelet) IncStartedContainers(t ContainerType) {
	if k != nil && t >= 0 && t < numContainerTypes {
		k.startedContainers[t].Add(1)
	}
}

// IncStartedContainersErrors counts a failed container start, with the
// kubelet's error code (ErrImagePull, CreateContainerError...).
func (k *Kubelet) IncStartedContainersErrors(t ContainerType, code string) {
	if k != nil && t >= 0 && t < numContainerTypes {
		k.incRare(startedContainersErrorsDesc, containerTypeNames[t], code)
	}
}

// IncEvictions counts a pod evicted for the given signal.
func (k *Kubelet) IncEvictions(signal string) {
	if k != nil {
		k.incRare(evictionsDesc, signal, "")
	}
}

func (k *Kubelet) incRare(d *Desc, l0, l1 string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range k.rare {
		if r := &k.rare[i]; r.desc == d && r.labels == [2]string{l0, l1} {
			r.n++
			return
		}
	}
	k.rare = append(k.rare, rareCounter{desc: d, labels: [2]string{l0, l1}, n: 1})
}

// processStartDesc is component-base's process_start_time_seconds, which
// the kubelet serves on /metrics/probes.
var processStartDesc = NewDesc("process_start_time_seconds", "[ALPHA] Start time of the process since unix epoch in seconds.",
	dto.MetricType_GAUGE, nil)

// ProcessStartTime is the family of process_start_time_seconds: when the
// node's kubelet (the agent) started.
func (k *Kubelet) ProcessStartTime() *Family {
	f := processStartDesc.Family(1)
	f.Add(float64(k.started.UnixNano()) / float64(time.Second))
	return f
}

// Runtime is what a scrape reads of the runtime: the pods with a ready
// sandbox, which the kubelet's PLEG counts at each relist of sandboxes and
// containers where the agent's lists containers only.
type Runtime struct {
	RunningPods int
	// Failed says the runtime could not be listed: kubelet_running_pods is
	// then left out.
	Failed bool
}

// Gather builds the families of the kubelet's /metrics from the node's
// state and rt, read at this scrape.
func (k *Kubelet) Gather(rt Runtime) Families {
	nodeName := nodeNameDesc.Family(1)
	nodeName.Add(1, k.nodeName)
	runningPods := runningPodsDesc.Family(1)
	if !rt.Failed {
		runningPods.Add(float64(rt.RunningPods))
	}
	running := runningContainersDesc.Family(int(NumContainerStates))
	seen := k.statesSeen.Load()
	for s := range NumContainerStates {
		if seen&(1<<s) != 0 {
			running.Add(float64(k.containers[s].Load()), stateNames[s])
		}
	}

	podStart := podStartDesc.Family(1)
	podStart.AddHistogram(&k.podStart)
	// Labelled (with no labels) in the kubelet, so absent until observed.
	podStartSLI := podStartSLIDesc.Family(1)
	if k.podStartSLI.Observed() {
		podStartSLI.AddHistogram(&k.podStartSLI)
	}
	podStartTotal := podStartTotalDesc.Family(1)
	if k.podStartTotal.Observed() {
		podStartTotal.AddHistogram(&k.podStartTotal)
	}
	firstNetwork := firstNetworkPodStartSLIDesc.Family(1)
	firstNetwork.Add(math.Float64frombits(k.firstNetworkSLI.Load()))
	workerStart := podWorkerStartDesc.Family(1)
	workerStart.AddHistogram(&k.podWorkerStart)
	perPod := containersPerPodDesc.Family(1)
	perPod.AddHistogram(&k.containersPerPod)
	worker := podWorkerDesc.Family(int(numOps))
	for op := range numOps {
		if k.podWorker[op].Observed() {
			worker.AddHistogram(&k.podWorker[op], opNames[op])
		}
	}

	relist := plegRelistDesc.Family(1)
	relist.AddHistogram(&k.plegRelist)
	interval := plegIntervalDesc.Family(1)
	interval.AddHistogram(&k.plegInterval)
	podRelist := plegPodRelistDesc.Family(1)
	podRelist.AddHistogram(&k.plegPod)
	lastSeen := plegLastSeenDesc.Family(1)
	lastSeen.Add(float64(k.plegLastSeen.Load()))
	discard := plegDiscardDesc.Family(1)
	discard.Add(float64(k.plegDiscard.Load()))

	startedPods := startedPodsDesc.Family(1)
	startedPods.Add(float64(k.startedPods.Load()))
	startedPodsErrors := startedPodsErrorsDesc.Family(1)
	startedPodsErrors.Add(float64(k.startedPodsErrors.Load()))
	startedContainers := startedContainersDesc.Family(int(numContainerTypes))
	for t := range numContainerTypes {
		if n := k.startedContainers[t].Load(); n > 0 {
			startedContainers.Add(float64(n), containerTypeNames[t])
		}
	}

	evictions := evictionsDesc.Family(1)
	containerErrors := startedContainersErrorsDesc.Family(1)
	k.mu.Lock()
	for _, r := range k.rare {
		switch r.desc {
		case evictionsDesc:
			evictions.Add(float64(r.n), r.labels[0])
		case startedContainersErrorsDesc:
			containerErrors.Add(float64(r.n), r.labels[0], r.labels[1])
		}
	}
	k.mu.Unlock()

	return Gather(nodeName, runningPods, running, podStart, podStartSLI, podStartTotal, firstNetwork,
		workerStart, perPod, worker, relist, interval, podRelist, lastSeen, discard,
		startedPods, startedPodsErrors, startedContainers, evictions, containerErrors)
}
