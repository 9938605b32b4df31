package eviction

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"
)

const mi = 1 << 20

// podSpec builds a pod with one container "app" and the given requests and
// limits (memory in Mi; 0 leaves it unset).
func podSpec(name string, priority int32, reqMi, limMi int64) *corev1.Pod {
	c := corev1.Container{Name: "app"}
	if reqMi > 0 {
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(reqMi*mi, resource.BinarySI)}
	}
	if limMi > 0 {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(limMi*mi, resource.BinarySI)}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{c}, Priority: ptr.To(priority)},
	}
}

// usage is what a pod uses in a test summary.
type usage struct {
	pod                *corev1.Pod
	memMi, diskMi, pid uint64
}

// summaryOf builds the summary of a node with the given capacities whose
// pods use what usages say; fsExtraMi is disk used outside pods.
func summaryOf(now time.Time, memCapMi, fsCapMi, fsExtraMi uint64, usages ...usage) *statsapi.Summary {
	t := metav1.NewTime(now)
	var ws, disk, procs uint64
	s := &statsapi.Summary{}
	for _, u := range usages {
		ws += u.memMi * mi
		disk += u.diskMi * mi
		procs += u.pid
		s.Pods = append(s.Pods, statsapi.PodStats{
			PodRef: statsapi.PodReference{Name: u.pod.Name, Namespace: u.pod.Namespace, UID: string(u.pod.UID)},
			Memory: &statsapi.MemoryStats{Time: t, WorkingSetBytes: ptr.To(u.memMi * mi)},
			Containers: []statsapi.ContainerStats{{
				Name:   "app",
				Memory: &statsapi.MemoryStats{Time: t, WorkingSetBytes: ptr.To(u.memMi * mi)},
				Rootfs: &statsapi.FsStats{Time: t, UsedBytes: ptr.To(u.diskMi * mi), InodesUsed: ptr.To[uint64](10)},
				Logs:   &statsapi.FsStats{Time: t, UsedBytes: ptr.To[uint64](0), InodesUsed: ptr.To[uint64](1)},
			}},
			ProcessStats: &statsapi.ProcessStats{ProcessCount: ptr.To(u.pid)},
		})
	}
	fsUsed := fsExtraMi*mi + disk
	fs := &statsapi.FsStats{
		Time: t, CapacityBytes: ptr.To(fsCapMi * mi), AvailableBytes: ptr.To(fsCapMi*mi - fsUsed), UsedBytes: ptr.To(fsUsed),
		Inodes: ptr.To[uint64](1000000), InodesFree: ptr.To[uint64](900000),
	}
	imageFs := *fs
	s.Node = statsapi.NodeStats{
		Memory:  &statsapi.MemoryStats{Time: t, WorkingSetBytes: ptr.To(ws), AvailableBytes: ptr.To(memCapMi*mi - ws)},
		Fs:      fs,
		Runtime: &statsapi.RuntimeStats{ImageFs: &imageFs},
		Rlimit:  &statsapi.RlimitStats{Time: t, MaxPID: ptr.To[int64](1000), NumOfRunningProcesses: ptr.To(int64(procs))},
	}
	return s
}

func quantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func TestParseThresholds(t *testing.T) {
	tests := []struct {
		name    string
		kc      kubeletconfig.KubeletConfiguration
		want    []string // "signal<value grace minReclaim"
		wantErr string
	}{{
		name: "unset evictionHard takes the kubelet's defaults",
		want: []string{"imagefs.available<15% 0s", "imagefs.inodesFree<5% 0s", "memory.available<100Mi 0s", "nodefs.available<10% 0s", "nodefs.inodesFree<5% 0s"},
	}, {
		name: "a set evictionHard replaces the defaults; 0% disables",
		kc:   kubeletconfig.KubeletConfiguration{EvictionHard: map[string]string{"memory.available": "1Gi", "nodefs.available": "0%", "pid.available": "10%"}},
		want: []string{"memory.available<1Gi 0s", "pid.available<10% 0s"},
	}, {
		name: "mergeDefaultEvictionSettings fills the missing defaults",
		kc:   kubeletconfig.KubeletConfiguration{EvictionHard: map[string]string{"memory.available": "1Gi"}, MergeDefaultEvictionSettings: ptr.To(true)},
		want: []string{"imagefs.available<15% 0s", "imagefs.inodesFree<5% 0s", "memory.available<1Gi 0s", "nodefs.available<10% 0s", "nodefs.inodesFree<5% 0s"},
	}, {
		name: "soft thresholds with grace periods and minimum reclaim",
		kc: kubeletconfig.KubeletConfiguration{
			EvictionHard:            map[string]string{"memory.available": "100Mi"},
			EvictionSoft:            map[string]string{"memory.available": "300Mi", "nodefs.available": "20%"},
			EvictionSoftGracePeriod: map[string]string{"memory.available": "30s", "nodefs.available": "1m30s"},
			EvictionMinimumReclaim:  map[string]string{"memory.available": "50Mi", "nodefs.available": "5%"},
		},
		want: []string{"memory.available<100Mi 0s +50Mi", "memory.available<300Mi 30s +50Mi", "nodefs.available<20% 1m30s +5%"},
	}, {
		name: "containerfs thresholds are ignored as the kubelet overrides them",
		kc:   kubeletconfig.KubeletConfiguration{EvictionHard: map[string]string{"containerfs.available": "10%", "memory.available": "1Mi"}},
		want: []string{"memory.available<1Mi 0s"},
	}, {
		name:    "soft threshold without grace period",
		kc:      kubeletconfig.KubeletConfiguration{EvictionSoft: map[string]string{"memory.available": "300Mi"}},
		wantErr: "grace period must be specified for the soft eviction threshold memory.available",
	}, {
		name:    "unknown signal",
		kc:      kubeletconfig.KubeletConfiguration{EvictionHard: map[string]string{"memory.free": "1Gi"}},
		wantErr: "evictionHard: unsupported eviction signal memory.free",
	}, {
		name:    "negative quantity",
		kc:      kubeletconfig.KubeletConfiguration{EvictionHard: map[string]string{"memory.available": "-1Gi"}},
		wantErr: "eviction threshold must be positive",
	}, {
		name:    "percentage above 100",
		kc:      kubeletconfig.KubeletConfiguration{EvictionHard: map[string]string{"nodefs.available": "110%"}},
		wantErr: "must be within 0% and 100%",
	}, {
		name:    "bad grace period",
		kc:      kubeletconfig.KubeletConfiguration{EvictionSoft: map[string]string{"memory.available": "1Gi"}, EvictionSoftGracePeriod: map[string]string{"memory.available": "soon"}},
		wantErr: "evictionSoftGracePeriod[memory.available]",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseThresholds(&tt.kc)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, th := range got {
				l := string(th.Signal) + "<" + th.Value.String() + " " + th.GracePeriod.String()
				if th.MinReclaim != nil {
					l += " +" + th.MinReclaim.String()
				}
				lines = append(lines, l)
			}
			slices.Sort(lines)
			if !slices.Equal(lines, tt.want) {
				t.Errorf("thresholds =\n%q\nwant\n%q", lines, tt.want)
			}
		})
	}
}

func TestObserve(t *testing.T) {
	now := time.Unix(1000, 0)
	a := podSpec("a", 0, 0, 0)
	s := summaryOf(now, 1024, 10240, 1024, usage{pod: a, memMi: 300, diskMi: 100, pid: 7})
	obs, stats := observe(s)
	want := map[Signal][2]int64{
		SignalMemoryAvailable:   {724 * mi, 1024 * mi},
		SignalNodeFsAvailable:   {(10240 - 1124) * mi, 10240 * mi},
		SignalNodeFsInodesFree:  {900000, 1000000},
		SignalImageFsAvailable:  {(10240 - 1124) * mi, 10240 * mi},
		SignalImageFsInodesFree: {900000, 1000000},
		SignalPIDAvailable:      {993, 1000},
	}
	if len(obs) != len(want) {
		t.Fatalf("observed %d signals, want %d", len(obs), len(want))
	}
	for s, w := range want {
		o := obs[s]
		if o.available.Value() != w[0] || o.capacity.Value() != w[1] {
			t.Errorf("%s: available %v of %v, want %d of %d", s, o.available, o.capacity, w[0], w[1])
		}
	}
	if ps, ok := stats(a); !ok || ps.PodRef.Name != "a" {
		t.Errorf("stats(a) = %v, %v", ps.PodRef, ok)
	}
	if _, ok := stats(podSpec("b", 0, 0, 0)); ok {
		t.Error("stats found a pod the summary does not have")
	}
}

