// Package images garbage-collects one node's unused images, as the kubelet's
// image GC manager does: it tracks when each image was first seen and last
// used by a container, and when the image filesystem is fuller than
// imageGCHighThresholdPercent it deletes the least recently used unused
// images until usage falls to imageGCLowThresholdPercent. The eviction
// manager calls DeleteUnusedImages to reclaim disk before evicting pods.
package images

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
)

// GCPeriod is the kubelet's ImageGCPeriod.
const GCPeriod = 5 * time.Minute

// The kubelet's event reasons.
const (
	reasonInvalidDiskCapacity = "InvalidDiskCapacity"
	reasonFreeDiskSpaceFailed = "FreeDiskSpaceFailed"
)

// Policy is the kubelet's ImageGCPolicy.
type Policy struct {
	HighThresholdPercent int
	LowThresholdPercent  int
	// MinAge is how long an image must have been known before it may go.
	MinAge time.Duration
	// MaxAge removes images unused for longer, whatever the disk usage;
	// zero turns it off.
	MaxAge time.Duration
}

// PolicyFrom reads the image GC settings of kc with the kubelet's defaults
// (85 %, 80 %, 2 m, off) for those unset, and validates them as the kubelet.
func PolicyFrom(kc *kubeletconfig.KubeletConfiguration) (Policy, error) {
	p := Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute, MaxAge: kc.ImageMaximumGCAge.Duration}
	if kc.ImageGCHighThresholdPercent != nil {
		p.HighThresholdPercent = int(*kc.ImageGCHighThresholdPercent)
	}
	if kc.ImageGCLowThresholdPercent != nil {
		p.LowThresholdPercent = int(*kc.ImageGCLowThresholdPercent)
	}
	if kc.ImageMinimumGCAge.Duration != 0 {
		p.MinAge = kc.ImageMinimumGCAge.Duration
	}
	switch {
	case p.HighThresholdPercent < 0 || p.HighThresholdPercent > 100:
		return p, fmt.Errorf("invalid imageGCHighThresholdPercent %d, must be in range [0-100]", p.HighThresholdPercent)
	case p.LowThresholdPercent < 0 || p.LowThresholdPercent > 100:
		return p, fmt.Errorf("invalid imageGCLowThresholdPercent %d, must be in range [0-100]", p.LowThresholdPercent)
	case p.LowThresholdPercent > p.HighThresholdPercent:
		return p, fmt.Errorf("imageGCLowThresholdPercent %d can not be higher than imageGCHighThresholdPercent %d", p.LowThresholdPercent, p.HighThresholdPercent)
	}
	return p, nil
}

// Config wires the image GC to its node.
type Config struct {
	NodeName string
	// Runtime lists containers, whose images are in use.
	Runtime internalapi.RuntimeService
	Images  internalapi.ImageManagerService
	Kubelet *kubeletconfig.KubeletConfiguration
	// ImageFs returns the image filesystem's capacity and availability:
	// stats.Provider.ImageFsStats. On one disk that is the whole disk's, so
	// writable layers and logs count toward the thresholds, as on a kubelet.
	ImageFs func(ctx context.Context) (*statsapi.FsStats, error)
	Clock   clock.Clock
	// Events records the kubelet's node events (InvalidDiskCapacity,
	// FreeDiskSpaceFailed), on the node as the kubelet's nodeRef names it.
	Events record.EventRecorder
}

// imageRecord is what the kubelet remembers of an image.
type imageRecord struct {
	firstDetected time.Time
	lastUsed      time.Time
	size          int64
	pinned        bool
}

// Manager is one node's image GC.
type Manager struct {
	cfg     Config
	policy  Policy
	nodeRef *corev1.ObjectReference

	mu      sync.Mutex
	records map[string]*imageRecord
	// began is when the GC started, for MaxAge: images are not removed for
	// age before the node has run that long, as in the kubelet.
	began time.Time
}

