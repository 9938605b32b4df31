package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"net"
	"testing"
	"time"
)

func TestSelfSignedCert(t *testing.T) {
	ips := []net.IP{net.ParseIP("127.0.1.1"), net.ParseIP("127.0.1.2")}
	cert, err := SelfSignedCert(ips, []string{"node-1", "node-2"}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	key, ok := cert.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		t.Errorf("key is %T, want ECDSA P-256", cert.PrivateKey)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	for _, name := range []string{"127.0.1.1", "127.0.1.2", "node-2"} {
		opts := x509.VerifyOptions{DNSName: name, Roots: pool, CurrentTime: testNow, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		if _, err := cert.Leaf.Verify(opts); err != nil {
			t.Errorf("certificate does not serve %s: %v", name, err)
		}
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: "127.0.1.3", Roots: pool, CurrentTime: testNow}); err == nil {
		t.Error("certificate serves 127.0.1.3, which it was not made for")
	}
	if !cert.Leaf.NotBefore.Equal(testNow.Add(-time.Hour)) || !cert.Leaf.NotAfter.Equal(testNow.Add(365*24*time.Hour)) {
		t.Errorf("validity %v to %v, want from an hour before now for a year", cert.Leaf.NotBefore, cert.Leaf.NotAfter)
	}
	if _, err := SelfSignedCert(nil, nil, testNow); err == nil {
		t.Error("SelfSignedCert made a certificate for no address and no name")
	}
}
