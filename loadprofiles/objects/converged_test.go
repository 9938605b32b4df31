package objects

import (
	"fmt"
	"testing"
)

// fixture is an object of kind with the given spec and status, at
// generation 2 unless the status says otherwise, as YAML flow mappings.
func fixture(t *testing.T, apiVersion, kind, spec, status string) string {
	t.Helper()
	text := fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata: {name: x, namespace: ns, generation: 2}\n", apiVersion, kind)
	if spec != "" {
		text += "spec: " + spec + "\n"
	}
	if status != "" {
		text += "status: " + status + "\n"
	}
	return text
}

func TestDesiredPods(t *testing.T) {
	for _, tc := range []struct {
		name, apiVersion, kind, spec, status string
		want                                 int
		ok                                   bool
	}{
		{"deployment", "apps/v1", "Deployment", "{replicas: 3}", "", 3, true},
		{"deployment default", "apps/v1", "Deployment", "{}", "", 1, true},
		{"deployment scaled to 0", "apps/v1", "Deployment", "{replicas: 0}", "", 0, true},
		{"replicaset", "apps/v1", "ReplicaSet", "{replicas: 4}", "", 4, true},
		{"statefulset", "apps/v1", "StatefulSet", "{replicas: 2}", "", 2, true},
		{"replicationcontroller", "v1", "ReplicationController", "{}", "", 1, true},
		{"replicas not a number", "apps/v1", "Deployment", "{replicas: three}", "", 0, false},
		{"daemonset observed", "apps/v1", "DaemonSet", "{}", "{observedGeneration: 2, desiredNumberScheduled: 40}", 40, true},
		{"daemonset before observedGeneration", "apps/v1", "DaemonSet", "{}", "{observedGeneration: 1, desiredNumberScheduled: 40}", 0, false},
		{"daemonset without status", "apps/v1", "DaemonSet", "{}", "", 0, false},
		{"job default", "batch/v1", "Job", "{}", "", 1, true},
		{"job parallelism", "batch/v1", "Job", "{parallelism: 5}", "{active: 5}", 5, true},
		{"job completions partly succeeded", "batch/v1", "Job", "{parallelism: 5, completions: 10}", "{succeeded: 7}", 3, true},
		{"job completions barely started", "batch/v1", "Job", "{parallelism: 5, completions: 10}", "{succeeded: 2}", 5, true},
		{"job finished", "batch/v1", "Job", "{parallelism: 5, completions: 10}", "{succeeded: 10}", 0, true},
		{"job over-succeeded", "batch/v1", "Job", "{parallelism: 5, completions: 10}", "{succeeded: 12}", 0, true},
		{"job suspended", "batch/v1", "Job", "{parallelism: 5, suspend: true}", "", 0, true},
		{"cronjob", "batch/v1", "CronJob", "{schedule: '* * * * *'}", "", 0, false},
		{"configmap", "v1", "ConfigMap", "", "", 0, false},
		{"custom resource", "example.com/v1", "Widget", "{replicas: 3}", "", 0, false},
	} {
		n, ok := DesiredPods(mustObj(t, fixture(t, tc.apiVersion, tc.kind, tc.spec, tc.status)))
		if n != tc.want || ok != tc.ok {
			t.Errorf("%s: DesiredPods = %d, %v; want %d, %v", tc.name, n, ok, tc.want, tc.ok)
		}
	}
}

