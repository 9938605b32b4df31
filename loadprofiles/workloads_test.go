package loadprofiles

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
	}, {
		name: "pod startup SLO of a phase that makes no pods",
		old:  "nodePools: [{name: pool, count: 1}]\n", new: "nodePools: [{name: pool, count: 1}]\nslos: {podStartupPhases: [deploy, grow]}\n",
		want: `slos.podStartupPhases[1]: Invalid value: "grow": must name a create or churn phase of this profile, whose pods the pod startup SLO then judges (phases that make pods: deploy)`,
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

// rejectingObjects is an ObjectClient that keeps what it is given and
// rejects the create of the objects named in reject, as an API server's
// admission would.
type rejectingObjects struct {
	mu      sync.Mutex
	reject  map[string]bool
	created []string
	deleted []string
}

func (o *rejectingObjects) Create(_ context.Context, obj *unstructured.Unstructured) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.reject[obj.GetName()] {
		return fmt.Errorf(`admission webhook "policy" denied the request: %s is not allowed`, obj.GetName())
	}
	o.created = append(o.created, obj.GetName())
	return nil
}

func (o *rejectingObjects) SetReplicas(context.Context, *unstructured.Unstructured, int) error {
	return nil
}
func (o *rejectingObjects) Apply(context.Context, *unstructured.Unstructured) error { return nil }
func (o *rejectingObjects) Get(context.Context, *unstructured.Unstructured) error   { return nil }
func (o *rejectingObjects) Delete(_ context.Context, obj *unstructured.Unstructured) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.deleted = append(o.deleted, obj.GetName())
	return nil
}

const configMapsYAML = `name: cms
nodePools: [{name: pool, count: 1}]
phases:
  - name: cm
    create:
      count: 5
      qps: 1000
      object: |
        apiVersion: v1
        kind: ConfigMap
        data: {index: "{{.Index}}"}
  - name: after
    delete: {phase: cm, qps: 1000}
`

// TestObjectRejections: an object the API server rejects is reported with
// its name and the reason, and the run goes on with the rest (the delete
// phase runs) and fails at its end; with failFast it stops at the
// rejection.
func TestObjectRejections(t *testing.T) {
	for _, failFast := range []bool{false, true} {
		t.Run(fmt.Sprintf("failFast=%v", failFast), func(t *testing.T) {
			ctx, cancel := testContext(t)
			defer cancel()
			text := configMapsYAML
			if failFast {
				text = strings.Replace(text, "name: cms\n", "name: cms\nfailFast: true\n", 1)
			}
			p, err := Parse([]byte(text), "cms.yaml")
			if err != nil {
				t.Fatal(err)
			}
			// With failFast the phase stops at its first failure: reject
			// the first object, so no other create is in flight.
			objs := &rejectingObjects{reject: map[string]bool{"cm-0": true}}
			if !failFast {
				objs.reject = map[string]bool{"cm-1": true, "cm-3": true}
			}
			err = (&Driver{Client: newFakeAPI(t, nil), Objects: objs}).Run(ctx, p)
			if err == nil {
				t.Fatal("a rejected object did not fail the run")
			}
			first := "cm-1"
			if failFast {
				first = "cm-0"
			}
			for _, want := range []string{`phase "cm"`, "object creates failed", "creating ConfigMap fleetlet-load/" + first, "denied the request"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			switch {
			case failFast && (len(objs.created) != 0 || len(objs.deleted) != 0):
				t.Errorf("failFast: created %v, deleted %v; want the run stopped at the first rejection", objs.created, objs.deleted)
			case !failFast && (len(objs.created) != 3 || len(objs.deleted) != 3):
				t.Errorf("created %v, deleted %v; want the 3 accepted objects made and then deleted by the next phase", objs.created, objs.deleted)
			}
		})
	}
}
