package loadprofiles

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/fleetlet/fleetlet/nodeagent"
	"github.com/fleetlet/fleetlet/reports"
)

// validYAML is a small correct profile; the malformed cases edit one line.
const validYAML = `name: test
nodePools:
  - name: default
    count: 3
    cpu: "4"
runtime:
  pullLatency: 200ms
phases:
  - name: create
    create:
      count: 10
      qps: 5
      template:
        metadata: {labels: {app: test}}
        spec:
          containers:
            - name: app
              image: registry.k8s.io/pause:3.10
              resources: {requests: {cpu: 10m, memory: 16Mi}}
  - waitRunning: {timeout: 1m}
  - delete: {}
  - waitGone: {}
  - sleep: {duration: 1s}
  - churn:
      qps: 4
      duration: 30s
      lifetime: 10s
      template: {spec: {containers: [{name: churner, image: registry.k8s.io/pause:3.10}]}}
  - services:
      count: 7
      qps: 9
      selector: {app: web}
`

func TestParseValid(t *testing.T) {
	p, err := Parse([]byte(validYAML), "test.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	pool := p.NodePools[0]
	if pool.Pods != DefaultPodsPerNode || pool.Memory.Cmp(resource.MustParse("32Gi")) != 0 || pool.CPU.Cmp(resource.MustParse("4")) != 0 {
		t.Errorf("pool not defaulted as expected: pods %d cpu %s memory %s", pool.Pods, pool.CPU.String(), pool.Memory.String())
	}
	if got := p.TotalNodes(); got != 3 {
		t.Errorf("TotalNodes = %d, want 3", got)
	}
	var names []string
	for _, ph := range p.Phases {
		names = append(names, ph.Name)
	}
	if got, want := strings.Join(names, ","), "create,wait-running,delete,wait-gone,sleep,churn,services"; got != want {
		t.Errorf("phase names = %s, want %s", got, want)
	}
	if got := p.Phases[2].Delete.QPS; got != DefaultQPS {
		t.Errorf("delete qps = %v, want %v", got, DefaultQPS)
	}
	if got := p.Phases[1].WaitRunning.Timeout.Duration; got != time.Minute {
		t.Errorf("waitRunning timeout = %v, want the profile's 1m", got)
	}
	if got := p.Phases[3].WaitGone.Timeout.Duration; got != DefaultWaitTimeout {
		t.Errorf("waitGone timeout = %v, want the default %v", got, DefaultWaitTimeout)
	}
	churn := p.Phases[5].Churn
	if churn.QPS != 4 || churn.Duration.Duration != 30*time.Second || churn.Lifetime.Duration != 10*time.Second {
		t.Errorf("churn = %v/s for %v, lifetime %v", churn.QPS, churn.Duration.Duration, churn.Lifetime.Duration)
	}
	if got := churn.Timeout.Duration; got != DefaultWaitTimeout {
		t.Errorf("churn timeout = %v, want the default %v", got, DefaultWaitTimeout)
	}
	if got := churn.Template.Spec.Containers[0].Name; got != "churner" {
		t.Errorf("churn template container = %q", got)
	}
	svc := p.Phases[6].Services
	if svc.Count != 7 || svc.QPS != 9 || svc.Selector["app"] != "web" || len(svc.Selector) != 1 {
		t.Errorf("services = %d at %v/s selecting %v", svc.Count, svc.QPS, svc.Selector)
	}
	if svc.Port != DefaultServicePort || svc.TargetPort != DefaultServiceTargetPort {
		t.Errorf("services ports = %d -> %d, want the defaults %d -> %d", svc.Port, svc.TargetPort, DefaultServicePort, DefaultServiceTargetPort)
	}
	if got := p.Runtime.PullLatency.Duration; got != 200*time.Millisecond {
		t.Errorf("pullLatency = %v", got)
	}
	// The pod template's camelCase survives decoding: the reason profiles
	// are not read through viper.
	c := p.Phases[0].Create.Template.Spec.Containers[0]
	if c.Resources.Requests.Memory().String() != "16Mi" {
		t.Errorf("template requests lost: %v", c.Resources.Requests)
	}
}

func TestParseErrors(t *testing.T) {
	const quantityRE = `quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'`
	cases := []struct {
		name     string
		old, new string // replace old with new in validYAML
		want     string
	}{{
		name: "unknown field",
		old:  "    cpu: \"4\"\n", new: "    cpu: \"4\"\n    colour: red\n",
		want: `profile test.yaml: unknown field "nodePools[0].colour"`,
	}, {
		name: "unknown field in the pod template",
		old:  "              image: registry", new: "              imagePullPolcy: Always\n              image: registry",
		want: `profile test.yaml: unknown field "phases[0].create.template.spec.containers[0].imagePullPolcy"`,
	}, {
		name: "keys are case-sensitive",
		old:  "nodePools:", new: "nodepools:",
		want: `profile test.yaml: unknown field "nodepools"`,
	}, {
		name: "bad quantity",
		old:  `cpu: "4"`, new: `cpu: four`,
		want: `profile test.yaml: nodePools[0].cpu: Invalid value: "four": ` + quantityRE,
	}, {
		name: "bad quantity in the pod template",
		old:  "memory: 16Mi", new: "memory: 16MB",
		want: `profile test.yaml: phases[0].create.template.spec.containers[0].resources.requests[memory]: Invalid value: "16MB": ` + quantityRE,
	}, {
		name: "wrong type",
		old:  "count: 3", new: "count: three",
		want: `profile test.yaml: nodePools[0].count: Invalid value: "three": must be an integer`,
	}, {
		name: "negative count",
		old:  "count: 3", new: "count: -1",
		want: `profile test.yaml: nodePools[0].count: Invalid value: -1: must be greater than zero`,
	}, {
		name: "system usage of a resource the stats do not model",
		old:  `cpu: "4"`, new: `cpu: "4"` + "\n    systemUsage: {pids: 10}",
		want: `profile test.yaml: nodePools[0].systemUsage: Unsupported value: "pids": supported values: "cpu", "memory"`,
	}, {
		name: "system usage of the whole node",
		old:  `cpu: "4"`, new: `cpu: "4"` + "\n    systemUsage: {cpu: 4}",
		want: `profile test.yaml: nodePools[0].systemUsage[cpu]: Invalid value: "4": must be less than the node's cpu, 4`,
	}, {
		name: "negative system usage",
		old:  `cpu: "4"`, new: `cpu: "4"` + "\n    systemUsage: {memory: -1Mi}",
		want: `profile test.yaml: nodePools[0].systemUsage[memory]: Invalid value: "-1Mi": must not be negative; "0" is none`,
	}, {
		name: "negative create count",
		old:  "count: 10", new: "count: -5",
		want: `profile test.yaml: phases[0].create.count: Invalid value: -5: must be greater than zero`,
	}, {
		name: "negative qps",
		old:  "qps: 5", new: "qps: -5",
		want: `profile test.yaml: phases[0].create.qps: Invalid value: -5: must be greater than zero`,
	}, {
		name: "two actions in a phase",
		old:  "  - waitRunning: {timeout: 1m}", new: "  - waitRunning: {timeout: 1m}\n    sleep: {duration: 1s}",
		want: `profile test.yaml: phases[1].sleep: Forbidden: a phase has exactly one action, and this one already has waitRunning`,
	}, {
		name: "no action in a phase",
		old:  "  - delete: {}", new: "  - name: nothing",
		want: `profile test.yaml: phases[2]: Required value: a phase needs one action: create, scale, update, waitRunning, delete, waitGone, sleep, churn, services, fault or heal`,
	}, {
		name: "unknown field in a churn",
		old:  "lifetime: 10s", new: "lifetme: 10s",
		want: `profile test.yaml: unknown field "phases[5].churn.lifetme"`,
	}, {
		name: "churn without a rate: it is not defaulted",
		old:  "      qps: 4\n", new: "",
		want: `profile test.yaml: phases[5].churn.qps: Invalid value: 0: must be greater than zero`,
	}, {
		name: "churn with a zero rate",
		old:  "qps: 4", new: "qps: 0",
		want: `profile test.yaml: phases[5].churn.qps: Invalid value: 0: must be greater than zero`,
	}, {
		name: "churn without a duration",
		old:  "      duration: 30s\n", new: "",
		want: `profile test.yaml: phases[5].churn.duration: Invalid value: "0s": must be greater than zero`,
	}, {
		name: "churn with a negative lifetime",
		old:  "lifetime: 10s", new: "lifetime: -10s",
		want: `profile test.yaml: phases[5].churn.lifetime: Invalid value: "-10s": must not be negative`,
	}, {
		name: "churn with a negative timeout",
		old:  "lifetime: 10s", new: "lifetime: 10s\n      timeout: -1s",
		want: `profile test.yaml: phases[5].churn.timeout: Invalid value: "-1s": must not be negative`,
	}, {
		name: "churn template names its namespace",
		old:  "template: {spec:", new: "template: {metadata: {namespace: x}, spec:",
		want: `profile test.yaml: phases[5].churn.template.metadata.namespace: Forbidden: the driver creates pods in its own namespace`,
	}, {
		name: "churn template without containers",
		old:  "{containers: [{name: churner, image: registry.k8s.io/pause:3.10}]}", new: "{}",
		want: `profile test.yaml: phases[5].churn.template.spec.containers: Required value: a pod needs at least one container`,
	}, {
		name: "churn and sleep in one phase",
		old:  "  - churn:", new: "  - sleep: {duration: 1s}\n    churn:",
		want: `profile test.yaml: phases[5].churn: Forbidden: a phase has exactly one action, and this one already has sleep`,
	}, {
		name: "unknown field in a services phase",
		old:  "selector: {app: web}", new: "selector: {app: web}\n      prot: 80",
		want: `profile test.yaml: unknown field "phases[6].services.prot"`,
	}, {
		name: "services and churn in one phase",
		old:  "  - services:", new: "  - churn: {qps: 1, duration: 1s, template: {spec: {containers: [{name: a, image: b}]}}}\n    services:",
		want: `profile test.yaml: phases[6].services: Forbidden: a phase has exactly one action, and this one already has churn`,
	}, {
		name: "services port not a number",
		old:  "selector: {app: web}", new: "selector: {app: web}\n      port: http",
		want: `profile test.yaml: phases[6].services.port: Invalid value: "http": must be an integer`,
	}, {
		name: "no containers",
		old:  "          containers:\n            - name: app\n              image: registry.k8s.io/pause:3.10\n              resources: {requests: {cpu: 10m, memory: 16Mi}}\n",
		new:  "          containers: []\n",
		want: `profile test.yaml: phases[0].create.template.spec.containers: Required value: a pod needs at least one container`,
	}, {
		name: "container without image",
		old:  "              image: registry.k8s.io/pause:3.10\n", new: "",
		want: `profile test.yaml: phases[0].create.template.spec.containers[0].image: Required value`,
	}, {
		name: "template names its pods",
		old:  "metadata: {labels: {app: test}}", new: "metadata: {name: mine}",
		want: `profile test.yaml: phases[0].create.template.metadata.name: Forbidden: the driver names pods after the phase`,
	}, {
		name: "bad duration",
		old:  "pullLatency: 200ms", new: "pullLatency: fast",
		want: `profile test.yaml: runtime.pullLatency: Invalid value: "fast": time: invalid duration "fast"`,
	}, {
		name: "negative duration",
		old:  "timeout: 1m", new: "timeout: -1m",
		want: `profile test.yaml: phases[1].waitRunning.timeout: Invalid value: "-1m0s": must not be negative`,
	}, {
		name: "no node pools",
		old:  "nodePools:\n  - name: default\n    count: 3\n    cpu: \"4\"\n", new: "",
		want: `profile test.yaml: nodePools: Required value: at least one node pool is needed`,
	}, {
		name: "duplicate pool names",
		old:  "runtime:", new: "  - {name: default, count: 1}\nruntime:",
		want: `profile test.yaml: nodePools[1].name: Duplicate value: "default"`,
	}, {
		name: "pool name not a DNS label",
		old:  "name: default", new: "name: Big_Pool",
		want: `profile test.yaml: nodePools[0].name: Invalid value: "Big_Pool": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`,
	}, {
		name: "malformed YAML",
		old:  "    count: 3\n", new: "    count: 3\n   bad: [\n",
		want: `profile test.yaml: line 4: did not find expected '-' indicator`,
	}, {
		name: "duplicate key",
		old:  "name: test\n", new: "name: test\nname: again\n",
		want: `profile test.yaml: line 2: key "name" already set in map`,
	}, {
		name: "unknown watch mode",
		old:  "runtime:\n", new: "watchMode: everywhere\nruntime:\n",
		want: `profile test.yaml: watchMode: Unsupported value: "everywhere": supported values: "per-node", "shared"`,
	}, {
		name: "not a mapping",
		old:  validYAML, new: "- just\n- a list\n",
		want: `profile test.yaml: the document must be a mapping`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(validYAML, tc.old) {
				t.Fatalf("test case edits text that is not in validYAML: %q", tc.old)
			}
			_, err := Parse([]byte(strings.Replace(validYAML, tc.old, tc.new, 1)), "test.yaml")
			if err == nil {
				t.Fatalf("Parse succeeded, want %q", tc.want)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("error:\n got: %s\nwant: %s", got, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err.Error())
			}
		})
	}
}

