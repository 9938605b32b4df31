package volumemanager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/internal/testutil"
	"github.com/fleetlet/fleetlet/nodeagent/objectcache"
)

type harness struct {
	client *fake.Clientset
	events *record.FakeRecorder
	clock  *clocktesting.FakeClock
	m      *Manager
	tokens []*authenticationv1.TokenRequest
	// tokenErr, when set, fails every TokenRequest.
	tokenErr error
}

func newHarness(t *testing.T, podsDir string, objects ...runtime.Object) *harness {
	h := &harness{client: fake.NewClientset(objects...), events: record.NewFakeRecorder(1000), clock: clocktesting.NewFakeClock(time.Unix(0, 0))}
	h.client.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		if h.tokenErr != nil {
			return true, nil, h.tokenErr
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenRequest)
		h.tokens = append(h.tokens, tr)
		out := tr.DeepCopy()
		out.Status.Token = fmt.Sprintf("token-for-%s-%d", tr.Spec.BoundObjectRef.Name, len(h.tokens))
		out.Status.ExpirationTimestamp = metav1.NewTime(h.clock.Now().Add(time.Duration(*tr.Spec.ExpirationSeconds) * time.Second))
		return true, out, nil
	})
	// The Get strategy: every retry sees the objects as they are now.
	cache := objectcache.New(objectcache.Config{Client: h.client, Clock: h.clock, Strategy: kubeletconfig.GetChangeDetectionStrategy})
	h.m = New(Config{Clock: h.clock, Client: h.client, Objects: cache, Events: h.events, PodsDir: podsDir})
	return h
}

// wait runs WaitForAttachAndMount, stepping the fake clock by half a second
// whenever it waits to retry, until it returns; before each step, poke (if
// set) may change the world.
func (h *harness) wait(t *testing.T, pod *corev1.Pod, poke func(retries int)) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- h.m.WaitForAttachAndMount(context.Background(), pod) }()
	for retries := 0; ; {
		select {
		case err := <-done:
			return err
		case <-time.After(time.Millisecond):
		}
		if h.clock.HasWaiters() {
			retries++
			if poke != nil {
				poke(retries)
			}
			h.clock.Step(initialDurationBeforeRetry)
		}
	}
}

func (h *harness) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-h.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func testPod(volumes ...corev1.Volume) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-1", Labels: map[string]string{"app": "web", "tier": "front"}},
		Spec: corev1.PodSpec{
			Volumes: volumes,
			Containers: []corev1.Container{{
				Name: "app",
				VolumeMounts: []corev1.VolumeMount{
					{Name: volumes[0].Name, MountPath: "/etc/app", ReadOnly: true},
				},
			}},
		},
	}
}

func configMapVolume(name, cm string, optional bool) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Optional: ptr.To(optional),
	}}}
}

func TestMissingConfigMapHoldsThePodUntilItExists(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, "")
	pod := testPod(configMapVolume("config", "app-config", false))

	err := h.wait(t, pod, func(retries int) {
		if retries != 3 {
			return
		}
		if _, err := h.client.CoreV1().ConfigMaps("ns").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app-config"}}, metav1.CreateOptions{}); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatalf("once the ConfigMap exists: %v", err)
	}
	events := h.drainEvents()
	want := `Warning FailedMount MountVolume.SetUp failed for volume "config" : configmap "app-config" not found`
	// Tries at 0 s and 0.5 s fail; the one at 1.5 s finds the ConfigMap.
	if len(events) != 2 || events[0] != want || events[1] != want {
		t.Errorf("events = %q, want 2 × %q (one per failed try)", events, want)
	}
}

func TestMountGivesUpAfterTheKubeletsTimeout(t *testing.T) {
	h := newHarness(t, "")
	pod := testPod(configMapVolume("config", "app-config", false))
	start := h.clock.Now()
	err := h.wait(t, pod, nil)
	if err == nil || !strings.Contains(err.Error(), "unmounted volumes=[config]") {
		t.Fatalf("err = %v, want the unmounted volume named", err)
	}
	if waited := h.clock.Since(start); waited > attachAndMountTimeout+maxDurationBeforeRetry {
		t.Errorf("gave up after %v, want about %v", waited, attachAndMountTimeout)
	}
}

func TestMountStopsWhenTheSyncIsCancelled(t *testing.T) {
	h := newHarness(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- h.m.WaitForAttachAndMount(ctx, testPod(configMapVolume("config", "app-config", false)))
	}()
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WaitForAttachAndMount did not return 30 s after its context ended")
	}
}