// NewManager validates cfg and returns a Manager.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Runtime == nil || cfg.Images == nil || cfg.Kubelet == nil || cfg.ImageFs == nil || cfg.Clock == nil || cfg.Events == nil {
		return nil, fmt.Errorf("image GC of node %q: Runtime, Images, Kubelet, ImageFs, Clock and Events are all required", cfg.NodeName)
	}
	p, err := PolicyFrom(cfg.Kubelet)
	if err != nil {
		return nil, fmt.Errorf("image GC of node %q: %w; fix the kubelet configuration", cfg.NodeName, err)
	}
	return &Manager{
		cfg: cfg, policy: p, records: map[string]*imageRecord{}, began: cfg.Clock.Now(),
		nodeRef: &corev1.ObjectReference{Kind: "Node", Name: cfg.NodeName, UID: types.UID(cfg.NodeName)},
	}, nil
}

// Run garbage-collects at once and then every GCPeriod until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		if err := m.GarbageCollect(ctx); err != nil {
			logger.Error(err, "Image garbage collection failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-m.cfg.Clock.After(GCPeriod):
		}
	}
}

// evictionInfo is an image that may be deleted.
type evictionInfo struct {
	id string
	imageRecord
}

// GarbageCollect removes images unused for longer than MaxAge, then, if the
// image filesystem is at or above the high threshold, unused images in LRU
// order until it is at the low threshold.
func (m *Manager) GarbageCollect(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	now := m.cfg.Clock.Now()
	images, err := m.imagesInEvictionOrder(ctx, now)
	if err != nil {
		return err
	}
	if images, err = m.freeOldImages(ctx, images, now); err != nil {
		return err
	}
	fs, err := m.cfg.ImageFs(ctx)
	if err != nil {
		return fmt.Errorf("image GC of node %s: no image filesystem stats: %w", m.cfg.NodeName, err)
	}
	if fs == nil {
		return fmt.Errorf("image GC of node %s: the node has no image filesystem; give it an ephemeral-storage capacity", m.cfg.NodeName)
	}
	var capacity, available int64
	if fs.CapacityBytes != nil {
		capacity = int64(*fs.CapacityBytes)
	}
	if fs.AvailableBytes != nil {
		available = min(int64(*fs.AvailableBytes), capacity)
	}
	if capacity == 0 {
		err := errors.New("invalid capacity 0 on image filesystem")
		m.cfg.Events.Eventf(m.nodeRef, corev1.EventTypeWarning, reasonInvalidDiskCapacity, "%s", err.Error())
		return fmt.Errorf("image GC of node %s: %w; give the node an ephemeral-storage capacity", m.cfg.NodeName, err)
	}
	usage := 100 - int(available*100/capacity)
	if usage < m.policy.HighThresholdPercent {
		return nil
	}
	toFree := capacity*int64(100-m.policy.LowThresholdPercent)/100 - available
	logger.Info("Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold",
		"usage", usage, "highThreshold", m.policy.HighThresholdPercent, "amountToFree", toFree, "lowThreshold", m.policy.LowThresholdPercent)
	freed, err := m.freeSpace(ctx, toFree, now, images)
	if err != nil {
		return err
	}
	if freed < toFree {
		message := fmt.Sprintf("Insufficient free disk space on the node's image filesystem (%d%% of %s used). "+
			"Failed to free sufficient space by deleting unused images (freed %d bytes). "+
			"Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
			usage, resource.NewQuantity(capacity, resource.BinarySI), freed)
		m.cfg.Events.Eventf(m.nodeRef, corev1.EventTypeWarning, reasonFreeDiskSpaceFailed, "%s", message)
		return fmt.Errorf("image GC of node %s: %s", m.cfg.NodeName, message)
	}
	return nil
}

// DeleteUnusedImages deletes every unused image old enough to go, for the
// eviction manager's node-level reclaim, and returns the bytes freed.
func (m *Manager) DeleteUnusedImages(ctx context.Context) (int64, error) {
	klog.FromContext(ctx).Info("Attempting to delete unused images")
	now := m.cfg.Clock.Now()
	images, err := m.imagesInEvictionOrder(ctx, now)
	if err != nil {
		return 0, err
	}
	return m.freeSpace(ctx, math.MaxInt64, now, images)
}

