package kuberuntime

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// creatingRuntime keeps the config of every container created.
type creatingRuntime struct {
	internalapi.RuntimeService
	mu      sync.Mutex
	configs []*runtimeapi.ContainerConfig
}

func (r *creatingRuntime) CreateContainer(ctx context.Context, sandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	r.mu.Lock()
	r.configs = append(r.configs, config)
	r.mu.Unlock()
	return r.RuntimeService.CreateContainer(ctx, sandboxID, config, sandboxConfig)
}

func TestContainerOptions(t *testing.T) {
	ctx := context.Background()
	literal := func() *corev1.Pod {
		pod := newPod("opts", false, corev1.PullIfNotPresent, "app")
		pod.Spec.Containers[0].Env = []corev1.EnvVar{
			{Name: "LITERAL", Value: "1"},
			{Name: "FROM", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		}
		return pod
	}

	t.Run("nil keeps the literal values", func(t *testing.T) {
		m, rt, _ := newManager(t, "busybox")
		rec := &creatingRuntime{RuntimeService: rt}
		m.cfg.Runtime = rec
		pod := literal()
		st, _ := m.GetPodStatus(ctx, pod.UID)
		if err := m.SyncPod(ctx, pod, st, healthy{}); err != nil {
			t.Fatal(err)
		}
		c := rec.configs[0]
		if len(c.Envs) != 1 || c.Envs[0].Key != "LITERAL" || string(c.Envs[0].Value) != "1" || len(c.Mounts) != 0 {
			t.Errorf("envs %v mounts %v, want only LITERAL=1 and no mounts", c.Envs, c.Mounts)
		}
	})

	t.Run("resolved envs and mounts reach the runtime", func(t *testing.T) {
		m, rt, _ := newManager(t, "busybox")
		rec := &creatingRuntime{RuntimeService: rt}
		m.cfg.Runtime = rec
		var asked []string
		m.cfg.ContainerOptions = func(_ context.Context, pod *corev1.Pod, c *corev1.Container) (*RunContainerOptions, error) {
			asked = append(asked, pod.Name+"/"+c.Name)
			return &RunContainerOptions{
				Envs:   []*runtimeapi.KeyValue{{Key: "FROM", Value: []byte(pod.Name)}},
				Mounts: []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/var/lib/data"}},
			}, nil
		}
		pod := literal()
		st, _ := m.GetPodStatus(ctx, pod.UID)
		if err := m.SyncPod(ctx, pod, st, healthy{}); err != nil {
			t.Fatal(err)
		}
		c := rec.configs[0]
		if strings.Join(asked, ",") != pod.Name+"/app" {
			t.Errorf("asked for %v", asked)
		}
		if len(c.Envs) != 1 || c.Envs[0].Key != "FROM" || string(c.Envs[0].Value) != pod.Name {
			t.Errorf("envs %v, want only FROM=%s", c.Envs, pod.Name)
		}
		if len(c.Mounts) != 1 || c.Mounts[0].ContainerPath != "/data" || c.Mounts[0].HostPath != "/var/lib/data" {
			t.Errorf("mounts %v", c.Mounts)
		}
	})

	t.Run("an error is CreateContainerConfigError and nothing is created", func(t *testing.T) {
		m, rt, events := newManager(t, "busybox")
		rec := &creatingRuntime{RuntimeService: rt}
		m.cfg.Runtime = rec
		resolveErr := errors.New(`configmap "cfg" not found`)
		m.cfg.ContainerOptions = func(context.Context, *corev1.Pod, *corev1.Container) (*RunContainerOptions, error) {
			return nil, resolveErr
		}
		pod := literal()
		st, _ := m.GetPodStatus(ctx, pod.UID)
		err := m.SyncPod(ctx, pod, st, healthy{})
		var b *BackoffError
		if !errors.As(err, &b) || !b.Until.IsZero() || !errors.Is(err, resolveErr) {
			t.Fatalf("err = %v, want a BackoffError with no Until wrapping the resolution error", err)
		}
		if len(rec.configs) != 0 {
			t.Errorf("%d containers created", len(rec.configs))
		}
		w := m.Waiting(pod.UID)["app"]
		if w.Reason != "CreateContainerConfigError" || w.Message != resolveErr.Error() {
			t.Errorf("waiting = %+v, want CreateContainerConfigError: %v", w, resolveErr)
		}
		var failed bool
		for _, e := range drainEvents(events) {
			failed = failed || e == `Warning Failed Error: configmap "cfg" not found`
		}
		if !failed {
			t.Error(`no event "Warning Failed Error: configmap "cfg" not found"`)
		}
	})
}
