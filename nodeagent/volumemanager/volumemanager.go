// Package volumemanager sets up a pod's volumes before its containers run,
// as the kubelet's volume manager does in WaitForAttachAndMount: emptyDir,
// hostPath, configMap, secret, downwardAPI and projected volumes (with the
// pod's service-account token from a TokenRequest). A required ConfigMap or
// Secret that is missing holds the pod in ContainerCreating with FailedMount
// events until it appears; optional ones are honoured.
//
// On an emulated node nothing is written: a volume is set up once its
// sources have been fetched, and containers get mounts naming where the
// kubelet would have put the files. Given a PodsDir (a real runtime), the
// files are written there and bind-mounted, as under /var/lib/kubelet/pods.
// Either way, every later sync of the pod (the pod worker's resync, each
// minute or so, and the syncs its changes trigger) sets up its ConfigMap,
// Secret, downward API and projected volumes again, as the kubelet's
// reconciler remounts them: contents follow their objects, read the way
// the node's change-detection strategy reads them, and a service-account
// token is requested again once 80 % of its lifetime has passed.
package volumemanager

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubectl/pkg/util/fieldpath"
	"k8s.io/kubectl/pkg/util/resource"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// DefaultPodsDir is where the kubelet keeps pods' volumes; emulated nodes
// name paths under it in their mounts without creating them.
const DefaultPodsDir = "/var/lib/kubelet/pods"

