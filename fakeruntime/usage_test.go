package fakeruntime

import (
	"math"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// parseCurve parses one usage curve as a pod annotation spells it.
func parseCurve(t *testing.T, yamlCurve string) *curve {
	t.Helper()
	pb, err := ParsePodBehaviour("app: {memory: " + yamlCurve + "}")
	if err != nil {
		t.Fatalf("curve %s: %v", yamlCurve, err)
	}
	return resolveCurve(pb["app"].Memory)
}

const mi = 1 << 20

func TestCurveAtAndIntegral(t *testing.T) {
	const leak = `{start: 64Mi, perSecond: 1Mi, steps: [{after: 30s, value: 200Mi}], max: 1Gi}`
	sec := time.Second
	tests := []struct {
		name     string
		curve    string // "" for none
		t        time.Duration
		at       float64
		integral float64 // unit-seconds from 0 to t
	}{
		{"no curve", "", time.Hour, 0, 0},
		{"constant", `{start: 250m}`, 10 * sec, 0.25, 2.5},
		{"constant at the start", `{start: 250m}`, 0, 0.25, 0},
		{"linear", `{perSecond: 1}`, 10 * sec, 10, 50},
		{"linear, capped at max", `{perSecond: 1, max: 4}`, 10 * sec, 4, 8 + 6*4},
		{"shrinking to zero and staying there", `{start: 10, perSecond: -1}`, 20 * sec, 0, 50},
		{"steps up and down", `{start: 1, steps: [{after: 10s, value: 3}, {after: 20s, value: 0}]}`, 30 * sec, 0, 10 + 30},
		{"between steps", `{start: 1, steps: [{after: 10s, value: 3}, {after: 20s, value: 0}]}`, 15 * sec, 3, 10 + 15},
		{"at a step: the step's level", `{start: 1, steps: [{after: 10s, value: 3}]}`, 10 * sec, 3, 10},
		{"a step above max is capped", `{steps: [{after: 5s, value: 10}], max: 4}`, 6 * sec, 4, 4},
		{"the leak before its step", leak, 10 * sec, 74 * mi, (64*10 + 50) * mi},
		{"the leak after its step", leak, 40 * sec, 210 * mi, (64*30 + 450 + 200*10 + 50) * mi},
		{"the leak at its cap", leak, time.Hour, 1 << 30, math.NaN()},
		{"two steps at one time: the later wins", `{steps: [{after: 5s, value: 500}, {after: 5s, value: 10}]}`, 5 * sec, 10, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c *curve
			if tc.curve != "" {
				c = parseCurve(t, tc.curve)
			}
			if got := c.at(tc.t); !near(got, tc.at) {
				t.Errorf("at(%s) = %g, want %g", tc.t, got, tc.at)
			}
			if got := c.integral(tc.t); !math.IsNaN(tc.integral) && !near(got, tc.integral) {
				t.Errorf("integral(%s) = %g, want %g", tc.t, got, tc.integral)
			}
		})
	}
}

// near compares floats to a relative 1e-9: quantities convert to floats.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }

func TestCurveIntegralIsMonotonic(t *testing.T) {
	c := parseCurve(t, `{start: 2, perSecond: -100m, steps: [{after: 30s, value: 500m}, {after: 40s, value: 3}], max: 2500m}`)
	prev := 0.0
	for ms := range 60_000 {
		got := c.integral(time.Duration(ms) * time.Millisecond)
		if got < prev {
			t.Fatalf("integral(%dms) = %g, below integral of the millisecond before (%g)", ms, got, prev)
		}
		prev = got
	}
}

func TestCurveReaches(t *testing.T) {
	sec := time.Second
	tests := []struct {
		name   string
		curve  string
		limit  float64
		from   time.Duration
		want   time.Duration
		reachd bool
	}{
		{"at the limit is not past it", `{start: 100}`, 100, 0, 0, false},
		{"above the limit from the start", `{start: 101}`, 100, 0, 0, true},
		{"max at the limit", `{perSecond: 10, max: 100}`, 100, 0, 0, false},
		{"growth reaches the limit", `{perSecond: 10}`, 100, 0, 10 * sec, true},
		{"already above when the limit is set", `{perSecond: 10}`, 100, 20 * sec, 20 * sec, true},
		{"growth after a later from", `{perSecond: 10}`, 100, 5 * sec, 10 * sec, true},
		{"a step past the limit", `{steps: [{after: 5s, value: 200}]}`, 100, 0, 5 * sec, true},
		{"shrinking, then a step", `{start: 50, perSecond: -1, steps: [{after: 100s, value: 150}]}`, 100, 0, 100 * sec, true},
		{"a step past the limit at once undone", `{steps: [{after: 5s, value: 500}, {after: 5s, value: 10}]}`, 100, 0, 0, false},
		{"a step before from no longer counts", `{steps: [{after: 5s, value: 500}, {after: 6s, value: 10}]}`, 100, 10 * sec, 0, false},
		{"the documented cache", `{start: 64Mi, perSecond: 1Mi, steps: [{after: 30s, value: 200Mi}]}`, 256 * mi, 0, 86 * sec, true},
		{"a growth too slow to reach it in time.Duration", `{perSecond: 1}`, 1e18, 0, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseCurve(t, tc.curve).reaches(tc.limit, tc.from)
			if ok != tc.reachd || (ok && got != tc.want) {
				t.Errorf("reaches(%g, from %s) = %s, %v; want %s, %v", tc.limit, tc.from, got, ok, tc.want, tc.reachd)
			}
		})
	}
	if _, ok := (*curve)(nil).reaches(0, 0); ok {
		t.Error("a nil curve reaches a limit")
	}
}

