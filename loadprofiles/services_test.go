package loadprofiles

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fleetlet/fleetlet/internal/testutil"
)

func servicesPhase(name string, count int, qps float64) Phase {
	return Phase{Name: name, Services: &ServicesPhase{Count: count, QPS: qps, Selector: map[string]string{"app": "web"}}}
}

// serviceLog plays the API server's part the fake clientset lacks on a
// Service create, a UID, and keeps a copy of each Service created and the
// name of each deleted, in call order.
type serviceLog struct {
	mu      sync.Mutex
	created []*corev1.Service
	deleted []string
}

func logServices(api *fakeAPI) *serviceLog {
	l := &serviceLog{}
	api.PrependReactor("create", "services", func(action k8stesting.Action) (bool, runtime.Object, error) {
		svc := action.(k8stesting.CreateAction).GetObject().(*corev1.Service)
		l.mu.Lock()
		defer l.mu.Unlock()
		svc.UID = types.UID(fmt.Sprintf("svc-uid-%d", len(l.created)))
		l.created = append(l.created, svc.DeepCopy())
		return false, nil, nil // the default reactor stores it
	})
	api.PrependReactor("delete", "services", func(action k8stesting.Action) (bool, runtime.Object, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.deleted = append(l.deleted, action.(k8stesting.DeleteAction).GetName())
		return false, nil, nil
	})
	return l
}

func (l *serviceLog) creates() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.created)
}

// servicesLeft lists the Services in the driver's namespace.
func servicesLeft(t *testing.T, api *fakeAPI) []string {
	t.Helper()
	list, err := api.CoreV1().Services(DefaultNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing Services: %v", err)
	}
	var names []string
	for _, svc := range list.Items {
		names = append(names, svc.Name)
	}
	return names
}

// TestDriverServices checks each Service's name, namespace, labels, selector
// and ports, and that Run deletes them all before it returns.
func TestDriverServices(t *testing.T) {
	ctx, cancel := testContext(t)
	defer cancel()
	api := newFakeAPI(t, nil)
	log := logServices(api)
	custom := servicesPhase("api", 2, 1000)
	custom.Services.Selector = map[string]string{"app": "api", "tier": "backend"}
	custom.Services.Port, custom.Services.TargetPort = 443, 8443
	p := profile(t, servicesPhase("web", 3, 1000), custom, createPhase(1, 1000))
	if err := (&Driver{Client: api}).Run(ctx, p); err != nil {
		t.Fatalf("Run: %v", err)
	}

	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.created) != 5 {
		t.Fatalf("%d Services created, want 5", len(log.created))
	}
	run := log.created[0].Labels[LabelRun]
	if len(run) != 8 {
		t.Fatalf("Service labels %v: no run label", log.created[0].Labels)
	}
	pods, err := api.CoreV1().Pods(DefaultNamespace).List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Labels[LabelRun] != run {
		t.Errorf("the run's pod and its Services disagree on the run label: pods %v, err %v", pods.Items, err)
	}
	// The creates of a phase go concurrently, so they may arrive in any
	// order within it.
	var names []string
	for _, svc := range log.created {
		names = append(names, svc.Name)
	}
	slices.Sort(names[:3])
	slices.Sort(names[3:])
	if got, want := strings.Join(names, ","), "web-0,web-1,web-2,api-0,api-1"; got != want {
		t.Errorf("Services created %s, want %s", got, want)
	}
	for _, svc := range log.created {
		phase, selector, port, target := "web", map[string]string{"app": "web"}, int32(DefaultServicePort), int32(DefaultServiceTargetPort)
		if strings.HasPrefix(svc.Name, "api-") {
			phase, selector, port, target = "api", map[string]string{"app": "api", "tier": "backend"}, 443, 8443
		}
		selector[LabelRun] = run
		if svc.GenerateName != "" || svc.Namespace != DefaultNamespace {
			t.Errorf("Service %s in namespace %q (generateName %q), want %s", svc.Name, svc.Namespace, svc.GenerateName, DefaultNamespace)
		}
		if want := map[string]string{LabelRun: run, LabelPhase: phase}; !maps.Equal(svc.Labels, want) {
			t.Errorf("Service %s labels = %v, want %v", svc.Name, svc.Labels, want)
		}
		if !maps.Equal(svc.Spec.Selector, selector) {
			t.Errorf("Service %s selector = %v, want %v", svc.Name, svc.Spec.Selector, selector)
		}
		if svc.Spec.Type != corev1.ServiceTypeClusterIP {
			t.Errorf("Service %s type = %q, want ClusterIP", svc.Name, svc.Spec.Type)
		}
		wantPorts := []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(target)}}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0] != wantPorts[0] {
			t.Errorf("Service %s ports = %+v, want %+v", svc.Name, svc.Spec.Ports, wantPorts)
		}
	}
	if len(log.deleted) != 5 {
		t.Errorf("%d Service deletes, want 5: %v", len(log.deleted), log.deleted)
	}
	if left := servicesLeft(t, api); len(left) != 0 {
		t.Errorf("Services left after Run: %v", left)
	}
}

