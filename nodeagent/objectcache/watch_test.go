package objectcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/internal/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// watchTracker counts the watches the fake clientset serves, by what they
// watch ("configmaps ns metadata.name=cfg"), and how many are still open:
// a watch is open until its client stops it.
type watchTracker struct {
	mu     sync.Mutex
	opened map[string]int
	open   map[string]int
}

func trackWatches(client *fake.Clientset) *watchTracker {
	t := &watchTracker{opened: map[string]int{}, open: map[string]int{}}
	client.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		opts := action.(k8stesting.WatchActionImpl).ListOptions
		inner, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		what := fmt.Sprintf("%s %s %s", action.GetResource().Resource, action.GetNamespace(), opts.FieldSelector)
		t.mu.Lock()
		t.opened[what]++
		t.open[what]++
		t.mu.Unlock()
		w := &countedWatch{Interface: inner}
		w.stopped = func() {
			t.mu.Lock()
			t.open[what]--
			t.mu.Unlock()
		}
		return true, w, nil
	})
	return t
}

// of is how many watches of the named object in namespace ns were opened,
// and how many of them are open.
func (t *watchTracker) of(resource, name string) (opened, open int) {
	what := fmt.Sprintf("%s ns metadata.name=%s", resource, name)
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.opened[what], t.open[what]
}

// total is how many watches were opened of anything.
func (t *watchTracker) total() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, opened := range t.opened {
		n += opened
	}
	return n
}

type countedWatch struct {
	watch.Interface
	once    sync.Once
	stopped func()
}

func (w *countedWatch) Stop() {
	w.Interface.Stop()
	w.once.Do(w.stopped)
}

// requests is how many requests with verb the fake clientset served for
// resource.
func requests(client *fake.Clientset, verb, resource string) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

// startWatching is a Cache with the Watch strategy, run until the test
// ends; the test fails if Run does not then return.
func startWatching(t *testing.T, client *fake.Clientset, clock *clocktesting.FakeClock) *Cache {
	t.Helper()
	c := New(Config{Client: client, Clock: clock, Strategy: kubeletconfig.WatchChangeDetectionStrategy})
	ctx, cancel := context.WithCancel(context.Background())
	done := run(ctx, c)
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(testutil.Patience):
			t.Errorf("Run did not return within %v of its context's end", testutil.Patience)
		}
	})
	return c
}

func configMap(name, value string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string]string{"k": value}}
}

func secret(name, value string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string][]byte{"k": []byte(value)}}
}

// podWith is a pod of namespace ns whose one container takes its
// environment from the named ConfigMaps and Secrets.
func podWith(uid string, configMaps, secrets []string) *corev1.Pod {
	c := corev1.Container{Name: "c"}
	for _, name := range configMaps {
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}})
	}
	for _, name := range secrets {
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod-" + uid, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{c}},
	}
}

func readConfigMap(t *testing.T, c *Cache, name string) string {
	t.Helper()
	cm, err := c.ConfigMap(context.Background(), "ns", name)
	if err != nil {
		t.Fatalf("ConfigMap %s: %v", name, err)
	}
	return cm.Data["k"]
}

func updateConfigMap(t *testing.T, client *fake.Clientset, cm *corev1.ConfigMap) {
	t.Helper()
	if _, err := client.CoreV1().ConfigMaps(cm.Namespace).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestPodsSharingAConfigMapShareOneWatch(t *testing.T) {
	client := fake.NewClientset(configMap("cfg", "v1"))
	watches := trackWatches(client)
	c := startWatching(t, client, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	a := podWith("a", []string{"cfg"}, nil)
	b := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod-b", UID: "b"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}},
		}}}},
	}

	c.RegisterPod(a)
	c.RegisterPod(b)
	if got := readConfigMap(t, c, "cfg"); got != "v1" {
		t.Fatalf("ConfigMap = %q, want v1", got)
	}
	testutil.WaitFor(t, "the ConfigMap's watch is open", func() bool { _, open := watches.of("configmaps", "cfg"); return open == 1 })
	if opened, lists := watches.total(), requests(client, "list", "configmaps"); opened != 1 || lists != 1 {
		t.Errorf("two pods sharing a ConfigMap: %d watches and %d lists, want 1 of each", opened, lists)
	}

	c.UnregisterPod(a)
	// The remaining pod's watch still delivers.
	updateConfigMap(t, client, configMap("cfg", "v2"))
	testutil.WaitFor(t, "the update reaches the remaining pod's watch", func() bool { return readConfigMap(t, c, "cfg") == "v2" })
	if opened, open := watches.of("configmaps", "cfg"); opened != 1 || open != 1 {
		t.Errorf("after one of two pods unregistered: %d watches opened, %d open; want the one, open", opened, open)
	}

	c.UnregisterPod(b)
	testutil.WaitFor(t, "the last pod's unregistration closes the watch", func() bool { _, open := watches.of("configmaps", "cfg"); return open == 0 })
	if _, err := c.ConfigMap(context.Background(), "ns", "cfg"); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("ConfigMap once no pod refers to it: err = %v, want ErrNotRegistered", err)
	}
	if n := watches.total(); n != 1 {
		t.Errorf("%d watches opened in all, want 1", n)
	}
}

