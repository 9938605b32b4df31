package manifests

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// rendered is a base's objects, by kind and then name.
type rendered map[string]map[string]any

// render runs kustomize on a base as `kubectl apply -k` would and decodes
// every object strictly into its Go type, so that a misspelt field fails.
func render(t *testing.T, dir string) rendered {
	t.Helper()
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out := rendered{}
	for _, r := range resources.Resources() {
		data, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		var obj any
		switch r.GetKind() {
		case "Namespace":
			obj = &corev1.Namespace{}
		case "ConfigMap":
			obj = &corev1.ConfigMap{}
		case "Secret":
			obj = &corev1.Secret{}
		case "Service":
			obj = &corev1.Service{}
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "StatefulSet":
			obj = &appsv1.StatefulSet{}
		case "ClusterRole":
			obj = &rbacv1.ClusterRole{}
		case "ClusterRoleBinding":
			obj = &rbacv1.ClusterRoleBinding{}
		default:
			t.Errorf("%s: %s %s is of a kind this test does not check; add it", dir, r.GetKind(), r.GetName())
			continue
		}
		if err := yaml.UnmarshalStrict(data, obj); err != nil {
			t.Errorf("%s: %s %s does not parse: %v", dir, r.GetKind(), r.GetName(), err)
			continue
		}
		if out[r.GetKind()] == nil {
			out[r.GetKind()] = map[string]any{}
		}
		out[r.GetKind()][r.GetName()] = obj
	}
	return out
}

// get is the object of kind and name in r, or a fatal error.
func get[T any](t *testing.T, r rendered, kind, name string) T {
	t.Helper()
	obj, ok := r[kind][name]
	if !ok {
		var names []string
		for n := range r[kind] {
			names = append(names, n)
		}
		t.Fatalf("no %s %s; the %ss are %q", kind, name, kind, names)
	}
	return obj.(T)
}

