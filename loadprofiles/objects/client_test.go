package objects

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// testMapper knows what the tests' API server serves: namespaced apps/v1
// Deployments and DaemonSets, v1 ConfigMaps and a custom resource, and
// cluster-scoped rbac ClusterRoles.
func testMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, meta.RESTScopeRoot)
	return m
}

// calls records what the Client sent through the fake client.
type calls struct {
	mu      sync.Mutex
	patches []recordedPatch
	applies []client.ApplyOptions
	deletes []client.DeleteOptions
	creates []client.CreateOptions
}

type recordedPatch struct {
	typ  types.PatchType
	data string
	opts client.PatchOptions
}

// newTestClient returns a Client over controller-runtime's fake client, in
// namespace "load", and what it records of the calls.
func newTestClient(t *testing.T, objs ...client.Object) (*Client, client.WithWatch, *calls) {
	t.Helper()
	rec := &calls{}
	base := fake.NewClientBuilder().WithRESTMapper(testMapper()).WithObjects(objs...).WithReturnManagedFields().Build()
	c := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			rec.mu.Lock()
			rec.creates = append(rec.creates, *(&client.CreateOptions{}).ApplyOptions(opts))
			rec.mu.Unlock()
			return c.Create(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			data, err := patch.Data(obj)
			if err != nil {
				return err
			}
			rec.mu.Lock()
			rec.patches = append(rec.patches, recordedPatch{patch.Type(), string(data), *(&client.PatchOptions{}).ApplyOptions(opts)})
			rec.mu.Unlock()
			return c.Patch(ctx, obj, patch, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			rec.mu.Lock()
			rec.applies = append(rec.applies, *(&client.ApplyOptions{}).ApplyOptions(opts))
			rec.mu.Unlock()
			return c.Apply(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			rec.mu.Lock()
			rec.deletes = append(rec.deletes, *(&client.DeleteOptions{}).ApplyOptions(opts))
			rec.mu.Unlock()
			return c.Delete(ctx, obj, opts...)
		},
	})
	oc := NewClientFrom(c)
	oc.Namespace = "load"
	return oc, base, rec
}

const deploymentYAML = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-0
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: c
        image: pause:3.9
