package loadprofiles

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func faultNodes() []FaultNode {
	var nodes []FaultNode
	for _, zone := range []string{"a", "b", "c"} {
		for i := range 4 {
			nodes = append(nodes, FaultNode{
				Name: fmt.Sprintf("zone-%s-%d", zone, i), Pool: "zone-" + zone,
				Labels: map[string]string{"topology.kubernetes.io/zone": zone, "fleetlet.io/pool": "zone-" + zone},
			})
		}
	}
	return nodes
}

func TestSelectNodes(t *testing.T) {
	nodes := faultNodes()
	for _, tc := range []struct {
		name    string
		sel     NodeSelector
		want    int
		prefix  string // every node selected starts with it
		wantErr string
		words   string
	}{
		{name: "everything", sel: NodeSelector{}, want: 12, words: "every node"},
		{name: "a pool", sel: NodeSelector{Pool: "zone-b"}, want: 4, prefix: "zone-b-", words: "pool zone-b"},
		{name: "a label", sel: NodeSelector{Labels: map[string]string{"topology.kubernetes.io/zone": "c"}}, want: 4, prefix: "zone-c-", words: "label topology.kubernetes.io/zone=c"},
		{name: "count of a pool", sel: NodeSelector{Pool: "zone-a", Count: 3}, want: 3, prefix: "zone-a-", words: "3 nodes of pool zone-a"},
		{name: "fraction rounds up", sel: NodeSelector{Fraction: 0.1}, want: 2, words: "10% of the fleet"},
		{name: "too many", sel: NodeSelector{Pool: "zone-a", Count: 5}, wantErr: "nodes: 5 nodes of pool zone-a, but only 4 nodes match"},
		{name: "no match", sel: NodeSelector{Labels: map[string]string{"x": "y"}}, wantErr: "nodes: label x=y matches none of the fleet's nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := selectNodes(nodes, tc.sel, 42, "outage")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("selectNodes() error = %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want {
				t.Fatalf("selected %d nodes (%v), want %d", len(got), got, tc.want)
			}
			for _, n := range got {
				if !strings.HasPrefix(n, tc.prefix) {
					t.Errorf("selected %s, not of %s", n, tc.prefix)
				}
			}
			if !slices.IsSortedFunc(got, func(a, b string) int {
				return slices.IndexFunc(nodes, func(n FaultNode) bool { return n.Name == a }) - slices.IndexFunc(nodes, func(n FaultNode) bool { return n.Name == b })
			}) {
				t.Errorf("selected %v, not in the fleet's order", got)
			}
			if words := tc.sel.describe(); words != tc.words {
				t.Errorf("describe() = %q, want %q", words, tc.words)
			}
		})
	}
}

func TestSelectNodesReplays(t *testing.T) {
	nodes := faultNodes()
	sel := NodeSelector{Count: 5}
	first, _ := selectNodes(nodes, sel, 7, "outage")
	again, _ := selectNodes(nodes, sel, 7, "outage")
	if !slices.Equal(first, again) {
		t.Fatalf("same seed and phase drew %v, then %v", first, again)
	}
	differs := false
	for seed := uint64(8); seed < 20 && !differs; seed++ {
		other, _ := selectNodes(nodes, sel, seed, "outage")
		differs = !slices.Equal(first, other)
	}
	if !differs {
		t.Errorf("twelve other seeds all drew %v: the draw ignores the seed", first)
	}
}

const faultProfileYAML = `
name: faults
nodePools:
- {name: zone-a, count: 4, labels: {topology.kubernetes.io/zone: a}}
- {name: zone-b, count: 4, labels: {topology.kubernetes.io/zone: b}}
phases:
- name: cut
  fault: {kind: partition, nodes: {pool: zone-a, count: 2}}
- sleep: {duration: 1s}
- heal: {phase: cut}
- name: pulls
  fault: {kind: registryErrors, nodes: {labels: {topology.kubernetes.io/zone: b}}, duration: 1m}
- name: slow
  fault: {kind: runtimeSlow, nodes: {fraction: 0.5}, slowFactor: 10, duration: 1m}
`

func TestParseFaultPhases(t *testing.T) {
	p, err := Parse([]byte(faultProfileYAML), "faults.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if f := p.Phases[0].Fault; f.Kind != FaultPartition || f.Nodes.Count != 2 || f.ReadyTimeout.Duration != 0 {
		t.Errorf("cut = %+v", f)
	}
	if h := p.Phases[2].Heal; h.Phase != "cut" || h.Timeout.Duration != DefaultWaitTimeout {
		t.Errorf("heal = %+v, want the default timeout", h)
	}
	if f := p.Phases[3].Fault; f.PullError != DefaultPullError || f.ReadyTimeout.Duration != DefaultWaitTimeout {
		t.Errorf("pulls = %+v, want the default pull error and ready timeout", f)
	}
}