// Sources are where ConfigMaps and Secrets come from.
type Sources interface {
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// The kubelet's timing: syncPod waits up to podAttachAndMountTimeout for a
// pod's volumes, while the reconciler retries a failed mount with
// exponential back-off from 500 ms, doubling to 2m2s.
const (
	attachAndMountTimeout      = 2 * time.Minute
	initialDurationBeforeRetry = 500 * time.Millisecond
	maxDurationBeforeRetry     = 2*time.Minute + 2*time.Second
)

// Config wires a Manager.
type Config struct {
	Clock clock.WithTicker
	// Client makes the TokenRequests of service-account token projections.
	Client  kubernetes.Interface
	Objects Sources
	Events  record.EventRecorder
	// PodsDir, when set, is where volumes are written for a real runtime
	// to bind-mount; empty means an emulated node that writes nothing.
	PodsDir string
	// Allocatable answers resourceFieldRef items for limits a container
	// does not set, as for environment variables.
	Allocatable corev1.ResourceList
	// CheckInterval is the kubelet's podAttachAndMountRetryInterval
	// (300 ms): its WaitForAttachAndMount checks at once, then at this
	// interval, whether the reconciler, which mounts in the background, is
	// done. A volume it has to mount is never done at the first check, so
	// a sync that mounts anything returns at the next check after. 0
	// returns as soon as the volumes are set up.
	CheckInterval time.Duration
}

// CheckInterval is the kubelet's podAttachAndMountRetryInterval.
const CheckInterval = 300 * time.Millisecond

// Manager is one node's volume manager.
type Manager struct {
	cfg Config

	mu sync.Mutex
	// mounted holds each pod's volumes that are set up, by name, so that a
	// pod's later syncs fetch nothing again.
	mounted map[types.UID]map[string]bool
	// tokens are the pods' service-account tokens by request, kept as the
	// kubelet's token manager keeps them: a projected volume retried
	// because its ConfigMap is missing must not ask for a new token, nor
	// a remount before the token needs a refresh.
	tokens map[types.UID]map[tokenKey]token
}

type tokenKey struct {
	serviceAccount, audience string
	expirationSeconds        int64
}

// token is a TokenRequest's answer: the token, when it expires, and the
// lifetime it was issued for.
type token struct {
	value             string
	expires           time.Time
	expirationSeconds int64
}

// The kubelet's token manager refreshes a token older than maxTTL or in
// the last 20 % of its lifetime, each check moved earlier by a random
// jitter of up to maxJitter so that a node's tokens do not refresh at once.
const (
	maxTTL    = 24 * time.Hour
	maxJitter = 10 * time.Second
)

// requiresRefresh is the token manager's test of a cached token.
func (m *Manager) requiresRefresh(t token) bool {
	now := m.cfg.Clock.Now()
	issued := t.expires.Add(-time.Duration(t.expirationSeconds) * time.Second)
	jitter := time.Duration(rand.Float64()*maxJitter.Seconds()) * time.Second
	if now.After(issued.Add(maxTTL - jitter)) {
		return true
	}
	return now.After(t.expires.Add(-time.Duration(t.expirationSeconds*20/100)*time.Second - jitter))
}

// New returns a Manager for cfg.
func New(cfg Config) *Manager {
	return &Manager{cfg: cfg, mounted: map[types.UID]map[string]bool{}, tokens: map[types.UID]map[tokenKey]token{}}
}

// The kubelet's volume plugin names, which name the directories volumes
// live in.
var pluginNames = map[string]string{
	"emptyDir": "kubernetes.io~empty-dir", "configMap": "kubernetes.io~configmap", "secret": "kubernetes.io~secret",
	"downwardAPI": "kubernetes.io~downward-api", "projected": "kubernetes.io~projected", "hostPath": "kubernetes.io~host-path",
}

// WaitForAttachAndMount sets up every volume of the pod not yet set up,
// retrying failed ones with the kubelet's back-off for up to its timeout.
// Each failure sends the kubelet's FailedMount event (the event
// broadcaster aggregates repeats); after the timeout the error lists the
// volumes left unmounted, and the pod's sync is retried.
func (m *Manager) WaitForAttachAndMount(ctx context.Context, pod *corev1.Pod) error {
	m.remount(ctx, pod)
	start := m.cfg.Clock.Now()
	deadline := start.Add(attachAndMountTimeout)
	delay := initialDurationBeforeRetry
	mountedAny := false
	for {
		unmounted, mounted, err := m.mountAll(ctx, pod)
		mountedAny = mountedAny || mounted > 0
		if err == nil {
			if !mountedAny {
				return nil
			}
			return m.nextCheck(ctx, start)
		}
		if m.cfg.Clock.Now().Add(delay).After(deadline) {
			return fmt.Errorf("unable to attach or mount volumes of pod %s/%s: unmounted volumes=[%s]: %w",
				pod.Namespace, pod.Name, strings.Join(unmounted, " "), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.cfg.Clock.After(delay):
		}
		delay = min(2*delay, maxDurationBeforeRetry)
	}
}

// nextCheck waits for the first of the kubelet's checks, every
// CheckInterval from start, that comes after now (not the immediate one).
func (m *Manager) nextCheck(ctx context.Context, start time.Time) error {
	if m.cfg.CheckInterval <= 0 {
		return nil
	}
	elapsed := m.cfg.Clock.Since(start)
	next := (elapsed/m.cfg.CheckInterval + 1) * m.cfg.CheckInterval
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-m.cfg.Clock.After(next - elapsed):
		return nil
	}
}

// mountAll tries once to set up each volume not yet set up, and returns the
// names of those that failed with their errors, and how many it set up.
func (m *Manager) mountAll(ctx context.Context, pod *corev1.Pod) ([]string, int, error) {
	var unmounted []string
	var errs []error
	mounted := 0
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if m.isMounted(pod.UID, v.Name) {
			continue
		}
		if err := m.setUp(ctx, pod, v); err != nil {
			m.cfg.Events.Eventf(pod, corev1.EventTypeWarning, "FailedMount", "MountVolume.SetUp failed for volume %q : %v", v.Name, err)
			unmounted = append(unmounted, v.Name)
			errs = append(errs, err)
			continue
		}
		m.mu.Lock()
		if m.mounted[pod.UID] == nil {
			m.mounted[pod.UID] = map[string]bool{}
		}
		m.mounted[pod.UID][v.Name] = true
		m.mu.Unlock()
		mounted++
	}
	return unmounted, mounted, errors.Join(errs...)
}

// remount sets up again the pod's mounted volumes whose contents come from
// objects or the pod: the kubelet's populator marks them for remount on
// every sync (ReprocessPod), and its reconciler mounts them again. A
// failure leaves the volume mounted with its old contents and sends the
// kubelet's FailedMount event; the sync goes on.
func (m *Manager) remount(ctx context.Context, pod *corev1.Pod) {
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if !requiresRemount(v) || !m.isMounted(pod.UID, v.Name) {
			continue
		}
		if err := m.setUp(ctx, pod, v); err != nil && ctx.Err() == nil {
			m.cfg.Events.Eventf(pod, corev1.EventTypeWarning, "FailedMount", "MountVolume.SetUp failed for volume %q : %v", v.Name, err)
		}
	}
}