func TestAnUpdateIsReadWithoutAGET(t *testing.T) {
	for _, tc := range []struct {
		kind     string
		resource string
		object   runtime.Object
		pod      *corev1.Pod
		update   func(context.Context, *fake.Clientset) error
		read     func(*Cache) (string, error)
	}{{
		kind: "ConfigMap", resource: "configmaps", object: configMap("cfg", "v1"),
		pod: podWith("a", []string{"cfg"}, nil),
		update: func(ctx context.Context, client *fake.Clientset) error {
			_, err := client.CoreV1().ConfigMaps("ns").Update(ctx, configMap("cfg", "v2"), metav1.UpdateOptions{})
			return err
		},
		read: func(c *Cache) (string, error) {
			cm, err := c.ConfigMap(context.Background(), "ns", "cfg")
			if err != nil {
				return "", err
			}
			return cm.Data["k"], nil
		},
	}, {
		kind: "Secret", resource: "secrets", object: secret("cfg", "v1"),
		pod: podWith("a", nil, []string{"cfg"}),
		update: func(ctx context.Context, client *fake.Clientset) error {
			_, err := client.CoreV1().Secrets("ns").Update(ctx, secret("cfg", "v2"), metav1.UpdateOptions{})
			return err
		},
		read: func(c *Cache) (string, error) {
			s, err := c.Secret(context.Background(), "ns", "cfg")
			if err != nil {
				return "", err
			}
			return string(s.Data["k"]), nil
		},
	}} {
		t.Run(tc.kind, func(t *testing.T) {
			client := fake.NewClientset(tc.object)
			watches := trackWatches(client)
			c := startWatching(t, client, clocktesting.NewFakeClock(time.Unix(1000, 0)))
			c.RegisterPod(tc.pod)
			if got, err := tc.read(c); err != nil || got != "v1" {
				t.Fatalf("first read = %q, %v; want v1", got, err)
			}
			// The fake clientset does not replay what a watch missed.
			testutil.WaitFor(t, "the watch is open", func() bool { _, open := watches.of(tc.resource, "cfg"); return open == 1 })

			if err := tc.update(context.Background(), client); err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, "a read returns the update", func() bool { got, err := tc.read(c); return err == nil && got == "v2" })
			if n := requests(client, "get", tc.resource); n != 0 {
				t.Errorf("%d GETs, want none: reads are served by the watch", n)
			}
		})
	}
}

func TestAnImmutableObjectStopsItsWatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		// makeImmutable, if set, is done after the first read, of a
		// ConfigMap created mutable.
		makeImmutable bool
	}{
		{name: "immutable when created"},
		{name: "made immutable later", makeImmutable: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := configMap("cfg", "v1")
			cm.Immutable = ptr.To(!tc.makeImmutable)
			client := fake.NewClientset(cm)
			watches := trackWatches(client)
			c := startWatching(t, client, clocktesting.NewFakeClock(time.Unix(1000, 0)))
			c.RegisterPod(podWith("a", []string{"cfg"}, nil))
			if got := readConfigMap(t, c, "cfg"); got != "v1" {
				t.Fatalf("ConfigMap = %q, want v1", got)
			}
			if tc.makeImmutable {
				testutil.WaitFor(t, "the watch is open", func() bool { _, open := watches.of("configmaps", "cfg"); return open == 1 })
				cm = configMap("cfg", "v2")
				cm.Immutable = ptr.To(true)
				updateConfigMap(t, client, cm)
				testutil.WaitFor(t, "a read returns the immutable update", func() bool { return readConfigMap(t, c, "cfg") == "v2" })
			}
			want := map[bool]string{false: "v1", true: "v2"}[tc.makeImmutable]
			testutil.WaitFor(t, "the read of the immutable object closes its watch", func() bool { _, open := watches.of("configmaps", "cfg"); return open == 0 })

			// The API server forbids changing an immutable object; the
			// fake does not, which shows what is read is the last copy.
			updateConfigMap(t, client, configMap("cfg", "changed"))
			if got := readConfigMap(t, c, "cfg"); got != want {
				t.Errorf("ConfigMap once its watch closed = %q, want the last copy %q", got, want)
			}
			if opened, _ := watches.of("configmaps", "cfg"); opened != 1 {
				t.Errorf("%d watches opened, want 1: a read of an immutable object does not reopen it", opened)
			}
			if n := requests(client, "get", "configmaps"); n != 0 {
				t.Errorf("%d GETs, want none", n)
			}
		})
	}
}

