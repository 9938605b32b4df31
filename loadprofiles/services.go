package loadprofiles

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
)

// serviceCleanupTimeout bounds the deletes of a run's Services when Run
// returns, on top of serviceDeleteTime for each Service; see cleanupTimeout.
const (
	serviceCleanupTimeout = time.Minute
	serviceDeleteTime     = time.Second / DefaultQPS
	// serviceDeletesInFlight bounds the concurrent deletes of the cleanup,
	// which is not paced by the driver's limiter: it is not part of the
	// load the profile asks for, and the client's own limiter paces it.
	serviceDeletesInFlight = 16
)

// serviceRef is a Service the run created.
type serviceRef struct {
	name string
	uid  types.UID
}

// serviceLedger is what the run knows of the Services it made, for the
// cleanup: those whose create returned, and whether any create was sent at
// all (one whose response was lost may have made a Service all the same).
type serviceLedger struct {
	mu      sync.Mutex
	created []serviceRef
	sent    bool
}

func (l *serviceLedger) sending() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent = true
}

func (l *serviceLedger) add(ref serviceRef) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.created = append(l.created, ref)
}

func (l *serviceLedger) snapshot() (refs []serviceRef, sent bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]serviceRef(nil), l.created...), l.sent
}

// createServices runs a ServicesPhase: it creates the Services at s.QPS
// through the driver's limiter, concurrently and at most maxInFlight at once
// as a create phase does. Failed creates do not stop the phase; it reports
// them at the end.
func (r *run) createServices(ctx context.Context, phase string, s *ServicesPhase) error {
	r.pods.setPhase(phase, 0) // Services are not pods: Progress counts none
	limiter := newClockLimiter(s.QPS, r.clock)
	var g errgroup.Group
	g.SetLimit(maxInFlight(s.QPS))
	var failures failureCount
	for i := range s.Count {
		if limiter.Wait(ctx) != nil {
			break // ctx ended; Run reports it
		}
		svc := r.serviceFor(phase, i, s)
		r.services.sending()
		g.Go(func() error {
			r.createService(ctx, svc, &failures)
			return nil
		})
	}
	_ = g.Wait() // the goroutines return nil; failures are counted instead
	return failures.err("Service creates", s.Count)
}

// serviceFor builds the i-th Service of a services phase.
func (r *run) serviceFor(phase string, i int, s *ServicesPhase) *corev1.Service {
	selector := maps.Clone(s.Selector)
	selector[LabelRun] = r.id
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s-%d", phase, i),
			Namespace: r.namespace,
			Labels:    map[string]string{LabelRun: r.id, LabelPhase: phase},
		},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: selector,
			Ports: []corev1.ServicePort{{
				Protocol:   corev1.ProtocolTCP,
				Port:       s.Port,
				TargetPort: intstr.FromInt32(s.TargetPort),
			}},
		},
	}
}

// createService sends one create and records the Service for the cleanup;
// a failure is counted in failures.
func (r *run) createService(ctx context.Context, svc *corev1.Service, failures *failureCount) {
	created, err := r.client.CoreV1().Services(r.namespace).Create(ctx, svc, metav1.CreateOptions{})
	switch {
	case err == nil:
		r.services.add(serviceRef{name: created.Name, uid: created.UID})
	case apierrors.IsAlreadyExists(err):
		failures.add(r.serviceExists(ctx, svc.Name))
	default:
		failures.add(fmt.Errorf("creating Service %s/%s: %w", r.namespace, svc.Name, err))
	}
}

// serviceExists is the error for a create that found a Service of the same
// name. It cannot be this run's (Validate gives each services phase its own
// name), so it says whose it is when the Service carries a run label, and
// how to remove it.
func (r *run) serviceExists(ctx context.Context, name string) error {
	key := r.namespace + "/" + name
	fix := fmt.Sprintf("delete it with kubectl -n %s delete service %s, or rename the phase", r.namespace, name)
	whose := ""
	if old, err := r.client.CoreV1().Services(r.namespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
		if other := old.Labels[LabelRun]; other != "" {
			whose = fmt.Sprintf(" (%s=%s)", LabelRun, other)
			fix = fmt.Sprintf("delete that run's Services with kubectl -n %s delete services -l %s=%s, or rename the phase", r.namespace, LabelRun, other)
		}
	}
	return fmt.Errorf("creating Service %s: already exists: the namespace holds a Service of that name from another run%s; %s", key, whose, fix)
}

// cleanupTimeout bounds the cleanup of n Services.
func cleanupTimeout(n int) time.Duration {
	return serviceCleanupTimeout + time.Duration(n)*serviceDeleteTime
}

// deleteServices deletes the Services the run made, if it sent any create:
// those whose create returned and any others carrying the run's label (a
// create whose response was lost). It runs when Run returns, however it
// ends, so it has a context of its own: parent's values (the logger) without
// its cancellation, and a timeout of cleanupTimeout. Each delete carries
// the Service's UID as a precondition, so that a Service of the same name
// made by someone else since is left alone; one already gone counts as
// deleted. It logs what it could not delete and returns that error too.
func (r *run) deleteServices(parent context.Context) error {
	refs, sent := r.services.snapshot()
	if !sent {
		return nil
	}
	timeout := cleanupTimeout(len(refs))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), timeout)
	defer cancel()
	logger := klog.FromContext(ctx)
	services := r.client.CoreV1().Services(r.namespace)

	var errs []error
	known := map[types.UID]bool{}
	for _, ref := range refs {
		known[ref.uid] = true
	}
	list, err := services.List(ctx, metav1.ListOptions{LabelSelector: LabelRun + "=" + r.id})
	if err != nil {
		errs = append(errs, fmt.Errorf("listing the run's Services: %w", err))
	} else {
		for _, svc := range list.Items {
			// The selector is applied by the API server; checking it again
			// keeps clients that ignore it (fakes) from leaking others in.
			if svc.Labels[LabelRun] == r.id && !known[svc.UID] {
				known[svc.UID] = true
				refs = append(refs, serviceRef{name: svc.Name, uid: svc.UID})
			}
		}
	}

	var g errgroup.Group
	g.SetLimit(serviceDeletesInFlight)
	var failures failureCount
	for _, ref := range refs {
		g.Go(func() error {
			opts := metav1.DeleteOptions{}
			if ref.uid != "" {
				opts.Preconditions = &metav1.Preconditions{UID: &ref.uid}
			}
			if err := services.Delete(ctx, ref.name, opts); err != nil && !apierrors.IsNotFound(err) {
				failures.add(fmt.Errorf("deleting Service %s/%s: %w", r.namespace, ref.name, err))
			}
			return nil
		})
	}
	_ = g.Wait()
	errs = append(errs, failures.err("Service deletes", len(refs)))
	err = joinLine(errs)
	if err == nil {
		logger.V(2).Info("Load run's Services deleted", "services", len(refs))
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w (the cleanup's bound is %v)", err, timeout)
	}
	err = fmt.Errorf("deleting the run's Services: %w; delete those left with kubectl -n %s delete services -l %s=%s",
		err, r.namespace, LabelRun, r.id)
	logger.Error(err, "Load run's Services left behind")
	return err
}