// requiresRemount is the volume plugins' RequiresRemount: true for those
// whose contents change after the mount.
func requiresRemount(v *corev1.Volume) bool {
	return v.ConfigMap != nil || v.Secret != nil || v.DownwardAPI != nil || v.Projected != nil
}

func (m *Manager) isMounted(uid types.UID, name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mounted[uid][name]
}

// CleanupPod forgets the pod's volumes and removes their files, once the
// pod's containers are gone.
func (m *Manager) CleanupPod(uid types.UID) error {
	m.mu.Lock()
	delete(m.mounted, uid)
	delete(m.tokens, uid)
	m.mu.Unlock()
	if m.cfg.PodsDir == "" {
		return nil
	}
	return os.RemoveAll(filepath.Join(m.cfg.PodsDir, string(uid)))
}

// Mounts returns the CRI mounts of the container's volumeMounts. The
// volumes must have been set up.
func (m *Manager) Mounts(pod *corev1.Pod, c *corev1.Container) ([]*runtimeapi.Mount, error) {
	mounts := make([]*runtimeapi.Mount, 0, len(c.VolumeMounts))
	for _, vm := range c.VolumeMounts {
		i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
		if i < 0 {
			return nil, fmt.Errorf("cannot find volume %q to mount into container %q", vm.Name, c.Name)
		}
		host := m.volumeDir(pod, &pod.Spec.Volumes[i])
		if vm.SubPath != "" {
			if filepath.IsAbs(vm.SubPath) || slices.Contains(strings.Split(vm.SubPath, "/"), "..") {
				return nil, fmt.Errorf("error SubPath `%s` must not be an absolute path or contain '..'", vm.SubPath)
			}
			host = filepath.Join(host, vm.SubPath)
		}
		mounts = append(mounts, &runtimeapi.Mount{
			ContainerPath: vm.MountPath, HostPath: host, Readonly: vm.ReadOnly,
			Propagation: runtimeapi.MountPropagation_PROPAGATION_PRIVATE,
		})
	}
	return mounts, nil
}

// volumeDir is where the volume's files live on the host.
func (m *Manager) volumeDir(pod *corev1.Pod, v *corev1.Volume) string {
	if v.HostPath != nil {
		return v.HostPath.Path
	}
	root := m.cfg.PodsDir
	if root == "" {
		root = DefaultPodsDir
	}
	return filepath.Join(root, string(pod.UID), "volumes", pluginNames[volumeKind(v)], v.Name)
}

func volumeKind(v *corev1.Volume) string {
	switch {
	case v.EmptyDir != nil:
		return "emptyDir"
	case v.ConfigMap != nil:
		return "configMap"
	case v.Secret != nil:
		return "secret"
	case v.DownwardAPI != nil:
		return "downwardAPI"
	case v.Projected != nil:
		return "projected"
	case v.HostPath != nil:
		return "hostPath"
	}
	return ""
}

// file is one file of a volume: a path relative to the volume and its
// contents.
type file struct {
	path string
	data []byte
	mode int32
}

