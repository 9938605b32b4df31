package fakeruntime

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestDurationJSON(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Duration
		wantErr string
	}{
		{in: `"30s"`, want: Duration(30 * time.Second)},
		{in: `"1m30s"`, want: Duration(90 * time.Second)},
		{in: `"0s"`, want: 0},
		{in: `"-2ms"`, want: Duration(-2 * time.Millisecond)}, // parses; Validate rejects it
		{in: `null`, want: 0},
		{in: `30`, wantErr: `a duration must be a string such as "30s"`},
		{in: `"30"`, wantErr: `missing unit`},
		{in: `"soon"`, wantErr: `invalid duration`},
	} {
		var d Duration
		err := json.Unmarshal([]byte(tc.in), &d)
		if tc.wantErr != "" {
			wantErrContains(t, tc.in, err, tc.wantErr)
			continue
		}
		if err != nil || d != tc.want {
			t.Errorf("Unmarshal(%s) = %s, %v; want %s", tc.in, d, err, tc.want)
		}
	}
	out, err := json.Marshal(ProbeStep{After: Duration(90 * time.Second), Succeed: true})
	if err != nil || string(out) != `{"after":"1m30s","succeed":true}` {
		t.Errorf("Marshal = %s, %v", out, err)
	}
}

func TestParsePodBehaviour(t *testing.T) {
	yamlValue := `
app:
  runFor: 30s
  exitCode: 1
  readiness: [{after: 0s, succeed: true}, {after: 30s, succeed: false}, {after: 60s, succeed: true}]
"*":
  startLatency: 2s
  exec:
    - command: cat /tmp/healthy
      steps: [{after: 2m, succeed: false}]
      stdout: ok
`
	jsonValue := `{"app": {"runFor": "30s", "exitCode": 1, "readiness": [{"after": "0s", "succeed": true}, {"after": "30s", "succeed": false}, {"after": "1m", "succeed": true}]},
	  "*": {"startLatency": "2s", "exec": [{"command": "cat /tmp/healthy", "steps": [{"after": "120s", "succeed": false}], "stdout": "ok"}]}}`
	want := PodBehaviour{
		"app": {
			RunFor: new(Duration(30 * time.Second)), ExitCode: new(int32(1)),
			Readiness: []ProbeStep{{After: 0, Succeed: true}, {After: Duration(30 * time.Second)}, {After: Duration(time.Minute), Succeed: true}},
		},
		"*": {
			StartLatency: new(Duration(2 * time.Second)),
			Exec:         []ExecBehaviour{{Command: "cat /tmp/healthy", Steps: []ProbeStep{{After: Duration(2 * time.Minute)}}, Stdout: "ok"}},
		},
	}
	for name, value := range map[string]string{"yaml": yamlValue, "json": jsonValue} {
		got, err := ParsePodBehaviour(value)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, want %+v", name, got, want)
		}
	}
	// It round-trips through JSON, empty lists (which clear a default)
	// included.
	withEmpty := PodBehaviour{"app": {Readiness: []ProbeStep{}, RunFor: new(Duration(0))}}
	raw, err := json.Marshal(withEmpty)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := ParsePodBehaviour(string(raw)); err != nil || !reflect.DeepEqual(back, withEmpty) {
		t.Errorf("round trip of %s = %+v, %v", raw, back, err)
	}
	if pb, err := ParsePodBehaviour(""); err != nil || pb != nil {
		t.Errorf(`ParsePodBehaviour("") = %v, %v; want no behaviour`, pb, err)
	}
}

func TestParsePodBehaviourErrors(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        []string
	}{
		{"not JSON or YAML", `{app: [`, []string{"yaml"}},
		{"not a mapping", `[1, 2]`, []string{"cannot unmarshal array"}},
		{"unknown field", `{"app": {"runfor": "30s"}}`, []string{`unknown field "app.runfor"`}},
		{"a number for a duration", `{"app": {"runFor": 30}}`, []string{`a duration must be a string such as "30s"`}},
		{"bad duration", `{"app": {"runFor": "30 seconds"}}`, []string{`unknown unit`}},
		{"negative runFor", `{"app": {"runFor": "-1s"}}`, []string{`app.runFor: Invalid value: "-1s": must not be negative`}},
		{"exit code out of range", `{"*": {"exitCode": 256}}`, []string{`*.exitCode: Invalid value: 256`}},
		{"jitter out of range", `{"app": {"jitter": 1.5}}`, []string{`app.jitter: Invalid value: 1.5`}},
		{"steps out of order", `{"app": {"liveness": [{"after": "1m", "succeed": false}, {"after": "30s", "succeed": true}]}}`,
			[]string{`app.liveness[1].after: Invalid value: "30s": steps must be sorted by after, and this one comes after a step at 1m0s`}},
		{"exec without a command", `{"app": {"exec": [{"stdout": "x"}]}}`, []string{`app.exec[0].command: Required value`}},
		{"exec command twice", `{"app": {"exec": [{"command": "true"}, {"command": "true"}]}}`, []string{`app.exec[1].command: Duplicate value: "true"`}},
		{"several problems at once", `{"a": {"runFor": "-1s"}, "b": {"stopLatency": "-1s"}}`, []string{"a.runFor", "b.stopLatency"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePodBehaviour(tc.value)
			for _, want := range tc.want {
				wantErrContains(t, tc.name, err, want)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q spans lines; an agent's event needs one", err)
			}
		})
	}
}