func TestThresholdsMet(t *testing.T) {
	hard := Threshold{Signal: SignalMemoryAvailable, Value: ThresholdValue{Quantity: quantity("100Mi")}, MinReclaim: &ThresholdValue{Quantity: quantity("50Mi")}}
	pct := Threshold{Signal: SignalNodeFsAvailable, Value: ThresholdValue{Percentage: 0.1}, MinReclaim: &ThresholdValue{Percentage: 0.05}}
	obs := func(memAvailMi, fsAvailMi int64) observations {
		return observations{
			SignalMemoryAvailable: {available: resource.NewQuantity(memAvailMi*mi, resource.BinarySI), capacity: resource.NewQuantity(1024*mi, resource.BinarySI)},
			SignalNodeFsAvailable: {available: resource.NewQuantity(fsAvailMi*mi, resource.BinarySI), capacity: resource.NewQuantity(1000*mi, resource.BinarySI)},
		}
	}
	tests := []struct {
		name              string
		memAvail, fsAvail int64
		enforceMinReclaim bool
		want              []Signal
	}{
		{"both fine", 500, 500, false, nil},
		{"memory below 100Mi", 99, 500, false, []Signal{SignalMemoryAvailable}},
		{"exactly at the threshold is not met", 100, 500, false, nil},
		{"nodefs below 10%", 500, 99, false, []Signal{SignalNodeFsAvailable}},
		{"within min reclaim: still met", 120, 140, true, []Signal{SignalMemoryAvailable, SignalNodeFsAvailable}},
		{"past min reclaim: resolved", 151, 151, true, nil},
		{"within min reclaim but not enforced", 120, 140, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []Signal
			for _, th := range thresholdsMet([]Threshold{hard, pct}, obs(tt.memAvail, tt.fsAvail), tt.enforceMinReclaim) {
				got = append(got, th.Signal)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("met = %v, want %v", got, tt.want)
			}
		})
	}
	if got := thresholdsMet([]Threshold{{Signal: SignalPIDAvailable, Value: ThresholdValue{Percentage: 0.5}}}, obs(0, 0), false); len(got) != 0 {
		t.Errorf("a threshold without observation was met: %v", got)
	}
}

func TestGracePeriods(t *testing.T) {
	t0 := time.Unix(1000, 0)
	hard := Threshold{Signal: SignalMemoryAvailable, Value: ThresholdValue{Quantity: quantity("100Mi")}}
	soft := Threshold{Signal: SignalMemoryAvailable, Value: ThresholdValue{Quantity: quantity("300Mi")}, GracePeriod: 30 * time.Second}
	tests := []struct {
		name    string
		elapsed []time.Duration // cycles at which both are met, from t0
		want    []time.Duration // grace periods of the thresholds acting at the last cycle
	}{
		{"first seen: hard acts, soft waits", []time.Duration{0}, []time.Duration{0}},
		{"soft before its grace period", []time.Duration{0, 10 * time.Second, 29 * time.Second}, []time.Duration{0}},
		{"soft at its grace period", []time.Duration{0, 10 * time.Second, 30 * time.Second}, []time.Duration{0, 30 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := map[thresholdKey]time.Time{}
			var acting []Threshold
			for _, e := range tt.elapsed {
				first = thresholdsFirstObservedAt([]Threshold{hard, soft}, first, t0.Add(e))
				acting = thresholdsMetGracePeriod([]Threshold{hard, soft}, first, t0.Add(e))
			}
			var got []time.Duration
			for _, th := range acting {
				got = append(got, th.GracePeriod)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("acting grace periods = %v, want %v", got, tt.want)
			}
		})
	}
	// A threshold no longer met is forgotten: its grace period restarts.
	first := thresholdsFirstObservedAt([]Threshold{soft}, nil, t0)
	first = thresholdsFirstObservedAt(nil, first, t0.Add(10*time.Second))
	first = thresholdsFirstObservedAt([]Threshold{soft}, first, t0.Add(20*time.Second))
	if got := thresholdsMetGracePeriod([]Threshold{soft}, first, t0.Add(40*time.Second)); len(got) != 0 {
		t.Errorf("grace period did not restart: %v acting", got)
	}
}

