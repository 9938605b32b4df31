package loadprofiles

import (
	"bytes"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	sigsjson "sigs.k8s.io/json"

	"github.com/fleetlet/fleetlet/reports"
)

// Profile is one load run: the fleet to emulate and the phases to execute
// against it, in order.
type Profile struct {
	// Name identifies the profile in reports and on the command line.
	Name string `json:"name"`
	// Description is one human sentence shown in listings and reports.
	Description string `json:"description,omitempty"`
	// NodePools are the groups of identical emulated nodes; at least one.
	NodePools []NodePool `json:"nodePools"`
	// Runtime holds the fake runtime's default behaviour for every node.
	Runtime RuntimeBehaviour `json:"runtime"`
	// WatchMode is how agents watch their pods and Node: "per-node" (the
	// default: each agent its own watches, as kubelets) or "shared" (one
	// informer of the fleet's, fanned out by node). --watch-mode overrides.
	WatchMode string `json:"watchMode,omitempty"`
	// Phases run one after the other; the run stops at the first error.
	Phases []Phase `json:"phases"`
	// SLOs are the thresholds the run is judged by; a zero field keeps the
	// upstream SLO, a negative one turns that check off. A failed SLO makes
	// the run exit 1 once its report is written.
	SLOs reports.SLOThresholds `json:"slos,omitempty"`
	// FailFast stops the run at the first object the API server rejects
	// in a create, scale, update or delete of objects. Without it the
	// phase goes on with the rest, and so does the run; the failures are
	// in the report's errors and the run fails at its end.
	FailFast bool `json:"failFast,omitempty"`
	// Sweep, if set, makes a run a capacity search: the profile is run once
	// per value, in increasing order, until a step fails its SLOs.
	Sweep *Sweep `json:"sweep,omitempty"`
}

// Sweep names the parameter a capacity search steps and its values.
type Sweep struct {
	// Parameter is "nodes" (the first node pool's count) or "qps" (the rate
	// of every create and churn phase; a services phase keeps its own, since
	// the sweep is over the pod creation rate).
	Parameter string `json:"parameter"`
	// Values are the steps, increasing.
	Values []int `json:"values"`
}

// Apply sets the swept parameter of p to value.
func (sw *Sweep) Apply(p *Profile, value int) {
	switch sw.Parameter {
	case "nodes":
		p.NodePools[0].Count = value
	case "qps":
		for i := range p.Phases {
			if c := p.Phases[i].Create; c != nil {
				c.QPS = float64(value)
			}
			if c := p.Phases[i].Churn; c != nil {
				c.QPS = float64(value)
			}
		}
	}
}

// NodePool is Count identical nodes.
type NodePool struct {
	// Name is a DNS label, unique in the profile; the fleet derives node
	// names from it.
	Name string `json:"name"`
	// Count is the number of nodes in the pool.
	Count int `json:"count"`
	// CPU and Memory are each node's capacity.
	CPU    resource.Quantity `json:"cpu,omitempty"`
	Memory resource.Quantity `json:"memory,omitempty"`
	// Pods is the kubelet's maxPods, hence the node's pod capacity.
	Pods int `json:"pods,omitempty"`
	// Labels are extra node labels, on top of the kubelet's well-known ones.
	Labels map[string]string `json:"labels,omitempty"`
	// Taints are registered with each node, as --register-with-taints does.
	Taints []corev1.Taint `json:"taints,omitempty"`
	// EphemeralStorage is each node's root filesystem size (nodefs, which
	// images share); default 100Gi.
	EphemeralStorage resource.Quantity `json:"ephemeralStorage,omitempty"`
	// Kubelet overrides the kubelet's settings on the pool's nodes, under
	// KubeletConfiguration's own field names: evictionHard, evictionSoft,
	// evictionPressureTransitionPeriod, imageGCHighThresholdPercent, ...
	// A field left out keeps the kubelet's default. maxPods is not set
	// here but as Pods. Parse checks the settings as an agent would
	// (nodeagent.ValidateKubeletConfiguration), so a bad one fails the
	// profile rather than every agent.
	Kubelet *KubeletOverrides `json:"kubelet,omitempty"`
	// StaticPods are static pods of every node of the pool, given inline:
	// each is as a manifest file in the pool's kubelet.staticPodPath (one
	// of the same name and namespace there replaces it), run by each node
	// from its definition and shown by a mirror pod. Entry i hashes into
	// the pods' UIDs as a file named staticPods[i].
	StaticPods []corev1.Pod `json:"staticPods,omitempty"`
	// KubeProxy is the pool's kube-proxy: on by default, as on a real
	// cluster, with kube-proxy's own defaults.
	KubeProxy *KubeProxy `json:"kubeProxy,omitempty"`
	// SystemUsage is what each node's OS, container runtime and kubelet
	// use outside pods (cpu, memory): the node's stats add it to its pods'
	// sum, as a kubelet's root cgroup holds both. A resource left out has
	// the default (DefaultSystemUsage); "0" makes it none.
	SystemUsage corev1.ResourceList `json:"systemUsage,omitempty"`
}