func TestConverged(t *testing.T) {
	for _, tc := range []struct {
		name, apiVersion, kind, spec, status string
		running                              int
		want                                 bool
		why                                  string
	}{
		// Deployment.
		{"deployment converged", "apps/v1", "Deployment", "{replicas: 3}",
			"{observedGeneration: 2, replicas: 3, updatedReplicas: 3}", 3, true, ""},
		{"deployment starting", "apps/v1", "Deployment", "{replicas: 5}",
			"{observedGeneration: 2, replicas: 5, updatedReplicas: 5}", 3, false, "3/5 running"},
		{"deployment generation not observed", "apps/v1", "Deployment", "{replicas: 3}",
			"{observedGeneration: 1, replicas: 3, updatedReplicas: 3}", 3, false, "generation 2 not observed yet (at 1)"},
		{"deployment without status", "apps/v1", "Deployment", "{replicas: 3}", "", 0, false,
			"generation 2 not observed yet (no status)"},
		{"deployment mid-rollout", "apps/v1", "Deployment", "{replicas: 3}",
			"{observedGeneration: 2, replicas: 4, updatedReplicas: 2}", 4, false,
			"4/3 running, rollout: 2 old pods, rollout: 2/3 updated"},
		// All pods are running and as many as wanted, but one is an old
		// ReplicaSet's: the rollout is not done.
		{"deployment last old pod", "apps/v1", "Deployment", "{replicas: 3}",
			"{observedGeneration: 2, replicas: 4, updatedReplicas: 3}", 3, false, "rollout: 1 old pod"},
		{"deployment scaled to 0", "apps/v1", "Deployment", "{replicas: 0}",
			"{observedGeneration: 2}", 0, true, ""},
		// ReplicaSet and ReplicationController.
		{"replicaset converged", "apps/v1", "ReplicaSet", "{replicas: 2}", "{observedGeneration: 2, replicas: 2}", 2, true, ""},
		{"replicaset short", "apps/v1", "ReplicaSet", "{replicas: 2}", "{observedGeneration: 2, replicas: 2}", 1, false, "1/2 running"},
		{"replicationcontroller converged", "v1", "ReplicationController", "{}", "{observedGeneration: 3, replicas: 1}", 1, true, ""},
		{"replicationcontroller not observed", "v1", "ReplicationController", "{}", "{observedGeneration: 1}", 1, false, "generation 2 not observed yet (at 1)"},
		// StatefulSet.
		{"statefulset converged", "apps/v1", "StatefulSet", "{replicas: 3}",
			"{observedGeneration: 2, updatedReplicas: 3, currentRevision: web-1, updateRevision: web-1}", 3, true, ""},
		{"statefulset rolling", "apps/v1", "StatefulSet", "{replicas: 3}",
			"{observedGeneration: 2, updatedReplicas: 1, currentRevision: web-1, updateRevision: web-2}", 3, false,
			"rollout: 1/3 updated, rollout: revision web-2 not current yet"},
		{"statefulset revision not current", "apps/v1", "StatefulSet", "{replicas: 3, updateStrategy: {type: RollingUpdate}}",
			"{observedGeneration: 2, updatedReplicas: 3, currentRevision: web-1, updateRevision: web-2}", 3, false,
			"rollout: revision web-2 not current yet"},
		{"statefulset partition", "apps/v1", "StatefulSet", "{replicas: 3, updateStrategy: {type: RollingUpdate, rollingUpdate: {partition: 2}}}",
			"{observedGeneration: 2, updatedReplicas: 1, currentRevision: web-1, updateRevision: web-2}", 3, true, ""},
		{"statefulset partition rolling", "apps/v1", "StatefulSet", "{replicas: 3, updateStrategy: {type: RollingUpdate, rollingUpdate: {partition: 1}}}",
			"{observedGeneration: 2, updatedReplicas: 1, currentRevision: web-1, updateRevision: web-2}", 3, false,
			"rollout: 1/2 updated (partition 1)"},
		{"statefulset OnDelete", "apps/v1", "StatefulSet", "{replicas: 3, updateStrategy: {type: OnDelete}}",
			"{observedGeneration: 2, updatedReplicas: 0, currentRevision: web-1, updateRevision: web-2}", 3, true, ""},
		// DaemonSet.
		{"daemonset before observedGeneration", "apps/v1", "DaemonSet", "{}",
			"{observedGeneration: 1, desiredNumberScheduled: 4, updatedNumberScheduled: 4}", 4, false, "generation 2 not observed yet (at 1)"},
		{"daemonset converged", "apps/v1", "DaemonSet", "{}",
			"{observedGeneration: 2, desiredNumberScheduled: 4, updatedNumberScheduled: 4}", 4, true, ""},
		{"daemonset short", "apps/v1", "DaemonSet", "{}",
			"{observedGeneration: 2, desiredNumberScheduled: 4, updatedNumberScheduled: 4}", 2, false, "2/4 running"},
		{"daemonset rolling", "apps/v1", "DaemonSet", "{}",
			"{observedGeneration: 2, desiredNumberScheduled: 4, updatedNumberScheduled: 3}", 4, false, "rollout: 3/4 updated"},
		{"daemonset OnDelete", "apps/v1", "DaemonSet", "{updateStrategy: {type: OnDelete}}",
			"{observedGeneration: 2, desiredNumberScheduled: 4, updatedNumberScheduled: 0}", 4, true, ""},
		// Job: no observedGeneration to wait for.
		{"job running", "batch/v1", "Job", "{parallelism: 3}", "{active: 3}", 3, true, ""},
		{"job starting", "batch/v1", "Job", "{parallelism: 3}", "", 1, false, "1/3 running"},
		{"job completions partly succeeded", "batch/v1", "Job", "{parallelism: 3, completions: 10}", "{succeeded: 8, active: 2}", 2, true, ""},
		{"job completions partly succeeded, short", "batch/v1", "Job", "{parallelism: 3, completions: 10}", "{succeeded: 6}", 1, false, "1/3 running"},
		{"job finished by count", "batch/v1", "Job", "{parallelism: 3, completions: 10}", "{succeeded: 10}", 0, true, ""},
		{"job finished by condition", "batch/v1", "Job", "{parallelism: 3}",
			"{succeeded: 1, conditions: [{type: Complete, status: 'True'}]}", 0, true, ""},
		{"job failed", "batch/v1", "Job", "{parallelism: 3, completions: 10}",
			"{failed: 7, conditions: [{type: Failed, status: 'True', reason: BackoffLimitExceeded}]}", 0, false, "job failed (BackoffLimitExceeded)"},
		{"job condition not true", "batch/v1", "Job", "{parallelism: 2}",
			"{conditions: [{type: Failed, status: 'False'}]}", 2, true, ""},
		// Kinds fleetlet cannot wait for.
		{"cronjob", "batch/v1", "CronJob", "{schedule: '* * * * *'}", "", 0, false,
			"cannot tell when a CronJob's pods are running: wait only for Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs and ReplicationControllers"},
		{"configmap", "v1", "ConfigMap", "", "", 0, false,
			"cannot tell when a ConfigMap's pods are running: wait only for Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs and ReplicationControllers"},
	} {
		got, why := Converged(mustObj(t, fixture(t, tc.apiVersion, tc.kind, tc.spec, tc.status)), tc.running)
		if got != tc.want || why != tc.why {
			t.Errorf("%s: Converged = %v, %q; want %v, %q", tc.name, got, why, tc.want, tc.why)
		}
	}
}

// TestIntTypes reads counts held as int or float64, as objects built in Go
// or decoded without the API machinery's number handling hold them.
func TestIntTypes(t *testing.T) {
	obj := mustObj(t, fixture(t, "apps/v1", "Deployment", "{}", ""))
	obj.Object["spec"] = map[string]any{"replicas": 3}
	obj.Object["status"] = map[string]any{"observedGeneration": float64(2), "replicas": int64(3), "updatedReplicas": float64(3)}
	if ok, why := Converged(obj, 3); !ok {
		t.Errorf("Converged = false, %q", why)
	}
	obj.Object["spec"] = map[string]any{"replicas": 2.5}
	if n, ok := DesiredPods(obj); ok {
		t.Errorf("replicas 2.5: DesiredPods = %d, true; want not ok", n)
	}
}
