package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
)

// NodeBootstrapGroup is the group kubeadm gives the bootstrap tokens of
// `kubeadm join`, which its RBAC lets create and auto-approve node CSRs.
const NodeBootstrapGroup = "system:bootstrappers:kubeadm:default-node-token"

// NodeBootstrapRBAC is kubeadm's RBAC for the kubelet's TLS bootstrap
// (cmd/kubeadm/app/phases/bootstraptoken/node): the bootstrap group may
// create CSRs (system:node-bootstrapper), the controller-manager's approver
// approves its node client CSRs (…:nodeclient), and nodes' renewals of
// their own (…:selfnodeclient).
func NodeBootstrapRBAC(group string) []*rbacv1.ClusterRoleBinding {
	binding := func(name, role string, subject rbacv1.Subject) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{subject},
		}
	}
	bootstrappers := rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: group}
	nodes := rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"}
	return []*rbacv1.ClusterRoleBinding{
		binding("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", bootstrappers),
		binding("kubeadm:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", bootstrappers),
		binding("kubeadm:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", nodes),
	}
}

// CreateBootstrapToken stores a new bootstrap token (a Secret
// bootstrap-token-<id> in kube-system, as `kubeadm token create` makes)
// that authenticates as system:bootstrap:<id> in system:bootstrappers and
// groups, and expires at expires (never if zero). It returns the token,
// "<id>.<secret>".
func CreateBootstrapToken(ctx context.Context, client kubernetes.Interface, expires time.Time, groups ...string) (string, error) {
	token, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return "", err
	}
	id, secret, _ := strings.Cut(token, ".")
	data := map[string][]byte{
		bootstrapapi.BootstrapTokenIDKey:               []byte(id),
		bootstrapapi.BootstrapTokenSecretKey:           []byte(secret),
		bootstrapapi.BootstrapTokenUsageAuthentication: []byte("true"),
		bootstrapapi.BootstrapTokenUsageSigningKey:     []byte("true"),
		bootstrapapi.BootstrapTokenDescriptionKey:      []byte("fleetlet: TLS bootstrap of the fleet's nodes"),
	}
	if len(groups) > 0 {
		data[bootstrapapi.BootstrapTokenExtraGroupsKey] = []byte(strings.Join(groups, ","))
	}
	if !expires.IsZero() {
		data[bootstrapapi.BootstrapTokenExpirationKey] = []byte(expires.UTC().Format(time.RFC3339))
	}
	_, err = client.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: bootstraputil.BootstrapTokenSecretName(id), Namespace: metav1.NamespaceSystem},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		Data:       data,
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("controlplane: bootstrap token: %w", err)
	}
	return token, nil
}

// WriteBootstrapKubeconfig writes to path a kubeconfig for this API server
// that authenticates with token: what a node's --bootstrap-kubeconfig holds.
func (cp *ControlPlane) WriteBootstrapKubeconfig(path, token string) error {
	const name = "fleetlet"
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{name: {Server: cp.apiserverURL, CertificateAuthorityData: cp.pki.ca.certPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"tls-bootstrap-token-user": {Token: token}},
		Contexts:       map[string]*clientcmdapi.Context{name: {Cluster: name, AuthInfo: "tls-bootstrap-token-user"}},
		CurrentContext: name,
	}
	if err := clientcmd.WriteToFile(cfg, path); err != nil {
		return fmt.Errorf("controlplane: write bootstrap kubeconfig %s: %w", path, err)
	}
	return nil
}

// setUpNodeBootstrap prepares the TLS bootstrap of nodes as kubeadm does:
// its RBAC, and one token (no expiry: the control plane lives as long as
// the run) in a bootstrap kubeconfig in Dir.
func (cp *ControlPlane) setUpNodeBootstrap(ctx context.Context) error {
	client, err := kubernetes.NewForConfig(cp.AdminRESTConfig())
	if err != nil {
		return err
	}
	for _, b := range NodeBootstrapRBAC(NodeBootstrapGroup) {
		if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("controlplane: node bootstrap RBAC %s: %w", b.Name, err)
		}
	}
	token, err := CreateBootstrapToken(ctx, client, time.Time{}, NodeBootstrapGroup)
	if err != nil {
		return err
	}
	cp.bootstrapKubeconfig = filepath.Join(cp.cfg.Dir, "bootstrap.kubeconfig")
	cp.bootstrapToken = token
	return cp.WriteBootstrapKubeconfig(cp.bootstrapKubeconfig, token)
}

// BootstrapKubeconfig is the path of the bootstrap kubeconfig of the
// control plane's token, for nodes' TLS bootstrap.
func (cp *ControlPlane) BootstrapKubeconfig() string { return cp.bootstrapKubeconfig }

// BootstrapRESTConfig is the rest config of the control plane's bootstrap
// token: a new copy each call.
func (cp *ControlPlane) BootstrapRESTConfig() *rest.Config {
	return &rest.Config{
		Host:            cp.apiserverURL,
		BearerToken:     cp.bootstrapToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: bytes.Clone(cp.pki.ca.certPEM)},
	}
}

// Dir is the control plane's run directory (Config.Dir).
func (cp *ControlPlane) Dir() string { return cp.cfg.Dir }
