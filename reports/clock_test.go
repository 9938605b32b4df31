package reports

import (
	"bytes"
	"encoding/json"
	"html"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestMeasureClock(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	// sample is an exchange sent at t0+sent µs that took rtt µs, served
	// when the shard's clock read t0+remote.
	sample := func(sent, rtt int, remote time.Duration) ClockSample {
		return ClockSample{Sent: t0.Add(us(sent)), Remote: t0.Add(remote), Received: t0.Add(us(sent + rtt))}
	}
	for _, tc := range []struct {
		name    string
		samples []ClockSample
		want    ClockMeasurement
		wantErr string
	}{
		{
			name:    "one sample",
			samples: []ClockSample{sample(0, 400, us(200)+1500*time.Microsecond)},
			want:    ClockMeasurement{At: t0.Add(us(200)), OffsetSeconds: 0.0015, UncertaintySeconds: 0.0002, Samples: 1},
		},
		{
			// The shortest round trip wins, wherever it is; the others,
			// delayed one way, would say otherwise.
			name: "the shortest round trip",
			samples: []ClockSample{
				sample(0, 5000, us(4900)-us(2000)),
				sample(10000, 120, us(10060)-us(2000)+7), // 7 ns: kept
				sample(20000, 900, us(20100)-us(2000)),
				sample(30000, 120, us(30060)), // as short, later: the first wins
			},
			want: ClockMeasurement{At: t0.Add(us(10060)), OffsetSeconds: -0.001999993, UncertaintySeconds: 0.00006, Samples: 4},
		},
		{
			name:    "no round trip at all",
			samples: []ClockSample{{Sent: t0, Remote: t0.Add(-time.Hour), Received: t0}},
			want:    ClockMeasurement{At: t0, OffsetSeconds: -3600, Samples: 1},
		},
		{name: "no samples", wantErr: "no samples"},
		{
			name:    "received before sent",
			samples: []ClockSample{sample(0, 100, 0), {Sent: t0.Add(time.Second), Remote: t0, Received: t0}},
			wantErr: "sample 2 was received (2026-03-04T05:06:07Z) 1s before it was sent",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MeasureClock(tc.samples)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.At.Equal(tc.want.At) || strings.Contains(got.At.String(), "m=") || got.Samples != tc.want.Samples ||
				secondsDuration(got.OffsetSeconds) != secondsDuration(tc.want.OffsetSeconds) ||
				secondsDuration(got.UncertaintySeconds) != secondsDuration(tc.want.UncertaintySeconds) {
				t.Errorf("MeasureClock = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestShardClockOffsetAt(t *testing.T) {
	m := func(at time.Duration, offsetMs float64) ClockMeasurement {
		return ClockMeasurement{At: t0.Add(at), OffsetSeconds: offsetMs / 1e3, UncertaintySeconds: 0.0001, Samples: 5}
	}
	drifting := ShardClock{Start: m(0, 2), End: m(time.Hour, 38)} // 36 ms an hour: 10 ppm fast
	for _, tc := range []struct {
		name  string
		clock ShardClock
		at    time.Duration
		want  time.Duration
		ppm   float64
	}{
		{"before the start", drifting, -time.Minute, 2 * time.Millisecond, 10},
		{"at the start", drifting, 0, 2 * time.Millisecond, 10},
		{"a quarter in", drifting, 15 * time.Minute, 11 * time.Millisecond, 10},
		{"a second in", drifting, time.Second, 2*time.Millisecond + 10*time.Microsecond, 10},
		{"to the nanosecond", drifting, time.Millisecond + 300*time.Microsecond, 2*time.Millisecond + 13, 10},
		{"at the end", drifting, time.Hour, 38 * time.Millisecond, 10},
		{"after the end", drifting, 2 * time.Hour, 38 * time.Millisecond, 10},
		{"slow", ShardClock{Start: m(0, -1), End: m(10*time.Second, -1.5)}, 5 * time.Second, -1250 * time.Microsecond, -50},
		{"no end", ShardClock{Start: m(0, 3)}, time.Hour, 3 * time.Millisecond, 0},
		{"end at the start", ShardClock{Start: m(0, 3), End: m(0, 4)}, time.Hour, 3 * time.Millisecond, 0},
		{"end before the start", ShardClock{Start: m(time.Minute, 3), End: m(0, 4)}, 0, 3 * time.Millisecond, 0},
		{"no start", ShardClock{End: m(time.Minute, 4)}, 0, 4 * time.Millisecond, 0},
		{"nothing measured", ShardClock{}, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.clock.OffsetAt(t0.Add(tc.at)); got != tc.want {
				t.Errorf("OffsetAt(%v) = %v, want %v", tc.at, got, tc.want)
			}
			if got := tc.clock.DriftPPM(); math.Abs(got-tc.ppm) > 1e-9 {
				t.Errorf("DriftPPM() = %v, want %v", got, tc.ppm)
			}
		})
	}
}

func TestShardClockRemoteOffsetAt(t *testing.T) {
	// A shard 1 s ahead and 50 ppm fast: 1 s + 180 ms at the end of the
	// hour. OffsetAt of a time on the shard's clock would be off by 50 µs;
	// RemoteOffsetAt is exact.
	sc := ShardClock{
		Start: ClockMeasurement{At: t0, OffsetSeconds: 1},
		End:   ClockMeasurement{At: t0.Add(time.Hour), OffsetSeconds: 1.18},
	}
	for _, at := range []time.Duration{-time.Second, 0, time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour} {
		x := t0.Add(at) // on the driver's clock
		off := sc.OffsetAt(x)
		if got := sc.RemoteOffsetAt(x.Add(off)); got != off {
			t.Errorf("RemoteOffsetAt of driver's %v on the shard's clock = %v, want %v", at, got, off)
		}
	}
	if d := sc.OffsetAt(t0.Add(30*time.Minute+1090*time.Millisecond)) - sc.OffsetAt(t0.Add(30*time.Minute)); d != 54500*time.Nanosecond {
		t.Errorf("the shift OffsetAt would take on a time of the shard's clock is %v, want 54.5µs", d)
	}
}

func sampleShards() []ShardClock {
	return []ShardClock{
		{
			Shard: "shard-0 (10.0.0.5:7070)", Nodes: 500, Pods: 2400,
			Start: ClockMeasurement{At: t0, OffsetSeconds: 0.001234567, UncertaintySeconds: 0.0000604, Samples: 8},
			End:   ClockMeasurement{At: t0.Add(time.Hour), OffsetSeconds: 0.0012, UncertaintySeconds: 0.000071, Samples: 8},
		},
		{
			// Measured once: no end, no drift; an offset that rounds to
			// zero from below.
			Shard: "shard-1 (10.0.0.6:7070)", Nodes: 500, Pods: 2350,
			Start: ClockMeasurement{At: t0, OffsetSeconds: -0.0000004, UncertaintySeconds: 0.00005, Samples: 8},
		},
		{
			Shard: "shard-2 (10.0.0.7:7070)", Nodes: 250, Pods: 1200,
			Start: ClockMeasurement{At: t0, OffsetSeconds: -0.0421, UncertaintySeconds: 0.0002, Samples: 8},
			End:   ClockMeasurement{At: t0.Add(time.Hour), OffsetSeconds: -0.0459, UncertaintySeconds: 0.0003, Samples: 8},
		},
	}
}

func TestShardsInTheReport(t *testing.T) {
	rep := &Report{Shards: sampleShards()}
	var md, page, term bytes.Buffer
	if err := RenderMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	if err := RenderHTML(&page, rep); err != nil {
		t.Fatal(err)
	}
	RenderSummary(&term, rep)

	v := buildView(rep)
	for _, phase := range []string{"scheduled_to_agent_observed", "running_reported_to_running_observed", "schedule_to_run", "run_to_watch"} {
		if !strings.Contains(v.ShardsText, phase) {
			t.Errorf("the Shards section does not name %s as crossing processes: %s", phase, v.ShardsText)
		}
	}
	for _, phase := range []string{"create_to_running_observed", "agent_observed_to_running_reported", "delete_to_gone", "pod_startup"} {
		if strings.Contains(v.ShardsText, phase+",") || strings.Contains(v.ShardsText, phase+")") {
			t.Errorf("the Shards section names %s, within one process, as crossing", phase)
		}
	}
	for _, want := range []string{
		"\n## Shards\n\n" + mdText(v.ShardsText) + "\n\n",
		"| shard | nodes | pods | offset at start ms | offset at end ms | drift ppm |\n|---|---:|---:|---:|---:|---:|\n",
		"| shard-0 (10.0.0.5:7070) | 500 | 2400 | +1.235 ± 0.060 | +1.200 ± 0.071 | -0.01 |\n",
		"| shard-1 (10.0.0.6:7070) | 500 | 2350 | +0.000 ± 0.050 | - | - |\n",
		"| shard-2 (10.0.0.7:7070) | 250 | 1200 | -42.100 ± 0.200 | -45.900 ± 0.300 | -1.06 |\n",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}
	if i, j, k := strings.Index(md.String(), "## Faults"), strings.Index(md.String(), "## Shards"), strings.Index(md.String(), "## Fleet"); j < 0 || j < i || j > k {
		t.Errorf("Markdown's Shards section is not after Faults and before Fleet")
	}

	if want := "\n3 shards, clock offsets within ±45.900 ms\n"; !strings.Contains(term.String(), want) {
		t.Errorf("summary lacks %q:\n%s", want, term.String())
	}
	if n := strings.Count(term.String(), "shard"); n != 1 {
		t.Errorf("summary says shard %d times, want one line", n)
	}

	if err := checkWellFormed(page.Bytes()); err != nil {
		t.Fatalf("report.html is not well-formed: %v", err)
	}
	got := html.UnescapeString(page.String())
	for _, want := range []string{
		`<section id="shards">`,
		v.ShardsText,
		`<tr><td>shard-2 (10.0.0.7:7070)</td><td class="n">250</td><td class="n">1200</td><td class="n">-42.100 ± 0.200</td><td class="n">-45.900 ± 0.300</td><td class="n">-1.06</td></tr>`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}

	// Without shards, no section and no line.
	md.Reset()
	page.Reset()
	term.Reset()
	if err := RenderMarkdown(&md, sampleReport()); err != nil {
		t.Fatal(err)
	}
	if err := RenderHTML(&page, sampleReport()); err != nil {
		t.Fatal(err)
	}
	RenderSummary(&term, sampleReport())
	for name, out := range map[string]string{"Markdown": md.String(), "HTML": page.String(), "summary": term.String()} {
		if strings.Contains(strings.ToLower(out), "shard") {
			t.Errorf("%s of a report without shards mentions them", name)
		}
	}
}

func TestFmtOffsetMs(t *testing.T) {
	for seconds, want := range map[float64]string{
		0: "+0.000", -0.0000004: "+0.000", 0.0000005001: "+0.001", -0.000001: "-0.001",
		0.001234567: "+1.235", -0.0421: "-42.100", 1.5: "+1500.000", -3600: "-3600000.000",
	} {
		if got := fmtOffsetMs(seconds); got != want {
			t.Errorf("fmtOffsetMs(%v) = %q, want %q", seconds, got, want)
		}
	}
}

func TestShardsJSONAndMerge(t *testing.T) {
	a, b, _ := shardReports(t)
	a.Shards = sampleShards()[:2]
	b.Shards = sampleShards()[2:]
	path := filepath.Join(t.TempDir(), "report.json")
	if err := WriteJSON(path, a); err != nil {
		t.Fatal(err)
	}
	got, err := ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Shards, a.Shards) {
		t.Errorf("round trip changed the shards:\ngot  %+v\nwant %+v", got.Shards, a.Shards)
	}
	data, _ := os.ReadFile(path)
	var doc struct {
		Shards []map[string]any `json:"shards"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"shard", "nodes", "pods", "start", "end"} {
		if _, ok := doc.Shards[0][k]; !ok {
			t.Errorf("shards[0] has no %q field", k)
		}
	}
	for _, k := range []string{"at", "offsetSeconds", "uncertaintySeconds", "samples"} {
		if _, ok := doc.Shards[0]["start"].(map[string]any)[k]; !ok {
			t.Errorf("shards[0].start has no %q field", k)
		}
	}

	m, err := Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m.Shards, sampleShards()) {
		t.Errorf("merged shards = %+v, want a's then b's", m.Shards)
	}

	// Without shards, no key.
	a.Shards = nil
	if err := WriteJSON(path, a); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(path)
	if strings.Contains(string(data), `"shards":`) {
		t.Errorf("a report without shards has the key")
	}
	if m, _ := Merge(a, &Report{Profile: a.Profile}); m.Shards != nil {
		t.Errorf("merging reports without shards gives %v", m.Shards)
	}
}
