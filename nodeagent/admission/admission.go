// Package admission decides, as the kubelet's predicate admit handler does,
// whether a node accepts a pod bound to it: the pod must fit the node's
// allocatable resources beside the pods already admitted, match its node
// affinity, name and free host ports, and tolerate its NoExecute taints.
// Admit is a pure function of the pod, the node and the admitted pods.
package admission

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	resourcehelper "k8s.io/component-helpers/resource"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// Result is the verdict; Reason and Message are what the kubelet writes into
// a rejected pod's status and event (the message is prefixed with
// "Pod was rejected: " in the status).
type Result struct {
	Admit           bool
	Reason, Message string
}

// The scheduler plugins' names and reasons the kubelet reports.
const (
	reasonNodeAffinity = "NodeAffinity"
	reasonNodeName     = "NodeName"
	reasonNodePorts    = "NodePorts"
	reasonTaint        = "TaintToleration"
)

// Admit checks pod against node and the pods already admitted to it, in the
// kubelet's order, and returns the first failure.
func Admit(pod *corev1.Pod, node *corev1.Node, admitted []*corev1.Pod) Result {
	if r, ok := fits(pod, node, admitted); !ok {
		return r
	}
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !ok {
		return predicate(reasonNodeAffinity, "node(s) didn't match Pod's node affinity/selector")
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Name {
		return predicate(reasonNodeName, "node(s) didn't match the requested node name")
	}
	if portsConflict(pod, admitted) {
		return predicate(reasonNodePorts, "node(s) didn't have free ports for the requested pod ports")
	}
	_, untolerated := v1helper.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations,
		// The kubelet only cares about NoExecute: NoSchedule is the scheduler's.
		func(t *corev1.Taint) bool { return t.Effect == corev1.TaintEffectNoExecute }, false)
	if untolerated {
		return predicate(reasonTaint, "node(s) had taints that the pod didn't tolerate")
	}
	return Result{Admit: true}
}

func predicate(name, desc string) Result {
	return Result{Reason: name, Message: fmt.Sprintf("Predicate %s failed: %s", name, desc)}
}

// fits checks the pod count and the pod's requests (the larger of its init
// containers' and the sum of its app containers', plus overhead) against
// what the admitted pods request of the node's status.allocatable, as the
// kubelet's predicate handler does through the scheduler's NodeInfo (whose
// Allocatable is the Node's): capacity less the kubelet's reservation, not
// capacity. cpu, memory and ephemeral-storage are checked, then the scalar
// resources (hugepages, extended resources) in name order; an extended
// resource the node does not have is not checked, as the kubelet's
// removeMissingExtendedResources drops it.
func fits(pod *corev1.Pod, node *corev1.Node, admitted []*corev1.Pod) (Result, bool) {
	alloc := node.Status.Allocatable
	if maxPods := alloc.Pods().Value(); int64(len(admitted))+1 > maxPods {
		return insufficient(corev1.ResourcePods, 1, int64(len(admitted)), maxPods), false
	}
	used := corev1.ResourceList{}
	for _, p := range admitted {
		for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
			sum := used[name]
			sum.Add(q)
			used[name] = sum
		}
	}
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		req, ok := requests[name]
		if !ok || req.IsZero() {
			continue
		}
		capacity, u := alloc[name], used[name]
		r, taken, limit := amount(name, req), amount(name, u), amount(name, capacity)
		if taken+r > limit {
			return insufficient(name, r, taken, limit), false
		}
	}
	for _, name := range slices.Sorted(maps.Keys(requests)) {
		req := requests[name]
		if !isScalar(name) || req.IsZero() {
			continue
		}
		capacity, present := alloc[name]
		if !present && isExtended(name) {
			continue
		}
		u := used[name]
		if r, taken, limit := req.Value(), u.Value(), capacity.Value(); taken+r > limit {
			return insufficient(name, r, taken, limit), false
		}
	}
	return Result{}, true
}

// isScalar is the kubelet's IsScalarResourceName: what the scheduler's
// Resource keeps beside cpu, memory and ephemeral-storage.
func isScalar(name corev1.ResourceName) bool {
	n := string(name)
	return isExtended(name) || strings.HasPrefix(n, corev1.ResourceHugePagesPrefix) ||
		strings.Contains(n, corev1.ResourceDefaultNamespacePrefix) || strings.HasPrefix(n, corev1.ResourceAttachableVolumesPrefix)
}

// isExtended is the kubelet's IsExtendedResourceName: a name with a domain
// other than kubernetes.io, not starting with "requests.", that is a valid
// quota name.
func isExtended(name corev1.ResourceName) bool {
	n := string(name)
	if !strings.Contains(n, "/") || strings.Contains(n, corev1.ResourceDefaultNamespacePrefix) || strings.HasPrefix(n, corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix+n)) == 0
}

// amount is a quantity as the kubelet's message counts it: millicores for
// cpu, bytes otherwise.
func amount(name corev1.ResourceName, q resource.Quantity) int64 {
	if name == corev1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

// insufficient is the kubelet's InsufficientResourceError: reason OutOf<resource>.
func insufficient(name corev1.ResourceName, requested, used, capacity int64) Result {
	return Result{
		Reason:  "OutOf" + string(name),
		Message: fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d", name, requested, used, capacity),
	}
}

// portsConflict reports whether the pod wants a host port an admitted pod
// already holds (same protocol and port; host IPs are not told apart, as
// every emulated node has one address).
func portsConflict(pod *corev1.Pod, admitted []*corev1.Pod) bool {
	type key struct {
		proto corev1.Protocol
		port  int32
	}
	taken := map[key]bool{}
	for _, p := range admitted {
		for _, c := range p.Spec.Containers {
			for _, port := range c.Ports {
				if port.HostPort > 0 {
					taken[key{port.Protocol, port.HostPort}] = true
				}
			}
		}
	}
	for _, c := range pod.Spec.Containers {
		for _, port := range c.Ports {
			if port.HostPort > 0 && taken[key{port.Protocol, port.HostPort}] {
				return true
			}
		}
	}
	return false
}
