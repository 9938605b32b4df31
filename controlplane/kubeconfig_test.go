package controlplane

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

func TestControlPlaneWriteKubeconfig(t *testing.T) {
	p, err := writePKI(t.TempDir(), net.IPv4(10, 96, 0, 1), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cp := &ControlPlane{pki: p, apiserverURL: "https://127.0.0.1:6443"}
	dir := t.TempDir()
	tests := []struct {
		name, cn string
		orgs     []string
	}{
		{"hollow kubelet", "system:node:hollow-0", []string{"system:nodes"}},
		{"hollow proxy", "system:kube-proxy", nil},
		{"several groups", "someone", []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name+".kubeconfig")
			if err := cp.WriteKubeconfig(path, tt.cn, tt.orgs...); err != nil {
				t.Fatal(err)
			}
			if st, err := os.Stat(path); err != nil || st.Mode().Perm()&0o077 != 0 {
				t.Errorf("kubeconfig %s: %v, mode %v; want it private to the user", path, err, st.Mode())
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", path)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != cp.apiserverURL || cfg.CertFile != "" || cfg.KeyFile != "" {
				t.Errorf("host %q, cert file %q, key file %q; want %q and embedded credentials", cfg.Host, cfg.CertFile, cfg.KeyFile, cp.apiserverURL)
			}
			cert := parseCert(t, cfg.CertData)
			if cert.Subject.CommonName != tt.cn || !slices.Equal(cert.Subject.Organization, tt.orgs) {
				t.Errorf("subject CN=%q O=%v, want CN=%q O=%v", cert.Subject.CommonName, cert.Subject.Organization, tt.cn, tt.orgs)
			}
			verify(t, p.ca, cert, x509.ExtKeyUsageClientAuth, "")
			if _, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData); err != nil {
				t.Errorf("key does not match certificate: %v", err)
			}
			if caCert := parseCert(t, cfg.CAData); !caCert.Equal(p.ca.cert) {
				t.Error("the kubeconfig's CA is not the run's")
			}
		})
	}
	if err := cp.WriteKubeconfig(filepath.Join(dir, "nobody"), ""); err == nil {
		t.Error("WriteKubeconfig accepted an empty common name")
	}
}