// TestDriverServicesRate drives the limiter with a fake clock: at 2/s, one
// Service create at once, then one more per 500ms and never one early.
func TestDriverServicesRate(t *testing.T) {
	ctx, cancel := testContext(t)
	defer cancel()
	api := newFakeAPI(t, nil)
	log := logServices(api)
	clk := testingclock.NewFakeClock(time.Now())
	done := runAsync(ctx, &Driver{Client: api, Clock: clk}, profile(t, servicesPhase("web", 4, 2)))

	for want := 1; want <= 3; want++ {
		// The limiter's timer is the only thing that waits on the clock.
		testutil.WaitFor(t, fmt.Sprintf("Service create %d and the limiter waiting", want), func() bool {
			return log.creates() == want && clk.Waiters() == 1
		})
		clk.Step(499 * time.Millisecond)
		if got := log.creates(); got != want || clk.Waiters() != 1 {
			t.Fatalf("after %d.499s: %d creates (want %d), %d clock waiters", want-1, got, want, clk.Waiters())
		}
		clk.Step(time.Millisecond)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(patience):
		t.Fatal("Run did not return")
	}
	if got := log.creates(); got != 4 {
		t.Errorf("%d Service creates, want 4", got)
	}
	if left := servicesLeft(t, api); len(left) != 0 {
		t.Errorf("Services left after Run: %v", left)
	}
}

