package staticpods

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Handler is told of a node's static pods as the kubelet's pod config
// tells the kubelet: removals first, then additions, then updates, then
// Listed once the source's whole content has been handed over.
type Handler struct {
	Add, Update, Remove func(*corev1.Pod)
	// Listed, if set, is called after each delivery, the first one
	// included, even when it changed nothing.
	Listed func()
}

// NodeSourceConfig describes a NodeSource.
type NodeSourceConfig struct {
	NodeName string
	Files    *FileSource
	Handler  Handler
	// Clock stamps the config.seen annotation of each pod first seen.
	Clock clock.PassiveClock
}

// NodeSource is one node's static pods: the FileSource's manifests made
// into the node's pods (Manifest.ForNode) and merged into what the node
// already holds, as the kubelet's podStorage merges its file source. A pod
// whose manifest changed has a new hash, hence a new UID: it is removed and
// another added. Only a manifest that sets its own UID can update a pod.
type NodeSource struct {
	cfg NodeSourceConfig

	mu sync.Mutex
	// pods are the node's static pods by UID, each with the manifest it
	// was made from, so that an unchanged manifest costs nothing.
	pods   map[types.UID]nodePod
	logger klog.Logger
	cancel func()
	synced atomic.Bool
}

type nodePod struct {
	pod  *corev1.Pod
	from *Manifest
}

// NewNodeSource returns the static pod source of cfg.NodeName.
func NewNodeSource(cfg NodeSourceConfig) *NodeSource {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &NodeSource{cfg: cfg, pods: map[types.UID]nodePod{}, logger: klog.Background()}
}

// Start subscribes to the FileSource: the node's pods are handed over at
// once if it has read its path, and at each change.
func (s *NodeSource) Start(ctx context.Context) error {
	s.mu.Lock()
	s.logger = klog.FromContext(ctx).WithValues("source", SourceFile, "path", s.cfg.Files.Path())
	s.mu.Unlock()
	s.cancel = s.cfg.Files.Subscribe(s.update)
	return nil
}

// Wait ends the subscription: the handler hears no more.
func (s *NodeSource) Wait() {
	if s.cancel != nil {
		s.cancel()
	}
}

// HasSynced reports whether the node's pods have been handed over once.
func (s *NodeSource) HasSynced() bool { return s.synced.Load() }

// Pods returns the node's static pods.
func (s *NodeSource) Pods() []*corev1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	pods := make([]*corev1.Pod, 0, len(s.pods))
	for _, p := range s.pods {
		pods = append(pods, p.pod)
	}
	return pods
}

// update merges the manifests the FileSource holds into the node's pods.
func (s *NodeSource) update(manifests []*Manifest) {
	s.mu.Lock()
	logger := s.logger
	byManifest := make(map[*Manifest]nodePod, len(s.pods))
	for _, p := range s.pods {
		byManifest[p.from] = p
	}
	next := make(map[types.UID]nodePod, len(manifests))
	names := sets.New[string]()
	var adds, updates []*corev1.Pod
	for _, m := range manifests {
		p, unchanged := byManifest[m]
		if !unchanged {
			pod, err := m.ForNode(s.cfg.NodeName)
			if err != nil {
				logger.Error(err, "Could not process manifest file", "file", m.Path)
				continue
			}
			p = nodePod{pod: pod, from: m}
		}
		pod := p.pod
		// The kubelet's filterInvalidPods: the first pod of a full name wins.
		if name := FullName(pod); names.Has(name) {
			logger.Info("Pod failed validation due to duplicate pod name, ignoring", "pod", klog.KObj(pod), "file", m.Path)
			continue
		} else {
			names.Insert(name)
		}
		if _, dup := next[pod.UID]; dup {
			logger.Info("Pod failed validation due to duplicate UID, ignoring", "pod", klog.KObj(pod), "podUID", pod.UID, "file", m.Path)
			continue
		}
		if unchanged {
			// The same manifest as before: the same pod.
			next[pod.UID] = p
			continue
		}
		pod.Annotations[ConfigSourceAnnotationKey] = SourceFile
		old, found := s.pods[pod.UID]
		switch {
		case !found:
			pod.Annotations[ConfigFirstSeenAnnotationKey] = s.cfg.Clock.Now().Format(time.RFC3339Nano)
			adds = append(adds, pod)
			next[pod.UID] = nodePod{pod: pod, from: m}
		case podsDifferSemantically(old.pod, pod):
			pod.Annotations[ConfigFirstSeenAnnotationKey] = old.pod.Annotations[ConfigFirstSeenAnnotationKey]
			updates = append(updates, pod)
			next[pod.UID] = nodePod{pod: pod, from: m}
		default:
			// Nothing the kubelet acts on changed.
			next[pod.UID] = nodePod{pod: old.pod, from: m}
		}
	}
	var removes []*corev1.Pod
	for uid, p := range s.pods {
		if _, ok := next[uid]; !ok {
			removes = append(removes, p.pod)
		}
	}
	s.pods = next
	s.mu.Unlock()
	s.synced.Store(true)

	h := s.cfg.Handler
	for _, pod := range removes {
		h.Remove(pod)
	}
	for _, pod := range adds {
		h.Add(pod)
	}
	for _, pod := range updates {
		h.Update(pod)
	}
	if h.Listed != nil {
		h.Listed()
	}
}

// podsDifferSemantically is the kubelet's pod config check: the spec,
// labels, deletion or annotations (but the kubelet's own) changed.
func podsDifferSemantically(existing, ref *corev1.Pod) bool {
	return !apiequality.Semantic.DeepEqual(existing.Spec, ref.Spec) ||
		!maps.Equal(existing.Labels, ref.Labels) ||
		!existing.DeletionTimestamp.Equal(ref.DeletionTimestamp) ||
		!apiequality.Semantic.DeepEqual(existing.DeletionGracePeriodSeconds, ref.DeletionGracePeriodSeconds) ||
		!maps.Equal(withoutLocal(existing.Annotations), withoutLocal(ref.Annotations))
}

// withoutLocal is annotations but the kubelet's own (source, mirror,
// first seen), which do not make two pods differ.
func withoutLocal(annotations map[string]string) map[string]string {
	out := maps.Clone(annotations)
	delete(out, ConfigSourceAnnotationKey)
	delete(out, ConfigMirrorAnnotationKey)
	delete(out, ConfigFirstSeenAnnotationKey)
	return out
}