func TestPressureTransitionPeriod(t *testing.T) {
	t0 := time.Unix(1000, 0)
	period := 5 * time.Minute
	last := nodeConditionsLastObservedAt([]corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure}, nil, t0)
	last = nodeConditionsLastObservedAt([]corev1.NodeConditionType{corev1.NodeDiskPressure}, last, t0.Add(time.Minute))
	tests := []struct {
		at   time.Duration
		want []corev1.NodeConditionType
	}{
		{0, []corev1.NodeConditionType{corev1.NodeDiskPressure, corev1.NodeMemoryPressure}},
		{4*time.Minute + 59*time.Second, []corev1.NodeConditionType{corev1.NodeDiskPressure, corev1.NodeMemoryPressure}},
		{5 * time.Minute, []corev1.NodeConditionType{corev1.NodeDiskPressure}},
		{6 * time.Minute, nil},
	}
	for _, tt := range tests {
		if got := nodeConditionsObservedSince(last, period, t0.Add(tt.at)); !slices.Equal(got, tt.want) {
			t.Errorf("at %v: conditions = %v, want %v", tt.at, got, tt.want)
		}
	}
	th := []Threshold{{Signal: SignalNodeFsAvailable}, {Signal: SignalImageFsInodesFree}, {Signal: SignalPIDAvailable}, {Signal: SignalMemoryAvailable}}
	if got, want := nodeConditions(th), []corev1.NodeConditionType{corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeMemoryPressure}; !slices.Equal(got, want) {
		t.Errorf("nodeConditions = %v, want %v", got, want)
	}
}

