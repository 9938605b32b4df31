package loadprofiles

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const objectsYAML = `name: objects
nodePools: [{name: pool, count: 1}]
phases:
  - name: deploy
    create:
      count: 4
      namespaces: 2
      params: {Replicas: 3}
      object: |
        apiVersion: apps/v1
        kind: Deployment
        spec:
          replicas: {{.Replicas}}
          selector: {matchLabels: {app: "{{.Name}}"}}
          template:
            metadata: {labels: {app: "{{.Name}}"}}
            spec: {containers: [{name: app, image: pause}]}
  - waitRunning: {}
  - name: grow
    scale: {phase: deploy, factor: [0.5, 1.5]}
  - name: roll
    update: {phase: deploy, params: {Replicas: 2}}
  - delete: {phase: deploy}
`

func TestObjectPhasesParse(t *testing.T) {
	p, err := Parse([]byte(objectsYAML), "objects.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := p.Phases[0].Create
	if c.Namespaces != 2 || c.QPS != DefaultQPS || p.Phases[2].Scale.QPS != DefaultQPS || p.Phases[3].Update.QPS != DefaultQPS {
		t.Errorf("defaults: namespaces %d, create qps %v, scale qps %v, update qps %v", c.Namespaces, c.QPS, p.Phases[2].Scale.QPS, p.Phases[3].Update.QPS)
	}
	if p.Phases[4].Delete.Phase != "deploy" {
		t.Errorf("delete phase = %q, want deploy", p.Phases[4].Delete.Phase)
	}
}

func TestObjectPhaseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, old, new, want string
	}{{
		name: "pod template and object template",
		old:  "      params: {Replicas: 3}\n", new: "      params: {Replicas: 3}\n      template: {spec: {containers: [{name: a, image: b}]}}\n",
		want: "phases[0].create.template: Forbidden: give a pod template or an object template, not both",
	}, {
		name: "template that does not parse",
		old:  "replicas: {{.Replicas}}", new: "replicas: {{.Replicas",
		want: "phases[0].create.object: Invalid value:",
	}, {
		name: "more namespaces than objects",
		old:  "namespaces: 2", new: "namespaces: 5",
		want: "phases[0].create.namespaces: Invalid value: 5: must be at most count (4)",
	}, {
		name: "scale of a phase that is not there",
		old:  "scale: {phase: deploy,", new: "scale: {phase: deplo,",
		want: `phases[2].scale.phase: Invalid value: "deplo": must name an earlier create phase with an object template`,
	}, {
		name: "scale with neither replicas nor factor",
		old:  "scale: {phase: deploy, factor: [0.5, 1.5]}", new: "scale: {phase: deploy}",
		want: "phases[2].scale: Required value: give replicas (the same for every object) or factor",
	}, {
		name: "factor upside down",
		old:  "factor: [0.5, 1.5]", new: "factor: [1.5, 0.5]",
		want: "phases[2].scale.factor: Invalid value:",
	}, {
		name: "update without a phase",
		old:  "update: {phase: deploy, ", new: "update: {",
		want: "phases[3].update.phase: Required value: name the create phase whose objects to update",
	}, {
		name: "delete of a later phase",
		old:  "delete: {phase: deploy}", new: "delete: {phase: roll}",
		want: `phases[4].delete.phase: Invalid value: "roll": must name an earlier create phase with an object template`,
	}, {
		name: "params on a pod template",
		old:  objectsYAML[strings.Index(objectsYAML, "      namespaces"):strings.Index(objectsYAML, "  - waitRunning")],
		new:  "      params: {Replicas: 3}\n      template: {spec: {containers: [{name: a, image: b}]}}\n",
		want: "phases[0].create.params: Forbidden: params fill an object template",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(objectsYAML, tc.old) {
				t.Fatalf("test case edits text that is not in the profile: %q", tc.old)
			}
			_, err := Parse([]byte(strings.Replace(objectsYAML, tc.old, tc.new, 1)), "objects.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestTemplateDataNumbers(t *testing.T) {
	data := templateData(map[string]any{"A": json.Number("3"), "B": json.Number("0.5"), "C": 4.0, "Index": 99}, 1, "deploy-1", "ns")
	if data["A"] != 3 || data["B"] != 0.5 || data["C"] != 4 {
		t.Errorf("numbers: A %#v, B %#v, C %#v; want int 3, float 0.5, int 4", data["A"], data["B"], data["C"])
	}
	if data["Index"] != 1 || data["Name"] != "deploy-1" || data["Namespace"] != "ns" {
		t.Errorf("Index, Name, Namespace = %v %v %v: a param must not hide them", data["Index"], data["Name"], data["Namespace"])
	}
}

// An object's pods are counted per object, Running now, and are never the
// driver's to delete: they go with their object.
func TestTrackerCountsObjectPods(t *testing.T) {
	tr := newTracker()
	pod := func(uid, object string, phase corev1.PodPhase, terminating bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: "ns", Name: uid, Labels: map[string]string{LabelObject: object}}}
		p.Status.Phase = phase
		if terminating {
			p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		}
		return p
	}
	now := time.Unix(100, 0)
	if first, _, _ := tr.observe(pod("a", "deploy-0", corev1.PodPending, false), now); !first {
		t.Error("the first sight of a pod is not reported as such")
	}
	tr.observe(pod("b", "deploy-0", corev1.PodRunning, false), now)
	tr.observe(pod("c", "deploy-1", corev1.PodRunning, false), now)
	if first, _, _ := tr.observe(pod("b", "deploy-0", corev1.PodRunning, false), now); first {
		t.Error("a second sight is reported as the first")
	}
	if tr.liveOf("deploy-0") != 1 || tr.presentOf("deploy-0") != 2 || tr.liveOf("deploy-1") != 1 {
		t.Errorf("deploy-0: %d live, %d present; deploy-1: %d live; want 1, 2, 1", tr.liveOf("deploy-0"), tr.presentOf("deploy-0"), tr.liveOf("deploy-1"))
	}
	tr.observe(pod("a", "deploy-0", corev1.PodRunning, false), now)
	tr.observe(pod("b", "deploy-0", corev1.PodRunning, true), now) // a scale-down
	if tr.liveOf("deploy-0") != 1 || tr.presentOf("deploy-0") != 2 {
		t.Errorf("after a start and a termination: %d live, %d present, want 1 and 2", tr.liveOf("deploy-0"), tr.presentOf("deploy-0"))
	}
	tr.observeGone("b")
	if tr.presentOf("deploy-0") != 1 {
		t.Errorf("after a pod went: %d present, want 1", tr.presentOf("deploy-0"))
	}
	if refs := tr.toDelete(); len(refs) != 0 {
		t.Errorf("the driver would delete %v, pods of objects", refs)
	}
	if p := tr.progress(); p.Created != 0 {
		t.Errorf("progress counts %d created pods; the driver created none", p.Created)
	}
}
