package staticpods

import (
	"bytes"
	"encoding"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/dump"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// maxConfigLength is the largest manifest the kubelet reads: 10 MiB.
const maxConfigLength = 10 << 20

// A Manifest is one static pod manifest, decoded and defaulted, before
// anything that depends on the node running it. It is immutable: one
// Manifest serves every node of a pool.
type Manifest struct {
	// Path is the manifest's file, which the pod's UID hashes: two files
	// with the same pod give two pods.
	Path string
	// pod is the decoded, defaulted pod, with the name the manifest gives.
	pod *corev1.Pod
	// hashState is the FNV-128a state after the pod's dump: the start of
	// every node's UID hash, so that the dump (the costly part) is made
	// once.
	hashState []byte
	// data is what the file held, to tell an unchanged file at the next
	// read without decoding it again.
	data []byte
}

// Key is the manifest's pod as the kubelet's file source stores it,
// namespace/name (the namespace defaulted): a file that defines a pod of
// the same name as another replaces it.
func (m *Manifest) Key() string {
	ns := m.pod.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	return ns + "/" + m.pod.Name
}

// Name is the pod's name as the manifest gives it.
func (m *Manifest) Name() string { return m.pod.Name }

// Decode reads the manifest file path held: one pod, in YAML or JSON, as
// the kubelet's tryDecodeSinglePod reads it (apiVersion v1, kind Pod, a
// name), defaulted as the kubelet's decoder defaults it.
func Decode(path string, data []byte) (*Manifest, error) {
	js, err := utilyaml.ToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: couldn't parse as pod (%v), please check config file", path, err)
	}
	obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(js, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: couldn't parse as pod (%v), please check config file", path, err)
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("%s: couldn't parse as pod (invalid pod: a %s, not a v1 Pod), please check config file", path, gvk.Kind)
	}
	m, err := newManifest(path, pod)
	if err != nil {
		return nil, err
	}
	m.data = data
	return m, nil
}

// InlineSource is the name of a node pool's inline static pod i, which its
// UIDs hash as a manifest's file name.
func InlineSource(i int) string { return fmt.Sprintf("staticPods[%d]", i) }

// FromPod is the manifest of a pod given as an object (a node pool's
// inline static pods): the same as a file at path holding it.
func FromPod(path string, pod *corev1.Pod) (*Manifest, error) {
	if gvk := pod.GroupVersionKind(); !gvk.Empty() && gvk != corev1.SchemeGroupVersion.WithKind("Pod") {
		return nil, fmt.Errorf("%s: invalid pod: apiVersion %q kind %q, want v1 Pod", path, pod.APIVersion, pod.Kind)
	}
	return newManifest(path, pod.DeepCopy())
}

// newManifest defaults pod (which it keeps) and hashes it. As the kubelet,
// it checks the pod's name here and the rest once the pod is named for its
// node (ForNode).
func newManifest(path string, pod *corev1.Pod) (*Manifest, error) {
	if pod.Name == "" {
		return nil, fmt.Errorf("%s: invalid pod: name is needed for the pod", path)
	}
	// The kubelet hashes the internal object its decoder returns, whose
	// type meta is cleared by the conversion.
	pod.TypeMeta = metav1.TypeMeta{}
	setPodDefaults(pod)
	m := &Manifest{Path: path, pod: pod}
	if pod.UID == "" {
		h := fnv.New128a()
		fmt.Fprintf(h, "%v", dump.ForHash(pod))
		state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
		if err != nil {
			return nil, err
		}
		m.hashState = state
	}
	// What does not depend on the node is checked once, for every node.
	if _, err := m.ForNode("node"); err != nil {
		return nil, err
	}
	return m, nil
}

// ForNode is the static pod the manifest gives nodeName, as the kubelet's
// applyDefaults makes it: the UID the FNV-128a hash of the pod, the node
// and the file (unless the manifest sets one); the name <name>-<node>; the
// namespace default if none; spec.nodeName the node; the hash annotation;
// a toleration of every NoExecute taint; phase Pending. It is then
// validated as the kubelet does, and checked to reference no API object.
// The pod is the caller's.
func (m *Manifest) ForNode(nodeName string) (*corev1.Pod, error) {
	pod := m.pod.DeepCopy()
	if pod.UID == "" {
		pod.UID = m.uid(nodeName)
	}
	pod.Name = pod.Name + "-" + strings.ToLower(nodeName)
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	pod.Spec.NodeName = nodeName
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[ConfigHashAnnotationKey] = string(pod.UID)
	addOrUpdateToleration(pod, corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})
	pod.Status.Phase = corev1.PodPending
	if errs := validatePod(pod); len(errs) > 0 {
		return nil, fmt.Errorf("%s: invalid pod: %v", m.Path, errs.ToAggregate())
	}
	resource, err := apiObjectReference(pod)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Path, err)
	}
	if resource != "" {
		return nil, fmt.Errorf("%s: static pods may not reference %s", m.Path, resource)
	}
	return pod, nil
}

// uid continues the pod's hash with the node and the file, as
// applyDefaults writes them after DeepHashObject.
func (m *Manifest) uid(nodeName string) types.UID {
	h := fnv.New128a()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(m.hashState); err != nil {
		// The state was marshalled by the same hash: it always reads back.
		panic(fmt.Sprintf("staticpods: restoring a pod hash: %v", err))
	}
	fmt.Fprintf(h, "host:%s", nodeName)
	fmt.Fprintf(h, "file:%s", m.Path)
	return types.UID(hex.EncodeToString(h.Sum(nil)))
}

// sameFile reports whether data is what the manifest was decoded from.
func (m *Manifest) sameFile(data []byte) bool {
	return m.data != nil && bytes.Equal(m.data, data)
}

// addOrUpdateToleration is the kubelet's helper.AddOrUpdateTolerationInPod:
// a toleration matching t (key, effect, operator, value) is replaced by t,
// or t is appended.
func addOrUpdateToleration(pod *corev1.Pod, t corev1.Toleration) {
	var out []corev1.Toleration
	updated := false
	for _, old := range pod.Spec.Tolerations {
		if t.MatchToleration(&old) {
			if t.TolerationSeconds == nil && old.TolerationSeconds == nil {
				return
			}
			out = append(out, t)
			updated = true
			continue
		}
		out = append(out, old)
	}
	if !updated {
		out = append(out, t)
	}
	pod.Spec.Tolerations = out
}