func names(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func TestRankMemoryPressure(t *testing.T) {
	now := time.Unix(1000, 0)
	bestEffort := podSpec("best-effort", 0, 0, 0)
	burstable := podSpec("burstable", 0, 100, 0)
	guaranteed := podSpec("guaranteed", 0, 200, 200)
	burstableUnder := podSpec("burstable-under", 0, 500, 0)
	highPriority := podSpec("high-priority-best-effort", 1000, 0, 0)
	noStats := podSpec("no-stats", 0, 100, 0)
	tests := []struct {
		name   string
		usages []usage
		extra  []*corev1.Pod
		want   []string
	}{{
		name: "BestEffort, then Burstable, then Guaranteed, when only the first two exceed requests",
		usages: []usage{
			{pod: guaranteed, memMi: 150}, {pod: burstable, memMi: 150}, {pod: bestEffort, memMi: 10},
		},
		want: []string{"burstable", "best-effort", "guaranteed"},
	}, {
		name: "among pods over their requests, the larger excess goes first",
		usages: []usage{
			{pod: bestEffort, memMi: 40}, {pod: burstable, memMi: 300}, {pod: burstableUnder, memMi: 400}, {pod: guaranteed, memMi: 150},
		},
		want: []string{"burstable", "best-effort", "guaranteed", "burstable-under"},
	}, {
		name: "priority before usage",
		usages: []usage{
			{pod: highPriority, memMi: 900}, {pod: bestEffort, memMi: 10},
		},
		want: []string{"best-effort", "high-priority-best-effort"},
	}, {
		name:   "pods without stats first",
		usages: []usage{{pod: bestEffort, memMi: 900}},
		extra:  []*corev1.Pod{noStats},
		want:   []string{"no-stats", "best-effort"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stats := observe(summaryOf(now, 4096, 10240, 0, tt.usages...))
			var pods []*corev1.Pod
			for _, u := range tt.usages {
				pods = append(pods, u.pod)
			}
			pods = append(pods, tt.extra...)
			rankPods(pods, SignalMemoryAvailable, stats, false)
			if got := names(pods); !slices.Equal(got, tt.want) {
				t.Errorf("order = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRankPIDAndDiskPressure(t *testing.T) {
	now := time.Unix(1000, 0)
	a, b, c := podSpec("a", 0, 0, 0), podSpec("b", 0, 0, 0), podSpec("c", 10, 0, 0)
	c.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")}
	_, stats := observe(summaryOf(now, 4096, 10240, 0,
		usage{pod: a, pid: 5, diskMi: 100}, usage{pod: b, pid: 50, diskMi: 300}, usage{pod: c, pid: 500, diskMi: 500}))

	pods := []*corev1.Pod{a, b, c}
	rankPods(pods, SignalPIDAvailable, stats, false)
	if got, want := names(pods), []string{"b", "a", "c"}; !slices.Equal(got, want) {
		t.Errorf("PID order = %v, want %v (priority, then most processes)", got, want)
	}

	pods = []*corev1.Pod{a, b, c}
	rankPods(pods, SignalNodeFsAvailable, stats, false)
	if got, want := names(pods), []string{"b", "a", "c"}; !slices.Equal(got, want) {
		t.Errorf("nodefs order = %v, want %v (over request, then priority, then usage)", got, want)
	}

	// With a dedicated imagefs, nodefs counts logs only (all zero here), so
	// priority alone decides; the stable sort keeps a before b.
	pods = []*corev1.Pod{a, b, c}
	rankPods(pods, SignalNodeFsAvailable, stats, true)
	if got, want := names(pods), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("dedicated nodefs order = %v, want %v", got, want)
	}
}

func TestEvictionMessage(t *testing.T) {
	now := time.Unix(1000, 0)
	pod := podSpec("web", 0, 100, 0)
	obs, stats := observe(summaryOf(now, 1024, 10240, 0, usage{pod: pod, memMi: 300}))
	obs[SignalMemoryAvailable] = observation{available: resource.NewQuantity(50*mi, resource.BinarySI), capacity: obs[SignalMemoryAvailable].capacity}
	th := []Threshold{{Signal: SignalMemoryAvailable, Value: ThresholdValue{Quantity: quantity("100Mi")}}}

	msg, ann := evictionMessage(corev1.ResourceMemory, pod, stats, th, obs)
	want := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Container app was using 300Mi, request is 100Mi, has larger consumption of memory. "
	if msg != want {
		t.Errorf("message =\n%q\nwant\n%q", msg, want)
	}
	wantAnn := map[string]string{OffendingContainersKey: "app", OffendingContainersUsageKey: "300Mi", StarvedResourceKey: "memory"}
	for k, v := range wantAnn {
		if ann[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, ann[k], v)
		}
	}

	// A container within its request is not named; a pod without stats
	// gets the node part only.
	under := podSpec("under", 0, 500, 0)
	_, stats = observe(summaryOf(now, 1024, 10240, 0, usage{pod: under, memMi: 300}))
	if msg, _ := evictionMessage(corev1.ResourceMemory, under, stats, th, obs); msg != "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " {
		t.Errorf("message for a pod within its request = %q", msg)
	}
	if msg, _ := evictionMessage(corev1.ResourceMemory, podSpec("gone", 0, 0, 0), stats, th, obs); msg != "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. " {
		t.Errorf("message for a pod without stats = %q", msg)
	}

	// Disk: a percentage threshold prints as its quantity of the capacity.
	fsPod := podSpec("writer", 0, 0, 0)
	obs, stats = observe(summaryOf(now, 1024, 1000, 850, usage{pod: fsPod, diskMi: 100}))
	msg, _ = evictionMessage(corev1.ResourceEphemeralStorage, fsPod, stats,
		[]Threshold{{Signal: SignalNodeFsAvailable, Value: ThresholdValue{Percentage: 0.5}}}, obs)
	want = "The node was low on resource: ephemeral-storage. Threshold quantity: 500Mi, available: 50Mi. Container app was using 100Mi, request is 0, has larger consumption of ephemeral-storage. "
	if msg != want {
		t.Errorf("disk message =\n%q\nwant\n%q", msg, want)
	}
}

func TestAdmit(t *testing.T) {
	bestEffort := podSpec("be", 0, 0, 0)
	burstable := podSpec("burstable", 0, 100, 0)
	tolerant := podSpec("tolerant", 0, 0, 0)
	tolerant.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	critical := podSpec("critical", systemCriticalPriority, 0, 0)
	static := podSpec("static", 0, 0, 0)
	static.Annotations = map[string]string{configSourceAnnotationKey: "file"}
	memory := []corev1.NodeConditionType{corev1.NodeMemoryPressure}
	diskAndMemory := []corev1.NodeConditionType{corev1.NodeDiskPressure, corev1.NodeMemoryPressure}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		conds   []corev1.NodeConditionType
		ok      bool
		message string
	}{
		{"no pressure", bestEffort, nil, true, ""},
		{"memory pressure rejects BestEffort", bestEffort, memory, false, "The node had condition: [MemoryPressure]. "},
		{"memory pressure admits Burstable", burstable, memory, true, ""},
		{"memory pressure admits a BestEffort pod tolerating the taint", tolerant, memory, true, ""},
		{"disk pressure rejects every pod", burstable, diskAndMemory, false, "The node had condition: [DiskPressure MemoryPressure]. "},
		{"the memory toleration does not help under disk pressure", tolerant, diskAndMemory, false, "The node had condition: [DiskPressure MemoryPressure]. "},
		{"critical pods are admitted", critical, diskAndMemory, true, ""},
		{"static pods are admitted", static, diskAndMemory, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, reason, message := admit(tt.pod, tt.conds)
			if ok != tt.ok || message != tt.message {
				t.Errorf("admit = %v %q, want %v %q", ok, message, tt.ok, tt.message)
			}
			if !ok && reason != "Evicted" {
				t.Errorf("reason = %q, want Evicted", reason)
			}
		})
	}
}

func TestPodQOS(t *testing.T) {
	cpuMem := func(req, lim string) corev1.ResourceRequirements {
		r := corev1.ResourceRequirements{}
		if req != "" {
			r.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(req), corev1.ResourceMemory: resource.MustParse(req)}
		}
		if lim != "" {
			r.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(lim), corev1.ResourceMemory: resource.MustParse(lim)}
		}
		return r
	}
	tests := []struct {
		name string
		res  []corev1.ResourceRequirements
		want corev1.PodQOSClass
	}{
		{"no resources", []corev1.ResourceRequirements{{}}, corev1.PodQOSBestEffort},
		{"limits equal requests", []corev1.ResourceRequirements{cpuMem("1", "1")}, corev1.PodQOSGuaranteed},
		{"limits only (requests default to them in the API)", []corev1.ResourceRequirements{cpuMem("", "1")}, corev1.PodQOSBurstable},
		{"requests below limits", []corev1.ResourceRequirements{cpuMem("1", "2")}, corev1.PodQOSBurstable},
		{"one guaranteed, one best effort", []corev1.ResourceRequirements{cpuMem("1", "1"), {}}, corev1.PodQOSBurstable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{}
			for _, r := range tt.res {
				pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Resources: r})
			}
			if got := podQOS(pod); got != tt.want {
				t.Errorf("QoS = %s, want %s", got, tt.want)
			}
		})
	}
	recorded := &corev1.Pod{Status: corev1.PodStatus{QOSClass: corev1.PodQOSGuaranteed}}
	if got := podQOS(recorded); got != corev1.PodQOSGuaranteed {
		t.Errorf("QoS recorded by the API server = %s, want Guaranteed", got)
	}
}