// DefaultSystemUsage is a node's usage outside pods when its pool does not
// say: an idle node's kubelet, container runtime and system daemons, about
// what a small cloud node's root cgroup shows. A node never reads zero, so
// readers that drop zero readings (metrics-server leaves such a node out of
// `kubectl top`) see every node.
func DefaultSystemUsage() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("50m"),
		corev1.ResourceMemory: resource.MustParse("200Mi"),
	}
}

// KubeProxy is a pool's kube-proxy settings.
type KubeProxy struct {
	// Enabled runs kube-proxy on the pool's nodes; default true. Off, the
	// nodes cost the API server the kubelet's watches only, as on clusters
	// whose CNI replaces kube-proxy.
	Enabled *bool `json:"enabled,omitempty"`
	// MinSyncPeriod is kube-proxy's minSyncPeriod: the least time between
	// two syncs of its rules; default 1s.
	MinSyncPeriod metav1.Duration `json:"minSyncPeriod,omitzero"`
}

// KubeletOverrides are a pool's kubelet settings as the profile writes
// them. Only the fields given override the kubelet's defaults: a decoded
// KubeletConfiguration could not tell "0s" from absent.
type KubeletOverrides struct {
	raw json.RawMessage
}

// UnmarshalJSON keeps the settings as written, after checking that they are
// a KubeletConfiguration: unknown fields are errors.
func (k *KubeletOverrides) UnmarshalJSON(b []byte) error {
	var kc kubeletconfig.KubeletConfiguration
	strictErrs, err := sigsjson.UnmarshalStrict(b, &kc)
	if err != nil {
		return err
	}
	if len(strictErrs) > 0 {
		return utilerrors.NewAggregate(strictErrs)
	}
	k.raw = bytes.Clone(b)
	return nil
}

// MarshalJSON writes the settings as written.
func (k KubeletOverrides) MarshalJSON() ([]byte, error) {
	if k.raw == nil {
		return []byte("{}"), nil
	}
	return k.raw, nil
}

// ApplyTo sets the given settings on kc, leaving the others as they are.
// As the kubelet's defaulting does, a maxParallelImagePulls above 1 given
// without serializeImagePulls turns serializeImagePulls off, so that it takes
// effect.
func (k *KubeletOverrides) ApplyTo(kc *kubeletconfig.KubeletConfiguration) error {
	if k == nil || k.raw == nil {
		return nil
	}
	if err := json.Unmarshal(k.raw, kc); err != nil {
		return err
	}
	if n := kc.MaxParallelImagePulls; n != nil && *n > 1 && !k.has("serializeImagePulls") {
		kc.SerializeImagePulls = ptr.To(false)
	}
	return nil
}

