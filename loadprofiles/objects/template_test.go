package objects

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// mustObj decodes one YAML object as Render does, for the tests' fixtures.
func mustObj(t *testing.T, text string) *unstructured.Unstructured {
	t.Helper()
	obj, err := decodeOne(t.Name(), text)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

func mustParse(t *testing.T, text string) *Template {
	t.Helper()
	tmpl, err := Parse(t.Name(), text)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// params is what the driver passes: Index, Name, Namespace, and profile
// params as a YAML profile decodes them (int64, float64, string).
func params() map[string]any {
	return map[string]any{
		"Index":     3,
		"Name":      "deploy-3",
		"Namespace": "load-1",
		"Replicas":  int64(5),
		"Factor":    0.5,
		"Image":     "registry.k8s.io/pause:3.10",
	}
}

const deploymentTemplate = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{.Name}}
  namespace: {{.Namespace}}
  labels:
    index: "{{.Index}}"
spec:
  replicas: {{.Replicas}}
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: c
        image: {{.Image}}
`

func TestRenderParams(t *testing.T) {
	obj, err := mustParse(t, deploymentTemplate).Render(params(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := obj.GroupVersionKind().String(); got != "apps/v1, Kind=Deployment" {
		t.Errorf("GVK = %s", got)
	}
	if obj.GetName() != "deploy-3" || obj.GetNamespace() != "load-1" || obj.GetLabels()["index"] != "3" {
		t.Errorf("metadata = %v", obj.Object["metadata"])
	}
	// Numbers decode as int64, as objects from the API server hold them.
	if r, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "replicas"); r != int64(5) {
		t.Errorf("spec.replicas = %#v, want int64(5)", r)
	}
	containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 || containers[0].(map[string]any)["image"] != "registry.k8s.io/pause:3.10" {
		t.Errorf("containers = %v", containers)
	}
}

// renderValue renders expr into a ConfigMap's data.v and returns it.
func renderValue(t *testing.T, expr string, rng *rand.Rand) (string, error) {
	t.Helper()
	tmpl, err := Parse("value", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n  v: \""+expr+"\"\n")
	if err != nil {
		t.Fatal(err)
	}
	obj, err := tmpl.Render(params(), rng)
	if err != nil {
		return "", err
	}
	v, _, _ := unstructured.NestedString(obj.Object, "data", "v")
	return v, nil
}

func TestFunctions(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"{{AddInt 1 2 3}}", "6"},
		{"{{AddInt .Replicas .Index}}", "8"},
		{"{{AddInt .Replicas .Factor}}", "5"}, // 5.5 truncated
		{"{{SubtractInt 10 .Replicas}}", "5"},
		{"{{SubtractInt 1 3}}", "-2"},
		{"{{MultiplyInt 2 3 4}}", "24"},
		{"{{MultiplyInt .Replicas 0.5}}", "2"}, // 2.5 truncated, as clusterloader2's
		{"{{MultiplyInt .Replicas .Factor 3}}", "7"},
		{"{{DivideInt 7 2}}", "3"},
		{`{{DivideInt .Replicas "2"}}`, "2"}, // a string holding a number, as clusterloader2
		{"{{DivideInt .Replicas 0.5}}", "10"},
		{"{{MaxInt 3 .Replicas 4}}", "5"},
		{"{{MinInt 3 .Replicas 4}}", "3"},
		{"{{MinInt .Replicas}}", "5"},
		{"{{DefaultParam .Replicas 7}}", "5"},
		{"{{DefaultParam .Missing 7}}", "7"},
		{"{{DefaultParam $.AlsoMissing 8}}", "8"},
		{"{{$r := DefaultParam .Missing 4}}{{MultiplyInt $r 2}}", "8"},
		{"{{range $i, $_ := Seq 3}}{{$i}}{{end}}", "012"},
		{"{{len (Seq .Replicas)}}", "5"},
		{"{{range Seq 2}}{{.}}{{end}}", "00"}, // zeros, as clusterloader2's
	} {
		got, err := renderValue(t, tc.expr, nil)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

func TestFunctionErrors(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"{{DivideInt 1 0}}", "DivideInt: division by zero"},
		{`{{AddInt 1 "x"}}`, `AddInt: x (string) is not a number`},
		{"{{MaxInt}}", "MaxInt needs at least one number"},
		{"{{Seq -1}}", "Seq -1: the length must not be negative"},
		{"{{RandInt 3}}", "Render was given no *rand.Rand"},
		{"{{RandIntRange 1 3}}", "Render was given no *rand.Rand"},
	} {
		_, err := renderValue(t, tc.expr, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.expr, err, tc.want)
		}
	}
}

// draws renders expr n times from a generator seeded with seed.
func draws(t *testing.T, expr string, seed uint64, n int) []int {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0))
	out := make([]int, n)
	for i := range out {
		v, err := renderValue(t, expr, rng)
		if err != nil {
			t.Fatal(err)
		}
		if out[i], err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestRandomReplaysWithSeed(t *testing.T) {
	first := draws(t, "{{RandIntRange 10 .Replicas}}{{RandIntRange 10 20}}", 42, 200)
	again := draws(t, "{{RandIntRange 10 .Replicas}}{{RandIntRange 10 20}}", 42, 200)
	if !slices.Equal(first, again) {
		t.Fatalf("the same seed drew %v, then %v", first[:10], again[:10])
	}
	if other := draws(t, "{{RandIntRange 10 .Replicas}}{{RandIntRange 10 20}}", 43, 200); slices.Equal(first, other) {
		t.Errorf("seeds 42 and 43 drew the same 200 numbers")
	}
	// "{{RandIntRange 10 .Replicas}}" is 10 (lo >= hi gives lo), so each
	// value is "10" followed by the draw in [10, 20], both bounds included
	// as clusterloader2's.
	seen := map[int]bool{}
	for _, v := range first {
		d := v - 1000 // "10" then the two digits of the draw
		if d < 10 || d > 20 {
			t.Fatalf("RandIntRange 10 20 drew %d (rendered %d), want [10, 20]", d, v)
		}
		seen[d] = true
	}
	if len(seen) != 11 {
		t.Errorf("200 draws of RandIntRange 10 20 gave %d distinct values, want all 11: %v", len(seen), seen)
	}

	seen = map[int]bool{}
	for _, v := range draws(t, "{{RandInt 3}}", 7, 100) {
		if v < 0 || v > 3 {
			t.Fatalf("RandInt 3 drew %d, want [0, 3]", v)
		}
		seen[v] = true
	}
	if len(seen) != 4 {
		t.Errorf("100 draws of RandInt 3 gave %v, want all of 0..3", seen)
	}
	if got := draws(t, "{{RandIntRange 5 5}}", 1, 3); !slices.Equal(got, []int{5, 5, 5}) {
		t.Errorf("RandIntRange 5 5 = %v, want 5s", got)
	}
}

func TestMissingKeyIsAnError(t *testing.T) {
	_, err := mustParse(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{.Nmae}}\n").Render(params(), nil)
	if err == nil || !strings.Contains(err.Error(), `map has no entry for key "Nmae"`) {
		t.Fatalf("error %v, want the missing key named", err)
	}
}

func TestDefaultParamLeavesDataAlone(t *testing.T) {
	data := params()
	before := maps.Clone(data)
	if _, err := mustParse(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x-{{DefaultParam .Suffix 1}}\n").Render(data, nil); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(data, before) {
		t.Errorf("Render changed the caller's data: %v", data)
	}
}

func TestParseError(t *testing.T) {
	if _, err := Parse("broken", "name: {{.Name"); err == nil || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("error %v, want a parse error naming the template", err)
	}
}

func TestYAMLErrorNamesTemplateAndLine(t *testing.T) {
	const bad = "apiVersion: v1\nkind: ConfigMap\ndata:\n  a: b\n c: d\n"
	_, err := mustParse(t, bad).Render(nil, nil)
	want := `template "` + t.Name() + `" renders invalid YAML: yaml: line 4: did not find expected key: fix the template at that line`
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
	// Line numbers count from the top of the rendered text, not from the
	// document's first line after a separator: two lines more here.
	_, err = mustParse(t, "# a comment\n---\n"+bad).Render(nil, nil)
	if err == nil || !strings.Contains(err.Error(), "yaml: line 6: did not find expected key") {
		t.Fatalf("after a separator: error %v, want line 6", err)
	}
}

func TestDocuments(t *testing.T) {
	const cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
	// Empty documents around the object are skipped, as kubectl does.
	for _, text := range []string{"---\n" + cm, cm + "---\n", "# header\n---\n" + cm + "--- # end\n"} {
		obj, err := mustParse(t, text).Render(nil, nil)
		if err != nil || obj.GetName() != "x" {
			t.Errorf("%q: %v, %v", text, obj, err)
		}
	}
	_, err := mustParse(t, cm+"---\n"+cm).Render(nil, nil)
	if err == nil || !strings.Contains(err.Error(), "renders a second YAML document at line 5") {
		t.Errorf("two documents: error %v", err)
	}
}

func TestNotAnObject(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"apiVersion: v1\nmetadata: {name: x}\n", "renders an object without kind: add kind at the top"},
		{"kind: ConfigMap\n", "renders an object without apiVersion: add apiVersion"},
		{"metadata: {name: x}\n", "without apiVersion or kind: add apiVersion and kind"},
		{"- a\n- b\n", "renders a YAML list, not an object"},
		{"{{if false}}x: 1{{end}}\n", "renders no object"},
	} {
		_, err := mustParse(t, tc.text).Render(nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.text, err, tc.want)
		}
	}
}

// TestConcurrentRenders shares one Template between goroutines, each with
// its own rng, as the driver's create workers do; run with -race.
func TestConcurrentRenders(t *testing.T) {
	tmpl := mustParse(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{{.Index}}\ndata:\n  r: \"{{RandInt 100}}\"\n  d: \"{{DefaultParam .Missing 1}}\"\n")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 0))
			for range 20 {
				obj, err := tmpl.Render(map[string]any{"Index": i}, rng)
				if err != nil {
					t.Error(err)
					return
				}
				if obj.GetName() != "cm-"+strconv.Itoa(i) {
					t.Errorf("name %s, want cm-%d", obj.GetName(), i)
				}
			}
		})
	}
	wg.Wait()
}