func TestAReRegisteredPodMovesItsReferences(t *testing.T) {
	client := fake.NewClientset(configMap("a", "a"), configMap("b", "b"), configMap("c", "c"))
	watches := trackWatches(client)
	c := startWatching(t, client, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	before := podWith("p", []string{"a", "b"}, nil)
	after := podWith("p", []string{"b", "c"}, nil)

	c.RegisterPod(before)
	readConfigMap(t, c, "a")
	readConfigMap(t, c, "b")
	c.watchedConfigMaps.mu.RLock()
	b := c.watchedConfigMaps.items[key{"ns", "b"}]
	c.watchedConfigMaps.mu.RUnlock()

	c.RegisterPod(after)
	testutil.WaitFor(t, "the dropped reference's watch closes", func() bool { _, open := watches.of("configmaps", "a"); return open == 0 })
	if got := readConfigMap(t, c, "c"); got != "c" {
		t.Errorf("the new reference reads %q, want c", got)
	}
	if _, err := c.ConfigMap(context.Background(), "ns", "a"); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("the dropped reference: err = %v, want ErrNotRegistered", err)
	}
	c.watchedConfigMaps.mu.RLock()
	kept := c.watchedConfigMaps.items[key{"ns", "b"}]
	c.watchedConfigMaps.mu.RUnlock()
	b.mu.Lock()
	stopped := b.stopped
	b.mu.Unlock()
	if kept != b || stopped {
		t.Errorf("the reference kept across the update was closed and reopened; it must keep its watch")
	}
	if opened, _ := watches.of("configmaps", "b"); opened != 1 {
		t.Errorf("the kept reference's watch was opened %d times, want 1", opened)
	}

	// Unregistering drops the references the pod was registered with,
	// whatever the copy passed.
	c.UnregisterPod(before)
	testutil.WaitFor(t, "every watch closes", func() bool {
		_, b := watches.of("configmaps", "b")
		_, c := watches.of("configmaps", "c")
		return b == 0 && c == 0
	})
}

func TestAnIdleWatchIsClosedAndAReadReopensIt(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
	client := fake.NewClientset(configMap("cfg", "v1"))
	watches := trackWatches(client)
	c := startWatching(t, client, clock)
	c.RegisterPod(podWith("a", []string{"cfg"}, nil))
	readConfigMap(t, c, "cfg")
	testutil.WaitFor(t, "the watch is open and the recycler's ticker set", func() bool {
		_, open := watches.of("configmaps", "cfg")
		return open == 1 && clock.HasWaiters()
	})

	// Five sync periods of the default one minute, and a little.
	clock.Step(5*time.Minute + time.Second)
	testutil.WaitFor(t, "the recycler closes the idle watch", func() bool { _, open := watches.of("configmaps", "cfg"); return open == 0 })

	updateConfigMap(t, client, configMap("cfg", "v2"))
	if got := readConfigMap(t, c, "cfg"); got != "v2" {
		t.Errorf("the read that reopens the watch = %q, want v2: it waits for the new list", got)
	}
	if opened, _ := watches.of("configmaps", "cfg"); opened != 2 {
		t.Errorf("%d watches opened, want 2", opened)
	}
}

func TestARecentlyReadWatchIsNotRecycled(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
	client := fake.NewClientset(configMap("cfg", "v1"))
	c := startWatching(t, client, clock)
	c.RegisterPod(podWith("a", []string{"cfg"}, nil))
	w := c.watchedConfigMaps
	w.mu.RLock()
	o := w.items[key{"ns", "cfg"}]
	w.mu.RUnlock()
	for _, tc := range []struct {
		step        time.Duration
		read        bool
		wantStopped bool
	}{
		{step: 0, read: true},
		{step: 4 * time.Minute, read: true},
		{step: 4 * time.Minute},
		{step: time.Minute, wantStopped: false}, // 5 min since the last read: not after it
		{step: time.Second, wantStopped: true},
	} {
		clock.Step(tc.step)
		if tc.read {
			readConfigMap(t, c, "cfg")
		}
		w.recycleIdle(context.Background())
		o.mu.Lock()
		stopped := o.stopped
		o.mu.Unlock()
		if stopped != tc.wantStopped {
			t.Fatalf("at %v: stopped = %v, want %v", clock.Since(time.Unix(1000, 0)), stopped, tc.wantStopped)
		}
	}
}

