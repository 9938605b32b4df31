package watchers

import (
	"context"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// Interners are a fleet's interners, one per kind a kubelet watches beside
// its pods and Node; every node's watches share them.
type Interners struct {
	Services               Interner[corev1.Service, *corev1.Service]
	RuntimeClasses         Interner[nodev1.RuntimeClass, *nodev1.RuntimeClass]
	CSIDrivers             Interner[storagev1.CSIDriver, *storagev1.CSIDriver]
	PodCertificateRequests Interner[certificatesv1.PodCertificateRequest, *certificatesv1.PodCertificateRequest]
}

// Config is what a node's kubelet watches need.
type Config struct {
	// NodeName picks the node's own PodCertificateRequests; empty watches
	// every node's, as the fleet's one shared watch does.
	NodeName string
	Client   kubernetes.Interface
	// Interners, if set, are shared with the other nodes of the fleet.
	Interners *Interners
	Clock     clock.Clock
}

// Kubelet is the kubelet's watches beside its pods and its Node, each opened
// as pkg/kubelet/kubelet.go opens it in 1.37:
//   - Services with spec.clusterIP!=None, for the service-link environment
//     variables (headless Services give none; kubernetes/kubernetes#122394);
//   - RuntimeClasses, all of them, for the handler a pod's runtimeClassName
//     names (runtimeclass.NewManager);
//   - CSIDrivers, all of them, which the CSI volume plugin reads
//     (volume_host.go);
//   - the node's PodCertificateRequests, spec.nodeName=<node>, of the pod
//     certificate manager (podcertificate.NewIssuingManager).
//
// The kubelet's ClusterTrustBundle informer starts only once a pod projects
// a trust bundle, so an idle kubelet does not hold it, nor does this.
type Kubelet struct {
	Services               *Watch[corev1.Service, *corev1.Service]
	RuntimeClasses         *Watch[nodev1.RuntimeClass, *nodev1.RuntimeClass]
	CSIDrivers             *Watch[storagev1.CSIDriver, *storagev1.CSIDriver]
	PodCertificateRequests *Watch[certificatesv1.PodCertificateRequest, *certificatesv1.PodCertificateRequest]
}

// NewKubelet builds a node's four watches; nothing is sent until Start.
func NewKubelet(cfg Config) *Kubelet {
	in := cfg.Interners
	if in == nil {
		in = &Interners{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	c := cfg.Client
	name := func(kind string) string {
		if cfg.NodeName == "" {
			return kind
		}
		return cfg.NodeName + "/" + kind
	}
	services := c.CoreV1().Services(metav1.NamespaceAll)
	pcrSel := Selectors{}
	if cfg.NodeName != "" {
		pcrSel.Field = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName)
	}
	pcrs := c.CertificatesV1().PodCertificateRequests(metav1.NamespaceAll)
	return &Kubelet{
		Services: NewWatch(name("services"), ListWatch(c,
			Selectors{Field: fields.OneTermNotEqualSelector("spec.clusterIP", corev1.ClusterIPNone)},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return services.List(ctx, o) },
			services.Watch), &in.Services, cfg.Clock),
		RuntimeClasses: NewWatch(name("runtimeclasses"), ListWatch(c, Selectors{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.NodeV1().RuntimeClasses().List(ctx, o)
			},
			c.NodeV1().RuntimeClasses().Watch), &in.RuntimeClasses, cfg.Clock),
		CSIDrivers: NewWatch(name("csidrivers"), ListWatch(c, Selectors{},
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.StorageV1().CSIDrivers().List(ctx, o)
			},
			c.StorageV1().CSIDrivers().Watch), &in.CSIDrivers, cfg.Clock),
		PodCertificateRequests: NewWatch(name("podcertificaterequests"), ListWatch(c, pcrSel,
			func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pcrs.List(ctx, o) },
			pcrs.Watch), &in.PodCertificateRequests, cfg.Clock),
	}
}

// Start starts the four watches.
func (k *Kubelet) Start(ctx context.Context) error {
	for _, w := range k.all() {
		if err := w.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Wait returns once every watch has stopped.
func (k *Kubelet) Wait() {
	for _, w := range k.all() {
		w.Wait()
	}
}

// HasSynced reports whether every watch has listed once.
func (k *Kubelet) HasSynced() bool {
	for _, w := range k.all() {
		if !w.HasSynced() {
			return false
		}
	}
	return true
}

type runner interface {
	Start(context.Context) error
	Wait()
	HasSynced() bool
}

func (k *Kubelet) all() []runner {
	return []runner{k.Services, k.RuntimeClasses, k.CSIDrivers, k.PodCertificateRequests}
}

// RuntimeHandler returns the CRI handler a pod's RuntimeClass names, as the
// kubelet's runtimeclass.Manager.LookupRuntimeHandler: "" for none, and a
// NotFound error for a RuntimeClass the node does not know.
func (k *Kubelet) RuntimeHandler(runtimeClassName *string) (string, error) {
	if runtimeClassName == nil || *runtimeClassName == "" {
		return "", nil
	}
	name := *runtimeClassName
	rc := k.RuntimeClasses.Store.Get(name)
	if rc == nil {
		return "", apierrors.NewNotFound(nodev1.Resource("runtimeclass"), name)
	}
	return rc.Handler, nil
}
