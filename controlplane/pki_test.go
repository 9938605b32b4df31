package controlplane

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("not a PEM certificate: %q", certPEM)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatalf("parse certificate: %v", err)
	}
	return cert
}

func verify(t *testing.T, ca *certAuthority, cert *x509.Certificate, usage x509.ExtKeyUsage, dnsName string) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: dnsName, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		t.Errorf("certificate %q does not verify for %q: %v", cert.Subject.CommonName, dnsName, err)
	}
}

func TestAPIServerServingCertificate(t *testing.T) {
	ca, err := newCA("test-ca", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	serviceIP, err := firstServiceIP("10.96.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.issue(apiserverServingSpec(serviceIP), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(pair.cert, pair.key); err != nil {
		t.Fatalf("key does not match certificate: %v", err)
	}
	cert := parseCert(t, pair.cert)
	for _, name := range []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "127.0.0.1", "10.96.0.1"} {
		verify(t, ca, cert, x509.ExtKeyUsageServerAuth, name)
	}
	var ips []string
	for _, ip := range cert.IPAddresses {
		ips = append(ips, ip.String())
	}
	if want := []string{"127.0.0.1", "10.96.0.1"}; !slices.Equal(ips, want) {
		t.Errorf("IP SANs = %v, want %v", ips, want)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("serving certificate also verifies as a client certificate")
	}
}

func TestClientCertificates(t *testing.T) {
	dir := t.TempDir()
	p, err := writePKI(dir, net.IPv4(10, 96, 0, 1), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		pair     pemPair
		wantCN   string
		wantOrgs []string
	}{
		{"admin", p.adminClient, "fleetlet-admin", []string{"system:masters"}},
		{"scheduler", p.schedulerClient, "system:kube-scheduler", nil},
		{"controller-manager", p.controllerClient, "system:kube-controller-manager", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cert := parseCert(t, tt.pair.cert)
			if cert.Subject.CommonName != tt.wantCN || !slices.Equal(cert.Subject.Organization, tt.wantOrgs) {
				t.Errorf("subject CN=%q O=%v, want CN=%q O=%v", cert.Subject.CommonName, cert.Subject.Organization, tt.wantCN, tt.wantOrgs)
			}
			verify(t, p.ca, cert, x509.ExtKeyUsageClientAuth, "")
			if _, err := tls.X509KeyPair(tt.pair.cert, tt.pair.key); err != nil {
				t.Errorf("key does not match certificate: %v", err)
			}
		})
	}

	kubeletClient, err := os.ReadFile(p.kubeletClient.cert)
	if err != nil {
		t.Fatal(err)
	}
	if cert := parseCert(t, kubeletClient); !slices.Equal(cert.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("apiserver-kubelet-client O=%v, want [system:masters]", cert.Subject.Organization)
	}

	// Only the front-proxy CA vouches for the front-proxy client: a node's
	// certificate from the cluster CA must never pass as the front proxy.
	frontProxyCAPEM, err := os.ReadFile(p.frontProxyCA.cert)
	if err != nil {
		t.Fatal(err)
	}
	frontProxyClientPEM, err := os.ReadFile(p.frontProxyClient.cert)
	if err != nil {
		t.Fatal(err)
	}
	frontProxyCA, frontProxyClient := parseCert(t, frontProxyCAPEM), parseCert(t, frontProxyClientPEM)
	if frontProxyClient.Subject.CommonName != frontProxyClientName {
		t.Errorf("front-proxy client CN=%q, want %q", frontProxyClient.Subject.CommonName, frontProxyClientName)
	}
	verify(t, &certAuthority{cert: frontProxyCA}, frontProxyClient, x509.ExtKeyUsageClientAuth, "")
	if frontProxyCA.Equal(p.ca.cert) {
		t.Error("front-proxy CA is the cluster CA")
	}

	for _, serving := range []filePair{p.schedulerServing, p.controllerServing} {
		certPEM, err := os.ReadFile(serving.cert)
		if err != nil {
			t.Fatal(err)
		}
		verify(t, p.ca, parseCert(t, certPEM), x509.ExtKeyUsageServerAuth, "127.0.0.1")
		if _, err := tls.LoadX509KeyPair(serving.cert, serving.key); err != nil {
			t.Errorf("%s: %v", serving.cert, err)
		}
	}
}

func TestWritePKIFiles(t *testing.T) {
	dir := t.TempDir()
	p, err := writePKI(dir, net.IPv4(10, 96, 0, 1), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{p.caFiles.cert, p.caFiles.key, p.frontProxyCA.key, p.frontProxyClient.key, p.apiserverServing.cert, p.apiserverServing.key, p.kubeletClient.cert, p.kubeletClient.key, p.serviceAccountKey, p.serviceAccountPub} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600: keys must stay private", path, st.Mode().Perm())
		}
	}
	pubPEM, err := os.ReadFile(p.serviceAccountPub)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pubPEM)
	if block == nil || block.Type != "PUBLIC KEY" {
		t.Fatalf("sa.pub is not a PEM public key: %q", pubPEM)
	}
	if _, err := x509.ParsePKIXPublicKey(block.Bytes); err != nil {
		t.Errorf("sa.pub: %v", err)
	}
	caPEM, err := os.ReadFile(p.caFiles.cert)
	if err != nil {
		t.Fatal(err)
	}
	if ca := parseCert(t, caPEM); !ca.IsCA {
		t.Error("ca.crt is not a CA certificate")
	}
}