func TestMaxIdleTimeIsFiveSyncPeriods(t *testing.T) {
	for _, tc := range []struct {
		syncFrequency, want time.Duration
	}{
		{0, 5 * time.Minute},
		{2 * time.Minute, 10 * time.Minute},
		{time.Second, minIdleTime},
	} {
		c := New(Config{Client: fake.NewClientset(), SyncFrequency: tc.syncFrequency})
		if got := c.watchedSecrets.maxIdleTime; got != tc.want {
			t.Errorf("SyncFrequency %v: maxIdleTime = %v, want %v", tc.syncFrequency, got, tc.want)
		}
	}
}

func TestAReadOfAnUnsyncedWatchFails(t *testing.T) {
	client := fake.NewClientset(configMap("cfg", "v1"))
	client.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("the API server is overloaded")
	})
	c := startWatching(t, client, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	c.watchedConfigMaps.syncTimeout = 50 * time.Millisecond
	c.RegisterPod(podWith("a", []string{"cfg"}, nil))

	_, err := c.ConfigMap(context.Background(), "ns", "cfg")
	if want := "failed to sync configmap cache: timed out waiting for the condition"; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.ConfigMap(ctx, "ns", "cfg"); !errors.Is(err, context.Canceled) {
		t.Errorf("read with an ended context: err = %v, want it to wrap context.Canceled", err)
	}
}

func TestAnUnregisteredObjectIsRefused(t *testing.T) {
	client := fake.NewClientset(configMap("cfg", "v1"), secret("creds", "x"))
	c := startWatching(t, client, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	_, err := c.ConfigMap(context.Background(), "ns", "cfg")
	if want := `object "ns"/"cfg" not registered`; !errors.Is(err, ErrNotRegistered) || err.Error() != want {
		t.Errorf("ConfigMap: err = %v, want %q", err, want)
	}
	if _, err := c.Secret(context.Background(), "ns", "creds"); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("Secret: err = %v, want ErrNotRegistered", err)
	}
	if n := len(client.Actions()); n != 0 {
		t.Errorf("%d requests, want none", n)
	}
}

func TestRunEndsEveryReflector(t *testing.T) {
	client := fake.NewClientset(secret("shared", "x"))
	for i := range 5 {
		_, _ = client.CoreV1().ConfigMaps("ns").Create(context.Background(), configMap(fmt.Sprint("cfg-", i), "v"), metav1.CreateOptions{})
	}
	watches := trackWatches(client)
	baseline := testutil.SettledGoroutines()

	c := New(Config{Client: client, Clock: clocktesting.NewFakeClock(time.Unix(1000, 0))})
	ctx, cancel := context.WithCancel(context.Background())
	done := run(ctx, c)
	for i := range 5 {
		c.RegisterPod(podWith(fmt.Sprint(i), []string{fmt.Sprint("cfg-", i)}, []string{"shared"}))
		readConfigMap(t, c, fmt.Sprint("cfg-", i))
	}
	if _, err := c.Secret(context.Background(), "ns", "shared"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "six watches open", func() bool { return watches.total() == 6 })

	cancel()
	select {
	case <-done:
	case <-time.After(testutil.Patience):
		t.Fatalf("Run did not return within %v of its context's end", testutil.Patience)
	}
	for i := range 5 {
		if _, open := watches.of("configmaps", fmt.Sprint("cfg-", i)); open != 0 {
			t.Errorf("cfg-%d: watch open after Run returned", i)
		}
	}
	if _, open := watches.of("secrets", "shared"); open != 0 {
		t.Errorf("the shared Secret's watch is open after Run returned")
	}

	// Once shut down, a registration opens no watch, as the kubelet's
	// opens none once it is stopping.
	c.RegisterPod(podWith("late", []string{"cfg-0"}, nil))
	if n := testutil.SettledGoroutines(); n > baseline {
		t.Errorf("%d goroutines after Run returned, %d before the Cache was made", n, baseline)
	}
	if n := watches.total(); n != 6 {
		t.Errorf("%d watches opened, want the 6 from before the shutdown", n)
	}
}
