package objectcache

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
)

func countGets(client *fake.Clientset, resource string) *int {
	n := new(int)
	client.PrependReactor("get", resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		*n++
		return false, nil, nil
	})
	return n
}

func TestConfigMapIsReusedForTheTTL(t *testing.T) {
	ctx := context.Background()
	clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
	client := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"k": "v1"},
	})
	gets := countGets(client, "configmaps")
	c := New(Config{Client: client, Clock: clock, Strategy: kubeletconfig.TTLCacheChangeDetectionStrategy})

	for range 3 {
		cm, err := c.ConfigMap(ctx, "ns", "cfg")
		if err != nil || cm.Data["k"] != "v1" {
			t.Fatalf("ConfigMap = %v, %v", cm, err)
		}
	}
	if *gets != 1 {
		t.Errorf("GETs within the TTL = %d, want 1", *gets)
	}

	cm, _ := client.CoreV1().ConfigMaps("ns").Get(ctx, "cfg", metav1.GetOptions{})
	cm.Data["k"] = "v2"
	if _, err := client.CoreV1().ConfigMaps("ns").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	*gets = 0
	clock.SetTime(clock.Now().Add(DefaultTTL - time.Second))
	if got, _ := c.ConfigMap(ctx, "ns", "cfg"); got.Data["k"] != "v1" || *gets != 0 {
		t.Errorf("before the TTL: value %q after %d GETs, want the cached v1 and none", got.Data["k"], *gets)
	}
	clock.SetTime(clock.Now().Add(time.Second))
	if got, _ := c.ConfigMap(ctx, "ns", "cfg"); got.Data["k"] != "v2" || *gets != 1 {
		t.Errorf("at the TTL: value %q after %d GETs, want v2 and one GET", got.Data["k"], *gets)
	}
}

func TestMissingObjectsAreAskedForAgain(t *testing.T) {
	ctx := context.Background()
	clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
	client := fake.NewClientset()
	c := New(Config{Client: client, Clock: clock, Strategy: kubeletconfig.TTLCacheChangeDetectionStrategy})

	if _, err := c.Secret(ctx, "ns", "creds"); !apierrors.IsNotFound(err) {
		t.Fatalf("Secret of a missing object: err = %v, want NotFound", err)
	}
	if _, err := client.CoreV1().Secrets("ns").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds"}, Data: map[string][]byte{"password": []byte("x")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := c.Secret(ctx, "ns", "creds")
	if err != nil || string(s.Data["password"]) != "x" {
		t.Errorf("Secret once created = %v, %v; a NotFound must not be cached", s, err)
	}
}

func TestExpiredEntriesArePruned(t *testing.T) {
	ctx := context.Background()
	clock := clocktesting.NewFakeClock(time.Unix(1000, 0))
	client := fake.NewClientset()
	for i := range 200 {
		_, _ = client.CoreV1().ConfigMaps("ns").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: string(rune('a'+i%26)) + string(rune('a'+i/26))}}, metav1.CreateOptions{})
	}
	c := New(Config{Client: client, Clock: clock, TTL: time.Minute, Strategy: kubeletconfig.TTLCacheChangeDetectionStrategy})
	list, _ := client.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{})
	for _, cm := range list.Items {
		if _, err := c.ConfigMap(ctx, "ns", cm.Name); err != nil {
			t.Fatal(err)
		}
		clock.SetTime(clock.Now().Add(time.Second))
	}
	if n := len(c.configMaps.entries); n > 130 {
		t.Errorf("%d entries kept for 200 objects fetched one second apart with a 1 min TTL; expired ones should be swept", n)
	}
}

func TestNotFoundReadsAsTheKubeletSaysIt(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{
			{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}},
			{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "app-creds"}}},
		}},
	}
	for _, strategy := range []kubeletconfig.ResourceChangeDetectionStrategy{
		kubeletconfig.WatchChangeDetectionStrategy, kubeletconfig.TTLCacheChangeDetectionStrategy, kubeletconfig.GetChangeDetectionStrategy,
	} {
		t.Run(string(strategy), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			c := New(Config{Client: fake.NewClientset(), Clock: clocktesting.NewFakeClock(time.Unix(1000, 0)), Strategy: strategy})
			stopped := run(ctx, c)
			defer func() { cancel(); <-stopped }()
			c.RegisterPod(pod)

			_, err := c.ConfigMap(ctx, "ns", "app-config")
			if want := `configmap "app-config" not found`; err == nil || err.Error() != want || !apierrors.IsNotFound(err) {
				t.Errorf("ConfigMap: err = %v, want NotFound %q", err, want)
			}
			_, err = c.Secret(ctx, "ns", "app-creds")
			if want := `secret "app-creds" not found`; err == nil || err.Error() != want || !apierrors.IsNotFound(err) {
				t.Errorf("Secret: err = %v, want NotFound %q", err, want)
			}
		})
	}
}

// run runs c until ctx ends, and returns a channel closed once Run has
// returned.
func run(ctx context.Context, c *Cache) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	return done
}