func TestValidateReportsEveryProblemOnItsOwnLine(t *testing.T) {
	p, err := Parse([]byte(validYAML), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p.NodePools[0].Count = -1
	p.Phases[0].Create.QPS = 0
	err = p.Validate()
	want := "nodePools[0].count: Invalid value: -1: must be greater than zero\n" +
		"phases[0].create.qps: Invalid value: 0: must be greater than zero"
	if err == nil || err.Error() != want {
		t.Fatalf("Validate:\n got: %v\nwant: %s", err, want)
	}
	var fe *field.Error
	if !errors.As(err, &fe) || fe.Field != "nodePools[0].count" {
		t.Errorf("errors.As(*field.Error) = %v, want the first field error", fe)
	}
	if got, want := withSource(err, "x.yaml").Error(), "profile x.yaml has 2 problems:\n  "+strings.ReplaceAll(want, "\n", "\n  "); got != want {
		t.Errorf("with source:\n got: %s\nwant: %s", got, want)
	}
}

func TestBuiltins(t *testing.T) {
	if got, want := strings.Join(BuiltinNames(), ","), "churn,density,density-1k,eviction-storm,flaky-registry,heartbeat,lifecycle,load,quickstart,scheduler-throughput,services,smoke,soak,sweep,zone-outage"; got != want {
		t.Fatalf("BuiltinNames = %s, want %s", got, want)
	}
	for _, name := range BuiltinNames() {
		p, err := Load(name)
		if err != nil {
			t.Fatalf("Load(%q): %v", name, err)
		}
		if p.Name != name {
			t.Errorf("built-in %s is named %q inside", name, p.Name)
		}
		if p.Description == "" {
			t.Errorf("built-in %s has no description", name)
		}
		// Load validated the defaulted profile; check that the file did not
		// lean on a default that would then be invalid.
		if err := p.Validate(); err != nil {
			t.Errorf("built-in %s: %v", name, err)
		}
	}

	q, _ := Load("quickstart")
	pool := q.NodePools[0]
	if q.TotalNodes() != 100 || pool.CPU.String() != "8" || pool.Memory.String() != "32Gi" || pool.Pods != 110 {
		t.Errorf("quickstart pool = %d nodes, %s cpu, %s memory, %d pods", q.TotalNodes(), pool.CPU.String(), pool.Memory.String(), pool.Pods)
	}
	wantPhases := []string{"create", "wait-running", "delete", "wait-gone"}
	if len(q.Phases) != len(wantPhases) {
		t.Fatalf("quickstart has %d phases, want %d", len(q.Phases), len(wantPhases))
	}
	for i, ph := range q.Phases {
		if ph.Name != wantPhases[i] {
			t.Errorf("quickstart phase %d = %s, want %s", i, ph.Name, wantPhases[i])
		}
	}
	if c := q.Phases[0].Create; c.Count != 500 || c.QPS != 10 {
		t.Errorf("quickstart create = %d pods at %v/s", c.Count, c.QPS)
	}
	if w := q.Phases[1].WaitRunning; w.Timeout.Duration != 5*time.Minute {
		t.Errorf("quickstart waitRunning timeout = %v", w.Timeout.Duration)
	}
	if d := q.Phases[2].Delete; d.QPS != 10 {
		t.Errorf("quickstart delete qps = %v", d.QPS)
	}
	if !reflect.DeepEqual(q.SLOs, reports.SLOThresholds{}) {
		t.Errorf("quickstart SLOs = %+v, want the upstream thresholds: the first run must pass them", q.SLOs)
	}

	s, _ := Load("smoke")
	if s.TotalNodes() != 20 || s.Phases[0].Create.Count != 200 || s.Phases[0].Create.QPS != 50 {
		t.Errorf("smoke = %d nodes, %d pods at %v/s", s.TotalNodes(), s.Phases[0].Create.Count, s.Phases[0].Create.QPS)
	}
}

// TestBuiltinShapes pins each load profile to the shape its header promises.
func TestBuiltinShapes(t *testing.T) {
	load := func(name string) *Profile {
		t.Helper()
		p, err := Load(name)
		if err != nil {
			t.Fatalf("Load(%q): %v", name, err)
		}
		return p
	}
	phaseNames := func(p *Profile) string {
		names := make([]string, len(p.Phases))
		for i, ph := range p.Phases {
			names[i] = ph.Name
		}
		return strings.Join(names, ",")
	}
	const createDeleteWait = "create,wait-running,delete,wait-gone"

	d := load("density")
	if d.TotalNodes() != 50 || phaseNames(d) != createDeleteWait {
		t.Fatalf("density = %d nodes, phases %s", d.TotalNodes(), phaseNames(d))
	}
	if c := d.Phases[0].Create; c.Count != 50*30 || c.QPS != 20 {
		t.Errorf("density create = %d pods at %v/s, want 1500 at 20/s", c.Count, c.QPS)
	}
	if q := d.Phases[2].Delete.QPS; q != 20 {
		t.Errorf("density delete qps = %v, want 20", q)
	}

	c := load("churn")
	if c.TotalNodes() != 50 || len(c.Phases) != 1 || c.Phases[0].Churn == nil {
		t.Fatalf("churn = %d nodes, phases %s", c.TotalNodes(), phaseNames(c))
	}
	if ch := c.Phases[0].Churn; ch.QPS != 10 || ch.Duration.Duration != 2*time.Minute || ch.Lifetime.Duration != 30*time.Second || ch.Timeout.Duration != 5*time.Minute {
		t.Errorf("churn = %v/s for %v, lifetime %v, timeout %v", ch.QPS, ch.Duration.Duration, ch.Lifetime.Duration, ch.Timeout.Duration)
	}

	sv := load("services")
	if sv.TotalNodes() != 50 || phaseNames(sv) != "web-services,churn" {
		t.Fatalf("services = %d nodes, phases %s", sv.TotalNodes(), phaseNames(sv))
	}
	if s := sv.Phases[0].Services; s.Count != 5 || s.QPS != 20 || len(s.Selector) != 1 || s.Selector["app"] != "web" || s.Port != 80 || s.TargetPort != 8080 {
		t.Errorf("services phase = %d at %v/s selecting %v, port %d -> %d", s.Count, s.QPS, s.Selector, s.Port, s.TargetPort)
	}
	ch := sv.Phases[1].Churn
	if ch.QPS != 5 || ch.Duration.Duration != 2*time.Minute || ch.Lifetime.Duration != 20*time.Second {
		t.Errorf("services churn = %v/s for %v, lifetime %v", ch.QPS, ch.Duration.Duration, ch.Lifetime.Duration)
	}
	if ch.Template.Labels["app"] != "web" {
		t.Errorf("services churn pods are labelled %v: the Services select app=web", ch.Template.Labels)
	}
	if !reflect.DeepEqual(sv.SLOs, reports.SLOThresholds{}) {
		t.Errorf("services SLOs = %+v, want the upstream thresholds", sv.SLOs)
	}

	h := load("heartbeat")
	if h.TotalNodes() != 300 || len(h.Phases) != 1 || h.Phases[0].Sleep == nil || h.Phases[0].Sleep.Duration.Duration != 3*time.Minute {
		t.Errorf("heartbeat = %d nodes, phases %s", h.TotalNodes(), phaseNames(h))
	}

	s := load("scheduler-throughput")
	if s.TotalNodes() != 100 || phaseNames(s) != createDeleteWait {
		t.Fatalf("scheduler-throughput = %d nodes, phases %s", s.TotalNodes(), phaseNames(s))
	}
	sc := s.Phases[0].Create
	if sc.Count != 2000 || sc.QPS != 200 {
		t.Errorf("scheduler-throughput create = %d pods at %v/s, want 2000 at 200/s", sc.Count, sc.QPS)
	}
	cpu := sc.Template.Spec.Containers[0].Resources.Requests.Cpu()
	if cpu.IsZero() {
		t.Error("scheduler-throughput pods request no cpu: the scheduler would not score resources")
	}
	// The pods must fit, or waitRunning measures pods that can never run.
	capacity := s.NodePools[0].CPU.MilliValue() * int64(s.TotalNodes())
	if need := cpu.MilliValue() * int64(sc.Count); need > capacity {
		t.Errorf("scheduler-throughput pods request %dm cpu, the fleet has %dm", need, capacity)
	}
}

func TestLoadUnknownName(t *testing.T) {
	_, err := Load("nosuch")
	want := `unknown profile "nosuch": the built-in profiles are churn, density, density-1k, eviction-storm, flaky-registry, heartbeat, lifecycle, load, quickstart, scheduler-throughput, services, smoke, soak, sweep, zone-outage; a path to a YAML profile works too`
	if err == nil || err.Error() != want {
		t.Fatalf("Load(nosuch) error:\n got: %v\nwant: %s", err, want)
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mine.yaml")
	if err := os.WriteFile(path, []byte(validYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	if p.Name != "test" {
		t.Errorf("loaded profile %q", p.Name)
	}

	missing := filepath.Join(dir, "missing.yaml")
	if _, err := Load(missing); err == nil || !strings.Contains(err.Error(), "reading profile: open "+missing) {
		t.Errorf("Load(missing file) = %v", err)
	}
}

func TestSweep(t *testing.T) {
	p, err := Load("sweep")
	if err != nil {
		t.Fatal(err)
	}
	if p.Sweep == nil || p.Sweep.Parameter != "qps" || len(p.Sweep.Values) != 4 {
		t.Fatalf("sweep = %+v, want qps over 4 steps", p.Sweep)
	}
	p.Sweep.Apply(p, 40)
	if q := p.Phases[0].Create.QPS; q != 40 {
		t.Errorf("create qps after Apply(40) = %v", q)
	}
	(&Sweep{Parameter: "nodes"}).Apply(p, 7)
	if n := p.NodePools[0].Count; n != 7 {
		t.Errorf("nodes after Apply(7) = %d", n)
	}
	_, err = Parse([]byte(`name: t
nodePools: [{name: p, count: 1}]
sweep: {parameter: pods, values: [3, 2]}
phases: [{sleep: {duration: 1s}}]
`), "bad.yaml")
	for _, want := range []string{`sweep.parameter: Unsupported value: "pods"`, "sweep.values[1]: Invalid value: 2: steps must be positive and increasing"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to say %q", err, want)
		}
	}
}

func TestKubeletOverrides(t *testing.T) {
	yaml := strings.Replace(validYAML, "    cpu: \"4\"\n", "    cpu: \"4\"\n    kubelet:\n      evictionPressureTransitionPeriod: 30s\n      imageMinimumGCAge: 0s\n      featureGates: {EventedPLEG: true}\n", 1)
	p, err := Parse([]byte(yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kc := &kubeletconfig.KubeletConfiguration{
		ImageMinimumGCAge: metav1.Duration{Duration: 2 * time.Minute},
		MaxPods:           110,
	}
	if err := p.NodePools[0].Kubelet.ApplyTo(kc); err != nil {
		t.Fatal(err)
	}
	switch {
	case kc.EvictionPressureTransitionPeriod.Duration != 30*time.Second:
		t.Errorf("evictionPressureTransitionPeriod = %v, want 30s", kc.EvictionPressureTransitionPeriod)
	case kc.ImageMinimumGCAge.Duration != 0:
		t.Errorf("imageMinimumGCAge = %v, want the 0s the profile gives", kc.ImageMinimumGCAge)
	case kc.MaxPods != 110:
		t.Errorf("maxPods = %d, want 110 kept: the profile does not give it", kc.MaxPods)
	case !kc.FeatureGates["EventedPLEG"]:
		t.Errorf("featureGates = %v, want EventedPLEG", kc.FeatureGates)
	}

	bad := strings.Replace(validYAML, "    cpu: \"4\"\n", "    cpu: \"4\"\n    kubelet:\n      evictionHardd: {memory.available: 1Gi}\n", 1)
	if _, err := Parse([]byte(bad), "test.yaml"); err == nil || !strings.Contains(err.Error(), "nodePools[0].kubelet") || !strings.Contains(err.Error(), "evictionHardd") {
		t.Errorf("a misspelt kubelet setting: err = %v, want one naming nodePools[0].kubelet and the field", err)
	}
}

func TestPoolStaticPods(t *testing.T) {
	yaml := strings.Replace(validYAML, "    cpu: \"4\"\n", "    cpu: \"4\"\n    kubelet: {staticPodPath: /etc/kubernetes/manifests, fileCheckFrequency: 5s}\n"+
		"    staticPods:\n      - metadata: {name: node-exporter, namespace: monitoring}\n"+
		"        spec: {hostNetwork: true, containers: [{name: exporter, image: quay.io/prometheus/node-exporter:v1.9.0}]}\n", 1)
	p, err := Parse([]byte(yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pool := p.NodePools[0]
	if len(pool.StaticPods) != 1 || pool.StaticPods[0].Name != "node-exporter" || pool.StaticPods[0].Spec.Containers[0].Image != "quay.io/prometheus/node-exporter:v1.9.0" {
		t.Errorf("static pods %+v", pool.StaticPods)
	}
	kc := &kubeletconfig.KubeletConfiguration{}
	if err := pool.Kubelet.ApplyTo(kc); err != nil {
		t.Fatal(err)
	}
	if kc.StaticPodPath != "/etc/kubernetes/manifests" || kc.FileCheckFrequency.Duration != 5*time.Second {
		t.Errorf("staticPodPath %q fileCheckFrequency %v", kc.StaticPodPath, kc.FileCheckFrequency)
	}
}

// TestParseCaughtBeforeTheRun checks the problems that would otherwise show
// only once the fleet runs, or not at all: each error names its field and,
// where there is one, the fix.
func TestParseCaughtBeforeTheRun(t *testing.T) {
	const pool = "    cpu: \"4\"\n"
	kubelet := func(settings string) [2]string { return [2]string{pool, pool + "    kubelet: " + settings + "\n"} }
	const signals = `"imagefs.available", "imagefs.inodesFree", "memory.available", "nodefs.available", "nodefs.inodesFree", "pid.available"`
	const shard = "more than the 100000 one fleetlet process emulates; shard larger fleets over several processes (fleetlet fleet --shard; README, Past one machine)"
	const annotated = "metadata: {labels: {app: test}, annotations: {%s}}"
	cases := []struct {
		name  string
		edits [][2]string // replace [0] with [1] in validYAML, in order
		want  string
	}{{
		name:  "misspelt eviction signal",
		edits: [][2]string{kubelet("{evictionHard: {memory.avialable: 100Mi}}")},
		want:  `nodePools[0].kubelet.evictionHard[memory.avialable]: Unsupported value: "memory.avialable": supported values: ` + signals,
	}, {
		name:  "eviction threshold not a quantity",
		edits: [][2]string{kubelet("{evictionHard: {memory.available: lots}}")},
		want:  `nodePools[0].kubelet.evictionHard[memory.available]: Invalid value: "lots": must be a quantity such as 100Mi or a percentage such as 10%`,
	}, {
		name:  "soft threshold without a grace period",
		edits: [][2]string{kubelet("{evictionSoft: {memory.available: 1Gi}}")},
		want: `nodePools[0].kubelet.evictionSoftGracePeriod[memory.available]: Required value: evictionSoft[memory.available] needs a grace period: ` +
			`add evictionSoftGracePeriod: {memory.available: 1m30s}`,
	}, {
		name:  "image GC thresholds the wrong way round",
		edits: [][2]string{kubelet("{imageGCHighThresholdPercent: 70}")},
		want:  `nodePools[0].kubelet.imageGCLowThresholdPercent: Invalid value: 80: must be less than imageGCHighThresholdPercent (70)`,
	}, {
		name:  "zero lease duration",
		edits: [][2]string{kubelet("{nodeLeaseDurationSeconds: 0}")},
		want:  `nodePools[0].kubelet.nodeLeaseDurationSeconds: Invalid value: 0: must be greater than zero; leave it out for the kubelet's default 40`,
	}, {
		name:  "parallel pulls while serialized",
		edits: [][2]string{kubelet("{maxParallelImagePulls: 4, serializeImagePulls: true}")},
		want:  `nodePools[0].kubelet.maxParallelImagePulls: Invalid value: 4: must be 1 while serializeImagePulls is true; set serializeImagePulls: false to pull in parallel`,
	}, {
		name:  "kubelet maxPods beside the pool's pods",
		edits: [][2]string{kubelet("{maxPods: 50}")},
		want:  `nodePools[0].kubelet.maxPods: Forbidden: a pool's pods is its nodes' maxPods: set nodePools[0].pods instead`,
	}, {
		name:  "unknown feature gate",
		edits: [][2]string{kubelet("{featureGates: {NoSuchGate: true}}")},
		want:  `nodePools[0].kubelet.featureGates[NoSuchGate]: Unsupported value: "NoSuchGate": supported values: "EventedPLEG"`,
	}, {
		name:  "feature gate not a boolean",
		edits: [][2]string{kubelet(`{featureGates: {EventedPLEG: "yes"}}`)},
		want:  `nodePools[0].kubelet.featureGates[EventedPLEG]: Invalid value: "yes": must be true or false`,
	}, {
		name:  "kubelet setting of the wrong type",
		edits: [][2]string{kubelet("{nodeLeaseDurationSeconds: forty}")},
		want:  `nodePools[0].kubelet.nodeLeaseDurationSeconds: Invalid value: "forty": must be an integer`,
	}, {
		name:  "kubelet duration that does not parse",
		edits: [][2]string{kubelet("{evictionPressureTransitionPeriod: soon}")},
		want:  `nodePools[0].kubelet.evictionPressureTransitionPeriod: Invalid value: "soon": time: invalid duration "soon"`,
	}, {
		name:  "relative static pod path",
		edits: [][2]string{kubelet("{staticPodPath: manifests}")},
		want:  `nodePools[0].kubelet.staticPodPath: Invalid value: "manifests": must be an absolute path, such as /etc/kubernetes/manifests`,
	}, {
		name:  "static pod path without a period",
		edits: [][2]string{kubelet("{staticPodPath: /etc/kubernetes/manifests, fileCheckFrequency: 0s}")},
		want:  `nodePools[0].kubelet.fileCheckFrequency: Invalid value: "0s": must be greater than zero; leave it out for the kubelet's default 20s`,
	}, {
		name:  "static pod without a name",
		edits: [][2]string{{pool, pool + "    staticPods: [{spec: {containers: [{name: a, image: i}]}}]\n"}},
		want:  `nodePools[0].staticPods[0]: Invalid value: "": invalid pod: name is needed for the pod`,
	}, {
		name:  "static pod referencing a secret",
		edits: [][2]string{{pool, pool + "    staticPods: [{metadata: {name: s}, spec: {volumes: [{name: v, secret: {secretName: x}}], containers: [{name: a, image: i}]}}]\n"}},
		want:  `nodePools[0].staticPods[0]: Invalid value: "s": static pods may not reference secrets`,
	}, {
		name:  "static pod misspelt field",
		edits: [][2]string{{pool, pool + "    staticPods: [{metadata: {name: s}, spec: {containers: [{name: a, imagee: i}]}}]\n"}},
		want:  `unknown field "nodePools[0].staticPods[0].spec.containers[0].imagee"`,
	}, {
		name: "two static pods of one name",
		edits: [][2]string{{pool, pool + "    staticPods:\n      - {metadata: {name: s}, spec: {containers: [{name: a, image: i}]}}\n" +
			"      - {metadata: {name: s, namespace: default}, spec: {containers: [{name: a, image: j}]}}\n"}},
		want: `nodePools[0].staticPods[1].metadata.name: Duplicate value: "default/s"`,
	}, {
		name:  "a pool too big for one process",
		edits: [][2]string{{"count: 3", "count: 10000000"}},
		want:  `nodePools[0].count: Invalid value: 10000000: makes 10000000 nodes, ` + shard,
	}, {
		name:  "pools too big together",
		edits: [][2]string{{"count: 3", "count: 60000"}, {"runtime:", "  - {name: more, count: 60000}\nruntime:"}},
		want:  `nodePools: Invalid value: 120000: the pools' counts add up to 120000 nodes, ` + shard,
	}, {
		name:  "a sweep step too big for one process",
		edits: [][2]string{{"runtime:", "sweep: {parameter: nodes, values: [10, 100001]}\nruntime:"}},
		want:  `sweep.values[1]: Invalid value: 100001: makes 100001 nodes, ` + shard,
	}, {
		name:  "a create phase too big",
		edits: [][2]string{{"count: 10", "count: 1000001"}},
		want:  `phases[0].create.count: Invalid value: 1000001: must be at most 1000000, the pods one phase may create`,
	}, {
		name:  "a churn too big",
		edits: [][2]string{{"qps: 4", "qps: 40000"}},
		want:  `phases[5].churn: Invalid value: qps 40000 for duration 30s creates 1200000 pods, more than the 1000000 one phase may create; lower the rate or the duration`,
	}, {
		name:  "a churn sweep step too big",
		edits: [][2]string{{"runtime:", "sweep: {parameter: qps, values: [10, 40000]}\nruntime:"}},
		want:  `sweep.values[1]: Invalid value: 40000: makes phases[5].churn create 1200000 pods in its 30s, more than the 1000000 one phase may create`,
	}, {
		name:  "zero create rate",
		edits: [][2]string{{"qps: 5", "qps: 0"}},
		want:  `phases[0].create.qps: Invalid value: 0: must be greater than zero; leave it out for the default 50`,
	}, {
		name:  "zero delete rate",
		edits: [][2]string{{"delete: {}", "delete: {qps: 0}"}},
		want:  `phases[2].delete.qps: Invalid value: 0: must be greater than zero; leave it out for the default 50`,
	}, {
		name:  "zero cpu",
		edits: [][2]string{{`cpu: "4"`, `cpu: "0"`}},
		want:  `nodePools[0].cpu: Invalid value: "0": must be greater than zero; leave it out for the default 8`,
	}, {
		name:  "zero memory",
		edits: [][2]string{{pool, pool + "    memory: 0Gi\n"}},
		want:  `nodePools[0].memory: Invalid value: "0": must be greater than zero; leave it out for the default 32Gi`,
	}, {
		name:  "zero pods",
		edits: [][2]string{{pool, pool + "    pods: 0\n"}},
		want:  `nodePools[0].pods: Invalid value: 0: must be greater than zero; leave it out for the default 110`,
	}, {
		name:  "zero wait timeout",
		edits: [][2]string{{"waitRunning: {timeout: 1m}", "waitRunning: {timeout: 0s}"}},
		want:  `phases[1].waitRunning.timeout: Invalid value: "0s": must be greater than zero; leave it out for the default 5m0s`,
	}, {
		name:  "zero waitGone timeout",
		edits: [][2]string{{"waitGone: {}", "waitGone: {timeout: 0s}"}},
		want:  `phases[3].waitGone.timeout: Invalid value: "0s": must be greater than zero; leave it out for the default 5m0s`,
	}, {
		name:  "zero churn timeout",
		edits: [][2]string{{"lifetime: 10s", "lifetime: 10s\n      timeout: 0s"}},
		want:  `phases[5].churn.timeout: Invalid value: "0s": must be greater than zero; leave it out for the default 5m0s`,
	}, {
		name:  "zero services rate",
		edits: [][2]string{{"qps: 9", "qps: 0"}},
		want:  `phases[6].services.qps: Invalid value: 0: must be greater than zero; leave it out for the default 50`,
	}, {
		name:  "negative services rate",
		edits: [][2]string{{"qps: 9", "qps: -1"}},
		want:  `phases[6].services.qps: Invalid value: -1: must be greater than zero`,
	}, {
		name:  "services without a count",
		edits: [][2]string{{"      count: 7\n", ""}},
		want:  `phases[6].services.count: Invalid value: 0: must be greater than zero`,
	}, {
		name:  "negative services count",
		edits: [][2]string{{"count: 7", "count: -7"}},
		want:  `phases[6].services.count: Invalid value: -7: must be greater than zero`,
	}, {
		name:  "too many Services",
		edits: [][2]string{{"count: 7", "count: 10001"}},
		want:  `phases[6].services.count: Invalid value: 10001: must be at most 10000, the Services one phase may create: every kube-proxy of the fleet holds each of them`,
	}, {
		name:  "services without a selector",
		edits: [][2]string{{"      selector: {app: web}\n", ""}},
		want:  `phases[6].services.selector: Required value: the Services select the run's pods by label, for example {app: web}: without a selector they get no endpoints`,
	}, {
		name:  "services with an empty selector",
		edits: [][2]string{{"selector: {app: web}", "selector: {}"}},
		want:  `phases[6].services.selector: Required value: the Services select the run's pods by label, for example {app: web}: without a selector they get no endpoints`,
	}, {
		name:  "services selector key not a label key",
		edits: [][2]string{{"selector: {app: web}", "selector: {app/x/y: web}"}},
		want:  `phases[6].services.selector: Invalid value: "app/x/y": a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')`,
	}, {
		name:  "services selector value not a label value",
		edits: [][2]string{{"selector: {app: web}", "selector: {app: web server}"}},
		want:  `phases[6].services.selector[app]: Invalid value: "web server": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`,
	}, {
		name:  "services selector on the run label",
		edits: [][2]string{{"selector: {app: web}", "selector: {app: web, fleetlet.io/run: abc}"}},
		want:  `phases[6].services.selector[fleetlet.io/run]: Forbidden: the driver adds this key, so that the Services select only the run's own pods`,
	}, {
		name:  "zero services port",
		edits: [][2]string{{"selector: {app: web}", "selector: {app: web}\n      port: 0"}},
		want:  `phases[6].services.port: Invalid value: 0: must be greater than zero; leave it out for the default 80`,
	}, {
		name:  "negative services port",
		edits: [][2]string{{"selector: {app: web}", "selector: {app: web}\n      port: -80"}},
		want:  `phases[6].services.port: Invalid value: -80: must be between 1 and 65535, inclusive`,
	}, {
		name:  "services port too high",
		edits: [][2]string{{"selector: {app: web}", "selector: {app: web}\n      port: 65536"}},
		want:  `phases[6].services.port: Invalid value: 65536: must be between 1 and 65535, inclusive`,
	}, {
		name:  "zero services targetPort",
		edits: [][2]string{{"selector: {app: web}", "selector: {app: web}\n      targetPort: 0"}},
		want:  `phases[6].services.targetPort: Invalid value: 0: must be greater than zero; leave it out for the default 8080`,
	}, {
		name:  "services targetPort too high",
		edits: [][2]string{{"selector: {app: web}", "selector: {app: web}\n      targetPort: 70000"}},
		want:  `phases[6].services.targetPort: Invalid value: 70000: must be between 1 and 65535, inclusive`,
	}, {
		name:  "services phase name not a DNS label",
		edits: [][2]string{{"  - services:", "  - name: Web\n    services:"}},
		want:  `phases[6].name: Invalid value: "Web": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`,
	}, {
		name:  "services phase name starting with a digit",
		edits: [][2]string{{"  - services:", "  - name: 1web\n    services:"}},
		want:  `phases[6].name: Invalid value: "1web": names the phase's Services <name>-<i>, and a Service's name must start with a letter: rename the phase`,
	}, {
		name:  "services phase name too long for its Services' names",
		edits: [][2]string{{"  - services:", "  - name: " + strings.Repeat("w", 62) + "\n    services:"}},
		want: `phases[6].name: Invalid value: "` + strings.Repeat("w", 62) + `": names the phase's Services up to ` + strings.Repeat("w", 62) +
			`-6, 64 characters, and a Service's name is at most 63: shorten the phase name`,
	}, {
		name:  "two services phases of one name",
		edits: [][2]string{{"  - services:", "  - services: {count: 1, selector: {app: api}}\n  - services:"}},
		want:  `phases[7].name: Invalid value: "services": phases[6] is a services phase of this name already, and Services are named after their phase: give each services phase its own name`,
	}, {
		name:  "no phases",
		edits: [][2]string{{validYAML[strings.Index(validYAML, "phases:"):], "phases: []\n"}},
		want:  `phases: Required value: a profile needs at least one phase; to only run the fleet for a while, use [{sleep: {duration: 10m}}]`,
	}, {
		name:  "phases left out",
		edits: [][2]string{{validYAML[strings.Index(validYAML, "phases:"):], ""}},
		want:  `phases: Required value: a profile needs at least one phase; to only run the fleet for a while, use [{sleep: {duration: 10m}}]`,
	}, {
		name:  "behaviour annotation with a bad value",
		edits: [][2]string{{"metadata: {labels: {app: test}}", fmt.Sprintf(annotated, `fleetlet.io/behaviour: "app: {runFor: -1s}"`)}},
		want:  `phases[0].create.template.metadata.annotations[fleetlet.io/behaviour]: Invalid value: app.runFor: Invalid value: "-1s": must not be negative`,
	}, {
		name:  "behaviour annotation with a misspelt field",
		edits: [][2]string{{"metadata: {labels: {app: test}}", fmt.Sprintf(annotated, `fleetlet.io/behaviour: '{"app": {"runFr": "1s"}}'`)}},
		want:  `phases[0].create.template.metadata.annotations[fleetlet.io/behaviour]: Invalid value: unknown field "app.runFr"`,
	}, {
		name:  "pull-error annotation with a bad value",
		edits: [][2]string{{"template: {spec:", "template: {metadata: {annotations: {fleetlet.io/pull-error: denied}}, spec:"}},
		want:  `phases[5].churn.template.metadata.annotations[fleetlet.io/pull-error]: Unsupported value: "denied": supported values: "unauthorized", "notfound"`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			yaml := validYAML
			for _, e := range tc.edits {
				if !strings.Contains(yaml, e[0]) {
					t.Fatalf("test case edits text that is not there: %q", e[0])
				}
				yaml = strings.Replace(yaml, e[0], e[1], 1)
			}
			_, err := Parse([]byte(yaml), "test.yaml")
			if err == nil {
				t.Fatalf("Parse succeeded, want %q", tc.want)
			}
			if got, want := err.Error(), "profile test.yaml: "+tc.want; got != want {
				t.Errorf("error:\n got: %s\nwant: %s", got, want)
			}
		})
	}
}

// TestParseExplicitZerosOnly checks that only a written zero is an error: a
// field left out, or written null, still takes its default.
func TestParseExplicitZerosOnly(t *testing.T) {
	yaml := strings.NewReplacer(
		"qps: 5", "qps: null",
		"qps: 9", "qps: null\n      port: null",
		"waitRunning: {timeout: 1m}", "waitRunning: {}",
		"    cpu: \"4\"\n", "    cpu:\n    pods:\n",
	).Replace(validYAML)
	p, err := Parse([]byte(yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Phases[0].Create; c.QPS != DefaultQPS {
		t.Errorf("create qps = %v, want the default %v", c.QPS, DefaultQPS)
	}
	if s := p.Phases[6].Services; s.QPS != DefaultQPS || s.Port != DefaultServicePort {
		t.Errorf("services qps %v, port %d, want the defaults %v, %d", s.QPS, s.Port, DefaultQPS, DefaultServicePort)
	}
	if w := p.Phases[1].WaitRunning; w.Timeout.Duration != DefaultWaitTimeout {
		t.Errorf("waitRunning timeout = %v, want the default", w.Timeout.Duration)
	}
	// metav1.Duration refuses a null; say where, rather than only
	// `time: invalid duration ""`.
	_, err = Parse([]byte(strings.Replace(validYAML, "lifetime: 10s", "lifetime:", 1)), "test.yaml")
	if want := "profile test.yaml: phases[5].churn.lifetime: Invalid value: null: give it a value, or leave it out"; err == nil || err.Error() != want {
		t.Errorf("error:\n got: %v\nwant: %s", err, want)
	}
	if pool := p.NodePools[0]; pool.CPU.String() != "8" || pool.Pods != DefaultPodsPerNode {
		t.Errorf("pool = %s cpu, %d pods, want the defaults", pool.CPU.String(), pool.Pods)
	}

	// Every problem at once: the written zeros and the others.
	bad := strings.NewReplacer("qps: 5", "qps: 0", "count: 3", "count: -1").Replace(validYAML)
	_, err = Parse([]byte(bad), "test.yaml")
	want := "profile test.yaml has 2 problems:\n" +
		"  phases[0].create.qps: Invalid value: 0: must be greater than zero; leave it out for the default 50\n" +
		"  nodePools[0].count: Invalid value: -1: must be greater than zero"
	if err == nil || err.Error() != want {
		t.Errorf("error:\n got: %v\nwant: %s", err, want)
	}
}

func TestParseValidAnnotationsAndKubelet(t *testing.T) {
	yaml := strings.NewReplacer(
		"metadata: {labels: {app: test}}", `metadata: {labels: {app: test}, annotations: {fleetlet.io/behaviour: "app: {runFor: 30s, exitCode: 1}", fleetlet.io/pull-error: notfound}}`,
		"    cpu: \"4\"\n", "    cpu: \"4\"\n    kubelet: {maxParallelImagePulls: 4, featureGates: {EventedPLEG: false}, evictionSoft: {memory.available: 1Gi}, evictionSoftGracePeriod: {memory.available: 1m}}\n",
	).Replace(validYAML)
	p, err := Parse([]byte(yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// As the kubelet defaults it: parallel pulls asked for without
	// serializeImagePulls turn serializing off.
	kc := nodeagent.DefaultKubeletConfiguration()
	if err := p.NodePools[0].Kubelet.ApplyTo(kc); err != nil {
		t.Fatal(err)
	}
	if *kc.SerializeImagePulls || *kc.MaxParallelImagePulls != 4 {
		t.Errorf("serializeImagePulls %v, maxParallelImagePulls %d; want false, 4", *kc.SerializeImagePulls, *kc.MaxParallelImagePulls)
	}
}