`

// fetch reads what the fake API server holds for obj's kind and key.
func fetch(t *testing.T, c client.Client, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	t.Helper()
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(obj.GroupVersionKind())
	return got, c.Get(context.Background(), client.ObjectKeyFromObject(obj), got)
}

func TestCreateDefaultsNamespace(t *testing.T) {
	oc, base, rec := newTestClient(t)
	obj := mustObj(t, deploymentYAML)
	if err := oc.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	if obj.GetNamespace() != "load" {
		t.Errorf("namespace = %q, want the client's, load", obj.GetNamespace())
	}
	if obj.GetResourceVersion() == "" {
		t.Errorf("Create did not fill obj from the server's answer: %v", obj.Object["metadata"])
	}
	if _, err := fetch(t, base, obj); err != nil {
		t.Errorf("not stored in load/web-0: %v", err)
	}
	if len(rec.creates) != 1 || rec.creates[0].FieldManager != FieldOwner {
		t.Errorf("create options = %+v, want field manager %s", rec.creates, FieldOwner)
	}

	// Its own namespace is kept.
	own := mustObj(t, deploymentYAML)
	own.SetNamespace("elsewhere")
	if err := oc.Create(context.Background(), own); err != nil || own.GetNamespace() != "elsewhere" {
		t.Errorf("own namespace: %v, namespace %q", err, own.GetNamespace())
	}

	// Neither is an error, and nothing is sent.
	none := NewClientFrom(base)
	err := none.Create(context.Background(), mustObj(t, strings.Replace(deploymentYAML, "web-0", "web-1", 1)))
	want := "Deployment web-1 is of a namespaced kind but names no namespace, and the client has none: set Client.Namespace or metadata.namespace"
	if err == nil || err.Error() != want {
		t.Errorf("no namespace: error %v, want %s", err, want)
	}
}

func TestCreateClusterScopedKeepsNoNamespace(t *testing.T) {
	oc, base, _ := newTestClient(t)
	obj := mustObj(t, "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: reader\n  namespace: stray\nrules: []\n")
	if err := oc.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	if obj.GetNamespace() != "" {
		t.Errorf("namespace = %q, want none for a cluster-scoped kind", obj.GetNamespace())
	}
	if _, err := fetch(t, base, obj); err != nil {
		t.Errorf("not stored as the cluster-scoped reader: %v", err)
	}
}

func TestUnknownKind(t *testing.T) {
	oc, _, rec := newTestClient(t)
	for _, tc := range []struct{ yaml, want string }{
		{"apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}\n",
			"no kind Gadget in group example.com is served by the API server at apiVersion example.com/v1: install its CRD or fix apiVersion/kind"},
		{"apiVersion: example.com/v2\nkind: Widget\nmetadata: {name: w}\n",
			"no kind Widget in group example.com is served by the API server at apiVersion example.com/v2: install its CRD or fix apiVersion/kind"},
		{"apiVersion: v1\nkind: Secrte\nmetadata: {name: s}\n",
			`no kind Secrte in group "" (core) is served by the API server at apiVersion v1: install its CRD or fix apiVersion/kind`},
	} {
		err := oc.Create(context.Background(), mustObj(t, tc.yaml))
		if err == nil || err.Error() != tc.want {
			t.Errorf("error %v, want %s", err, tc.want)
		}
		if !meta.IsNoMatchError(err) {
			t.Errorf("meta.IsNoMatchError(%v) = false; the RESTMapper's error should unwrap", err)
		}
	}
	if len(rec.creates) != 0 {
		t.Errorf("%d creates sent for unknown kinds", len(rec.creates))
	}
}

func TestSetReplicas(t *testing.T) {
	ctx := context.Background()
	oc, base, rec := newTestClient(t)
	obj := mustObj(t, deploymentYAML)
	if err := oc.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if err := oc.SetReplicas(ctx, obj, 5); err != nil {
		t.Fatal(err)
	}
	if len(rec.patches) != 1 {
		t.Fatalf("%d patches sent, want 1", len(rec.patches))
	}
	p := rec.patches[0]
	if p.typ != types.MergePatchType || p.data != `{"spec":{"replicas":5}}` || p.opts.FieldManager != FieldOwner {
		t.Errorf("patch = %s %s (field manager %q), want a JSON merge patch of spec.replicas by %s", p.typ, p.data, p.opts.FieldManager, FieldOwner)
	}
	if n, _ := DesiredPods(obj); n != 5 {
		t.Errorf("obj's spec.replicas = %d after the patch, want 5", n)
	}
	stored, err := fetch(t, base, obj)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := DesiredPods(stored); n != 5 {
		t.Errorf("stored spec.replicas = %d, want 5", n)
	}

	// A custom resource with spec.replicas is scaled the same way.
	w := mustObj(t, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {replicas: 1}\n")
	if err := oc.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := oc.SetReplicas(ctx, w, 3); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := intAt(w, "spec", "replicas"); r != 3 {
		t.Errorf("Widget spec.replicas = %d, want 3", r)
	}
}

func TestSetReplicasRefused(t *testing.T) {
	oc, _, rec := newTestClient(t)
	for _, tc := range []struct {
		yaml string
		n    int
		want string
	}{
		{"apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: d, namespace: load}\nspec: {}\n", 2,
			"scaling DaemonSet load/d: a DaemonSet has no spec.replicas: scale only Deployments, ReplicaSets, StatefulSets, ReplicationControllers or custom resources with spec.replicas"},
		{"apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: load}\nspec: {}\n", 2,
			"scaling Widget load/w: a Widget has no spec.replicas"},
		{deploymentYAML, -1, "scaling Deployment web-0 to -1 replicas: replicas must not be negative"},
	} {
		err := oc.SetReplicas(context.Background(), mustObj(t, tc.yaml), tc.n)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("error %v, want %s", err, tc.want)
		}
	}
	if len(rec.patches) != 0 {
		t.Errorf("%d patches sent for refused scales", len(rec.patches))
	}
}

func TestApply(t *testing.T) {
	ctx := context.Background()
	oc, base, rec := newTestClient(t)
	obj := mustObj(t, deploymentYAML)
	if err := oc.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if err := oc.SetReplicas(ctx, obj, 4); err != nil {
		t.Fatal(err)
	}

	// The re-rendered template: a new image, and the template's replicas,
	// which the scale above changed.
	updated := mustObj(t, strings.Replace(deploymentYAML, "pause:3.9", "pause:3.10", 1))
	// Without force the API server refuses it: the fields are fleetlet's
	// by its create and its patch (operation Update), another manager than
	// fleetlet's applies. This is why Apply forces.
	unforced := updated.DeepCopy()
	unforced.SetNamespace("load")
	err := base.Apply(ctx, client.ApplyConfigurationFromUnstructured(unforced), client.FieldOwner(FieldOwner))
	if !apierrors.IsConflict(err) {
		t.Fatalf("apply without force: error %v, want a conflict", err)
	}

	if err := oc.Apply(ctx, updated); err != nil {
		t.Fatal(err)
	}
	if len(rec.applies) != 1 {
		t.Fatalf("%d applies sent, want 1", len(rec.applies))
	}
	if o := rec.applies[0]; o.FieldManager != FieldOwner || o.Force == nil || !*o.Force {
		t.Errorf("apply options = field manager %q, force %v; want %s, forced", o.FieldManager, o.Force, FieldOwner)
	}
	if updated.GetNamespace() != "load" {
		t.Errorf("namespace = %q, want the client's", updated.GetNamespace())
	}
	stored, err := fetch(t, base, updated)
	if err != nil {
		t.Fatal(err)
	}
	containers, _, _ := unstructured.NestedSlice(stored.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 || containers[0].(map[string]any)["image"] != "pause:3.10" {
		t.Errorf("stored containers = %v, want the new image", containers)
	}
	if n, _ := DesiredPods(stored); n != 2 {
		t.Errorf("stored replicas = %d, want the template's 2", n)
	}
	var applied bool
	for _, f := range stored.GetManagedFields() {
		if f.Manager == FieldOwner && f.Operation == metav1.ManagedFieldsOperationApply {
			applied = true
		}
	}
	if !applied {
		t.Errorf("managed fields %v have no apply by %s", stored.GetManagedFields(), FieldOwner)
	}
}

func TestGet(t *testing.T) {
	ctx := context.Background()
	oc, base, _ := newTestClient(t)
	obj := mustObj(t, deploymentYAML)
	if err := oc.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	// The controller writes status; Get brings it into the driver's copy.
	stored, err := fetch(t, base, obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(stored.Object, map[string]any{"observedGeneration": int64(1), "replicas": int64(2), "updatedReplicas": int64(2)}, "status"); err != nil {
		t.Fatal(err)
	}
	if err := base.Status().Update(ctx, stored); err != nil {
		t.Fatal(err)
	}
	obj.SetGeneration(1)
	if ok, why := Converged(obj, 2); ok {
		t.Fatalf("Converged before Get = true, %q", why)
	}
	if err := oc.Get(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if ok, why := Converged(obj, 2); !ok {
		t.Errorf("Converged after Get = false, %q; status %v", why, obj.Object["status"])
	}

	missing := mustObj(t, strings.Replace(deploymentYAML, "web-0", "gone", 1))
	if err := oc.Get(ctx, missing); !apierrors.IsNotFound(err) {
		t.Errorf("Get of a missing object: %v, want NotFound", err)
	}
}

func TestDelete(t *testing.T) {
	ctx := context.Background()
	oc, base, rec := newTestClient(t)
	obj := mustObj(t, deploymentYAML)
	if err := oc.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if err := oc.Delete(ctx, obj); err != nil {
		t.Fatal(err)
	}
	if _, err := fetch(t, base, obj); !apierrors.IsNotFound(err) {
		t.Errorf("after Delete: %v, want NotFound", err)
	}
	// Deleting it again, or one never made, is success.
	if err := oc.Delete(ctx, obj); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if err := oc.Delete(ctx, mustObj(t, strings.Replace(deploymentYAML, "web-0", "never", 1))); err != nil {
		t.Errorf("Delete of a missing object: %v", err)
	}
	if len(rec.deletes) != 3 {
		t.Fatalf("%d deletes sent, want 3", len(rec.deletes))
	}
	for _, o := range rec.deletes {
		if o.PropagationPolicy == nil {
			t.Errorf("no propagation policy, want Background")
		} else if *o.PropagationPolicy != metav1.DeletePropagationBackground {
			t.Errorf("propagation %s, want Background", *o.PropagationPolicy)
		}
	}
}

func TestDeleteOtherErrors(t *testing.T) {
	base := fake.NewClientBuilder().WithRESTMapper(testMapper()).WithInterceptorFuncs(interceptor.Funcs{
		Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error {
			return apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web-0", errors.New("RBAC"))
		},
	}).Build()
	oc := NewClientFrom(base)
	oc.Namespace = "load"
	err := oc.Delete(context.Background(), mustObj(t, deploymentYAML))
	if !apierrors.IsForbidden(err) || !strings.HasPrefix(err.Error(), "deleting Deployment load/web-0: ") {
		t.Errorf("error %v, want the Forbidden, wrapped with the object", err)
	}
}
