package metrics

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

// encode writes families as a text scrape and parses it back, as a
// scraper would.
func encode(t *testing.T, families Families) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	if err := Write(rec, expfmt.NewFormat(expfmt.TypeTextPlain), families); err != nil {
		t.Fatal(err)
	}
	Release(families)
	p := expfmt.NewTextParser(model.LegacyValidation)
	parsed, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	return parsed
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// find returns the metric of the family with exactly these labels.
func find(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	mf, ok := fams[name]
	if !ok {
		t.Fatalf("family %s missing", name)
	}
	for _, m := range mf.GetMetric() {
		got := labels(m)
		if len(got) != len(want) {
			continue
		}
		match := true
		for k, v := range want {
			if got[k] != v {
				match = false
			}
		}
		if match {
			return m
		}
	}
	t.Fatalf("%s has no series %v; has %v", name, want, mf.GetMetric())
	return nil
}

func TestHistogramBucketsAsTheKubeletDeclaresThem(t *testing.T) {
	k := NewKubelet("n1", t0)
	for _, v := range []float64{0.4, 0.5, 7, 5000} {
		k.podStart.Observe(v)
	}
	fams := encode(t, k.Gather(Runtime{}))
	h := find(t, fams, "kubelet_pod_start_duration_seconds", nil).GetHistogram()
	if h.GetSampleCount() != 4 || h.GetSampleSum() != 5007.9 {
		t.Errorf("count %d sum %v, want 4 and 5007.9", h.GetSampleCount(), h.GetSampleSum())
	}
	wantBounds := []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}
	wantCounts := map[float64]uint64{0.5: 2, 1: 2, 6: 2, 8: 3, 3600: 3}
	var bounds []float64
	for _, b := range h.GetBucket() {
		if math.IsInf(b.GetUpperBound(), 1) {
			if b.GetCumulativeCount() != 4 {
				t.Errorf("+Inf bucket %d, want 4", b.GetCumulativeCount())
			}
			continue
		}
		bounds = append(bounds, b.GetUpperBound())
		if want, ok := wantCounts[b.GetUpperBound()]; ok && b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	if len(bounds) != len(wantBounds) {
		t.Fatalf("bounds %v, want the kubelet's podStartupDurationBuckets %v", bounds, wantBounds)
	}
	for i := range bounds {
		if bounds[i] != wantBounds[i] {
			t.Fatalf("bounds %v, want %v", bounds, wantBounds)
		}
	}
	relist := find(t, fams, "kubelet_pleg_relist_duration_seconds", nil).GetHistogram()
	if n := len(relist.GetBucket()); n != 12 { // DefBuckets' 11 and +Inf
		t.Errorf("kubelet_pleg_relist_duration_seconds has %d buckets, want DefBuckets' 11 and +Inf", n)
	}
}