func TestParseFaultPhaseErrors(t *testing.T) {
	for _, tc := range []struct{ old, new, want string }{
		{"kind: partition", "kind: powerCut", `phases[0].fault.kind: Unsupported value: "powerCut"`},
		{"kind: partition, ", "", "phases[0].fault.kind: Required value"},
		{"pool: zone-a, count: 2", "pool: zone-c", `phases[0].fault.nodes.pool: Unsupported value: "zone-c"`},
		{"pool: zone-a, count: 2", "pool: zone-a, count: 5", "phases[0].fault.nodes.count: Invalid value: 5: is more than the 4 nodes that match"},
		{"pool: zone-a, count: 2", "fraction: 1.5", "phases[0].fault.nodes.fraction: Invalid value: 1.5"},
		{"pool: zone-a, count: 2", "count: 1, fraction: 0.5", "give count or fraction, not both"},
		{"{labels: {topology.kubernetes.io/zone: b}}", "{labels: {topology.kubernetes.io/zone: z}}", "phases[3].fault.nodes: Invalid value: \"label topology.kubernetes.io/zone=z\": matches no node"},
		{"heal: {phase: cut}", "heal: {phase: pulls}", `phases[2].heal.phase: Invalid value: "pulls": must name an earlier fault phase`},
		{"- heal: {phase: cut}", "- heal: {phase: cut}\n- heal: {phase: cut}", `phases[3].heal.phase: Duplicate value: "cut"`},
		{"duration: 1m}\n- name: slow", "duration: 1m}\n- heal: {phase: pulls}\n- name: slow", "that fault ends by itself after its duration"},
		{"slowFactor: 10", "slowFactor: 0.5", "phases[4].fault.slowFactor: Invalid value: 0.5: must be at least 1"},
		{"slowFactor: 10, ", "", "runtimeSlow needs slowFactor above 1, callLatency, or both"},
		{"duration: 1m}\n- name: slow", "duration: 1m, pullError: gone}\n- name: slow", `phases[3].fault.pullError: Unsupported value: "gone"`},
		{"count: 2}}", "count: 2}, pullError: notfound}", "only registryErrors takes pullError"},
		{"count: 2}}", "count: 2}, readyTimeout: 1m}", "a fault without a duration ends in a heal phase"},
		{"duration: 1m}\n- name: slow", "duration: 1m, readyTimeout: 0s}\n- name: slow", "phases[3].fault.readyTimeout: Invalid value: \"0s\": must be greater than zero"},
		{"- name: pulls", "- name: cut", `phases[3].name: Duplicate value: "cut"`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			yaml := strings.Replace(faultProfileYAML, tc.old, tc.new, 1)
			if yaml == faultProfileYAML {
				t.Fatalf("%q is not in the profile", tc.old)
			}
			_, err := Parse([]byte(yaml), "faults.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse() error = %v, want one with %q", err, tc.want)
			}
		})
	}
}

// fakeInjector records what the driver asks of the fleet.
type fakeInjector struct {
	nodes []FaultNode
	// notReady, if set, is what WaitReady fails with.
	notReady error

	mu    sync.Mutex
	calls []string
}

func (f *fakeInjector) Nodes() []FaultNode { return f.nodes }

func (f *fakeInjector) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeInjector) Inject(_ context.Context, fault Fault) error {
	f.record(fmt.Sprintf("inject %s %s %s", fault.Phase, fault.Spec.Kind, strings.Join(fault.Nodes, ",")))
	return nil
}

func (f *fakeInjector) Heal(_ context.Context, fault Fault) error {
	f.record("heal " + fault.Phase)
	return nil
}

func (f *fakeInjector) WaitReady(_ context.Context, nodes []string, timeout time.Duration) error {
	f.record(fmt.Sprintf("wait %s %v", strings.Join(nodes, ","), timeout))
	return f.notReady
}

func (f *fakeInjector) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func faultProfile(t *testing.T, phases ...Phase) *Profile {
	t.Helper()
	p := &Profile{Name: "test", NodePools: []NodePool{{Name: "zone-a", Count: 4}, {Name: "zone-b", Count: 4}}, Phases: phases}
	p.Default()
	if err := p.Validate(); err != nil {
		t.Fatalf("test profile is invalid: %v", err)
	}
	return p
}

