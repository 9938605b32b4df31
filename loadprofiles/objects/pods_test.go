package objects

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// withTemplate is an object of apiVersion/kind whose pod template (at
// spec.template, or a CronJob's) has the label app=web, as templates do.
func withTemplate(t *testing.T, apiVersion, kind string) *unstructured.Unstructured {
	t.Helper()
	template := "  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers: [{name: c, image: pause}]\n"
	if kind == "CronJob" {
		template = "  schedule: '* * * * *'\n  jobTemplate:\n    spec:\n" + indent(template, "    ")
	}
	return mustObj(t, fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata:\n  name: x\n  labels: {owner: me}\nspec:\n%s", apiVersion, kind, template))
}

func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}

var podTemplateKinds = []struct {
	apiVersion, kind string
	path             []string
}{
	{"apps/v1", "Deployment", []string{"spec", "template"}},
	{"apps/v1", "ReplicaSet", []string{"spec", "template"}},
	{"apps/v1", "StatefulSet", []string{"spec", "template"}},
	{"apps/v1", "DaemonSet", []string{"spec", "template"}},
	{"batch/v1", "Job", []string{"spec", "template"}},
	{"batch/v1", "CronJob", []string{"spec", "jobTemplate", "spec", "template"}},
	{"v1", "ReplicationController", []string{"spec", "template"}},
}

func TestPodTemplate(t *testing.T) {
	for _, k := range podTemplateKinds {
		obj := withTemplate(t, k.apiVersion, k.kind)
		path, ok := PodTemplate(obj)
		if !ok || !slices.Equal(path, k.path) {
			t.Errorf("%s: PodTemplate = %v, %v, want %v", k.kind, path, ok, k.path)
			continue
		}
		if _, found, err := unstructured.NestedMap(obj.Object, path...); !found || err != nil {
			t.Errorf("%s: nothing at %v in the fixture: %v", k.kind, path, err)
		}
		path[0] = "changed" // the caller's copy
		if again, _ := PodTemplate(obj); again[0] != "spec" {
			t.Errorf("%s: changing the returned path changed the table", k.kind)
		}
	}
	// Kinds without a listed template, even one shaped like a Deployment:
	// the shape is not guessed from.
	for _, obj := range []*unstructured.Unstructured{
		mustObj(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"),
		withTemplate(t, "example.com/v1", "Deployment"), // another group's kind
		withTemplate(t, "example.com/v1", "Widget"),
		mustObj(t, "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n"),
	} {
		if path, ok := PodTemplate(obj); ok {
			t.Errorf("%s: PodTemplate = %v, true; want none", obj.GroupVersionKind(), path)
		}
	}
}

func TestStampEveryKind(t *testing.T) {
	labels := map[string]string{"fleetlet.io/run": "r1", "fleetlet.io/phase": "deploy"}
	for _, k := range podTemplateKinds {
		obj := withTemplate(t, k.apiVersion, k.kind)
		if err := Stamp(obj, labels); err != nil {
			t.Fatalf("%s: %v", k.kind, err)
		}
		want := map[string]string{"owner": "me", "fleetlet.io/run": "r1", "fleetlet.io/phase": "deploy"}
		if got := obj.GetLabels(); !maps.Equal(got, want) {
			t.Errorf("%s: metadata.labels = %v, want %v", k.kind, got, want)
		}
		got, _, err := unstructured.NestedStringMap(obj.Object, append(k.path, "metadata", "labels")...)
		want = map[string]string{"app": "web", "fleetlet.io/run": "r1", "fleetlet.io/phase": "deploy"}
		if err != nil || !maps.Equal(got, want) {
			t.Errorf("%s: pod template labels = %v (%v), want %v", k.kind, got, err, want)
		}
	}
}

func TestStampCreatesMaps(t *testing.T) {
	obj := mustObj(t, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec: {containers: []}\n")
	if err := Stamp(obj, map[string]string{"run": "r1"}); err != nil {
		t.Fatal(err)
	}
	if obj.GetLabels()["run"] != "r1" {
		t.Errorf("metadata.labels = %v", obj.GetLabels())
	}
	if got, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "template", "metadata", "labels"); got["run"] != "r1" {
		t.Errorf("template labels = %v", got)
	}
	// A Deployment with no template at all gets one with the labels: the
	// API server then rejects the object for its missing containers, which
	// says more than a label error would.
	bare := mustObj(t, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n")
	if err := Stamp(bare, map[string]string{"run": "r1"}); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedStringMap(bare.Object, "spec", "template", "metadata", "labels"); got["run"] != "r1" {
		t.Errorf("template labels = %v", got)
	}
}

func TestStampConfigMapOnlyMetadata(t *testing.T) {
	obj := mustObj(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n")
	if err := Stamp(obj, map[string]string{"run": "r1"}); err != nil {
		t.Fatal(err)
	}
	if got := obj.GetLabels(); !maps.Equal(got, map[string]string{"run": "r1"}) {
		t.Errorf("labels = %v", got)
	}
	if _, ok := obj.Object["spec"]; ok {
		t.Errorf("Stamp added a spec to a ConfigMap: %v", obj.Object)
	}
}

func TestStampConflicts(t *testing.T) {
	labels := map[string]string{"fleetlet.io/run": "r1"}
	for _, tc := range []struct {
		name, yaml, want string
	}{{
		name: "pod template",
		yaml: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    metadata:\n      labels: {fleetlet.io/run: other}\n",
		want: `Deployment x sets label fleetlet.io/run="other" in spec.template.metadata.labels, where the driver puts fleetlet.io/run="r1": remove that label from the template`,
	}, {
		name: "metadata",
		yaml: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels: {fleetlet.io/run: other}\n",
		want: `ConfigMap x sets label fleetlet.io/run="other" in metadata.labels`,
	}, {
		name: "not a string",
		yaml: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels: {port: 80}\n",
		want: "ConfigMap x has label port in metadata.labels of type int64, not a string: quote its value",
	}, {
		name: "not a map",
		yaml: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template: []\n",
		want: "Deployment x has spec.template of type []interface {}, not a map",
	}} {
		obj := mustObj(t, tc.yaml)
		before := obj.DeepCopy()
		err := Stamp(obj, labels)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
		if !equalObjects(obj, before) {
			t.Errorf("%s: a failed Stamp changed the object: %v", tc.name, obj.Object)
		}
	}
	// The same value is no conflict.
	obj := mustObj(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels: {fleetlet.io/run: r1}\n")
	if err := Stamp(obj, labels); err != nil {
		t.Errorf("same value: %v", err)
	}
}

func equalObjects(a, b *unstructured.Unstructured) bool {
	ja, _ := a.MarshalJSON()
	jb, _ := b.MarshalJSON()
	return string(ja) == string(jb)
}