func TestFreshNodeServesWhatTheKubeletRegisters(t *testing.T) {
	k := NewKubelet("n1", t0)
	if fams := encode(t, k.Gather(Runtime{})); fams["kubelet_running_containers"] != nil {
		t.Error("kubelet_running_containers served before any relist")
	}
	k.SetContainerStates([NumContainerStates]int{StateRunning: 2, StateExited: 1})
	fams := encode(t, k.Gather(Runtime{RunningPods: 2}))

	if v := find(t, fams, "kubelet_node_name", map[string]string{"node": "n1"}).GetGauge().GetValue(); v != 1 {
		t.Errorf("kubelet_node_name %v, want 1", v)
	}
	if v := find(t, fams, "kubelet_running_pods", nil).GetGauge().GetValue(); v != 2 {
		t.Errorf("kubelet_running_pods %v, want 2", v)
	}
	if v := find(t, fams, "kubelet_running_containers", map[string]string{"container_state": "running"}).GetGauge().GetValue(); v != 2 {
		t.Errorf("running containers %v, want 2", v)
	}
	if n := len(fams["kubelet_running_containers"].GetMetric()); n != 2 {
		t.Errorf("kubelet_running_containers has %d states, want the 2 seen", n)
	}
	if got := fams["kubelet_pleg_relist_duration_seconds"].GetHelp(); got != "[ALPHA] Duration in seconds for relisting pods in PLEG." {
		t.Errorf("help %q", got)
	}
	// Unlabelled series exist from the start; labelled ones once used.
	for _, name := range []string{"kubelet_pod_start_duration_seconds", "kubelet_pleg_relist_interval_seconds", "kubelet_started_pods_total", "kubelet_pleg_last_seen_seconds"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("%s missing on a fresh node", name)
		}
	}
	for _, name := range []string{"kubelet_pod_start_sli_duration_seconds", "kubelet_pod_worker_duration_seconds", "kubelet_evictions", "kubelet_started_containers_total"} {
		if _, ok := fams[name]; ok {
			t.Errorf("%s served before anything was counted in it", name)
		}
	}

	// A state once seen stays, at 0, as the kubelet's gauge keeps its label.
	k.SetContainerStates([NumContainerStates]int{StateRunning: 2})
	fams = encode(t, k.Gather(Runtime{}))
	if v := find(t, fams, "kubelet_running_containers", map[string]string{"container_state": "exited"}).GetGauge().GetValue(); v != 0 {
		t.Errorf("exited containers %v after they were removed, want 0", v)
	}
	if fams := encode(t, k.Gather(Runtime{Failed: true})); fams["kubelet_running_pods"] != nil {
		t.Error("kubelet_running_pods served although the runtime could not be listed")
	}
}

func TestCountersAndLabelledSeries(t *testing.T) {
	k := NewKubelet("n1", t0)
	k.IncStartedPods()
	k.IncStartedPods()
	k.IncStartedPodsErrors()
	k.IncStartedContainers(Container)
	k.IncStartedContainers(InitContainer)
	k.IncStartedContainers(Container)
	k.IncStartedContainersErrors(Container, "ErrImagePull")
	k.IncEvictions("memory.available")
	k.IncEvictions("memory.available")
	k.ObservePodWorker(OpCreate, 30*time.Millisecond)
	k.ObservePodWorker(OpSync, time.Millisecond)
	k.ObservePodWorker(OpSync, 2*time.Millisecond)
	k.ObservePLEGRelist(3 * time.Millisecond)
	k.ObservePLEGRelistInterval(time.Second)
	k.SetPLEGLastSeen(t0)
	k.IncPLEGDiscardEvents()
	fams := encode(t, k.Gather(Runtime{}))

	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"kubelet_started_pods_total", nil, 2},
		{"kubelet_started_pods_errors_total", nil, 1},
		{"kubelet_started_containers_total", map[string]string{"container_type": "container"}, 2},
		{"kubelet_started_containers_total", map[string]string{"container_type": "init_container"}, 1},
		{"kubelet_started_containers_errors_total", map[string]string{"container_type": "container", "code": "ErrImagePull"}, 1},
		{"kubelet_evictions", map[string]string{"eviction_signal": "memory.available"}, 2},
		{"kubelet_pleg_discard_events", nil, 1},
	} {
		if got := find(t, fams, c.name, c.labels).GetCounter().GetValue(); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if v := find(t, fams, "kubelet_pleg_last_seen_seconds", nil).GetGauge().GetValue(); v != float64(t0.Unix()) {
		t.Errorf("kubelet_pleg_last_seen_seconds %v, want %d", v, t0.Unix())
	}
	if n := find(t, fams, "kubelet_pod_worker_duration_seconds", map[string]string{"operation_type": "sync"}).GetHistogram().GetSampleCount(); n != 2 {
		t.Errorf("sync worker durations %d, want 2", n)
	}
	if n := len(fams["kubelet_pod_worker_duration_seconds"].GetMetric()); n != 2 {
		t.Errorf("pod worker durations for %d operation types, want create and sync", n)
	}
	if n := find(t, fams, "kubelet_pleg_relist_interval_seconds", nil).GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("relist intervals %d, want 1", n)
	}
}