func TestNodeRESTConfig(t *testing.T) {
	p, err := writePKI(t.TempDir(), net.IPv4(10, 96, 0, 1), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cp := &ControlPlane{pki: p, apiserverURL: "https://127.0.0.1:6443"}
	cfg, err := cp.NodeRESTConfig("n1")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != cp.apiserverURL || cfg.CertFile != "" || cfg.KeyFile != "" || cfg.CAFile != "" {
		t.Errorf("config uses host %q and files %q %q %q, want %q and in-memory data only", cfg.Host, cfg.CertFile, cfg.KeyFile, cfg.CAFile, cp.apiserverURL)
	}
	cert := parseCert(t, cfg.CertData)
	if cert.Subject.CommonName != "system:node:n1" || !slices.Equal(cert.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("subject CN=%q O=%v, want CN=system:node:n1 O=[system:nodes]", cert.Subject.CommonName, cert.Subject.Organization)
	}
	verify(t, p.ca, cert, x509.ExtKeyUsageClientAuth, "")
	if _, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData); err != nil {
		t.Errorf("key does not match certificate: %v", err)
	}
	if caCert := parseCert(t, cfg.CAData); !caCert.Equal(p.ca.cert) {
		t.Error("CAData is not the run's CA")
	}

	if _, err := cp.NodeRESTConfig("Not_A_Node"); err == nil {
		t.Error("NodeRESTConfig accepted an invalid node name")
	}

	admin := cp.AdminRESTConfig()
	admin.CAData[0] = 'X'
	if cp.AdminRESTConfig().CAData[0] == 'X' {
		t.Error("AdminRESTConfig returns shared data: a caller's change leaks into the next call")
	}
}

func TestWriteKubeconfig(t *testing.T) {
	p, err := writePKI(t.TempDir(), net.IPv4(10, 96, 0, 1), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := writeKubeconfig(path, "https://127.0.0.1:6443", p.ca.certPEM, p.adminClient, "fleetlet-admin"); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || string(cfg.CertData) != string(p.adminClient.cert) || string(cfg.CAData) != string(p.ca.certPEM) {
		t.Errorf("kubeconfig round trip: host %q, credentials embedded: %v", cfg.Host, len(cfg.CertData) > 0)
	}
}

func TestFirstServiceIP(t *testing.T) {
	for cidr, want := range map[string]string{"10.96.0.0/16": "10.96.0.1", "10.0.0.0/24": "10.0.0.1", "192.168.4.0/22": "192.168.4.1"} {
		ip, err := firstServiceIP(cidr)
		if err != nil || ip.String() != want {
			t.Errorf("firstServiceIP(%q) = %v, %v; want %s", cidr, ip, err, want)
		}
	}
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	cfg, err := Config{BinDir: "/b", Dir: "/d"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ClusterCIDR != DefaultClusterCIDR || cfg.NodeCIDRMaskSize != DefaultNodeCIDRMaskSize || cfg.ServiceCIDR != DefaultServiceCIDR || cfg.StartTimeout != DefaultStartTimeout || cfg.StopTimeout != DefaultStopTimeout {
		t.Errorf("defaults not applied: %+v", cfg)
	}
	bad := map[string]Config{
		"no bin dir":         {Dir: "/d"},
		"no dir":             {BinDir: "/b"},
		"bad cluster cidr":   {BinDir: "/b", Dir: "/d", ClusterCIDR: "10.0.0.0"},
		"mask too short":     {BinDir: "/b", Dir: "/d", ClusterCIDR: "10.0.0.0/16", NodeCIDRMaskSize: 16},
		"mask too long diff": {BinDir: "/b", Dir: "/d", ClusterCIDR: "10.0.0.0/8", NodeCIDRMaskSize: 28},
		"bad service cidr":   {BinDir: "/b", Dir: "/d", ServiceCIDR: "fd00::/108"},
		"unknown extra args": {BinDir: "/b", Dir: "/d", ExtraArgs: map[string][]string{"kubelet": {"--v=4"}}},
	}
	for name, c := range bad {
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// BenchmarkNodeRESTConfig is the cost of one node identity; a fleet mints
// one per agent at start.
func BenchmarkNodeRESTConfig(b *testing.B) {
	p, err := writePKI(b.TempDir(), net.IPv4(10, 96, 0, 1), time.Now())
	if err != nil {
		b.Fatal(err)
	}
	cp := &ControlPlane{pki: p, apiserverURL: "https://127.0.0.1:6443"}
	for b.Loop() {
		if _, err := cp.NodeRESTConfig("node-1"); err != nil {
			b.Fatal(err)
		}
	}
}
