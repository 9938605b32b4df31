package reports

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestPhaseExcludeIf(t *testing.T) {
	c := NewCollector()
	for i := range 10 {
		pod := types.UID(fmt.Sprintf("pod-%d", i))
		c.Mark(pod, Created, t0)
		if i < 3 { // these pulled an image
			c.Mark(pod, PullStarted, t0.Add(time.Millisecond))
		}
		c.Mark(pod, RunningObserved, t0.Add(time.Duration(i+1)*time.Second))
	}
	c.Mark("not-running", Created, t0)
	c.Mark("not-running", PullStarted, t0) // has no end: neither counted nor excluded

	phases := c.Phases([]PhaseSpec{
		{Name: "all", From: Created, To: RunningObserved},
		{Name: "no-pulls", From: Created, To: RunningObserved, ExcludeIf: []Milestone{PullStarted}},
		{Name: "bogus-exclusion", From: Created, To: RunningObserved, ExcludeIf: []Milestone{Milestone(99)}},
	})
	if p := phases[0]; p.Count != 10 || p.Excluded != 0 {
		t.Errorf("all: count %d excluded %d, want 10 and 0", p.Count, p.Excluded)
	}
	p := phases[1]
	if p.Count != 7 || p.Excluded != 3 || p.Hist.TotalCount() != 7 {
		t.Errorf("no-pulls: count %d excluded %d (hist %d), want 7 and 3", p.Count, p.Excluded, p.Hist.TotalCount())
	}
	if min := p.Hist.Min(); !p.Hist.ValuesAreEquivalent(min, 4_000_000) {
		t.Errorf("no-pulls min = %d µs, want 4 s (the pods that pulled were the fastest)", min)
	}
	if s := p.Summary(); s.Excluded != 3 {
		t.Errorf("summary excluded = %d, want 3", s.Excluded)
	}
	if p := phases[2]; p.Count != 10 || p.Excluded != 0 {
		t.Errorf("an unknown exclusion milestone excluded %d pods", p.Excluded)
	}
}

func TestSLIPhases(t *testing.T) {
	// The names are clusterloader2's, and part of the schema.
	var names []string
	for _, sp := range SLIPhases {
		names = append(names, sp.Name)
	}
	want := []string{"create_to_schedule", "schedule_to_run", "run_to_watch", "schedule_to_watch", "pod_startup"}
	if !slices.Equal(names, want) {
		t.Errorf("SLI names = %q, want %q", names, want)
	}
	s := Summaries(sampleCollector().Phases(SLIPhases))
	byName := map[string]PhaseSummary{}
	for _, p := range s {
		byName[p.Name] = p
	}
	if p := byName[SLIPodStartup]; p.Count != 180 || p.Excluded != 20 {
		t.Errorf("pod_startup: count %d excluded %d, want 180 and 20", p.Count, p.Excluded)
	}
	if p := byName[SLIScheduleToWatch]; p.Count != 200 || p.Excluded != 0 {
		t.Errorf("schedule_to_watch: count %d excluded %d, want 200 and 0 (only pod_startup excludes)", p.Count, p.Excluded)
	}
}

func TestPodSeries(t *testing.T) {
	c := NewCollector()
	if got := c.PodSeries(); got.Start != (time.Time{}) || got.Created != nil {
		t.Errorf("empty collector: %+v", got)
	}
	ms := time.Millisecond
	mark := func(pod string, m Milestone, at time.Duration) { c.Mark(types.UID(pod), m, t0.Add(at)) }
	// Second 0 (the wall-clock second t0): a and b created; second 1: both
	// scheduled, a Running;
	// second 2: b Running; second 3: a gone; second 4: c created.
	mark("a", Created, 100*ms)
	mark("b", Created, 900*ms)
	mark("a", Scheduled, 1100*ms)
	mark("b", Scheduled, 1200*ms)
	mark("a", RunningObserved, 1500*ms)
	mark("b", RunningObserved, 2200*ms)
	mark("a", DeleteIssued, 2500*ms)
	mark("a", Gone, 3999*ms)
	mark("c", Created, 4100*ms)
	mark("d", Gone, 4200*ms) // gone but never seen Running: not in the series

	s := c.PodSeries()
	if !s.Start.Equal(t0) || s.Start.Location() != time.UTC {
		t.Errorf("start = %v, want the wall-clock second of the first Created stamp, in UTC", s.Start)
	}
	for _, tc := range []struct {
		name      string
		got, want []int
	}{
		{"created", s.Created, []int{2, 0, 0, 0, 1}},
		{"scheduled", s.Scheduled, []int{0, 2, 0, 0, 0}},
		{"running", s.Running, []int{0, 1, 2, 1, 1}},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}

	// A stamp a day later (a clock bug) lands in the last bucket.
	mark("e", Created, 48*time.Hour)
	if s := c.PodSeries(); len(s.Created) != maxSeriesSeconds || s.Created[maxSeriesSeconds-1] != 1 {
		t.Errorf("series of a far stamp: %d buckets, last %d", len(s.Created), s.Created[len(s.Created)-1])
	}
}