// has reports whether the settings give the field named key (as spelled in
// YAML), null or not.
func (k *KubeletOverrides) has(key string) bool {
	if k == nil || k.raw == nil {
		return false
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(k.raw, &fields); err != nil {
		return false
	}
	_, ok := fields[key]
	return ok
}

// RuntimeBehaviour is the fake runtime's default timing for every node, in
// Go duration strings. A zero duration means the step is instantaneous: it is
// deliberately not defaulted, since "no latency" is a legitimate thing to ask
// for and could not be written otherwise.
type RuntimeBehaviour struct {
	PullLatency            metav1.Duration `json:"pullLatency,omitempty"`
	SandboxStartLatency    metav1.Duration `json:"sandboxStartLatency,omitempty"`
	ContainerCreateLatency metav1.Duration `json:"containerCreateLatency,omitempty"`
	ContainerStartLatency  metav1.Duration `json:"containerStartLatency,omitempty"`
	StopLatency            metav1.Duration `json:"stopLatency,omitempty"`
}

// Phase is one step of the run. Exactly one action field is set.
type Phase struct {
	// Name is a DNS label; it prefixes the names of the pods and Services
	// the phase creates and is their fleetlet.io/phase label. Defaulted from
	// the action.
	Name string `json:"name,omitempty"`

	Create      *CreatePhase `json:"create,omitempty"`
	Scale       *ScalePhase  `json:"scale,omitempty"`
	Update      *UpdatePhase `json:"update,omitempty"`
	WaitRunning *WaitPhase   `json:"waitRunning,omitempty"`
	Delete      *DeletePhase `json:"delete,omitempty"`
	WaitGone    *WaitPhase   `json:"waitGone,omitempty"`
	Sleep       *SleepPhase  `json:"sleep,omitempty"`
	Churn       *ChurnPhase  `json:"churn,omitempty"`
	// Services is the one action that makes no pods: it puts ClusterIP
	// Services in front of pods the run makes.
	Services *ServicesPhase `json:"services,omitempty"`
	// Fault fails some of the fleet's nodes; Heal ends a fault an earlier
	// fault phase left in place.
	Fault *FaultPhase `json:"fault,omitempty"`
	Heal  *HealPhase  `json:"heal,omitempty"`
}

// CreatePhase creates Count pods from Template, or Count objects of any kind
// from Object, at QPS creates per second.
type CreatePhase struct {
	Count int     `json:"count"`
	QPS   float64 `json:"qps,omitempty"`
	// Template is the pod to stamp out. The driver sets generateName from
	// the phase name, the namespace, and the fleetlet.io/run and
	// fleetlet.io/phase labels; the template must not set them.
	Template corev1.PodTemplateSpec `json:"template,omitempty"`
	// Object, instead of Template, is one object of any kind the API server
	// serves (a Deployment, a StatefulSet, a Job, a ConfigMap, a custom
	// resource), as a Go template of its YAML, as clusterloader2's object
	// templates: {{.Index}} (0 to Count-1), {{.Name}} (<phase>-<index>, the
	// object's name), {{.Namespace}}, the Params by their names, and
	// clusterloader2's functions (AddInt, MultiplyInt, RandIntRange, ...,
	// drawn from the run's seed). The driver names the object, puts it in
	// its namespace, and stamps the run's labels on it and on its pod
	// template, if its kind has one, so that its pods are the run's.
	Object string `json:"object,omitempty"`
	// Params are the template's named values, such as Replicas.
	Params map[string]any `json:"params,omitempty"`
	// Namespaces spreads the objects round-robin over this many namespaces,
	// <namespace>-0 to <namespace>-<N-1>, made as the run's namespace is;
	// default 1: the run's namespace itself. Objects only.
	Namespaces int `json:"namespaces,omitempty"`
}

// ScalePhase sets spec.replicas of every object a create phase made, at QPS
// updates per second: to Replicas, or, with Factor, to each object's
// replicas as created times a factor drawn between Factor's two bounds
// (clusterloader2's load test scales each Deployment to between 0.5 and 1.5
// of its size).
type ScalePhase struct {
	// Phase is the create phase whose objects to scale; required.
	Phase    string    `json:"phase"`
	Replicas *int32    `json:"replicas,omitempty"`
	Factor   []float64 `json:"factor,omitempty"`
	QPS      float64   `json:"qps,omitempty"`
}

// UpdatePhase re-renders the object template of a create phase for each of
// its objects, with the same index, name and namespace and with Params over
// the create phase's, and applies it (server-side apply): a change to a pod
// template is a rolling update, which a later waitRunning waits out. An
// object a scale phase resized keeps that size.
type UpdatePhase struct {
	// Phase is the create phase whose objects to update; required.
	Phase string `json:"phase"`
	// Object replaces the create phase's template; default: the same one.
	Object string         `json:"object,omitempty"`
	Params map[string]any `json:"params,omitempty"`
	QPS    float64        `json:"qps,omitempty"`
}

// WaitPhase blocks until a condition holds for every pod the run made, or
// Timeout passes. waitRunning also waits for every object the run made
// whose kind runs pods (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job,
// ReplicationController) to have all its desired pods Running and, after a
// scale or an update, its rollout done, as clusterloader2's
// WaitForControlledPodsRunning.
type WaitPhase struct {
	Timeout metav1.Duration `json:"timeout,omitempty"`
}

// DeletePhase deletes, at QPS deletions per second, every object the run
// created and every pod it created and has not yet deleted; with Phase, only
// the objects that create phase made. Objects are deleted in the background
// (the garbage collector removes their pods, as clusterloader2's deletes do),
// and a later waitGone waits for their pods to be gone.
type DeletePhase struct {
	QPS   float64 `json:"qps,omitempty"`
	Phase string  `json:"phase,omitempty"`
}

// SleepPhase waits for Duration, to let the fleet settle or idle.
type SleepPhase struct {
	Duration metav1.Duration `json:"duration"`
}

// ChurnPhase is steady create-and-delete load, the shape of clusterloader2's
// and kube-burner's churn: for Duration it creates pods from Template at QPS
// per second, and deletes each one Lifetime after the driver's watch sees it
// Running, so that about QPS × Lifetime of them run at any time and the API
// server, the scheduler and the agents see creates, deletes and terminations
// side by side.
//
// Lifetime counts from Running rather than from the create so that a slow
// start does not shorten the time a pod runs, and so that a zero Lifetime
// means "delete as soon as it runs" rather than "delete before it can run".
// A pod the watch has not seen Running Timeout after its create never ran: it
// is deleted then and the phase fails, saying how many.
//
// When Duration is over the phase stops creating and goes on deleting pods as
// their lifetimes end, as a steady load would, rather than all at once, which
// would add a burst the profile did not ask for. It then waits until every pod
// it deleted is gone, for at most Lifetime + Timeout after the last create,
// and fails naming the pods that are not. Churned pods are stamped like
// created and deleted ones, so every phase histogram and SLI includes them;
// a later delete phase deletes only what the churn could not.
type ChurnPhase struct {
	// QPS is pod creations per second; required. The first create is sent
	// at once and one every 1/QPS after, so the phase makes ⌈QPS × Duration⌉
	// pods when the API server keeps up, and fewer when it does not.
	QPS float64 `json:"qps"`
	// Duration is how long the phase keeps creating; required.
	Duration metav1.Duration `json:"duration"`
	// Lifetime is how long each pod lives once it is seen Running; 0
	// deletes it as soon as it is.
	Lifetime metav1.Duration `json:"lifetime"`
	// Timeout is how long a pod may take to be seen Running after its
	// create, and, added to Lifetime, how long the phase waits after its
	// last create for its pods to be gone. Default DefaultWaitTimeout.
	Timeout metav1.Duration `json:"timeout,omitempty"`
	// Template is the pod to stamp out, as in CreatePhase.
	Template corev1.PodTemplateSpec `json:"template"`
}

// ServicesPhase creates Count ClusterIP Services at QPS creates per second,
// named <phase name>-<i> for i from 0, each selecting the pods Selector
// matches among the run's own, so that every change the endpoints
// controllers make to their EndpointSlices as those pods come and go fans
// out to every node's kube-proxy, whose network programming latency the
// report then measures.
//
// Each Service carries the run's fleetlet.io/run and fleetlet.io/phase
// labels, as pods do, and the driver deletes the run's Services when Run
// returns, however it ends (see Driver.Run). Services are not pods: Progress
// names the phase but counts none of them, and no histogram includes them.
type ServicesPhase struct {
	// Count is the number of Services; required, at most
	// MaxServicesPerPhase.
	Count int `json:"count"`
	// QPS is Service creates per second; default DefaultQPS. A sweep over
	// qps does not change it.
	QPS float64 `json:"qps,omitempty"`
	// Selector is the Services' label selector, as a Service writes it;
	// required. The driver adds fleetlet.io/run=<the run's id> to it, so
	// that pods another run left in the namespace are not selected; it must
	// not give that key itself.
	Selector map[string]string `json:"selector"`
	// Port is the Services' one TCP port; default DefaultServicePort.
	Port int32 `json:"port,omitempty"`
	// TargetPort is the pods' port it forwards to; default
	// DefaultServiceTargetPort.
	TargetPort int32 `json:"targetPort,omitempty"`
}

// TotalNodes is the number of nodes over all pools.
func (p *Profile) TotalNodes() int {
	n := 0
	for _, pool := range p.NodePools {
		n += pool.Count
	}
	return n
}

// action names the one action a phase carries, as spelled in YAML; "" when
// none is set. With several set it returns the first, Validate reports them.
func (ph *Phase) action() string {
	names := ph.actions()
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// actions lists the action fields that are set, in schema order.
func (ph *Phase) actions() []string {
	var names []string
	if ph.Create != nil {
		names = append(names, "create")
	}
	if ph.Scale != nil {
		names = append(names, "scale")
	}
	if ph.Update != nil {
		names = append(names, "update")
	}
	if ph.WaitRunning != nil {
		names = append(names, "waitRunning")
	}
	if ph.Delete != nil {
		names = append(names, "delete")
	}
	if ph.WaitGone != nil {
		names = append(names, "waitGone")
	}
	if ph.Sleep != nil {
		names = append(names, "sleep")
	}
	if ph.Churn != nil {
		names = append(names, "churn")
	}
	if ph.Services != nil {
		names = append(names, "services")
	}
	if ph.Fault != nil {
		names = append(names, "fault")
	}
	if ph.Heal != nil {
		names = append(names, "heal")
	}
	return names
}