func TestDriverFaultPhases(t *testing.T) {
	ctx, cancel := testContext(t)
	defer cancel()
	inj := &fakeInjector{nodes: faultNodes()[:8]}
	d := &Driver{Client: newFakeAPI(t, nil), Faults: inj}
	p := faultProfile(t,
		Phase{Name: "cut", Fault: &FaultPhase{Kind: FaultPartition, Nodes: NodeSelector{Pool: "zone-a"}}},
		Phase{Name: "heal-cut", Heal: &HealPhase{Phase: "cut", Timeout: metav1.Duration{Duration: time.Minute}}},
		Phase{Name: "brief", Fault: &FaultPhase{Kind: FaultNodeDown, Nodes: NodeSelector{Pool: "zone-b", Count: 1}, Duration: metav1.Duration{Duration: time.Millisecond}}},
		Phase{Name: "left", Fault: &FaultPhase{Kind: FaultSyncLoopStall, Nodes: NodeSelector{Pool: "zone-b"}}},
	)
	if err := d.Run(ctx, p); err != nil {
		t.Fatal(err)
	}
	got := inj.log()
	want := []string{
		"inject cut partition zone-a-0,zone-a-1,zone-a-2,zone-a-3",
		"heal cut",
		"wait zone-a-0,zone-a-1,zone-a-2,zone-a-3 1m0s",
	}
	if !slices.Equal(got[:3], want) {
		t.Fatalf("calls = %q, want them to start with %q", got, want)
	}
	if !strings.HasPrefix(got[3], "inject brief nodeDown zone-b-") || got[4] != "heal brief" || !strings.HasPrefix(got[5], "wait zone-b-") || !strings.HasSuffix(got[5], " 5m0s") {
		t.Errorf("the timed fault's calls = %q, want inject, heal, then a wait of the default timeout", got[3:6])
	}
	// The fault the profile left in place ends with the run, without a wait.
	if rest := got[6:]; !slices.Equal(rest, []string{"inject left syncLoopStall zone-b-0,zone-b-1,zone-b-2,zone-b-3", "heal left"}) {
		t.Errorf("calls after the timed fault = %q, want the stall injected then healed at the end", rest)
	}
}

func TestDriverFaultNotReadyAgainFails(t *testing.T) {
	ctx, cancel := testContext(t)
	defer cancel()
	inj := &fakeInjector{nodes: faultNodes()[:8], notReady: errors.New("2 nodes are not Ready: zone-a-0, zone-a-1")}
	d := &Driver{Client: newFakeAPI(t, nil), Faults: inj}
	p := faultProfile(t, Phase{Name: "down", Fault: &FaultPhase{Kind: FaultNodeDown, Nodes: NodeSelector{Pool: "zone-a"}, Duration: metav1.Duration{Duration: time.Millisecond}}})
	err := d.Run(ctx, p)
	if err == nil || !strings.Contains(err.Error(), `phase "down": after the nodeDown of pool zone-a ended: 2 nodes are not Ready`) {
		t.Fatalf("Run() error = %v, want the nodes that did not come back named", err)
	}
}

func TestDriverFaultsNeedAFleet(t *testing.T) {
	ctx, cancel := testContext(t)
	defer cancel()
	d := &Driver{Client: newFakeAPI(t, nil)}
	p := faultProfile(t, Phase{Name: "cut", Fault: &FaultPhase{Kind: FaultPartition, Nodes: NodeSelector{}}})
	if err := d.Run(ctx, p); err == nil || !strings.Contains(err.Error(), "fault phases need the fleet's agents") {
		t.Fatalf("Run() error = %v, want one saying fault phases need a fleet", err)
	}
}

func TestDriverCancelHealsFaults(t *testing.T) {
	ctx, cancel := testContext(t)
	inj := &fakeInjector{nodes: faultNodes()[:8]}
	d := &Driver{Client: newFakeAPI(t, nil), Faults: inj}
	p := faultProfile(t, Phase{Name: "long", Fault: &FaultPhase{Kind: FaultPartition, Nodes: NodeSelector{}, Duration: metav1.Duration{Duration: time.Hour}}})
	done := runAsync(ctx, d, p)
	deadline := time.Now().Add(30 * time.Second)
	for len(inj.log()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run() error = %v, want context.Canceled", err)
	}
	if got := inj.log(); len(got) != 2 || got[1] != "heal long" {
		t.Fatalf("calls = %q, want the fault healed when the run was cancelled", got)
	}
}