func startingPod(uid string, created time.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "default", UID: types.UID(uid), CreationTimestamp: metav1.NewTime(created)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}, {Name: "side"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
}

func running(pod *corev1.Pod, at time.Time) *corev1.Pod {
	p := pod.DeepCopy()
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = &metav1.Time{Time: at}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at)}},
		})
	}
	return p
}

func TestPodStartDurationAsThe137Kubelet(t *testing.T) {
	k := NewKubelet("n1", t0)
	pod := startingPod("a", t0)
	k.PodAdded(pod, t0.Add(time.Second))
	// First sync: no status yet. The worker start latency, the container
	// count and, as 1.37 does, a first pod start duration.
	k.PodSynced(pod, false, "", corev1.PodPending, t0.Add(1500*time.Millisecond))
	// A sync that leaves it Pending records nothing more.
	k.PodSynced(pod, true, corev1.PodPending, corev1.PodPending, t0.Add(2*time.Second))
	// Pending to Running: the start.
	k.PodSynced(pod, true, corev1.PodPending, corev1.PodRunning, t0.Add(5*time.Second))
	// Later syncs of the running pod record nothing.
	k.PodSynced(pod, true, corev1.PodRunning, corev1.PodRunning, t0.Add(9*time.Second))

	fams := encode(t, k.Gather(Runtime{}))
	start := find(t, fams, "kubelet_pod_start_duration_seconds", nil).GetHistogram()
	if start.GetSampleCount() != 2 || start.GetSampleSum() != 0.5+4 {
		t.Errorf("pod start durations: count %d sum %v, want 2 observations, 0.5 s and 4 s", start.GetSampleCount(), start.GetSampleSum())
	}
	if h := find(t, fams, "kubelet_pod_worker_start_duration_seconds", nil).GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 0.5 {
		t.Errorf("worker start: count %d sum %v, want 1 of 0.5 s", h.GetSampleCount(), h.GetSampleSum())
	}
	if h := find(t, fams, "kubelet_containers_per_pod_count", nil).GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 2 {
		t.Errorf("containers per pod: count %d sum %v, want one pod of 2", h.GetSampleCount(), h.GetSampleSum())
	}

	// A pod that fails before it runs records no start.
	failed := startingPod("b", t0)
	k.PodAdded(failed, t0)
	k.PodSynced(failed, false, "", corev1.PodFailed, t0.Add(time.Second))
	if n := find(t, encode(t, k.Gather(Runtime{})), "kubelet_pod_start_duration_seconds", nil).GetHistogram().GetSampleCount(); n != 2 {
		t.Errorf("a pod that failed at once changed the start durations: count %d", n)
	}
}

