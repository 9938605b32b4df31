package reports

import (
	"bytes"
	"strings"
	"testing"
)

// soakOf makes minute samples over an hour with the given RSS at each
// minute; the other quantities stay flat.
func soakOf(rss func(minute int) int64) *Soak {
	s := &Soak{Profile: "soak", Nodes: 10, IntervalSeconds: 60, DurationSeconds: 3600, ChurnQPS: 5, Limits: DefaultSoakLimits}
	for m := 1; m <= 60; m++ {
		s.Samples = append(s.Samples, SoakSample{
			AtSeconds: float64(60 * m), RSSBytes: rss(m), HeapLiveBytes: 100 << 20, Goroutines: 5000, OpenFDs: 300,
			LeaseLatenessMaxMs: 400,
		})
	}
	return s
}

func check(t *testing.T, s *Soak, name string) SoakCheck {
	t.Helper()
	for _, c := range s.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, s.Checks)
	return SoakCheck{}
}

func TestSoakVerdict(t *testing.T) {
	for _, tc := range []struct {
		name string
		soak *Soak
		pass bool
		// failed is the check that fails, if any.
		failed string
		value  string
	}{
		{
			name: "flat", pass: true,
			soak: soakOf(func(int) int64 { return 1 << 30 }),
		},
		{
			// Growth in the first quarter (caches filling) is not counted.
			name: "grows only while settling", pass: true,
			soak: soakOf(func(m int) int64 { return int64(min(m, 15)) << 26 }),
		},
		{
			// 1 GiB at 15 min to 1.1 GiB at the end: the medians of the edges
			// (minutes 15-19 and 56-60) are 9.1 % apart.
			name: "leaks", failed: "RSS growth", value: "9.1 %",
			soak: soakOf(func(m int) int64 {
				return (1 << 30) + int64(float64(m-15)/45*0.1*(1<<30))
			}),
		},
		{
			// One sample's spike is not growth: the edges are medians.
			name: "one spike at the end", pass: true,
			soak: soakOf(func(m int) int64 {
				if m == 60 {
					return 2 << 30
				}
				return 1 << 30
			}),
		},
		{
			name: "a late lease", failed: "lease renewal lateness, max", value: "12 s",
			soak: func() *Soak {
				s := soakOf(func(int) int64 { return 1 << 30 })
				s.Samples[30].LeaseLatenessMaxMs = 12_000
				return s
			}(),
		},
		{
			name: "a node NotReady", failed: "nodes NotReady", value: "0 seen, 1 NodeNotReady events",
			soak: func() *Soak {
				s := soakOf(func(int) int64 { return 1 << 30 })
				s.Samples[59].NodeNotReadyEvents = 1
				return s
			}(),
		},
		{
			name: "the load failed",
			soak: func() *Soak {
				s := soakOf(func(int) int64 { return 1 << 30 })
				s.Errors = []string{"churn: 3 pods not Running"}
				return s
			}(),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.soak.Evaluate()
			if tc.soak.Pass != tc.pass {
				t.Fatalf("Pass = %v, want %v; checks %+v", tc.soak.Pass, tc.pass, tc.soak.Checks)
			}
			if tc.soak.TailFromSeconds != 900 {
				t.Errorf("tail from %v s, want 900 (a quarter of an hour)", tc.soak.TailFromSeconds)
			}
			if tc.failed != "" {
				c := check(t, tc.soak, tc.failed)
				if c.Pass || c.Value != tc.value {
					t.Errorf("%s: %+v, want failed with value %q", tc.failed, c, tc.value)
				}
			}
		})
	}
}

func TestSoakWithFewSamples(t *testing.T) {
	s := &Soak{Limits: DefaultSoakLimits}
	s.Evaluate()
	if s.Pass || len(s.Checks) != 1 || s.Checks[0].Name != "samples" {
		t.Fatalf("a soak without samples: %+v", s)
	}
	// Two samples: each edge is one of them.
	s.Samples = []SoakSample{{AtSeconds: 10, RSSBytes: 100, HeapLiveBytes: 1, Goroutines: 1, OpenFDs: 1}, {AtSeconds: 20, RSSBytes: 200, HeapLiveBytes: 1, Goroutines: 1, OpenFDs: 1}}
	s.Evaluate()
	if c := check(t, s, "RSS growth"); c.Pass || c.Value != "100 %" {
		t.Errorf("RSS growth over two samples: %+v", c)
	}
}

func TestSoakRenders(t *testing.T) {
	s := soakOf(func(m int) int64 { return (1 << 30) + int64(m)<<22 })
	s.Evaluate()
	var md, html bytes.Buffer
	if err := RenderSoakMarkdown(&md, s); err != nil {
		t.Fatal(err)
	}
	if err := RenderSoakHTML(&html, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Soak: soak, 10 nodes, 1h0m0s at 5 pods/s: FAIL", "| RSS growth | 15 % | ≤ 5 % | **FAIL** | 1092 MiB (median of 5 samples from 15m0s) → 1256 MiB (median of the last 5, to 1h0m0s) |", "| 1h0m0s | 1264 MiB |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}
	for _, want := range []string{"<svg", "tail starts", "Lease renewal lateness", `<span class="fail">FAIL</span>`, "<td>1264</td>"} {
		if !strings.Contains(html.String(), want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
}