// setUp resolves the volume's sources and, on a real node, writes them.
func (m *Manager) setUp(ctx context.Context, pod *corev1.Pod, v *corev1.Volume) error {
	var files []file
	var err error
	switch {
	case v.HostPath != nil:
		return nil
	case v.EmptyDir != nil:
		return m.emptyDir(pod, v)
	case v.ConfigMap != nil:
		files, err = m.configMapFiles(ctx, pod, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, ptr.Deref(v.ConfigMap.DefaultMode, corev1.ConfigMapVolumeSourceDefaultMode))
	case v.Secret != nil:
		files, err = m.secretFiles(ctx, pod, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, ptr.Deref(v.Secret.DefaultMode, corev1.SecretVolumeSourceDefaultMode))
	case v.DownwardAPI != nil:
		files, err = m.downwardAPIFiles(pod, v.DownwardAPI.Items, ptr.Deref(v.DownwardAPI.DefaultMode, corev1.DownwardAPIVolumeSourceDefaultMode))
	case v.Projected != nil:
		files, err = m.projectedFiles(ctx, pod, v.Projected)
	default:
		// Volumes backed by storage (persistentVolumeClaim, CSI, ...) are
		// set up as empty directories: there is no storage to attach.
		return m.emptyDir(pod, v)
	}
	if err != nil || m.cfg.PodsDir == "" {
		return err
	}
	var fsGroup *int64
	if sc := pod.Spec.SecurityContext; sc != nil {
		fsGroup = sc.FSGroup
	}
	return writeFiles(m.volumeDir(pod, v), files, fsGroup)
}

// emptyDir sets up an empty directory on a real node as the kubelet's
// emptyDir plugin does (pkg/volume/emptydir/empty_dir.go, setupDir and
// SetVolumeOwnership): mode 0777 whatever the umask, so that a container of
// any user can write in it, and nothing written into it; with the pod's
// fsGroup, owned by that group with the setgid bit, so that what the pod
// writes stays the group's.
func (m *Manager) emptyDir(pod *corev1.Pod, v *corev1.Volume) error {
	if m.cfg.PodsDir == "" {
		return nil
	}
	dir := m.volumeDir(pod, v)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	mode := os.FileMode(0o777)
	if sc := pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil {
		if err := os.Lchown(dir, -1, int(*sc.FSGroup)); err != nil {
			return fmt.Errorf("giving volume %s to fsGroup %d: %w", v.Name, *sc.FSGroup, err)
		}
		mode |= os.ModeSetgid
	}
	// MkdirAll's mode passes through the umask; the kubelet sets it again.
	return os.Chmod(dir, mode)
}

func (m *Manager) configMapFiles(ctx context.Context, pod *corev1.Pod, name string, items []corev1.KeyToPath, optional *bool, mode int32) ([]file, error) {
	cm, err := m.cfg.Objects.ConfigMap(ctx, pod.Namespace, name)
	if err != nil {
		if apierrors.IsNotFound(err) && ptr.Deref(optional, false) {
			return nil, nil
		}
		return nil, err
	}
	data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles("configmap", data, items, optional, mode)
}

func (m *Manager) secretFiles(ctx context.Context, pod *corev1.Pod, name string, items []corev1.KeyToPath, optional *bool, mode int32) ([]file, error) {
	s, err := m.cfg.Objects.Secret(ctx, pod.Namespace, name)
	if err != nil {
		if apierrors.IsNotFound(err) && ptr.Deref(optional, false) {
			return nil, nil
		}
		return nil, err
	}
	return keyFiles("secret", s.Data, items, optional, mode)
}

// keyFiles projects an object's keys to files: all of them, or the items
// listed, a missing listed key being the kubelet's error unless the source
// is optional.
func keyFiles(kind string, data map[string][]byte, items []corev1.KeyToPath, optional *bool, mode int32) ([]file, error) {
	var files []file
	if len(items) == 0 {
		for k, v := range data {
			files = append(files, file{path: k, data: v, mode: mode})
		}
		return files, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if ptr.Deref(optional, false) {
				continue
			}
			return nil, fmt.Errorf("%s references non-existent config key: %s", kind, it.Key)
		}
		files = append(files, file{path: it.Path, data: v, mode: ptr.Deref(it.Mode, mode)})
	}
	return files, nil
}

func (m *Manager) downwardAPIFiles(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, mode int32) ([]file, error) {
	files := make([]file, 0, len(items))
	for _, it := range items {
		var value string
		var err error
		switch {
		case it.FieldRef != nil:
			switch it.FieldRef.FieldPath {
			case "metadata.labels":
				value = fieldpath.FormatMap(pod.Labels)
			case "metadata.annotations":
				value = fieldpath.FormatMap(pod.Annotations)
			default:
				value, err = fieldpath.ExtractFieldPathAsString(pod, it.FieldRef.FieldPath)
			}
		case it.ResourceFieldRef != nil:
			value, err = m.resourceValue(pod, it.ResourceFieldRef)
		}
		if err != nil {
			return nil, fmt.Errorf("downward API item %s: %w", it.Path, err)
		}
		files = append(files, file{path: it.Path, data: []byte(value), mode: ptr.Deref(it.Mode, mode)})
	}
	return files, nil
}