func TestPodStartSLIExcludesPullsAndInitContainers(t *testing.T) {
	k := NewKubelet("n1", t0)
	pod := startingPod("a", t0)
	pod.Spec.InitContainers = []corev1.Container{{Name: "init"}}
	k.PodAdded(pod, t0.Add(time.Second))
	// Two overlapping pulls from 2 s to 6 s (4 s of pulling), then a pull
	// that fails at 7 s and, retried, succeeds at 9 s: the session of the
	// failed attempt stays open until the success, as in the kubelet.
	k.ImagePullStarted(pod.UID, t0.Add(2*time.Second))
	k.ImagePullStarted(pod.UID, t0.Add(3*time.Second))
	k.ImagePullFinished(pod.UID, t0.Add(5*time.Second))
	k.ImagePullFinished(pod.UID, t0.Add(6*time.Second))
	k.ImagePullStarted(pod.UID, t0.Add(7*time.Second))
	k.ImagePullStarted(pod.UID, t0.Add(8*time.Second))
	k.ImagePullFinished(pod.UID, t0.Add(9*time.Second))
	up := running(pod, t0.Add(12*time.Second))
	up.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		StartedAt: metav1.NewTime(t0.Add(9 * time.Second)), FinishedAt: metav1.NewTime(t0.Add(11 * time.Second)),
	}}}}
	// Not every container reported started yet: nothing.
	half := up.DeepCopy()
	half.Status.ContainerStatuses[1].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	k.PodUpdated(half, t0.Add(12*time.Second))
	if k.podStartSLI.Observed() {
		t.Fatal("SLI recorded before every container was reported started")
	}
	k.PodUpdated(up, t0.Add(13*time.Second))
	k.PodUpdated(up, t0.Add(14*time.Second)) // recorded once
	fams := encode(t, k.Gather(Runtime{}))
	total := find(t, fams, "kubelet_pod_start_total_duration_seconds", nil).GetHistogram()
	if total.GetSampleCount() != 1 || total.GetSampleSum() != 13 {
		t.Errorf("total: count %d sum %v, want one of 13 s (creation to the watch)", total.GetSampleCount(), total.GetSampleSum())
	}
	sli := find(t, fams, "kubelet_pod_start_sli_duration_seconds", nil).GetHistogram()
	// 13 s - pulls (4 s, and 7 s to 9 s: 2 s) - the init container (2 s).
	if sli.GetSampleCount() != 1 || sli.GetSampleSum() != 5 {
		t.Errorf("SLI: count %d sum %v, want one of 5 s", sli.GetSampleCount(), sli.GetSampleSum())
	}
	if v := find(t, fams, "kubelet_first_network_pod_start_sli_duration_seconds", nil).GetGauge().GetValue(); v != 5 {
		t.Errorf("first network pod SLI %v, want 5", v)
	}

	// A stateful pod counts in the total only; one seen already started
	// (the agent restarted) in neither.
	stateful := startingPod("s", t0)
	stateful.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}}
	k.PodAdded(stateful, t0)
	k.PodUpdated(running(stateful, t0.Add(time.Second)), t0.Add(2*time.Second))
	old := running(startingPod("o", t0), t0)
	k.PodAdded(old, t0.Add(time.Hour))
	k.PodUpdated(old, t0.Add(time.Hour))
	fams = encode(t, k.Gather(Runtime{}))
	if n := find(t, fams, "kubelet_pod_start_total_duration_seconds", nil).GetHistogram().GetSampleCount(); n != 2 {
		t.Errorf("total durations %d, want 2", n)
	}
	if n := find(t, fams, "kubelet_pod_start_sli_duration_seconds", nil).GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("SLI durations %d, want 1: not the stateful pod's", n)
	}
}

// TestNodeHoldsNoPodStateOnceStarted: what the start histograms keep of a
// pod goes once its start is recorded, and with the last pod the map.
func TestNodeHoldsNoPodStateOnceStarted(t *testing.T) {
	k := NewKubelet("n1", t0)
	var pods []*corev1.Pod
	for i := range 30 {
		p := startingPod(string(rune('a'+i)), t0)
		pods = append(pods, p)
		k.PodAdded(p, t0)
		k.PodSynced(p, false, "", corev1.PodPending, t0)
	}
	if n := k.Starting(); n != 30 {
		t.Fatalf("%d pods tracked while starting, want 30", n)
	}
	for _, p := range pods {
		k.PodSynced(p, true, corev1.PodPending, corev1.PodRunning, t0.Add(time.Second))
		k.PodUpdated(running(p, t0.Add(time.Second)), t0.Add(2*time.Second))
	}
	if k.starting != nil {
		t.Errorf("%d pods still tracked once all ran, want none and no map", len(k.starting))
	}
	gone := startingPod("z", t0)
	k.PodAdded(gone, t0)
	k.PodDeleted(gone.UID)
	if k.starting != nil {
		t.Error("a deleted pod is still tracked")
	}
}

