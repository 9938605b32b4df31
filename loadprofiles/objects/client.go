package objects

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// FieldOwner is the field manager of every write the Client makes, so that
// an object's managedFields say which of its fields fleetlet set.
const FieldOwner = "fleetlet"

// Client creates, scales, applies, reads and deletes objects of any kind
// the API server serves. It holds no state of its own but Namespace and is
// safe for concurrent use once Namespace is set.
type Client struct {
	// Namespace is where a namespaced object that names no namespace goes;
	// the driver sets it to the run's namespace. Objects of cluster-scoped
	// kinds are given none, whatever they name.
	Namespace string

	c client.Client
}

// NewClient returns a Client over controller-runtime's client with a
// dynamic RESTMapper: it asks the API server's discovery for a kind's
// resource and scope the first time the kind is used, and again when a
// kind it does not know is asked for, so that any kind served, custom
// resources included, works without a scheme, and a CRD installed during
// the run is found.
func NewClient(cfg *rest.Config) (*Client, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("object client: building the HTTP client from the rest config: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("object client: building the discovery RESTMapper: %w", err)
	}
	c, err := client.New(cfg, client.Options{HTTPClient: httpClient, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("object client: %w", err)
	}
	return &Client{c: c}, nil
}

// NewClientFrom returns a Client over c, such as controller-runtime's fake
// client in tests. c's RESTMapper decides kinds' scopes.
func NewClientFrom(c client.Client) *Client {
	return &Client{c: c}
}

// Create creates obj, as field owner FieldOwner. On success obj is the
// object the API server returned (its UID, resourceVersion, defaults). A
// namespaced kind's object without a namespace is given Client.Namespace.
func (c *Client) Create(ctx context.Context, obj *unstructured.Unstructured) error {
	if err := c.scope(obj); err != nil {
		return err
	}
	if err := c.c.Create(ctx, obj, client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("creating %s: %w", describe(obj), err)
	}
	return nil
}

// SetReplicas sets obj's spec.replicas to n with a JSON merge patch, and
// obj becomes the patched object. It patches the object, not its scale
// subresource, because a custom resource with spec.replicas need not serve
// /scale; and a JSON merge patch, not a strategic one, because custom
// resources take only the former. The kinds with spec.replicas are the
// Deployment, ReplicaSet, StatefulSet and ReplicationController, and any
// other object that has a spec.replicas already; others (a DaemonSet, a
// Job) are an error, since the API server would keep or reject a field
// their schema lacks.
func (c *Client) SetReplicas(ctx context.Context, obj *unstructured.Unstructured, n int) error {
	if n < 0 {
		return fmt.Errorf("scaling %s to %d replicas: replicas must not be negative", describe(obj), n)
	}
	if err := c.scope(obj); err != nil {
		return err
	}
	switch obj.GroupVersionKind().GroupKind() {
	case gkDeployment, gkReplicaSet, gkStatefulSet, gkReplicationController:
	default:
		if _, found, err := intAt(obj, "spec", "replicas"); err != nil || !found {
			return fmt.Errorf("scaling %s: a %s has no spec.replicas: scale only Deployments, ReplicaSets, StatefulSets, ReplicationControllers or custom resources with spec.replicas", describe(obj), obj.GetKind())
		}
	}
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n))
	if err := c.c.Patch(ctx, obj, patch, client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("scaling %s to %d replicas: %w", describe(obj), n, err)
	}
	return nil
}

// Apply applies obj, a re-rendered template of an object Create made, with
// server-side apply as field owner FieldOwner, and obj becomes the applied
// object. A changed pod template is a rolling update. obj must be what a
// template renders, stamped as for Create: fields it no longer sets that an
// earlier Apply set are removed, and a resourceVersion in it would be a
// precondition. Every field it renders is set, spec.replicas included: a
// driver that scaled the object renders its current replicas, or a template
// without spec.replicas, lest the update undo the scale.
//
// It forces ownership of conflicting fields. Create and SetReplicas write
// as FieldOwner with the Update operation, and the API server counts
// fleetlet's updates and fleetlet's applies as two managers, so the first
// Apply that changes a field Create set (an image, the replicas a scale
// phase set) conflicts with fleetlet itself and would fail without force.
// Forcing is safe because the run's objects are fleetlet's: nothing else
// writes their spec during a run (controllers write status, through its
// subresource), so the only owner force can take a field from is fleetlet.
func (c *Client) Apply(ctx context.Context, obj *unstructured.Unstructured) error {
	if err := c.scope(obj); err != nil {
		return err
	}
	if err := c.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s: %w", describe(obj), err)
	}
	return nil
}

// Delete deletes obj with background propagation: the API server removes
// the object at once and the garbage collector its dependents (a
// Deployment's ReplicaSets and their pods), as clusterloader2's deletes
// do, so that the driver sees the pods go through its watch. An object
// already gone is success.
func (c *Client) Delete(ctx context.Context, obj *unstructured.Unstructured) error {
	if err := c.scope(obj); err != nil {
		return err
	}
	err := c.c.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting %s: %w", describe(obj), err)
	}
	return nil
}

// Get reads obj (by its kind, namespace and name) from the API server into
// obj, such as for Converged to see its status.
func (c *Client) Get(ctx context.Context, obj *unstructured.Unstructured) error {
	if err := c.scope(obj); err != nil {
		return err
	}
	if err := c.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return fmt.Errorf("reading %s: %w", describe(obj), err)
	}
	return nil
}

// scope resolves obj's kind through the RESTMapper and sets its namespace
// by the kind's scope: Client.Namespace when a namespaced kind's object
// names none, none for a cluster-scoped kind.
func (c *Client) scope(obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	if gvk.Kind == "" || gvk.Version == "" {
		return fmt.Errorf("%s has no apiVersion or kind: set both", describe(obj))
	}
	mapping, err := c.c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return &unknownKindError{gvk: gvk, err: err}
	}
	if err != nil {
		return fmt.Errorf("finding the API resource of kind %s (apiVersion %s): %w", gvk.Kind, gvk.GroupVersion(), err)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameRoot {
		obj.SetNamespace("")
		return nil
	}
	if obj.GetNamespace() == "" {
		if c.Namespace == "" {
			return fmt.Errorf("%s is of a namespaced kind but names no namespace, and the client has none: set Client.Namespace or metadata.namespace", describe(obj))
		}
		obj.SetNamespace(c.Namespace)
	}
	return nil
}

// unknownKindError is a kind the API server does not serve, in one line
// that says what to do. It unwraps to the RESTMapper's error, so that
// meta.IsNoMatchError holds.
type unknownKindError struct {
	gvk schema.GroupVersionKind
	err error
}

func (e *unknownKindError) Error() string {
	group := e.gvk.Group
	if group == "" {
		group = `"" (core)`
	}
	return fmt.Sprintf("no kind %s in group %s is served by the API server at apiVersion %s: install its CRD or fix apiVersion/kind", e.gvk.Kind, group, e.gvk.GroupVersion())
}

func (e *unknownKindError) Unwrap() error { return e.err }
