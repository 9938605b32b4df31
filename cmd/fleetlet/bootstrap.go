package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/spf13/viper"
	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"github.com/fleetlet/fleetlet/nodeagent/certificate"
)

// checkBootstrapFlags rejects --bootstrap-kubeconfig without --kubeconfig or
// --cert-dir, a bootstrap kubeconfig that does not load or holds no token,
// and a --cert-dir that cannot be written.
func checkBootstrapFlags(v *viper.Viper) error {
	path, dir := v.GetString("bootstrap-kubeconfig"), v.GetString("cert-dir")
	if path != "" {
		if kubeconfigPath(v) == "" {
			return fmt.Errorf("--bootstrap-kubeconfig %s needs --kubeconfig: the embedded control plane bootstraps its nodes with its own token; drop the flag or name the cluster", path)
		}
		if dir == "" {
			return fmt.Errorf("--bootstrap-kubeconfig %s needs --cert-dir: the directory where each node keeps the certificate it gets, so that a restart reuses it", path)
		}
		cfg, err := loadKubeconfig(path)
		if err != nil {
			return fmt.Errorf("--bootstrap-kubeconfig: %w", err)
		}
		if cfg.BearerToken == "" && cfg.BearerTokenFile == "" {
			return fmt.Errorf("--bootstrap-kubeconfig %s holds no token: a TLS bootstrap authenticates with a bootstrap token (kubeadm token create --print-join-command gives one)", path)
		}
	}
	if dir != "" {
		if err := checkCertDir(dir); err != nil {
			return err
		}
	}
	return nil
}

// checkCertDir makes dir if it is missing and checks that it can be
// written, before anything starts.
func checkCertDir(dir string) error {
	if err := certificate.CheckWritable(dir); err != nil {
		var pathErr *fs.PathError
		if errors.As(err, &pathErr) {
			err = pathErr.Err
		}
		if _, statErr := os.Stat(dir); statErr != nil {
			return fmt.Errorf("--cert-dir %s cannot be made (%v); pass a directory this user may write", dir, err)
		}
		return fmt.Errorf("--cert-dir %s is not writable (%v); pass a directory this user may write", dir, err)
	}
	return nil
}

// nodeCertificates hands out the nodes' client certificates, each in a
// directory of its own under dir, bootstrapped with bootstrap's token.
type nodeCertificates struct {
	ctx       context.Context
	dir       string
	bootstrap *rest.Config
	// source names the bootstrap kubeconfig in messages.
	source string
	// wrap wraps the CSR requests' transports: the run counts them.
	wrap transport.WrapperFunc

	// tokenChecked makes the first node without a certificate check the
	// bootstrap token, for all of them: a token that cannot work is then
	// one line, not a fleet of nodes waiting five minutes. Nodes that all
	// have certificates never ask.
	tokenChecked sync.Once
	tokenErr     error
}

// forNode is the fleet's ClientCertificate: node name's certificate, from
// its directory if it holds a valid one.
func (n *nodeCertificates) forNode(name string) (*certificate.ClientCertificate, error) {
	c, err := certificate.New(certificate.Config{NodeName: name, Dir: filepath.Join(n.dir, name), Bootstrap: n.bootstrap, Wrap: n.wrap})
	if err != nil {
		return nil, err
	}
	if c.Current() == nil {
		n.tokenChecked.Do(func() { n.tokenErr = checkBootstrapToken(n.ctx, n.bootstrap, n.source) })
		if n.tokenErr != nil {
			return nil, n.tokenErr
		}
	}
	return c, nil
}

// checkBootstrapToken asks the API server, with the bootstrap token, what
// a node's TLS bootstrap needs: that the token authenticates, that it may
// create CSRs, and that the controller-manager's approver will approve its
// node client CSRs. Each failure is one line naming what is missing.
func checkBootstrapToken(ctx context.Context, cfg *rest.Config, source string) error {
	client, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return fmt.Errorf("bootstrap kubeconfig %s: %w", source, err)
	}
	for _, need := range []struct {
		subresource, fix string
	}{
		{"", "bind its group to ClusterRole system:node-bootstrapper (kubeadm's binding kubeadm:kubelet-bootstrap; see the README)"},
		{"nodeclient", "the controller-manager's CSR approver would not approve the nodes' CSRs; bind its group to ClusterRole system:certificates.k8s.io:certificatesigningrequests:nodeclient (kubeadm's kubeadm:node-autoapprove-bootstrap)"},
	} {
		review, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: certificatesv1.GroupName, Resource: "certificatesigningrequests", Subresource: need.subresource, Verb: "create",
			}},
		}, metav1.CreateOptions{})
		switch {
		case apierrors.IsUnauthorized(err):
			return fmt.Errorf("bootstrap kubeconfig %s: the API server does not accept its token (401 Unauthorized): it is expired, deleted or mistyped; make a new one (kubeadm token create) and put it in the kubeconfig", source)
		case err != nil:
			return fmt.Errorf("bootstrap kubeconfig %s: asking the API server what its token may do: %v", source, err)
		case !review.Status.Allowed:
			what := "certificatesigningrequests"
			if need.subresource != "" {
				what += "/" + need.subresource
			}
			return fmt.Errorf("bootstrap token of %s may not create %s (certificates.k8s.io): %s", source, what, need.fix)
		}
	}
	return nil
}