func TestRateTable(t *testing.T) {
	rt := newRateTable(t0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	rt.add(at(-time.Second), seriesVerbIndex("get"))         // before the base: second 0
	rt.add(at(500*time.Millisecond), seriesVerbIndex("get")) // second 0
	rt.add(at(2*time.Second), seriesVerbIndex("patch"))
	rt.add(at(63*time.Second), seriesVerbIndex("get")) // the last second of the first chunk
	rt.add(at(64*time.Second), seriesVerbIndex("get")) // the first of the second
	rt.add(at(64*time.Second), seriesVerbIndex("proxy"))
	rt.add(at(19*time.Hour), seriesVerbIndex("get")) // beyond the span

	s := rt.series()
	if !s.Start.Equal(t0) || s.Late != 1 {
		t.Errorf("start %v late %d, want %v and 1", s.Start, s.Late, t0)
	}
	var verbs []string
	for _, v := range s.Verbs {
		verbs = append(verbs, v.Verb)
		if len(v.Counts) != 65 {
			t.Errorf("%s has %d seconds, want 65 (to the last with a request)", v.Verb, len(v.Counts))
		}
	}
	if !slices.Equal(verbs, []string{"get", "patch", "other"}) {
		t.Errorf("verbs = %q, want get, patch, other in the fixed order", verbs)
	}
	get := s.Verbs[0].Counts
	if get[0] != 2 || get[63] != 1 || get[64] != 1 || get[1] != 0 {
		t.Errorf("get counts = %v", get)
	}
	if s.Verbs[1].Counts[2] != 1 || s.Verbs[2].Counts[64] != 1 {
		t.Errorf("patch %v, other %v", s.Verbs[1].Counts, s.Verbs[2].Counts)
	}
	if got := newRateTable(t0).series(); got.Verbs != nil {
		t.Errorf("empty table: %+v", got)
	}

	// A table made mid-second counts in whole wall-clock seconds.
	rt = newRateTable(t0.Add(700 * time.Millisecond))
	rt.add(t0.Add(900*time.Millisecond), 0)
	rt.add(t0.Add(1100*time.Millisecond), 0)
	if s := rt.series(); !s.Start.Equal(t0) || !slices.Equal(s.Verbs[0].Counts, []int64{1, 1}) {
		t.Errorf("mid-second table: start %v counts %v, want %v and [1 1]", s.Start, s.Verbs[0].Counts, t0)
	}
}

func TestRateTableConcurrent(t *testing.T) {
	rt := newRateTable(t0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				// Every goroutine races for the same new chunks.
				rt.add(t0.Add(time.Duration(i%200)*time.Second), (g+i)%numSeriesVerbs)
			}
		}()
	}
	wg.Wait()
	var total int64
	for _, v := range rt.series().Verbs {
		for _, n := range v.Counts {
			total += n
		}
	}
	if total != 8000 {
		t.Errorf("counted %d requests, want 8000", total)
	}
}

func TestAPICounterRequestSeries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") }))
	defer srv.Close()
	counter := NewAPICounter()
	client := &http.Client{Transport: counter.Wrap(srv.Client().Transport)}
	for _, req := range []struct{ method, path string }{
		{"GET", "/api/v1/namespaces/default/pods/p1"},
		{"GET", "/api/v1/namespaces/default/pods"},
		{"PATCH", "/api/v1/namespaces/default/pods/p1/status"},
		{"PATCH", "/api/v1/nodes/n1/status"},
		{"GET", "/healthz"},
	} {
		r, _ := http.NewRequest(req.method, srv.URL+req.path, strings.NewReader(""))
		resp, err := client.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	s := counter.RequestSeries()
	got := map[string]int64{}
	for _, v := range s.Verbs {
		for _, n := range v.Counts {
			got[v.Verb] += n
		}
	}
	want := map[string]int64{"get": 2, "list": 1, "patch": 2} // /healthz is a get too
	if !mapsEqual(got, want) {
		t.Errorf("requests by verb = %v, want %v", got, want)
	}
	if s.Start.IsZero() || s.Start.Location() != time.UTC {
		t.Errorf("start = %v, want the counter's creation in UTC", s.Start)
	}
}

// BenchmarkRateTableAdd is what counting a request per second and verb adds
// to each request, from all cores at once on the same second (the worst
// case: every agent's request lands on one counter).
func BenchmarkRateTableAdd(b *testing.B) {
	rt := newRateTable(time.Now())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rt.add(time.Now(), 0)
		}
	})
}
