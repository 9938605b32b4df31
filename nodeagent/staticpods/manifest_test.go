package staticpods

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

const etcdYAML = `apiVersion: v1
kind: Pod
metadata:
  name: etcd
  labels: {component: etcd}
spec:
  hostNetwork: true
  containers:
  - name: etcd
    image: registry.k8s.io/etcd:3.6.0-0
    ports: [{containerPort: 2381}]
    livenessProbe:
      httpGet: {port: 2381, path: /health}
  - name: sidecar
    image: busybox
    resources:
      limits: {cpu: 100m, memory: 64Mi}
  tolerations:
  - {operator: Exists, effect: NoExecute, tolerationSeconds: 30}
  - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
`

// The same pod in JSON: the kubelet reads either.
const etcdJSON = `{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "etcd", "labels": {"component": "etcd"}},
 "spec": {"hostNetwork": true,
  "containers": [
   {"name": "etcd", "image": "registry.k8s.io/etcd:3.6.0-0", "ports": [{"containerPort": 2381}],
    "livenessProbe": {"httpGet": {"port": 2381, "path": "/health"}}},
   {"name": "sidecar", "image": "busybox", "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}],
  "tolerations": [
   {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
   {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]}}`

func mustDecode(t *testing.T, path, data string) *Manifest {
	t.Helper()
	m, err := Decode(path, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustForNode(t *testing.T, m *Manifest, node string) *corev1.Pod {
	t.Helper()
	pod, err := m.ForNode(node)
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func TestManifestForNodeAppliesTheKubeletsDefaults(t *testing.T) {
	m := mustDecode(t, "/etc/kubernetes/manifests/etcd.yaml", etcdYAML)
	if m.Key() != "default/etcd" || m.Name() != "etcd" {
		t.Errorf("key %q name %q, want default/etcd and etcd", m.Key(), m.Name())
	}
	pod := mustForNode(t, m, "Control-Plane-1")

	// applyDefaults: named for the node (lower-cased), bound to it, in
	// the default namespace, its hash as UID and annotation, Pending.
	if pod.Name != "etcd-control-plane-1" || pod.Namespace != "default" || pod.Spec.NodeName != "Control-Plane-1" {
		t.Errorf("name %s/%s node %q", pod.Namespace, pod.Name, pod.Spec.NodeName)
	}
	if len(pod.UID) != 32 || pod.Annotations[ConfigHashAnnotationKey] != string(pod.UID) {
		t.Errorf("UID %q, hash annotation %q: want 32 hex digits, the same", pod.UID, pod.Annotations[ConfigHashAnnotationKey])
	}
	if pod.Status.Phase != corev1.PodPending {
		t.Errorf("phase %q, want Pending", pod.Status.Phase)
	}
	if pod.Labels["component"] != "etcd" {
		t.Errorf("labels %v", pod.Labels)
	}
	// The NoExecute toleration with seconds is replaced by one without;
	// the other toleration stays.
	wantTolerations := []corev1.Toleration{
		{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	if !equalTolerations(pod.Spec.Tolerations, wantTolerations) {
		t.Errorf("tolerations %+v, want %+v", pod.Spec.Tolerations, wantTolerations)
	}

	// The scheme's defaults, as the API server would set them.
	spec := pod.Spec
	if spec.RestartPolicy != corev1.RestartPolicyAlways || spec.DNSPolicy != corev1.DNSClusterFirst ||
		spec.SchedulerName != corev1.DefaultSchedulerName || ptr.Deref(spec.TerminationGracePeriodSeconds, 0) != 30 ||
		spec.SecurityContext == nil || !ptr.Deref(spec.EnableServiceLinks, false) {
		t.Errorf("pod spec defaults missing: %+v", spec)
	}
	etcd, sidecar := spec.Containers[0], spec.Containers[1]
	if etcd.ImagePullPolicy != corev1.PullIfNotPresent || sidecar.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("pull policies %q %q, want IfNotPresent for a tag and Always for latest", etcd.ImagePullPolicy, sidecar.ImagePullPolicy)
	}
	if etcd.TerminationMessagePath != corev1.TerminationMessagePathDefault || etcd.TerminationMessagePolicy != corev1.TerminationMessageReadFile {
		t.Errorf("termination message %q %q", etcd.TerminationMessagePath, etcd.TerminationMessagePolicy)
	}
	if p := etcd.Ports[0]; p.Protocol != corev1.ProtocolTCP || p.HostPort != 2381 {
		t.Errorf("port %+v, want TCP and, on the host network, hostPort 2381", p)
	}
	probe := etcd.LivenessProbe
	if probe.TimeoutSeconds != 1 || probe.PeriodSeconds != 10 || probe.SuccessThreshold != 1 || probe.FailureThreshold != 3 ||
		probe.HTTPGet.Scheme != corev1.URISchemeHTTP || probe.HTTPGet.Path != "/health" {
		t.Errorf("probe defaults: %+v %+v", probe, probe.HTTPGet)
	}
	if req := sidecar.Resources.Requests; req.Cpu().String() != "100m" || req.Memory().String() != "64Mi" {
		t.Errorf("requests %v, want the limits", req)
	}
}

func equalTolerations(a, b []corev1.Toleration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].MatchToleration(&b[i]) || !ptr.Equal(a[i].TolerationSeconds, b[i].TolerationSeconds) {
			return false
		}
	}
	return true
}

// TestManifestUID checks the UID's hash: stable for the same pod, node and
// file, whatever the encoding; different when any of them changes.
func TestManifestUID(t *testing.T) {
	const path = "/etc/kubernetes/manifests/etcd.yaml"
	uid := mustForNode(t, mustDecode(t, path, etcdYAML), "n1").UID
	if again := mustForNode(t, mustDecode(t, path, etcdYAML), "n1").UID; again != uid {
		t.Errorf("decoding the same file again: UID %s, then %s", uid, again)
	}
	if fromJSON := mustForNode(t, mustDecode(t, path, etcdJSON), "n1").UID; fromJSON != uid {
		t.Errorf("the same pod in JSON: UID %s, from YAML %s", fromJSON, uid)
	}
	// Pinned: a change of what is hashed changes every static pod's UID on
	// upgrade, which restarts them all.
	if want := types.UID("19b68c30106b0125153245e60a42943f"); uid != want {
		t.Errorf("UID %s, want %s", uid, want)
	}
	for what, other := range map[string]types.UID{
		"another node":   mustForNode(t, mustDecode(t, path, etcdYAML), "n2").UID,
		"another file":   mustForNode(t, mustDecode(t, "/etc/kubernetes/manifests/etcd2.yaml", etcdYAML), "n1").UID,
		"another image":  mustForNode(t, mustDecode(t, path, strings.Replace(etcdYAML, "3.6.0-0", "3.6.1-0", 1)), "n1").UID,
		"another label":  mustForNode(t, mustDecode(t, path, strings.Replace(etcdYAML, "{component: etcd}", "{component: etcd2}", 1)), "n1").UID,
		"a default made": mustForNode(t, mustDecode(t, path, strings.Replace(etcdYAML, "  hostNetwork: true\n", "  hostNetwork: true\n  restartPolicy: Always\n", 1)), "n1").UID,
	} {
		if what == "a default made" {
			// The hash is of the defaulted pod: spelling a default out
			// changes nothing.
			if other != uid {
				t.Errorf("%s: UID %s, want %s", what, other, uid)
			}
			continue
		}
		if other == uid {
			t.Errorf("%s: the same UID %s", what, uid)
		}
	}

	// A manifest's own UID is kept, and is its hash.
	withUID := mustForNode(t, mustDecode(t, path, strings.Replace(etcdYAML, "  name: etcd\n", "  name: etcd\n  uid: my-uid\n", 1)), "n1")
	if withUID.UID != "my-uid" || withUID.Annotations[ConfigHashAnnotationKey] != "my-uid" {
		t.Errorf("UID %q hash %q, want the manifest's my-uid", withUID.UID, withUID.Annotations[ConfigHashAnnotationKey])
	}
}

func TestManifestErrors(t *testing.T) {
	containers := "containers: [{name: c, image: i}]"
	cases := []struct{ name, data, want string }{
		{"no name", "apiVersion: v1\nkind: Pod\nmetadata: {}\nspec: {" + containers + "}\n", "invalid pod: name is needed for the pod"},
		{"not a pod", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n", "a ConfigMap, not a v1 Pod"},
		{"no kind", "metadata: {name: p}\n", "couldn't parse as pod"},
		{"not YAML", "{{{", "couldn't parse as pod"},
		{"no containers", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {}\n", "invalid pod: spec.containers: Required value"},
		{"bad container name", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: C_1, image: i}]}\n", `spec.containers[0].name: Invalid value: "C_1"`},
		{"service account", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {serviceAccountName: sa, " + containers + "}\n", "static pods may not reference serviceaccounts"},
		{"secret volume", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {volumes: [{name: v, secret: {secretName: s}}], " + containers + "}\n", "static pods may not reference secrets"},
		{"configmap env", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: i, envFrom: [{configMapRef: {name: cm}}]}]}\n", "static pods may not reference configmaps"},
		{"token volume", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {volumes: [{name: v, projected: {sources: [{serviceAccountToken: {path: t}}]}}], " + containers + "}\n", "static pods may not reference serviceaccounts (via projected volumes)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode("/m/p.yaml", []byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "/m/p.yaml: ") {
				t.Errorf("err = %v, want one naming /m/p.yaml and containing %q", err, tc.want)
			}
		})
	}
	// Allowed: host paths, empty dirs, the downward API.
	ok := "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {volumes: [{name: a, hostPath: {path: /etc}}, {name: b}, " +
		"{name: c, downwardAPI: {items: [{path: podname, fieldRef: {fieldPath: metadata.name}}]}}], " + containers + "}\n"
	m := mustDecode(t, "/m/ok.yaml", ok)
	pod := mustForNode(t, m, "n1")
	if pod.Spec.Volumes[1].EmptyDir == nil || *pod.Spec.Volumes[0].HostPath.Type != corev1.HostPathUnset ||
		pod.Spec.Volumes[2].DownwardAPI.Items[0].FieldRef.APIVersion != "v1" {
		t.Errorf("volume defaults: %+v", pod.Spec.Volumes)
	}
}

func TestFromPod(t *testing.T) {
	inline := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "kube-system"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "registry.k8s.io/pause:3.10"}}},
	}
	m, err := FromPod("nodePools[a].staticPods[0]", inline)
	if err != nil {
		t.Fatal(err)
	}
	pod := mustForNode(t, m, "n1")
	if pod.Name != "agent-n1" || pod.Namespace != "kube-system" || pod.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("pod %s/%s restart %q", pod.Namespace, pod.Name, pod.Spec.RestartPolicy)
	}
	if inline.Spec.RestartPolicy != "" {
		t.Error("FromPod defaulted the caller's pod")
	}
	// As the same pod in a file at that path would be.
	file := mustDecode(t, "nodePools[a].staticPods[0]",
		"apiVersion: v1\nkind: Pod\nmetadata: {name: agent, namespace: kube-system}\nspec: {containers: [{name: a, image: registry.k8s.io/pause:3.10}]}\n")
	if uid := mustForNode(t, file, "n1").UID; uid != pod.UID {
		t.Errorf("the pod from a file has UID %s, inline %s", uid, pod.UID)
	}
	inline.Kind, inline.APIVersion = "Deployment", "apps/v1"
	if _, err := FromPod("p", inline); err == nil || !strings.Contains(err.Error(), "want v1 Pod") {
		t.Errorf("a Deployment: err = %v", err)
	}
}

func TestImageTag(t *testing.T) {
	for image, want := range map[string]string{
		"busybox": "latest", "busybox:1.36": "1.36", "localhost:5000/app": "latest", "localhost:5000/app:v2": "v2",
		"registry.k8s.io/pause@sha256:abc": "", "registry.k8s.io/pause:3.10@sha256:abc": "3.10", "busybox:latest": "latest",
	} {
		if got := imageTag(image); got != want {
			t.Errorf("imageTag(%q) = %q, want %q", image, got, want)
		}
	}
}