func (m *Manager) resourceValue(pod *corev1.Pod, ref *corev1.ResourceFieldSelector) (string, error) {
	i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == ref.ContainerName })
	if i < 0 {
		return "", fmt.Errorf("container %q not found in pod %s/%s", ref.ContainerName, pod.Namespace, pod.Name)
	}
	c := pod.Spec.Containers[i].DeepCopy()
	if c.Resources.Limits == nil {
		c.Resources.Limits = corev1.ResourceList{}
	}
	for name, q := range m.cfg.Allocatable {
		if _, ok := c.Resources.Limits[name]; !ok {
			c.Resources.Limits[name] = q
		}
	}
	return resource.ExtractContainerResourceValue(ref, c)
}

func (m *Manager) projectedFiles(ctx context.Context, pod *corev1.Pod, p *corev1.ProjectedVolumeSource) ([]file, error) {
	mode := ptr.Deref(p.DefaultMode, corev1.ProjectedVolumeSourceDefaultMode)
	var files []file
	for _, s := range p.Sources {
		var more []file
		var err error
		switch {
		case s.ServiceAccountToken != nil:
			more, err = m.tokenFiles(ctx, pod, s.ServiceAccountToken, mode)
		case s.ConfigMap != nil:
			more, err = m.configMapFiles(ctx, pod, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional, mode)
		case s.Secret != nil:
			more, err = m.secretFiles(ctx, pod, s.Secret.Name, s.Secret.Items, s.Secret.Optional, mode)
		case s.DownwardAPI != nil:
			more, err = m.downwardAPIFiles(pod, s.DownwardAPI.Items, mode)
		}
		if err != nil {
			return nil, err
		}
		files = append(files, more...)
	}
	return files, nil
}