// TestDriverServicesDeletedWhenRunFails: the Services go however the run
// ends, and the run's own error is kept.
func TestDriverServicesDeletedWhenRunFails(t *testing.T) {
	t.Run("a later phase fails", func(t *testing.T) {
		ctx, cancel := testContext(t)
		defer cancel()
		api := newFakeAPI(t, func(int64) error { return errors.New("injected failure") })
		logServices(api)
		err := (&Driver{Client: api}).Run(ctx, profile(t, servicesPhase("web", 3, 1000), createPhase(2, 1000)))
		want := `phase "create": 2 of 2 pod creates failed; the first: injected failure`
		if err == nil || err.Error() != want {
			t.Fatalf("Run error:\n got: %v\nwant: %s", err, want)
		}
		if left := servicesLeft(t, api); len(left) != 0 {
			t.Errorf("Services left after Run: %v", left)
		}
	})
	t.Run("the services phase fails", func(t *testing.T) {
		ctx, cancel := testContext(t)
		defer cancel()
		api := newFakeAPI(t, nil)
		log := logServices(api)
		api.PrependReactor("create", "services", func(action k8stesting.Action) (bool, runtime.Object, error) {
			if action.(k8stesting.CreateAction).GetObject().(*corev1.Service).Name == "web-1" {
				return true, nil, errors.New("injected failure")
			}
			return false, nil, nil
		})
		err := (&Driver{Client: api}).Run(ctx, profile(t, servicesPhase("web", 3, 1000)))
		want := `phase "web": 1 of 3 Service creates failed; the first: creating Service fleetlet-load/web-1: injected failure`
		if err == nil || err.Error() != want {
			t.Fatalf("Run error:\n got: %v\nwant: %s", err, want)
		}
		if log.creates() != 2 {
			t.Errorf("%d Services created, want 2", log.creates())
		}
		if left := servicesLeft(t, api); len(left) != 0 {
			t.Errorf("Services left after Run: %v", left)
		}
	})
	t.Run("ctx is cancelled", func(t *testing.T) {
		ctx, cancel := testContext(t)
		defer cancel()
		api := newFakeAPI(t, nil)
		log := logServices(api)
		// Progress, once a second, tells when the run has reached the sleep.
		var napping atomic.Bool
		d := &Driver{Client: api, Progress: func(p Progress) { napping.Store(napping.Load() || p.Phase == "nap") }}
		done := runAsync(ctx, d, profile(t,
			servicesPhase("web", 2, 1000),
			Phase{Name: "nap", Sleep: &SleepPhase{Duration: metav1.Duration{Duration: time.Hour}}}))
		testutil.WaitFor(t, "the run to sleep", napping.Load)
		if left := servicesLeft(t, api); len(left) != 2 {
			t.Fatalf("Services before the cancel: %v, want 2", left)
		}
		cancel()
		select {
		case err := <-done:
			if want := `phase "nap": context canceled`; !errors.Is(err, context.Canceled) || err.Error() != want {
				t.Errorf("Run error = %v, want %s", err, want)
			}
		case <-time.After(patience):
			t.Fatal("Run did not return after cancel")
		}
		if left := servicesLeft(t, api); len(left) != 0 {
			t.Errorf("Services left after Run: %v", left)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		if len(log.deleted) != 2 {
			t.Errorf("Service deletes %v, want both", log.deleted)
		}
	})
}

// TestDriverServicesCleanupFailure: a Service the cleanup cannot delete is
// Run's error when nothing else failed, and only logged when a phase did.
func TestDriverServicesCleanupFailure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		phases []Phase
		fail   func(n int64) error
		want   string
	}{{
		name:   "the run succeeded",
		phases: []Phase{servicesPhase("web", 2, 1000)},
		want: `deleting the run's Services: 1 of 2 Service deletes failed; the first: deleting Service fleetlet-load/web-1: injected failure; ` +
			`delete those left with kubectl -n fleetlet-load delete services -l fleetlet.io/run=`,
	}, {
		name:   "a phase failed",
		phases: []Phase{servicesPhase("web", 2, 1000), createPhase(1, 1000)},
		fail:   func(int64) error { return errors.New("injected create failure") },
		want:   `phase "create": 1 of 1 pod creates failed; the first: injected create failure`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := testContext(t)
			defer cancel()
			api := newFakeAPI(t, tc.fail)
			logServices(api)
			api.PrependReactor("delete", "services", func(action k8stesting.Action) (bool, runtime.Object, error) {
				if action.(k8stesting.DeleteAction).GetName() == "web-1" {
					return true, nil, errors.New("injected failure")
				}
				return false, nil, nil
			})
			err := (&Driver{Client: api}).Run(ctx, profile(t, tc.phases...))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("Run error:\n got: %v\nwant: %s...", err, tc.want)
			}
			if left := servicesLeft(t, api); len(left) != 1 || left[0] != "web-1" {
				t.Errorf("Services left after Run: %v, want web-1 only", left)
			}
		})
	}
}