// TestRecordingDoesNotAllocate: the paths every sync, relist and probe
// takes cost no allocation, so that a node nobody scrapes pays only for
// the counters it has.
func TestRecordingDoesNotAllocate(t *testing.T) {
	k := NewKubelet("n1", t0)
	pod := running(startingPod("a", t0), t0)
	k.ObservePodWorker(OpSync, time.Millisecond) // allocates the buckets once
	k.ObservePLEGRelist(time.Millisecond)
	k.ObservePLEGRelistInterval(time.Second)
	k.ObservePLEGPodRelist(time.Millisecond)
	var c Counts
	allocs := testing.AllocsPerRun(100, func() {
		k.ObservePodWorker(OpSync, time.Millisecond)
		k.ObservePLEGRelist(time.Millisecond)
		k.ObservePLEGRelistInterval(time.Second)
		k.ObservePLEGPodRelist(time.Millisecond)
		k.SetPLEGLastSeen(t0)
		k.SetContainerStates([NumContainerStates]int{StateRunning: 30})
		k.IncStartedPods()
		k.IncStartedContainers(Container)
		// A running pod the tracker no longer knows: every later sync and
		// status echo.
		k.PodSynced(pod, true, corev1.PodRunning, corev1.PodRunning, t0)
		k.PodUpdated(pod, t0)
		k.ImagePullStarted(pod.UID, t0)
		c.Observe(0.001)
	})
	if allocs != 0 {
		t.Errorf("recording allocates %v times per round, want 0", allocs)
	}
	var nilKubelet *Kubelet
	nilKubelet.ObservePodWorker(OpSync, time.Millisecond)
	nilKubelet.PodAdded(pod, t0)
	nilKubelet.IncEvictions("memory.available")
}

func TestWriteNegotiatesTheFormat(t *testing.T) {
	k := NewKubelet("n1", t0)
	k.ObservePLEGRelist(time.Millisecond)
	for _, c := range []struct {
		accept string
		want   expfmt.FormatType
	}{
		{"", expfmt.TypeTextPlain},
		{"text/plain;version=0.0.4;q=0.5,*/*;q=0.1", expfmt.TypeTextPlain},
		{"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3", expfmt.TypeProtoDelim},
	} {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if c.accept != "" {
			r.Header.Set("Accept", c.accept)
		}
		rec := httptest.NewRecorder()
		if err := Write(rec, Format(r), k.Gather(Runtime{})); err != nil {
			t.Fatal(err)
		}
		// The second negotiation of a header is remembered: the same answer.
		if again := Format(r); again.FormatType() != c.want {
			t.Errorf("Accept %q negotiated again: %s, want type %d", c.accept, again, c.want)
		}
		format := expfmt.ResponseFormat(rec.Header())
		if format.FormatType() != c.want {
			t.Errorf("Accept %q: served %s", c.accept, format)
			continue
		}
		dec := expfmt.NewDecoder(bytes.NewReader(rec.Body.Bytes()), format)
		found := false
		for {
			var mf dto.MetricFamily
			err := dec.Decode(&mf)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("Accept %q: %v", c.accept, err)
			}
			if mf.GetName() == "kubelet_pleg_relist_duration_seconds" && mf.GetMetric()[0].GetHistogram().GetSampleCount() == 1 {
				found = true
			}
		}
		if !found {
			t.Errorf("Accept %q: the relist histogram did not decode", c.accept)
		}
	}
}