func TestOptionalSourcesAndMissingKeys(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"a": "1"}}
	tests := []struct {
		name    string
		volume  corev1.Volume
		wantErr string
	}{
		{"optional configMap missing", configMapVolume("v", "gone", true), ""},
		{"optional secret missing", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "gone", Optional: ptr.To(true)}}}, ""},
		{"required secret missing", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "gone"}}}, `secret "gone" not found`},
		{"listed key missing", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Items: []corev1.KeyToPath{{Key: "b", Path: "b"}},
		}}}, "configmap references non-existent config key: b"},
		{"listed key missing, optional", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Items: []corev1.KeyToPath{{Key: "b", Path: "b"}}, Optional: ptr.To(true),
		}}}, ""},
		{"emptyDir", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "", cm)
			err := h.wait(t, testPod(tt.volume), nil)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("err = %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestRealNodeWritesTheFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h := newHarness(t, dir,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": "CA"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds"}, Data: map[string][]byte{"password": []byte("pw")}},
	)
	pod := testPod(
		corev1.Volume{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		}}}},
		corev1.Volume{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
		corev1.Volume{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
		}}}},
	)
	pod.Spec.Containers[0].VolumeMounts = append(pod.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "creds", MountPath: "/pw", SubPath: "password"})
	if err := h.m.WaitForAttachAndMount(ctx, pod); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(dir, "uid-1", "volumes")
	for path, want := range map[string]string{
		"kubernetes.io~projected/kube-api-access/token":     "token-for-web-1",
		"kubernetes.io~projected/kube-api-access/ca.crt":    "CA",
		"kubernetes.io~projected/kube-api-access/namespace": "ns",
		"kubernetes.io~secret/creds/password":               "pw",
		"kubernetes.io~downward-api/info/labels":            "app=\"web\"\ntier=\"front\"",
	} {
		got, err := os.ReadFile(filepath.Join(base, path))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", path, got, err, want)
		}
	}
	if len(h.tokens) != 1 || h.tokens[0].Spec.BoundObjectRef.UID != "uid-1" || *h.tokens[0].Spec.ExpirationSeconds != 3607 {
		t.Errorf("token requests = %+v, want one bound to the pod for 3607 s", h.tokens)
	}

	mounts, err := h.m.Mounts(pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 2 || mounts[0].HostPath != filepath.Join(base, "kubernetes.io~projected/kube-api-access") || !mounts[0].Readonly ||
		mounts[1].HostPath != filepath.Join(base, "kubernetes.io~secret/creds/password") || mounts[1].ContainerPath != "/pw" {
		t.Errorf("mounts = %v", mounts)
	}

	// A second sync remounts, and the token is not due for a refresh.
	if err := h.m.WaitForAttachAndMount(ctx, pod); err != nil || len(h.tokens) != 1 {
		t.Errorf("second sync: err %v, %d token requests; want none more", err, len(h.tokens))
	}
	if err := h.m.CleanupPod(pod.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "uid-1")); !os.IsNotExist(err) {
		t.Errorf("pod directory still there after CleanupPod: %v", err)
	}
}

// TestRealNodeEmptyDir sets up an emptyDir and a volume backed by storage
// as the kubelet's emptyDir plugin does: empty, mode 0777 whatever the
// umask, so that a container of any user writes in it, and with the pod's
// fsGroup, the group's, with the setgid bit.
func TestRealNodeEmptyDir(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, dir)
	pod := testPod(
		corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
	)
	// The process's own group, which it may give a directory without root.
	gid := int64(os.Getgid())
	for i, fsGroup := range []*int64{nil, &gid} {
		pod := pod.DeepCopy()
		pod.UID = types.UID(fmt.Sprint("uid-", i))
		pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: fsGroup}
		if err := h.m.WaitForAttachAndMount(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
		want := os.ModeDir | 0o777
		if fsGroup != nil {
			want |= os.ModeSetgid
		}
		for i := range pod.Spec.Volumes {
			vol := pod.Spec.Volumes[i].Name
			path := h.m.volumeDir(pod, &pod.Spec.Volumes[i])
			info, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if info.Mode() != want {
				t.Errorf("fsGroup %v: %s has mode %v, want %v", fsGroup, vol, info.Mode(), want)
			}
			if st, ok := info.Sys().(*syscall.Stat_t); ok && fsGroup != nil && int64(st.Gid) != *fsGroup {
				t.Errorf("%s belongs to group %d, want the fsGroup %d", vol, st.Gid, *fsGroup)
			}
			if entries, _ := os.ReadDir(path); len(entries) != 0 {
				t.Errorf("%s holds %d entries, want none", vol, len(entries))
			}
		}
	}
}