// TestDriverServicesCleanupFindsLostCreates: a create that made its Service
// but failed on the client's side is not recorded, yet the cleanup finds the
// Service by the run's label and deletes it.
func TestDriverServicesCleanupFindsLostCreates(t *testing.T) {
	ctx, cancel := testContext(t)
	defer cancel()
	api := newFakeAPI(t, nil)
	logServices(api)
	api.PrependReactor("create", "services", func(action k8stesting.Action) (bool, runtime.Object, error) {
		svc := action.(k8stesting.CreateAction).GetObject().(*corev1.Service)
		if svc.Name != "web-0" {
			return false, nil, nil
		}
		svc = svc.DeepCopy()
		svc.UID = "lost"
		if err := api.Tracker().Add(svc); err != nil {
			t.Errorf("storing the Service: %v", err)
		}
		return true, nil, errors.New("the response was lost")
	})
	// Someone else's Service in the namespace is left alone.
	other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: DefaultNamespace, Labels: map[string]string{"app": "web"}}}
	if _, err := api.CoreV1().Services(DefaultNamespace).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := (&Driver{Client: api}).Run(ctx, profile(t, servicesPhase("web", 2, 1000)))
	if want := `phase "web": 1 of 2 Service creates failed; the first: creating Service fleetlet-load/web-0: the response was lost`; err == nil || err.Error() != want {
		t.Fatalf("Run error:\n got: %v\nwant: %s", err, want)
	}
	if left := servicesLeft(t, api); len(left) != 1 || left[0] != "theirs" {
		t.Errorf("Services left after Run: %v, want theirs only", left)
	}
}

// TestDriverServicesAlreadyExist: a Service of the same name from an earlier
// run fails the create with an error that says so and how to remove it, and
// the cleanup does not delete it.
func TestDriverServicesAlreadyExist(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   string
	}{{
		name:   "from another fleetlet run",
		labels: map[string]string{LabelRun: "old12345", LabelPhase: "web"},
		want: `phase "web": 1 of 2 Service creates failed; the first: creating Service fleetlet-load/web-1: already exists: ` +
			`the namespace holds a Service of that name from another run (fleetlet.io/run=old12345); ` +
			`delete that run's Services with kubectl -n fleetlet-load delete services -l fleetlet.io/run=old12345, or rename the phase`,
	}, {
		name: "made by someone else",
		want: `phase "web": 1 of 2 Service creates failed; the first: creating Service fleetlet-load/web-1: already exists: ` +
			`the namespace holds a Service of that name from another run; ` +
			`delete it with kubectl -n fleetlet-load delete service web-1, or rename the phase`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := testContext(t)
			defer cancel()
			api := newFakeAPI(t, nil)
			old := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: DefaultNamespace, Labels: tc.labels, UID: "old"}}
			if _, err := api.CoreV1().Services(DefaultNamespace).Create(ctx, old, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			logServices(api)
			err := (&Driver{Client: api}).Run(ctx, profile(t, servicesPhase("web", 2, 1000)))
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Run error:\n got: %v\nwant: %s", err, tc.want)
			}
			var status apierrors.APIStatus
			if errors.As(err, &status) {
				t.Errorf("the error wraps the API's %v: callers would take it for the API server's own", status.Status().Reason)
			}
			left, err := api.CoreV1().Services(DefaultNamespace).List(ctx, metav1.ListOptions{})
			if err != nil || len(left.Items) != 1 || left.Items[0].UID != "old" {
				t.Errorf("Services left after Run: %+v (%v), want the earlier run's web-1 only", left.Items, err)
			}
		})
	}
}

// TestDriverWithoutServicesTouchesNone: a profile without a services phase
// makes no Service call, not even the cleanup's list.
func TestDriverWithoutServicesTouchesNone(t *testing.T) {
	ctx, cancel := testContext(t)
	defer cancel()
	api := newFakeAPI(t, nil)
	if err := (&Driver{Client: api}).Run(ctx, profile(t, createPhase(1, 1000))); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, a := range api.Actions() {
		if a.GetResource().Resource == "services" {
			t.Errorf("unexpected Service call: %s", a.GetVerb())
		}
	}
}