// tokenFiles asks the API server for the pod's bound service-account token,
// as the kubelet's token manager does: the Node authorizer lets a node
// request tokens only for the pods bound to it.
func (m *Manager) tokenFiles(ctx context.Context, pod *corev1.Pod, src *corev1.ServiceAccountTokenProjection, mode int32) ([]file, error) {
	var audiences []string
	if src.Audience != "" {
		audiences = []string{src.Audience}
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	key := tokenKey{serviceAccount: sa, audience: src.Audience, expirationSeconds: ptr.Deref(src.ExpirationSeconds, 3600)}
	m.mu.Lock()
	cached, ok := m.tokens[pod.UID][key]
	m.mu.Unlock()
	if ok && !m.requiresRefresh(cached) {
		return []file{{path: src.Path, data: []byte(cached.value), mode: mode}}, nil
	}
	tr, err := m.cfg.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         audiences,
			ExpirationSeconds: ptr.To(key.expirationSeconds),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	switch {
	case err == nil:
	case !ok:
		return nil, fmt.Errorf("failed to fetch token: %w", err)
	case !m.cfg.Clock.Now().Before(cached.expires):
		return nil, fmt.Errorf("token %s/%s expired and refresh failed: %w", pod.Namespace, sa, err)
	default:
		// The token manager keeps a token that is still valid when its
		// refresh fails, and tries again at the next remount.
		klog.FromContext(ctx).Error(err, "Couldn't update token", "pod", klog.KObj(pod), "serviceAccount", sa)
		return []file{{path: src.Path, data: []byte(cached.value), mode: mode}}, nil
	}
	issued := token{value: tr.Status.Token, expires: tr.Status.ExpirationTimestamp.Time, expirationSeconds: ptr.Deref(tr.Spec.ExpirationSeconds, key.expirationSeconds)}
	m.mu.Lock()
	if m.tokens[pod.UID] == nil {
		m.tokens[pod.UID] = map[tokenKey]token{}
	}
	m.tokens[pod.UID][key] = issued
	m.mu.Unlock()
	return []file{{path: src.Path, data: []byte(issued.value), mode: mode}}, nil
}

// writeFiles writes a volume's files as the kubelet's AtomicWriter does
// (pkg/volume/util/atomic_writer.go, in k8s.io/kubernetes, which this
// module does not import for one function): a payload equal to what is
// there is left alone; a new one goes into a new timestamped directory, the
// ..data symlink is swapped to it by a rename, and each top-level path is a
// symlink through ..data. A container reading a remounted volume sees the
// old files or the new, never a mix.
//
// With an fsGroup, the volume is the group's, as the kubelet's
// SetVolumeOwnership (pkg/volume/volume_linux.go) leaves these read-only
// volumes: every file and directory given to the group, files readable by
// it, directories readable, searchable and setgid. The payload's modes are
// what that makes of them, so that an unchanged payload is left alone.
func writeFiles(dir string, files []file, fsGroup *int64) error {
	payload := make(map[string]file, len(files))
	for _, f := range files {
		if f.path == "" || filepath.IsAbs(f.path) || slices.Contains(strings.Split(f.path, "/"), "..") || strings.HasPrefix(f.path, "..") {
			return fmt.Errorf("invalid path %q in volume", f.path)
		}
		if fsGroup != nil {
			f.mode |= groupReadOnly
		}
		payload[filepath.Clean(f.path)] = f
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if fsGroup != nil {
		if err := giveToGroup(dir, *fsGroup); err != nil {
			return err
		}
	}
	dataLink := filepath.Join(dir, dataDirName)
	old, err := os.Readlink(dataLink)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	if old != "" && samePayload(filepath.Join(dir, old), payload) {
		return nil
	}
	tsDir, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	if err := os.Chmod(tsDir, 0o755); err != nil {
		return err
	}
	top := map[string]bool{}
	for p, f := range payload {
		full := filepath.Join(tsDir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, f.data, os.FileMode(f.mode)&os.ModePerm); err != nil {
			return err
		}
		if err := os.Chmod(full, os.FileMode(f.mode)&os.ModePerm); err != nil {
			return err
		}
		top[strings.SplitN(p, string(filepath.Separator), 2)[0]] = true
	}
	if fsGroup != nil {
		err := filepath.WalkDir(tsDir, func(path string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return giveToGroup(path, *fsGroup)
		})
		if err != nil {
			return fmt.Errorf("giving the volume to fsGroup %d: %w", *fsGroup, err)
		}
	}
	tmpLink := filepath.Join(dir, dataDirName+"_tmp")
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(tsDir), tmpLink); err != nil {
		return err
	}
	if err := os.Rename(tmpLink, dataLink); err != nil {
		return err
	}
	for name := range top {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join(dataDirName, name), link); err != nil {
				return err
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, ".."):
			// The previous payload goes once ..data no longer names it.
			if name != dataDirName && name == old {
				if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
					return err
				}
			}
		case !top[name] && e.Type()&os.ModeSymlink != 0:
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// groupReadOnly is the kubelet's roMask: the bits an fsGroup gets on the
// files of a read-only volume.
const groupReadOnly = 0o440

// giveToGroup gives path to gid as the kubelet's changeFilePermission does
// for a read-only volume: a file readable by the group, a directory also
// searchable and setgid; a symlink only changes hands.
func giveToGroup(path string, gid int64) error {
	info, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if err := os.Lchown(path, -1, int(gid)); err != nil {
		return err
	}
	if info.Mode()&os.ModeSymlink != 0 {
		return nil
	}
	mask := os.FileMode(groupReadOnly)
	if info.IsDir() {
		mask |= 0o110 | os.ModeSetgid
	}
	return os.Chmod(path, info.Mode()&(os.ModePerm|os.ModeSetgid)|mask)
}

// dataDirName is the AtomicWriter's symlink to the current payload.
const dataDirName = "..data"

// samePayload reports whether dir holds exactly payload's files, with the
// same contents and modes.
func samePayload(dir string, payload map[string]file) bool {
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		f, ok := payload[rel]
		if !ok {
			return fs.ErrNotExist
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(data, f.data) || info.Mode().Perm() != os.FileMode(f.mode)&os.ModePerm {
			return fs.ErrNotExist
		}
		n++
		return nil
	})
	return err == nil && n == len(payload)
}
