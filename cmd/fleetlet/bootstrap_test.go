//go:build integration

package main

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetlet/fleetlet/controlplane"
	"github.com/fleetlet/fleetlet/fleet"
	"github.com/fleetlet/fleetlet/loadprofiles"
)

// TestTLSBootstrap runs a fleet through the kubelet's TLS bootstrap on a
// control plane of its own whose signer issues 3-minute certificates: each
// node's CSR is made with the bootstrap token for system:node:<name>,
// approved and signed by the controller-manager, and the node is Ready as
// that identity; each node then rotates its certificate (a CSR of its own
// identity) and stays Ready; a restart with the same names asks for
// nothing; the kubelet API refuses a caller the API server's
// SubjectAccessReview denies; and bad bootstrap tokens are one line each.
func TestTLSBootstrap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cp, err := controlplane.Start(ctx, controlplane.Config{
		BinDir: binDir(t), Dir: filepath.Join(dir, "controlplane"),
		ExtraArgs: map[string][]string{controlplane.ComponentControllerManager: {"--cluster-signing-duration=3m"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cp.Stop() }()
	admin, err := kubernetes.NewForConfig(cp.AdminRESTConfig())
	if err != nil {
		t.Fatal(err)
	}

	const nodes = 5
	profile := &loadprofiles.Profile{Name: "bootstrap", NodePools: []loadprofiles.NodePool{{Name: "pool", Count: nodes}}}
	profile.Default()
	certDir := filepath.Join(dir, "certs")
	start := func() *session {
		t.Helper()
		opts, err := optionsFrom(testSettings(t, criInProc), profile, dir)
		if err != nil {
			t.Fatal(err)
		}
		opts.ControlPlane, opts.CertDir = cp, certDir
		s := newSession(opts)
		if err := s.Start(ctx); err != nil {
			_ = s.Close()
			t.Fatal(err)
		}
		return s
	}
	csrs := func() []certificatesv1.CertificateSigningRequest {
		t.Helper()
		list, err := admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return list.Items
	}

	s := start()
	names := s.fleet.NodeNames()
	t.Run("a CSR per node from the bootstrap token, approved and signed", func(t *testing.T) {
		for _, c := range csrs() {
			if !strings.HasPrefix(c.Spec.Username, "system:bootstrap:") {
				t.Errorf("CSR %s was made by %s, want the bootstrap token's user", c.Name, c.Spec.Username)
			}
			if c.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || len(c.Status.Certificate) == 0 {
				t.Errorf("CSR %s: signer %s, %d bytes of certificate", c.Name, c.Spec.SignerName, len(c.Status.Certificate))
			}
			approved := slices.ContainsFunc(c.Status.Conditions, func(cond certificatesv1.CertificateSigningRequestCondition) bool {
				return cond.Type == certificatesv1.CertificateApproved && cond.Reason == "AutoApproved"
			})
			if !approved {
				t.Errorf("CSR %s was not auto-approved: %v", c.Name, c.Status.Conditions)
			}
		}
		if total := len(csrs()); total != nodes {
			t.Errorf("%d CSRs for %d nodes", total, nodes)
		}
		for _, n := range names {
			if _, err := os.Stat(filepath.Join(certDir, n, "kubelet-client-current.pem")); err != nil {
				t.Errorf("node %s kept no certificate: %v", n, err)
			}
		}
	})

	t.Run("the kubelet API refuses what SubjectAccessReview denies", func(t *testing.T) {
		// A service account may authenticate but has no nodes/stats.
		sa, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "no-node-access"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tok, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node, err := admin.CoreV1().Nodes().Get(ctx, names[0], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		url := "https://" + net.JoinHostPort(node.Status.Addresses[0].Address, strconv.Itoa(int(node.Status.DaemonEndpoints.KubeletEndpoint.Port))) + "/stats/summary"
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+tok.Status.Token)
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET %s as a service account without nodes/stats: %s, want 403", url, resp.Status)
		}
	})

	t.Run("every node rotates its certificate and stays Ready", func(t *testing.T) {
		// Backdated 5 min, a 3-minute certificate lives 8 min and is
		// rotated at 70-90 % of that: 0.6 to 2.2 min after it was issued.
		rotated := map[string]bool{}
		err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 5*time.Minute, true, func(context.Context) (bool, error) {
			for _, c := range csrs() {
				if name, ok := strings.CutPrefix(c.Spec.Username, "system:node:"); ok && len(c.Status.Certificate) > 0 {
					rotated[name] = true
				}
			}
			return len(rotated) == nodes, nil
		})
		if err != nil {
			t.Fatalf("%d of %d nodes rotated their certificates within 5 min: %v", len(rotated), nodes, rotated)
		}
		// The rotation's check (every 10 s) closes the old connections;
		// each node must then renew its lease on a new one, presenting the
		// new certificate.
		rotatedAt := time.Now()
		renewed := map[string]bool{}
		err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
			for _, n := range names {
				l, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n, metav1.GetOptions{})
				if err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(rotatedAt.Add(15*time.Second)) {
					renewed[n] = true
				}
			}
			return len(renewed) == nodes, nil
		})
		if err != nil {
			t.Fatalf("%d of %d nodes renewed their leases after the rotation: %v", len(renewed), nodes, renewed)
		}
		if err := fleet.WaitForNodesReady(ctx, admin, names, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	})

	if err := s.Close(); err != nil {
		t.Errorf("closing the session: %v", err)
	}
	t.Run("a restart reuses the certificates", func(t *testing.T) {
		before := len(csrs())
		s := start()
		defer func() { _ = s.Close() }()
		if after := len(csrs()); after != before {
			t.Errorf("the restarted fleet made %d CSRs, want none", after-before)
		}
	})

	t.Run("bad bootstrap tokens", func(t *testing.T) {
		expired, err := controlplane.CreateBootstrapToken(ctx, admin, time.Now().Add(-time.Minute), controlplane.NodeBootstrapGroup)
		if err != nil {
			t.Fatal(err)
		}
		unbound, err := controlplane.CreateBootstrapToken(ctx, admin, time.Time{}, "system:bootstrappers:not-bound")
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ token, want string }{
			{expired, "does not accept its token (401 Unauthorized)"},
			{unbound, "may not create certificatesigningrequests (certificates.k8s.io): bind its group to ClusterRole system:node-bootstrapper"},
		} {
			path := filepath.Join(t.TempDir(), "bootstrap.kubeconfig")
			if err := cp.WriteBootstrapKubeconfig(path, tc.token); err != nil {
				t.Fatal(err)
			}
			v := testSettings(t, criInProc)
			v.Set("kubeconfig", cp.AdminKubeconfig())
			v.Set("bootstrap-kubeconfig", path)
			v.Set("cert-dir", filepath.Join(t.TempDir(), "certs"))
			v.Set("node-prefix", "bad-token-")
			opts, err := optionsFrom(v, profile, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			s := newSession(opts)
			err = s.Start(ctx)
			_ = s.Close()
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("a fleet with token %s: %v, want one line saying %q", tc.token[:6], err, tc.want)
			}
		}
	})
}
