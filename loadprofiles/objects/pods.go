package objects

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	gkDeployment            = schema.GroupKind{Group: "apps", Kind: "Deployment"}
	gkReplicaSet            = schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}
	gkStatefulSet           = schema.GroupKind{Group: "apps", Kind: "StatefulSet"}
	gkDaemonSet             = schema.GroupKind{Group: "apps", Kind: "DaemonSet"}
	gkJob                   = schema.GroupKind{Group: "batch", Kind: "Job"}
	gkCronJob               = schema.GroupKind{Group: "batch", Kind: "CronJob"}
	gkReplicationController = schema.GroupKind{Kind: "ReplicationController"}
)

// podTemplatePaths are the kinds known to make pods from a pod template, and
// where it is. The kinds are listed, not guessed from an object's shape: a
// custom resource with a spec.template need not make pods from it, and the
// driver would then wait for pods that never come. The kinds are matched by
// group and kind; every version the API server serves of them today (v1)
// keeps its template there.
var podTemplatePaths = map[schema.GroupKind][]string{
	gkDeployment:            {"spec", "template"},
	gkReplicaSet:            {"spec", "template"},
	gkStatefulSet:           {"spec", "template"},
	gkDaemonSet:             {"spec", "template"},
	gkJob:                   {"spec", "template"},
	gkCronJob:               {"spec", "jobTemplate", "spec", "template"},
	gkReplicationController: {"spec", "template"},
}

// PodTemplate returns the field path of obj's pod template, for the kinds
// that have one: apps/v1 Deployment, ReplicaSet, StatefulSet and DaemonSet,
// batch/v1 Job and CronJob (its jobTemplate's), and v1
// ReplicationController. Other kinds give ok=false. The path is a fresh
// slice the caller may keep.
func PodTemplate(obj *unstructured.Unstructured) (path []string, ok bool) {
	p, ok := podTemplatePaths[obj.GroupVersionKind().GroupKind()]
	return slices.Clone(p), ok
}

// Stamp sets labels on obj's metadata.labels and, when its kind has a pod
// template, on the template's metadata.labels too, so that the object and
// its pods carry the run's labels. Labels already there are kept; one of
// labels that obj already gives another value is an error naming the key,
// since overwriting it would change what the template author selects on.
// obj is left unchanged when Stamp fails.
func Stamp(obj *unstructured.Unstructured, labels map[string]string) error {
	paths := [][]string{{"metadata", "labels"}}
	if p, ok := PodTemplate(obj); ok {
		paths = append(paths, append(p, "metadata", "labels"))
	}
	// Check every place first, so that a failure changes nothing.
	for _, path := range paths {
		existing, err := stringMapAt(obj, path)
		if err != nil {
			return err
		}
		for _, k := range slices.Sorted(maps.Keys(labels)) { // the same key named each time
			if old, ok := existing[k]; ok && old != labels[k] {
				return fmt.Errorf("%s sets label %s=%q in %s, where the driver puts %s=%q: remove that label from the template", describe(obj), k, old, strings.Join(path, "."), k, labels[k])
			}
		}
	}
	for _, path := range paths {
		m, _, _ := unstructured.NestedFieldNoCopy(obj.Object, path...)
		labelMap, _ := m.(map[string]any)
		if labelMap == nil {
			labelMap = map[string]any{}
		}
		for k, v := range labels {
			labelMap[k] = v
		}
		if err := unstructured.SetNestedField(obj.Object, labelMap, path...); err != nil {
			// A field on the way is not a map; stringMapAt has ruled it out.
			return fmt.Errorf("%s: setting %s: %w", describe(obj), strings.Join(path, "."), err)
		}
	}
	return nil
}

// stringMapAt returns the string map at path in obj (nil when absent), or
// an error when a field on the way is not a map or a value is not a string.
func stringMapAt(obj *unstructured.Unstructured, path []string) (map[string]string, error) {
	cur := obj.Object
	for i, field := range path {
		v, ok := cur[field]
		if !ok || v == nil {
			return nil, nil
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s has %s of type %T, not a map: fix the template", describe(obj), strings.Join(path[:i+1], "."), v)
		}
		cur = m
	}
	out := make(map[string]string, len(cur))
	for k, v := range cur {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s has label %s in %s of type %T, not a string: quote its value in the template", describe(obj), k, strings.Join(path, "."), v)
		}
		out[k] = s
	}
	return out, nil
}

// describe names obj in errors: "Deployment ns/name", "ClusterRole name".
func describe(obj *unstructured.Unstructured) string {
	kind := obj.GetKind()
	if kind == "" {
		kind = "object"
	}
	name := obj.GetName()
	if name == "" {
		name = obj.GetGenerateName() + "*" // the server will name it
		if name == "*" {
			name = "(no name)"
		}
	}
	if ns := obj.GetNamespace(); ns != "" {
		name = ns + "/" + name
	}
	return kind + " " + name
}