func TestUsageBehaviourValidation(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{`{"app": {"memory": {"start": "-1Mi"}}}`, `app.memory.start: Invalid value: "-1Mi": must not be negative`},
		{`{"app": {"cpu": {"max": "-1"}}}`, `app.cpu.max: Invalid value: "-1": must not be negative`},
		{`{"app": {"pids": {"steps": [{"after": "10s", "value": "-2"}]}}}`, `app.pids.steps[0].value: Invalid value: "-2"`},
		{`{"app": {"writableLayer": {"steps": [{"after": "-1s", "value": "1"}]}}}`, `app.writableLayer.steps[0].after: Invalid value: "-1s"`},
		{`{"app": {"memory": {"steps": [{"after": "1m", "value": "1"}, {"after": "10s", "value": "2"}]}}}`, `app.memory.steps[1].after: Invalid value: "10s": steps must be sorted`},
		{`{"app": {"memory": {"start": "lots"}}}`, `quantities must match the regular expression`},
		{`{"app": {"memory": {"begin": "1Mi"}}}`, `unknown field "app.memory.begin"`},
		{`{"app": {"logs": {"line": "x"}}}`, `app.logs.every: Invalid value: "0s": must be positive`},
	} {
		_, err := ParsePodBehaviour(tc.value)
		wantErrContains(t, tc.value, err, tc.want)
	}
	// A shrinking curve is valid: memory can be given back.
	if _, err := ParsePodBehaviour(`{"app": {"memory": {"start": "1Gi", "perSecond": "-1Mi"}}}`); err != nil {
		t.Errorf("a negative perSecond: %v", err)
	}
	// Node defaults are checked with their path under behaviour.containers.
	err := Behaviour{Containers: ContainerBehaviour{CPU: &UsageCurve{Start: new(resource.MustParse("-1"))}}}.Validate()
	wantErrContains(t, "node default", err, "behaviour.containers.cpu.start")
}

func TestUsageCurveMergeAndCopy(t *testing.T) {
	node := ContainerBehaviour{
		Memory: &UsageCurve{Start: new(resource.MustParse("64Mi")), Steps: []UsageStep{{After: Duration(time.Second), Value: resource.MustParse("1Gi")}}},
		CPU:    &UsageCurve{Start: new(resource.MustParse("100m"))},
		Logs:   &LogBehaviour{Every: Duration(time.Second)},
	}
	pod := ContainerBehaviour{Memory: &UsageCurve{PerSecond: new(resource.MustParse("1Mi"))}}
	got := pod.over(node)
	if got.Memory != pod.Memory || got.CPU != node.CPU || got.Logs != node.Logs {
		t.Errorf("over: memory %v cpu %v logs %v; want the pod's memory curve whole and the node's cpu and logs", got.Memory, got.CPU, got.Logs)
	}
	cp := node.deepCopy()
	cp.Memory.Start.Add(resource.MustParse("1Mi"))
	cp.Memory.Steps[0].Value.Add(resource.MustParse("1Mi"))
	cp.Logs.Line = "changed"
	if node.Memory.Start.String() != "64Mi" || node.Memory.Steps[0].Value.String() != "1Gi" || node.Logs.Line != "" {
		t.Errorf("deepCopy shares with the original: %v, %v, %q", node.Memory.Start, node.Memory.Steps[0].Value, node.Logs.Line)
	}
	if s := (ContainerBehaviour{}).deepCopy(); s.Memory != nil || s.Logs != nil {
		t.Errorf("deepCopy of unset curves = %+v", s)
	}
}

func TestInodes(t *testing.T) {
	for bytes, want := range map[uint64]uint64{0: 0, 1: 1, 16 << 10: 1, 16<<10 + 1: 2, 10 << 20: 640} {
		if got := inodes(bytes); got != want {
			t.Errorf("inodes(%d) = %d, want %d", bytes, got, want)
		}
	}
}