// TestRealNodeVolumesOfTheFSGroup writes a Secret with mode 0400 for a pod
// with an fsGroup: as the kubelet's SetVolumeOwnership leaves it, the file is
// the group's and readable by it (0440), the directories are the group's
// and setgid, and a second mount of the same payload writes nothing anew.
func TestRealNodeVolumesOfTheFSGroup(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, dir, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds"}, Data: map[string][]byte{"password": []byte("pw")}})
	pod := testPod(corev1.Volume{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds", DefaultMode: ptr.To[int32](0o400)}}})
	// The process's own group, which it may give a file without root.
	gid := int64(os.Getgid())
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: &gid}
	if err := h.m.WaitForAttachAndMount(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	vol := h.m.volumeDir(pod, &pod.Spec.Volumes[0])
	payload, err := os.Readlink(filepath.Join(vol, dataDirName))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{
		vol:                                     os.ModeDir | os.ModeSetgid,
		filepath.Join(vol, payload):             os.ModeDir | os.ModeSetgid | 0o550,
		filepath.Join(vol, payload, "password"): 0o440,
	} {
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := info.Mode(); got&want != want || (!info.IsDir() && got != want) {
			t.Errorf("%s has mode %v, want %v", path, got, want)
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && int64(st.Gid) != gid {
			t.Errorf("%s belongs to group %d, want the fsGroup %d", path, st.Gid, gid)
		}
	}
	if err := h.m.WaitForAttachAndMount(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.Readlink(filepath.Join(vol, dataDirName)); again != payload {
		t.Errorf("a remount of the same payload wrote it anew: %s, then %s", payload, again)
	}
}

func TestEmulatedNodeWritesNothing(t *testing.T) {
	h := newHarness(t, "", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"a": "1"}})
	pod := testPod(configMapVolume("config", "cfg", false))
	if err := h.m.WaitForAttachAndMount(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	mounts, err := h.m.Mounts(pod, &pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(DefaultPodsDir, "uid-1", "volumes", "kubernetes.io~configmap", "config")
	if len(mounts) != 1 || mounts[0].HostPath != want {
		t.Errorf("mounts = %v, want one at %s", mounts, want)
	}
	if _, err := os.Stat(want); !os.IsNotExist(err) {
		t.Errorf("an emulated node wrote %s", want)
	}
}

func TestSubPathMustStayInsideTheVolume(t *testing.T) {
	h := newHarness(t, "")
	pod := testPod(corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	pod.Spec.Containers[0].VolumeMounts[0].SubPath = "../../etc"
	if _, err := h.m.Mounts(pod, &pod.Spec.Containers[0]); err == nil {
		t.Error("a subPath with .. was accepted")
	}
}

func TestRetriedProjectionReusesItsToken(t *testing.T) {
	h := newHarness(t, "")
	pod := testPod(corev1.Volume{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}},
	}}}})
	err := h.wait(t, pod, func(retries int) {
		if retries == 4 {
			_, _ = h.client.CoreV1().ConfigMaps("ns").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kube-root-ca.crt"}}, metav1.CreateOptions{})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.tokens) != 1 {
		t.Errorf("%d token requests for one pod whose volume was retried, want 1", len(h.tokens))
	}
}

// TestMountReturnsAtTheKubeletsNextCheck: the kubelet's WaitForAttachAndMount
// finds a new pod's volumes mounted at its second check, CheckInterval after
// the first; a pod whose volumes are mounted already returns at once.
func TestMountReturnsAtTheKubeletsNextCheck(t *testing.T) {
	h := newHarness(t, "", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app-config"}, Data: map[string]string{"k": "v"}})
	h.m.cfg.CheckInterval = CheckInterval
	pod := testPod(configMapVolume("config", "app-config", false))
	done := make(chan error, 1)
	go func() { done <- h.m.WaitForAttachAndMount(context.Background(), pod) }()
	testutil.WaitFor(t, "the mount waits for the next check", h.clock.HasWaiters)
	select {
	case err := <-done:
		t.Fatalf("returned before the next check: %v", err)
	default:
	}
	h.clock.Step(CheckInterval - time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("returned %v before the check %v after the first", err, CheckInterval)
	case <-time.After(20 * time.Millisecond):
	}
	h.clock.Step(time.Millisecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := h.m.WaitForAttachAndMount(context.Background(), pod); err != nil {
		t.Fatalf("a mounted pod's check: %v", err)
	}
}

// TestRemountFollowsTheObjects: a later sync sets a mounted ConfigMap
// volume up again from the object as it is now, swapping the payload as the
// kubelet's AtomicWriter does, and leaves an unchanged payload alone.
func TestRemountFollowsTheObjects(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h := newHarness(t, dir, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"a": "1", "b": "2"}})
	pod := testPod(configMapVolume("config", "cfg", false))
	if err := h.m.WaitForAttachAndMount(ctx, pod); err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(dir, "uid-1", "volumes", "kubernetes.io~configmap", "config")
	first, err := os.Readlink(filepath.Join(vol, "..data"))
	if err != nil {
		t.Fatalf("no ..data symlink: %v", err)
	}
	if err := h.m.WaitForAttachAndMount(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.Readlink(filepath.Join(vol, "..data")); again != first {
		t.Errorf("an unchanged payload was written again: ..data %s, then %s", first, again)
	}

	if _, err := h.client.CoreV1().ConfigMaps("ns").Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"a": "3"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.m.WaitForAttachAndMount(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(vol, "a")); err != nil || string(got) != "3" {
		t.Errorf("a = %q, %v after the update; want 3", got, err)
	}
	if _, err := os.Lstat(filepath.Join(vol, "b")); !os.IsNotExist(err) {
		t.Errorf("b, removed from the ConfigMap, is still in the volume: %v", err)
	}
	if _, err := os.Stat(filepath.Join(vol, first)); !os.IsNotExist(err) {
		t.Errorf("the previous payload %s is still there: %v", first, err)
	}

	// A ConfigMap gone after the mount keeps the old contents, with the
	// kubelet's event, and the sync goes on.
	if err := h.client.CoreV1().ConfigMaps("ns").Delete(ctx, "cfg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.drainEvents()
	if err := h.m.WaitForAttachAndMount(ctx, pod); err != nil {
		t.Fatalf("a failed remount failed the sync: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(vol, "a")); string(got) != "3" {
		t.Errorf("a = %q after a failed remount, want the old 3", got)
	}
	if ev := h.drainEvents(); len(ev) != 1 || !strings.Contains(ev[0], "FailedMount") {
		t.Errorf("events = %v, want one FailedMount", ev)
	}
}

// TestTokenRefreshedAtEightyPercent: the token manager's schedule. A token
// of 3600 s is kept until its last 20 % (minus up to 10 s of jitter), then
// requested again; a refresh that fails keeps a token still valid, and
// fails the mount once it has expired.
func TestTokenRefreshedAtEightyPercent(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, "")
	pod := testPod(corev1.Volume{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3600)}},
	}}}})
	if err := h.m.WaitForAttachAndMount(ctx, pod); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(2880*time.Second - maxJitter - time.Second)
	if err := h.m.WaitForAttachAndMount(ctx, pod); err != nil || len(h.tokens) != 1 {
		t.Fatalf("before 80 %% of the lifetime: err %v, %d token requests; want 1", err, len(h.tokens))
	}
	h.clock.Step(maxJitter + 2*time.Second)
	if err := h.m.WaitForAttachAndMount(ctx, pod); err != nil || len(h.tokens) != 2 {
		t.Fatalf("past 80 %% of the lifetime: err %v, %d token requests; want 2", err, len(h.tokens))
	}

	h.tokenErr = errors.New("apiserver unavailable")
	h.clock.Step(2881 * time.Second)
	if err := h.m.WaitForAttachAndMount(ctx, pod); err != nil {
		t.Errorf("a failed refresh of a valid token failed the sync: %v", err)
	}
	h.clock.Step(720 * time.Second)
	h.drainEvents()
	if err := h.m.WaitForAttachAndMount(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if ev := h.drainEvents(); len(ev) != 1 || !strings.Contains(ev[0], "expired and refresh failed") {
		t.Errorf("events = %v, want one FailedMount for the expired token", ev)
	}
}