func TestShards(t *testing.T) {
	r := render(t, "../../shards")
	get[*corev1.Namespace](t, r, "Namespace", "fleetlet")
	for kind, objs := range r {
		for name, obj := range objs {
			if ns := namespaceOf(obj); kind != "Namespace" && ns != "fleetlet" {
				t.Errorf("%s %s in namespace %q, want fleetlet", kind, name, ns)
			}
		}
	}

	// The profile: kustomize names the ConfigMap fleetlet-profile-<hash>.
	if len(r["ConfigMap"]) != 1 {
		t.Fatalf("%d ConfigMaps, want one (fleetlet-profile)", len(r["ConfigMap"]))
	}
	var cm *corev1.ConfigMap
	for _, o := range r["ConfigMap"] {
		cm = o.(*corev1.ConfigMap)
	}
	if !strings.HasPrefix(cm.Name, "fleetlet-profile-") {
		t.Errorf("ConfigMap %s, want fleetlet-profile-<hash>", cm.Name)
	}
	var profile struct {
		Name      string `json:"name"`
		NodePools []struct {
			Name  string `json:"name"`
			Count int    `json:"count"`
		} `json:"nodePools"`
		Phases []any `json:"phases"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["profile.yaml"]), &profile); err != nil {
		t.Fatalf("profile.yaml does not parse: %v", err)
	}
	nodes := 0
	for _, p := range profile.NodePools {
		nodes += p.Count
	}
	// A profile loads only with a name and a phase, even where a shard
	// ignores its phases.
	if profile.Name == "" || len(profile.NodePools) == 0 || nodes == 0 || len(profile.Phases) == 0 {
		t.Errorf("profile.yaml: name %q, %d node pools of %d nodes, %d phases: want a name, nodes and a phase", profile.Name, len(profile.NodePools), nodes, len(profile.Phases))
	}

	sts := get[*appsv1.StatefulSet](t, r, "StatefulSet", "fleetlet-shard")
	spec := sts.Spec
	if spec.Replicas == nil || *spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", spec.Replicas)
	}
	if spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q, want Parallel", spec.PodManagementPolicy)
	}
	if spec.ServiceName != "fleetlet-shards" {
		t.Errorf("serviceName %q, want fleetlet-shards", spec.ServiceName)
	}
	pod := spec.Template.Spec
	if !matches(spec.Selector.MatchLabels, spec.Template.Labels) {
		t.Errorf("selector %v does not select the pods, labelled %v", spec.Selector.MatchLabels, spec.Template.Labels)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g != 30 {
		t.Errorf("terminationGracePeriodSeconds %v, want 30", g)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != "fleetlet.io/fleetlet:latest" || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %s pulled %s, want fleetlet.io/fleetlet:latest IfNotPresent", c.Image, c.ImagePullPolicy)
	}
	if !slices.Equal(c.Args[:2], []string{"fleet", "--shard"}) {
		t.Errorf("args %q, want fleet --shard first", c.Args)
	}

	// The environment from the downward API.
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		case e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil:
			env[e.Name] = e.ValueFrom.ResourceFieldRef.Resource
		default:
			env[e.Name] = e.Value
		}
	}
	for name, want := range map[string]string{
		"FLEETLET_SHARD_ORDINAL": "metadata.labels['apps.kubernetes.io/pod-index']",
		"FLEETLET_POD_NAME":      "metadata.name",
		"FLEETLET_POD_IP":        "status.podIP",
	} {
		if env[name] != want {
			t.Errorf("env %s from %q, want %q", name, env[name], want)
		}
	}

	// The files the args name are where the volumes are mounted.
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	volumeAt := func(file string) (corev1.Volume, string) {
		t.Helper()
		m, ok := mounts[path.Dir(file)]
		if !ok {
			t.Fatalf("nothing is mounted at %s, where %s is", path.Dir(file), file)
		}
		if !m.ReadOnly {
			t.Errorf("%s is mounted writable", m.MountPath)
		}
		return volumes[m.Name], path.Base(file)
	}
	kubeconfig, profilePath := arg(t, c.Args, "--kubeconfig"), arg(t, c.Args, "--profile")
	if v, file := volumeAt(kubeconfig); v.Secret == nil || v.Secret.SecretName != "fleetlet-target" ||
		!slices.Contains(v.Secret.Items, corev1.KeyToPath{Key: "kubeconfig", Path: file}) {
		t.Errorf("--kubeconfig %s is not the Secret fleetlet-target's key kubeconfig: volume %+v", kubeconfig, v.VolumeSource)
	}
	if v, file := volumeAt(profilePath); v.ConfigMap == nil || v.ConfigMap.Name != cm.Name || cm.Data[file] == "" {
		t.Errorf("--profile %s is not the ConfigMap %s's key %s: volume %+v", profilePath, cm.Name, file, v.VolumeSource)
	}
	if m, ok := mounts["/tmp"]; !ok || volumes[m.Name].EmptyDir == nil || m.ReadOnly {
		t.Errorf("/tmp is not a writable emptyDir: mount %+v", m)
	}

	// Probes, ports, privileges, resources.
	var shardPort *corev1.ContainerPort
	for i, p := range c.Ports {
		if p.Name == "shard" {
			shardPort = &c.Ports[i]
		}
	}
	if shardPort == nil || shardPort.ContainerPort != 7070 {
		t.Errorf("container port shard %+v, want 7070", shardPort)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port != intstr.FromString("shard") {
		t.Errorf("readinessProbe %+v, want httpGet /healthz on port shard", p)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v, want a read-only root, no privilege escalation, all capabilities dropped", sc)
	}
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("pod securityContext %+v, want runAsNonRoot", psc)
	}
	// Measured: 1.5 MiB per idle agent and 60 MiB per pod; twice the agents'
	// share at the start-up.
	mib := func(n float64) resource.Quantity { return *resource.NewQuantity(int64(n*(1<<20)), resource.BinarySI) }
	idle, peak := mib(float64(nodes)*1.5+60), mib(float64(nodes)*3+60)
	req, limit := c.Resources.Requests[corev1.ResourceMemory], c.Resources.Limits[corev1.ResourceMemory]
	if req.Cmp(idle) < 0 || limit.Cmp(peak) < 0 {
		t.Errorf("memory request %s and limit %s for %d nodes: want at least %s (idle) and %s (start-up)", &req, &limit, nodes, &idle, &peak)
	}
	if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
		t.Errorf("no CPU request")
	}

	svc := get[*corev1.Service](t, r, "Service", "fleetlet-shards")
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("Service clusterIP %q publishNotReadyAddresses %v, want None and true", svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "shard" || svc.Spec.Ports[0].Port != 7070 {
		t.Errorf("Service ports %+v, want 7070 named shard", svc.Spec.Ports)
	}
	if !matches(svc.Spec.Selector, spec.Template.Labels) {
		t.Errorf("Service selector %v does not select the shards, labelled %v", svc.Spec.Selector, spec.Template.Labels)
	}
}

func TestTarget(t *testing.T) {
	r := render(t, "../../target")
	ns := get[*corev1.Namespace](t, r, "Namespace", "fleetlet")
	// One cluster may be host and target: the two Namespaces must agree, or
	// each apply would undo the other's labels.
	if host := get[*corev1.Namespace](t, render(t, "../../shards"), "Namespace", "fleetlet"); fmt.Sprint(host.Labels) != fmt.Sprint(ns.Labels) {
		t.Errorf("the Namespace's labels: %v in deploy/shards, %v in deploy/target", host.Labels, ns.Labels)
	}
	sa := get[*corev1.ServiceAccount](t, r, "ServiceAccount", "fleetlet-shard")
	if sa.Namespace != "fleetlet" {
		t.Errorf("ServiceAccount in %q, want fleetlet", sa.Namespace)
	}
	var token *corev1.Secret
	for _, o := range r["Secret"] {
		if s := o.(*corev1.Secret); s.Type == corev1.SecretTypeServiceAccountToken {
			token = s
		}
	}
	if token == nil || token.Namespace != "fleetlet" || token.Annotations[corev1.ServiceAccountNameKey] != "fleetlet-shard" {
		t.Errorf("no service-account-token Secret for fleetlet/fleetlet-shard: %+v", token)
	}

	crb := get[*rbacv1.ClusterRoleBinding](t, r, "ClusterRoleBinding", "fleetlet:shard")
	if crb.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fleetlet:shard"}) {
		t.Errorf("ClusterRoleBinding's roleRef %+v, want the ClusterRole fleetlet:shard", crb.RoleRef)
	}
	if !slices.Contains(crb.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "fleetlet-shard", Namespace: "fleetlet"}) {
		t.Errorf("ClusterRoleBinding's subjects %+v, want the ServiceAccount fleetlet/fleetlet-shard", crb.Subjects)
	}

	role := get[*rbacv1.ClusterRole](t, r, "ClusterRole", "fleetlet:shard")
	// What the agents do as kubelets and kube-proxies, and the shard as
	// itself (its lease, its pre-flight check).
	for _, g := range []struct {
		group, resource string
		verbs           string
	}{
		{"", "nodes", "get list watch create update patch delete"},
		{"", "nodes/status", "patch update"},
		{"coordination.k8s.io", "leases", "get list watch create update patch delete"},
		{"", "pods", "get list watch create delete"},
		{"", "pods/status", "patch update"},
		{"", "events", "create patch update"},
		{"events.k8s.io", "events", "create patch update"},
		{"", "serviceaccounts/token", "create"},
		{"", "configmaps", "get list watch"},
		{"", "secrets", "get list watch"},
		{"", "services", "get list watch"},
		{"", "persistentvolumeclaims", "get"},
		{"", "persistentvolumes", "get"},
		{"discovery.k8s.io", "endpointslices", "list watch"},
		{"networking.k8s.io", "servicecidrs", "list watch"},
		{"node.k8s.io", "runtimeclasses", "list watch"},
		{"storage.k8s.io", "csidrivers", "list watch"},
		{"certificates.k8s.io", "podcertificaterequests", "list watch"},
		{"certificates.k8s.io", "certificatesigningrequests", "create get list watch"},
		{"authentication.k8s.io", "tokenreviews", "create"},
		{"authorization.k8s.io", "subjectaccessreviews", "create"},
		{"authorization.k8s.io", "selfsubjectaccessreviews", "create"},
	} {
		for verb := range strings.FieldsSeq(g.verbs) {
			if !grants(role.Rules, g.group, g.resource, verb) {
				t.Errorf("the ClusterRole does not grant %s on %s", verb, groupResource(g.group, g.resource))
			}
		}
	}
}

// grants says whether rules allow verb on group's resource, as the RBAC
// authorizer decides it (no resourceNames: every rule here is for all names).
func grants(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	has := func(list []string, s string) bool {
		return slices.Contains(list, s) || slices.Contains(list, rbacv1.ResourceAll)
	}
	for _, r := range rules {
		if has(r.APIGroups, group) && has(r.Resources, resource) && has(r.Verbs, verb) && len(r.ResourceNames) == 0 {
			return true
		}
	}
	return false
}

func groupResource(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}

// arg is the value after flag in args.
func arg(t *testing.T, args []string, flag string) string {
	t.Helper()
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("args %q have no %s VALUE", args, flag)
	}
	return args[i+1]
}

// matches says whether selector selects labels.
func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func namespaceOf(obj any) string {
	if o, ok := obj.(interface{ GetNamespace() string }); ok {
		return o.GetNamespace()
	}
	return ""
}
