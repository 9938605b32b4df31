package objects

import (
	"fmt"
	"math"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// PodCounts is the caller's tally of one object's pods, from its pod watch
// (the pods carrying the labels Stamp put on the object's pod template).
// Running counts pods that are Running and not terminating (no
// deletionTimestamp); Pending those not yet Running; Terminating those with
// a deletionTimestamp, whatever their phase. Converged takes Running.
type PodCounts struct {
	Running, Pending, Terminating int
}

// DesiredPods returns how many pods obj's controller should have running
// now, read from the object itself:
//   - Deployment, ReplicaSet, StatefulSet, ReplicationController:
//     spec.replicas, 1 when absent (the API server's default).
//   - DaemonSet: status.desiredNumberScheduled, which is ok only once the
//     controller has observed the object's generation
//     (status.observedGeneration >= metadata.generation); ok=false before.
//   - Job: the pods that should be running now: 0 while suspended, else
//     spec.parallelism (default 1) capped by spec.completions minus
//     status.succeeded when completions is set, never below 0.
//
// Other kinds, CronJob among them (its pods come and go on a schedule),
// give ok=false.
//
// It follows clusterloader2's GetReplicasFromRuntimeObject
// (perf-tests clusterloader2/pkg/measurement/util/runtimeobjects) but
// differs in three places. A missing spec.replicas is 1 here, 0 there: the
// API server defaults it to 1, so 1 is what the controller runs. A
// DaemonSet's count is the controller's own status.desiredNumberScheduled;
// clusterloader2 lists and watches the nodes and matches them against the
// pod's node selector, affinity and tolerations itself, which repeats the
// controller's work and is one more watch of every node for a driver whose
// fleets have thousands. A Job's count there is spec.parallelism (0 when
// absent) whatever it has completed; here a Job near its end, with fewer
// completions left than its parallelism, wants only those, as the Job
// controller runs them, so that waiting for it does not wait for pods it
// will never make.
func DesiredPods(obj *unstructured.Unstructured) (n int, ok bool) {
	switch obj.GroupVersionKind().GroupKind() {
	case gkDeployment, gkReplicaSet, gkStatefulSet, gkReplicationController:
		r, found, err := intAt(obj, "spec", "replicas")
		if err != nil {
			return 0, false
		}
		if !found {
			return 1, true
		}
		return nonNegative(r), true
	case gkDaemonSet:
		if observed, _ := generationObserved(obj); !observed {
			return 0, false
		}
		// Written with observedGeneration and never omitted, so absent
		// only in an object not from the API server: none scheduled.
		d, _, err := intAt(obj, "status", "desiredNumberScheduled")
		if err != nil {
			return 0, false
		}
		return nonNegative(d), true
	case gkJob:
		return jobDesired(obj)
	}
	return 0, false
}

func jobDesired(obj *unstructured.Unstructured) (int, bool) {
	if suspended, _, _ := unstructured.NestedBool(obj.Object, "spec", "suspend"); suspended {
		return 0, true // the Job controller deletes a suspended Job's pods
	}
	parallelism, found, err := intAt(obj, "spec", "parallelism")
	if err != nil {
		return 0, false
	}
	if !found {
		parallelism = 1
	}
	completions, found, err := intAt(obj, "spec", "completions")
	if err != nil {
		return 0, false
	}
	if found {
		succeeded, _, err := intAt(obj, "status", "succeeded")
		if err != nil {
			return 0, false
		}
		parallelism = min(parallelism, completions-succeeded)
	}
	return nonNegative(parallelism), true
}

// Converged reports whether obj's controller has all the pods it wants
// running, from obj's own status and running, the caller's count of obj's
// pods that are Running and not terminating (PodCounts.Running), and when
// not, what is missing in a short phrase for the driver's messages ("3/5
// running", "rollout: 2 old pods"; several joined by ", "):
//   - Deployment, ReplicaSet, StatefulSet, DaemonSet, ReplicationController:
//     the controller has observed the latest generation
//     (status.observedGeneration >= metadata.generation), so that the
//     status read is of the current spec, and running == DesiredPods.
//   - Deployment, also: status.updatedReplicas and status.replicas equal
//     spec.replicas: no old ReplicaSet's pods are left, which is what a
//     rolling update waits for.
//   - StatefulSet with the RollingUpdate strategy (the default), also:
//     status.updatedReplicas equals spec.replicas and status.currentRevision
//     equals status.updateRevision. With a partition P, only the pods at
//     ordinals >= P are updated, so it wants replicas-P updated pods and
//     does not compare revisions, which stay apart by design.
//   - DaemonSet with the RollingUpdate strategy (the default), also:
//     status.updatedNumberScheduled equals desiredNumberScheduled, for the
//     reason a Deployment checks its updated replicas.
//   - Job: true once it is finished (a Complete condition, or
//     status.succeeded >= spec.completions); false for good once it has
//     failed (a Failed or FailureTarget condition), with the reason; else
//     running == DesiredPods. A Job publishes no observedGeneration.
//
// Other kinds (a CronJob, a ConfigMap, a custom resource) are never
// converged: fleetlet cannot tell from them which pods to wait for, and the
// driver waits only for the kinds above.
func Converged(obj *unstructured.Unstructured, running int) (bool, string) {
	gk := obj.GroupVersionKind().GroupKind()
	switch gk {
	case gkJob:
		return jobConverged(obj, running)
	case gkDeployment, gkReplicaSet, gkStatefulSet, gkDaemonSet, gkReplicationController:
	default:
		return false, fmt.Sprintf("cannot tell when a %s's pods are running: wait only for Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs and ReplicationControllers", obj.GetKind())
	}
	if observed, msg := generationObserved(obj); !observed {
		return false, msg
	}
	desired, ok := DesiredPods(obj)
	if !ok {
		return false, "cannot read its desired pods: spec.replicas or status is not a number"
	}
	var missing []string
	if running != desired {
		missing = append(missing, fmt.Sprintf("%d/%d running", running, desired))
	}
	switch gk {
	case gkDeployment:
		updated := statusInt(obj, "updatedReplicas")
		if old := statusInt(obj, "replicas") - updated; old > 0 {
			missing = append(missing, fmt.Sprintf("rollout: %d old %s", old, plural(old, "pod", "pods")))
		}
		if updated != desired {
			missing = append(missing, fmt.Sprintf("rollout: %d/%d updated", updated, desired))
		}
	case gkStatefulSet:
		if updateStrategy(obj) != "RollingUpdate" {
			break // OnDelete: pods are updated only when someone deletes them
		}
		updated := statusInt(obj, "updatedReplicas")
		partition, _, _ := intAt(obj, "spec", "updateStrategy", "rollingUpdate", "partition")
		if partition > 0 {
			if want := max(0, desired-nonNegative(partition)); updated < want {
				missing = append(missing, fmt.Sprintf("rollout: %d/%d updated (partition %d)", updated, want, partition))
			}
			break
		}
		if updated != desired {
			missing = append(missing, fmt.Sprintf("rollout: %d/%d updated", updated, desired))
		}
		current, _, _ := unstructured.NestedString(obj.Object, "status", "currentRevision")
		update, _, _ := unstructured.NestedString(obj.Object, "status", "updateRevision")
		if current != update {
			missing = append(missing, fmt.Sprintf("rollout: revision %s not current yet", update))
		}
	case gkDaemonSet:
		if updateStrategy(obj) != "RollingUpdate" {
			break
		}
		if updated := statusInt(obj, "updatedNumberScheduled"); updated != desired {
			missing = append(missing, fmt.Sprintf("rollout: %d/%d updated", updated, desired))
		}
	}
	return len(missing) == 0, strings.Join(missing, ", ")
}

func jobConverged(obj *unstructured.Unstructured, running int) (bool, string) {
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conditions {
		cond, _ := c.(map[string]any)
		if cond["status"] != "True" {
			continue
		}
		switch cond["type"] {
		case "Failed", "FailureTarget":
			if reason, _ := cond["reason"].(string); reason != "" {
				return false, fmt.Sprintf("job failed (%s)", reason)
			}
			return false, "job failed"
		case "Complete", "SuccessCriteriaMet":
			return true, ""
		}
	}
	completions, found, _ := intAt(obj, "spec", "completions")
	if found && statusInt(obj, "succeeded") >= nonNegative(completions) {
		return true, ""
	}
	desired, ok := DesiredPods(obj)
	if !ok {
		return false, "cannot read its desired pods: parallelism, completions or status.succeeded is not a number"
	}
	if running != desired {
		return false, fmt.Sprintf("%d/%d running", running, desired)
	}
	return true, ""
}

// generationObserved reports whether obj's controller has written a status
// for obj's current generation and, when not, says so. A status without
// observedGeneration has not been written by the controller yet.
func generationObserved(obj *unstructured.Unstructured) (bool, string) {
	generation := obj.GetGeneration()
	observed, found, err := intAt(obj, "status", "observedGeneration")
	switch {
	case err != nil:
		return false, "status.observedGeneration is not a number"
	case !found:
		return false, fmt.Sprintf("generation %d not observed yet (no status)", generation)
	case observed < generation:
		return false, fmt.Sprintf("generation %d not observed yet (at %d)", generation, observed)
	}
	return true, ""
}

// updateStrategy is spec.updateStrategy.type, RollingUpdate when absent
// (the API server's default for StatefulSets and DaemonSets).
func updateStrategy(obj *unstructured.Unstructured) string {
	s, _, _ := unstructured.NestedString(obj.Object, "spec", "updateStrategy", "type")
	if s == "" {
		return "RollingUpdate"
	}
	return s
}

// statusInt is status.<field>, 0 when absent or not a number: the API
// server omits status counts that are 0.
func statusInt(obj *unstructured.Unstructured, field string) int {
	v, _, _ := intAt(obj, "status", field)
	return nonNegative(v)
}

// intAt reads an integer field. Objects from the API server hold int64;
// objects built in Go or decoded otherwise may hold int or an integral
// float64, which are accepted too.
func intAt(obj *unstructured.Unstructured, path ...string) (int64, bool, error) {
	v, found, err := unstructured.NestedFieldNoCopy(obj.Object, path...)
	if err != nil || !found || v == nil {
		return 0, false, err
	}
	switch x := v.(type) {
	case int64:
		return x, true, nil
	case int:
		return int64(x), true, nil
	case int32:
		return int64(x), true, nil
	case float64:
		if x == math.Trunc(x) {
			return int64(x), true, nil
		}
	}
	return 0, false, fmt.Errorf("%s: %s is %v (%T), not an integer", describe(obj), strings.Join(path, "."), v, v)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func nonNegative(v int64) int {
	return int(max(v, 0))
}
