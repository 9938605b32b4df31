package kuberuntime

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/reports"
)

func newManager(t testing.TB, preloaded ...string) (*Manager, *fakeruntime.Runtime, *record.FakeRecorder) {
	clk := clocktesting.NewFakeClock(time.Now())
	rt := fakeruntime.New(fakeruntime.Config{Clock: clk, PreloadedImages: preloaded})
	if err := rt.UpdateRuntimeConfig(context.Background(), &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.64.0.0/16"}}); err != nil {
		t.Fatal(err)
	}
	events := record.NewFakeRecorder(1000)
	m := NewManager(Config{Runtime: rt, Images: rt, Events: events, Recorder: reports.Discard{}, Clock: clk, SerializeImagePulls: true})
	return m, rt, events
}

func newPod(uid string, hostNetwork bool, policy corev1.PullPolicy, containers ...string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "ns", UID: types.UID(uid)},
		Spec:       corev1.PodSpec{HostNetwork: hostNetwork},
	}
	for _, c := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c, Image: "busybox", ImagePullPolicy: policy})
	}
	return pod
}

func drainEvents(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestSyncPod(t *testing.T) {
	cases := []struct {
		name       string
		pod        *corev1.Pod
		preloaded  []string
		wantErr    string
		running    int
		wantEvents []string
	}{
		{
			name: "pulls, creates and starts in spec order", pod: newPod("u1", false, corev1.PullIfNotPresent, "a", "b"),
			running:    2,
			wantEvents: []string{"Normal Pulling", "Normal Pulled", "Normal Created", "Normal Started", "Normal Pulled", "Normal Created", "Normal Started"},
		},
		{
			name: "an image already present is not pulled", pod: newPod("u2", false, corev1.PullIfNotPresent, "a"), preloaded: []string{"busybox"},
			running:    1,
			wantEvents: []string{"Normal Pulled Container image \"busybox\" already present on machine", "Normal Created", "Normal Started"},
		},
		{
			name: "pull policy Always pulls a present image", pod: newPod("u3", false, corev1.PullAlways, "a"), preloaded: []string{"busybox"},
			running:    1,
			wantEvents: []string{"Normal Pulling", "Normal Pulled Successfully pulled", "Normal Created", "Normal Started"},
		},
		{
			name: "pull policy Never with the image absent fails", pod: newPod("u4", false, corev1.PullNever, "a"),
			wantErr:    "pull policy is Never",
			wantEvents: []string{"Warning ErrImageNeverPull"},
		},
		{
			name: "host network sandbox", pod: newPod("u5", true, corev1.PullIfNotPresent, "a"),
			running:    1,
			wantEvents: []string{"Normal Pulling", "Normal Pulled", "Normal Created", "Normal Started"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			m, rt, events := newManager(t, tc.preloaded...)
			status, err := m.GetPodStatus(ctx, tc.pod.UID)
			if err != nil {
				t.Fatal(err)
			}
			err = m.SyncPod(ctx, tc.pod, status, healthy{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to say %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			got := drainEvents(events)
			if len(got) != len(tc.wantEvents) {
				t.Fatalf("events = %q, want %d starting %q", got, len(tc.wantEvents), tc.wantEvents)
			}
			for i, want := range tc.wantEvents {
				if !strings.HasPrefix(got[i], want) {
					t.Errorf("event %d = %q, want prefix %q", i, got[i], want)
				}
			}
			status, err = m.GetPodStatus(ctx, tc.pod.UID)
			if err != nil {
				t.Fatal(err)
			}
			running := 0
			for _, c := range status.Containers {
				if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
					running++
				}
			}
			if running != tc.running {
				t.Errorf("%d containers running, want %d", running, tc.running)
			}
			sb := status.ReadySandbox()
			if sb == nil {
				t.Fatal("no ready sandbox")
			}
			if sb.GetMetadata().GetUid() != string(tc.pod.UID) {
				t.Errorf("sandbox metadata uid = %q", sb.GetMetadata().GetUid())
			}
			hostNet := sb.GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE
			if hostNet != tc.pod.Spec.HostNetwork {
				t.Errorf("sandbox host network = %v, want %v", hostNet, tc.pod.Spec.HostNetwork)
			}
			if hostNet == (sb.GetNetwork().GetIp() != "") {
				t.Errorf("sandbox IP %q with host network %v: only pod-network sandboxes get one", sb.GetNetwork().GetIp(), hostNet)
			}

			// A second sync of a converged pod does nothing.
			if tc.wantErr == "" {
				if err := m.SyncPod(ctx, tc.pod, status, healthy{}); err != nil {
					t.Fatal(err)
				}
				if again := drainEvents(events); len(again) != 0 {
					t.Errorf("a converged pod's sync emitted %q", again)
				}
			}

			// Kill and remove leave nothing behind.
			if err := m.KillPod(ctx, tc.pod, status, 30); err != nil {
				t.Fatal(err)
			}
			if status, err = m.GetPodStatus(ctx, tc.pod.UID); err != nil {
				t.Fatal(err)
			}
			if err := m.RemovePod(ctx, status); err != nil {
				t.Fatal(err)
			}
			sandboxes, _ := rt.ListPodSandbox(ctx, nil)
			containers, _ := rt.ListContainers(ctx, nil)
			if len(sandboxes)+len(containers) != 0 {
				t.Errorf("%d sandboxes and %d containers left", len(sandboxes), len(containers))
			}
		})
	}
}

// BenchmarkPodSync is one agent's work for one pod's life against the
// in-process fake runtime with no simulated latency: status read, sync to
// running, status read, kill and removal.
func BenchmarkPodSync(b *testing.B) {
	ctx := context.Background()
	m, _, events := newManager(b, "busybox")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		pod := newPod("u"+strconv.Itoa(i), false, corev1.PullIfNotPresent, "app")
		status, err := m.GetPodStatus(ctx, pod.UID)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.SyncPod(ctx, pod, status, healthy{}); err != nil {
			b.Fatal(err)
		}
		if status, err = m.GetPodStatus(ctx, pod.UID); err != nil {
			b.Fatal(err)
		}
		if err := m.KillPod(ctx, pod, status, 0); err != nil {
			b.Fatal(err)
		}
		if status, err = m.GetPodStatus(ctx, pod.UID); err != nil {
			b.Fatal(err)
		}
		if err := m.RemovePod(ctx, status); err != nil {
			b.Fatal(err)
		}
		drainEvents(events)
	}
}

// TestRuntimeClassHandler runs a pod's sandbox with the handler its
// RuntimeClass names, and fails a pod whose RuntimeClass the node does not
// know before the runtime is asked, with the kubelet's event.
func TestRuntimeClassHandler(t *testing.T) {
	handlers := map[string]string{"gvisor": "runsc"}
	lookup := func(name *string) (string, error) {
		if name == nil {
			return "", nil
		}
		h, ok := handlers[*name]
		if !ok {
			return "", fmt.Errorf("runtimeclass.node.k8s.io %q not found", *name)
		}
		return h, nil
	}
	cases := []struct {
		name, runtimeClass string
		wantHandler        string
		wantErr            bool
	}{
		{name: "no RuntimeClass: the default handler"},
		{name: "a known RuntimeClass: its handler", runtimeClass: "gvisor", wantHandler: "runsc"},
		{name: "an unknown RuntimeClass: no sandbox", runtimeClass: "kata", wantErr: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			m, rt, events := newManager(t, "busybox")
			rec := &sandboxRecorder{RuntimeService: rt}
			m.cfg.Runtime = rec
			m.cfg.RuntimeHandler = lookup
			pod := newPod(strconv.Itoa(i), false, corev1.PullIfNotPresent, "a")
			if tc.runtimeClass != "" {
				pod.Spec.RuntimeClassName = &tc.runtimeClass
			}
			status, err := m.GetPodStatus(ctx, pod.UID)
			if err != nil {
				t.Fatal(err)
			}
			err = m.SyncPod(ctx, pod, status, healthy{})
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), `"kata" not found`) {
					t.Fatalf("SyncPod: %v, want the RuntimeClass not found", err)
				}
				if len(rec.configs) != 0 {
					t.Errorf("the runtime was asked for %d sandboxes", len(rec.configs))
				}
				if evs := drainEvents(events); len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning FailedCreatePodSandBox") {
					t.Errorf("events %q, want one FailedCreatePodSandBox", evs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sandboxes, err := rt.ListPodSandbox(ctx, nil)
			if err != nil || len(sandboxes) != 1 {
				t.Fatalf("%d sandboxes, %v", len(sandboxes), err)
			}
			if got := sandboxes[0].RuntimeHandler; got != tc.wantHandler {
				t.Errorf("sandbox runs with handler %q, want %q", got, tc.wantHandler)
			}
		})
	}
}