func (m *Manager) freeOldImages(ctx context.Context, images []evictionInfo, now time.Time) ([]evictionInfo, error) {
	if m.policy.MaxAge == 0 || now.Sub(m.began) <= m.policy.MaxAge {
		return images, nil
	}
	var remaining []evictionInfo
	var errs []error
	for _, img := range images {
		if now.Sub(img.lastUsed) <= m.policy.MaxAge {
			remaining = append(remaining, img)
			continue
		}
		if err := m.freeImage(ctx, img); err != nil {
			errs = append(errs, err)
			remaining = append(remaining, img)
		}
	}
	if len(errs) > 0 {
		return remaining, fmt.Errorf("image GC of node %s: wanted to free images older than %v: %w", m.cfg.NodeName, m.policy.MaxAge, errors.Join(errs...))
	}
	return remaining, nil
}

// freeSpace deletes images in order until toFree bytes are freed, skipping
// those used at this very detection and those younger than MinAge.
func (m *Manager) freeSpace(ctx context.Context, toFree int64, now time.Time, images []evictionInfo) (int64, error) {
	var freed int64
	var errs []error
	for _, img := range images {
		if !img.lastUsed.Before(now) || now.Sub(img.firstDetected) < m.policy.MinAge {
			continue
		}
		if err := m.freeImage(ctx, img); err != nil {
			errs = append(errs, err)
			continue
		}
		freed += img.size
		if freed >= toFree {
			break
		}
	}
	if len(errs) > 0 {
		return freed, fmt.Errorf("image GC of node %s: wanted to free %d bytes, but freed %d bytes space with errors in image deletion: %w",
			m.cfg.NodeName, toFree, freed, errors.Join(errs...))
	}
	return freed, nil
}

func (m *Manager) freeImage(ctx context.Context, img evictionInfo) error {
	klog.FromContext(ctx).Info("Removing image to free bytes", "imageID", img.id, "size", img.size)
	if err := m.cfg.Images.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: img.id}); err != nil {
		return fmt.Errorf("remove image %s: %w", img.id, err)
	}
	m.mu.Lock()
	delete(m.records, img.id)
	m.mu.Unlock()
	return nil
}

// imagesInEvictionOrder detects images and returns the unused, unpinned
// ones, least recently used first.
func (m *Manager) imagesInEvictionOrder(ctx context.Context, now time.Time) ([]evictionInfo, error) {
	inUse, err := m.detectImages(ctx, now)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []evictionInfo
	for id, r := range m.records {
		if inUse[id] || r.pinned {
			continue
		}
		out = append(out, evictionInfo{id: id, imageRecord: *r})
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].lastUsed.Equal(out[j].lastUsed) {
			return out[i].lastUsed.Before(out[j].lastUsed)
		}
		if !out[i].firstDetected.Equal(out[j].firstDetected) {
			return out[i].firstDetected.Before(out[j].firstDetected)
		}
		return out[i].id < out[j].id
	})
	return out, nil
}

// detectImages refreshes the records from the runtime and returns the
// images that containers, running or exited, refer to.
func (m *Manager) detectImages(ctx context.Context, now time.Time) (map[string]bool, error) {
	images, err := m.cfg.Images.ListImages(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("image GC of node %s: CRI ListImages failed: %w", m.cfg.NodeName, err)
	}
	containers, err := m.cfg.Runtime.ListContainers(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("image GC of node %s: CRI ListContainers failed: %w", m.cfg.NodeName, err)
	}
	inUse := map[string]bool{}
	for _, c := range containers {
		// The kubelet's image ID of a container: ImageId since CRI 1.30,
		// ImageRef before.
		id := c.ImageRef
		if c.ImageId != "" {
			id = c.ImageId
		}
		inUse[id] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	current := map[string]bool{}
	for _, img := range images {
		current[img.Id] = true
		r, ok := m.records[img.Id]
		if !ok {
			r = &imageRecord{firstDetected: now}
			m.records[img.Id] = r
		}
		if inUse[img.Id] {
			r.lastUsed = now
		}
		r.size = int64(img.Size)
		r.pinned = img.Pinned
	}
	for id := range m.records {
		if !current[id] {
			delete(m.records, id)
		}
	}
	return inUse, nil
}