func TestContainerBehaviourOver(t *testing.T) {
	base := ContainerBehaviour{
		RunFor: new(Duration(time.Minute)), ExitCode: new(int32(1)), StopLatency: new(Duration(time.Second)), Jitter: new(0.1),
		Readiness: []ProbeStep{{After: 0, Succeed: false}},
		Exec:      []ExecBehaviour{{Command: "*", Stdout: "base"}},
	}
	tests := []struct {
		name string
		b    ContainerBehaviour
		want ContainerBehaviour
	}{
		{"nothing set: the base", ContainerBehaviour{}, base},
		{"a set field wins, zero included; the rest from the base",
			ContainerBehaviour{RunFor: new(Duration(0)), ExitCode: new(int32(0)), Readiness: []ProbeStep{}},
			ContainerBehaviour{RunFor: new(Duration(0)), ExitCode: new(int32(0)), StopLatency: base.StopLatency, Jitter: base.Jitter,
				Readiness: []ProbeStep{}, Exec: base.Exec}},
		{"lists replace, not append",
			ContainerBehaviour{Exec: []ExecBehaviour{{Command: "true"}}},
			ContainerBehaviour{RunFor: base.RunFor, ExitCode: base.ExitCode, StopLatency: base.StopLatency, Jitter: base.Jitter,
				Readiness: base.Readiness, Exec: []ExecBehaviour{{Command: "true"}}}},
	}
	for _, tc := range tests {
		if got := tc.b.over(base); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestBehaviourValidateNewFields(t *testing.T) {
	b := Behaviour{
		Containers: ContainerBehaviour{RunFor: new(Duration(-time.Second))},
		Images: map[string]ImageBehaviour{
			"busybox":                          {PullError: "forbidden"},
			"docker.io/library/busybox:latest": {},
			"nginx":                            {PullLatency: new(Duration(-1)), SizeBytes: -1},
			"Not/Valid":                        {},
		},
		StopLatency: -time.Second,
	}
	err := b.Validate()
	for _, want := range []string{
		`behaviour.stopLatency: Invalid value: "-1s"`,
		`behaviour.containers.runFor: Invalid value: "-1s": must not be negative`,
		`behaviour.images[busybox].pullError: Unsupported value: "forbidden": supported values: "unauthorized", "notfound"`,
		`behaviour.images[docker.io/library/busybox:latest]: Duplicate value`,
		`behaviour.images[nginx].pullLatency`,
		`behaviour.images[nginx].sizeBytes`,
		`behaviour.images[Not/Valid]: Invalid value`,
	} {
		wantErrContains(t, "Validate", err, want)
	}
	var fe *field.Error
	if !errors.As(err, &fe) {
		t.Errorf("Validate's error %v does not unwrap to a *field.Error", err)
	}
	ok := Behaviour{
		Containers: ContainerBehaviour{RunFor: new(Duration(time.Minute)), Jitter: new(0.2), Readiness: []ProbeStep{{After: 0}, {After: 0, Succeed: true}}},
		Images:     map[string]ImageBehaviour{"busybox": {PullError: PullErrorNotFound}, "registry.k8s.io/pause:3.10": {SizeBytes: 1}},
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate rejected a valid behaviour: %v", err)
	}
}

func TestBehaviourFromJSONWithContainersAndImages(t *testing.T) {
	in := `{"pullLatency": 1000000, "containers": {"runFor": "45s", "jitter": 0.1},
	        "images": {"busybox": {"pullError": "unauthorized", "pullLatency": "3s", "sizeBytes": 5}}}`
	var b Behaviour
	if err := json.Unmarshal([]byte(in), &b); err != nil {
		t.Fatal(err)
	}
	want := Behaviour{
		PullLatency: time.Millisecond,
		Containers:  ContainerBehaviour{RunFor: new(Duration(45 * time.Second)), Jitter: new(0.1)},
		Images:      map[string]ImageBehaviour{"busybox": {PullError: PullErrorUnauthorized, PullLatency: new(Duration(3 * time.Second)), SizeBytes: 5}},
	}
	if !reflect.DeepEqual(b, want) {
		t.Errorf("got %+v, want %+v", b, want)
	}
	// Existing profiles, without the new fields, marshal as before plus
	// nothing.
	out, err := json.Marshal(Behaviour{StopLatency: time.Second})
	if err != nil || strings.Contains(string(out), "containers") || strings.Contains(string(out), "images") {
		t.Errorf("Marshal of a behaviour without containers or images = %s, %v", out, err)
	}
}

func TestIndexImageBehaviours(t *testing.T) {
	if indexImageBehaviours(nil) != nil {
		t.Error("no behaviours should index to nil")
	}
	rt := New(Config{Behaviour: Behaviour{Images: map[string]ImageBehaviour{
		"busybox":                    {SizeBytes: 1},
		"docker.io/library/nginx":    {SizeBytes: 2},
		"nginx:latest":               {SizeBytes: 3}, // the same image as above, written differently
		"registry.k8s.io/pause:3.10": {SizeBytes: 4},
	}}})
	for _, tc := range []struct {
		ref  string
		want int64
	}{
		{"busybox", 1},
		{"busybox:latest", 1},
		{"docker.io/library/busybox:latest", 1},
		{"busybox:1.36", 0},
		{"docker.io/library/nginx", 2},        // as written wins
		{"nginx:latest", 3},                   // as written wins
		{"docker.io/library/nginx:latest", 2}, // two keys normalise to it: the first in sorted order
		{"registry.k8s.io/pause:3.10", 4},
	} {
		name, err := normaliseImageRef(tc.ref)
		if err != nil {
			t.Fatal(err)
		}
		if got := rt.imageBehaviour(tc.ref, name).SizeBytes; got != tc.want {
			t.Errorf("imageBehaviour(%q) size = %d, want %d", tc.ref, got, tc.want)
		}
	}
}

// TestNewKeepsNoCallerReferences checks that changing a Behaviour after New
// (a fleet reuses one for every node) does not change the Runtime.
func TestNewKeepsNoCallerReferences(t *testing.T) {
	b := Behaviour{
		Containers: ContainerBehaviour{RunFor: new(Duration(time.Minute)), Readiness: []ProbeStep{{After: 0, Succeed: false}}},
		Images:     map[string]ImageBehaviour{"busybox": {PullLatency: new(Duration(time.Second))}},
	}
	rt := New(Config{Behaviour: b})
	*b.Containers.RunFor = 0
	b.Containers.Readiness[0].Succeed = true
	*b.Images["busybox"].PullLatency = 0
	b.Images["nginx"] = ImageBehaviour{PullError: PullErrorNotFound}
	if rt.defaultModel.runFor != time.Minute || *rt.behaviour.Containers.RunFor != Duration(time.Minute) || rt.defaultModel.readiness[0].Succeed {
		t.Error("changing the caller's container behaviour changed the Runtime's")
	}
	if ib := rt.imageBehaviour("busybox", "docker.io/library/busybox:latest"); *ib.PullLatency != Duration(time.Second) {
		t.Error("changing the caller's image behaviour changed the Runtime's")
	}
	if ib := rt.imageBehaviour("nginx", "docker.io/library/nginx:latest"); ib.PullError != "" {
		t.Error("an image added to the caller's map after New reached the Runtime")
	}
}

// TestDocExample keeps the package documentation's example valid.
func TestDocExample(t *testing.T) {
	const value = `app:
  runFor: 30s
  exitCode: 1
"*":
  readiness: [{after: 0s, succeed: false}, {after: 10s, succeed: true}]
  exec:
    - command: cat /tmp/healthy
      steps: [{after: 2m, succeed: false}]
`
	pb, err := ParsePodBehaviour(value)
	if err != nil {
		t.Fatal(err)
	}
	if app, ok := pb.forContainer("app"); !ok || *app.RunFor != Duration(30*time.Second) || *app.ExitCode != 1 || app.Readiness != nil {
		t.Errorf("app = %+v", app)
	}
	if other, ok := pb.forContainer("sidecar"); !ok || len(other.Readiness) != 2 || other.Exec[0].Command != "cat /tmp/healthy" {
		t.Errorf("sidecar = %+v", other)
	}
}