// TestTextIsExpfmts holds the text encoder to client_golang's: for the
// same families, WriteText writes what expfmt.MetricFamilyToText writes,
// escaping, timestamps, special values and histograms included.
func TestTextIsExpfmts(t *testing.T) {
	gauge := NewDesc("test_gauge", "A gauge, with \\ and\nnewline.", dto.MetricType_GAUGE, nil, "zone", "app")
	counter := NewDesc("test_total", "A counter.", dto.MetricType_COUNTER, nil)
	hist := NewDesc("test_seconds", "A histogram.", dto.MetricType_HISTOGRAM, DefBuckets, "op")
	h := Histogram{buckets: DefBuckets}
	for _, v := range []float64{0.001, 0.3, 0.3, 42} {
		h.Observe(v)
	}
	var c Counts
	c.Observe(0.07)
	g := gauge.Family(12)
	g.Add(1, "a", `quote " back \ new
line`)
	g.AddAt(2.5e-7, time.UnixMilli(1_700_000_000_123), "b", "x")
	g.Add(math.Inf(1), "c", "")
	g.Add(-1, "d", "é")
	for i, v := range []float64{999999, 1e6, -999999, math.Copysign(0, -1), 1234567.5, math.NaN(), 0.1, 2 << 40} {
		g.Add(v, "e", strconv.Itoa(i))
	}
	ct := counter.Family(1)
	ct.Add(12345678901234)
	hf := hist.Family(2)
	hf.AddHistogram(&h, "sync")
	hf.AddCounts(&c, "probe")
	empty := hist.Family(1)
	empty.AddHistogram(&Histogram{buckets: DefBuckets}, "none")
	for _, f := range Gather(g, ct, hf, empty) {
		var ours, theirs bytes.Buffer
		bw := bufio.NewWriter(&ours)
		f.WriteText(bw)
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := expfmt.MetricFamilyToText(&theirs, f.MetricFamily()); err != nil {
			t.Fatal(err)
		}
		if ours.String() != theirs.String() {
			t.Errorf("%s:\nours:\n%s\nexpfmt's:\n%s", f.desc.name, ours.String(), theirs.String())
		}
	}
}

// TestIdleNodeFootprint: the metrics of a node without pods, relisting as
// every node does, take a few hundred bytes; what a node with pods adds
// is its histograms' buckets, allocated once.
func TestIdleNodeFootprint(t *testing.T) {
	const nodes = 1000
	keep := make([]*Kubelet, nodes)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range keep {
		k := NewKubelet("n", t0)
		for range 3 {
			k.ObservePLEGRelistInterval(time.Second)
			k.ObservePLEGRelist(time.Millisecond)
			k.SetPLEGLastSeen(t0)
			k.SetContainerStates([NumContainerStates]int{})
		}
		keep[i] = k
	}
	runtime.ReadMemStats(&after)
	perNode := (after.TotalAlloc - before.TotalAlloc) / nodes
	t.Logf("an idle node's metrics: %d bytes", perNode)
	if perNode > 1024 {
		t.Errorf("an idle node's metrics take %d bytes, want at most 1 KiB", perNode)
	}
	runtime.KeepAlive(keep)
}

// TestReusedFamily: a family from the pool carries nothing of its last use.
func TestReusedFamily(t *testing.T) {
	gauge := NewDesc("test_gauge", "A gauge.", dto.MetricType_GAUGE, nil, "app")
	hist := NewDesc("test_seconds", "A histogram.", dto.MetricType_HISTOGRAM, DefBuckets)
	f := gauge.Family(2)
	f.AddAt(1, t0, "a")
	f.AddAt(2, t0, "b")
	f.reset(hist, 1)
	f.AddHistogram(&Histogram{buckets: DefBuckets})
	var buf bytes.Buffer
	bw := bufio.NewWriter(&buf)
	f.WriteText(bw)
	_ = bw.Flush()
	var want bytes.Buffer
	if _, err := expfmt.MetricFamilyToText(&want, f.MetricFamily()); err != nil {
		t.Fatal(err)
	}
	if buf.String() != want.String() || strings.Contains(buf.String(), "app") {
		t.Errorf("reused family wrote:\n%s\nwant:\n%s", buf.String(), want.String())
	}
	// A stamp on a later sample leaves the earlier ones without.
	g := gauge.Family(2)
	g.Add(1, "a")
	g.AddAt(2, t0, "b")
	mf := g.MetricFamily()
	if mf.Metric[0].TimestampMs != nil || mf.Metric[1].GetTimestampMs() != t0.UnixMilli() {
		t.Errorf("timestamps %v", mf.Metric)
	}
	Release([]*Family{f, g})
}
