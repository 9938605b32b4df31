package certificate

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/certificate"
)

// writeCert stores a certificate for node in dir/node as the kubelet's
// store does, valid until notAfter.
func writeCert(t *testing.T, dir, node string, notAfter time.Time) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(dir, node)
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	store, err := certificate.NewFileStore("kubelet-client", d, d, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Update(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})); err != nil {
		t.Fatal(err)
	}
}

var bootstrap = &rest.Config{Host: "https://127.0.0.1:1", BearerToken: "abcdef.0123456789abcdef", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}

// TestReusesItsCertificate: a node whose directory holds a valid
// certificate starts with it and asks for none (the bootstrap server here
// does not exist), as a restarted kubelet does.
func TestReusesItsCertificate(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "n1", time.Now().Add(time.Hour))
	c, err := New(Config{NodeName: "n1", Dir: filepath.Join(dir, "n1"), Bootstrap: bootstrap, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if cur := c.Current(); cur == nil || cur.Leaf.Subject.CommonName != "system:node:n1" {
		t.Fatalf("current certificate %v, want n1's from its directory", cur)
	}
	cfg := c.RESTConfig()
	if cfg.BearerToken != "" || cfg.Transport == nil || cfg.Host != bootstrap.Host {
		t.Fatalf("the node's rest config carries the bootstrap token (%q) or no transport of its own (%v)", cfg.BearerToken, cfg.Transport)
	}
}

// TestBootstrapNeeded: a node without a certificate, or with an expired
// one, bootstraps; one that cannot get a certificate gives up after Wait
// with a message that says where to look.
func TestBootstrapNeeded(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "old", time.Now().Add(-time.Minute))
	writeCert(t, dir, "good", time.Now().Add(time.Hour))
	for node, want := range map[string]bool{"good": true, "old": false, "new": false} {
		c, err := New(Config{NodeName: node, Dir: filepath.Join(dir, node), Bootstrap: bootstrap})
		if err != nil {
			t.Fatal(err)
		}
		if has := c.Current() != nil; has != want {
			t.Errorf("node %s starts with a certificate: %v, want %v", node, has, want)
		}
	}
	c, err := New(Config{NodeName: "new", Dir: filepath.Join(dir, "new"), Bootstrap: bootstrap, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "kubectl get csr") {
		t.Fatalf("Start without a reachable API server: %v, want the CSR hint", err)
	}
}

// TestDirectoryNotWritable: a certificate directory that cannot be made
// is refused when the node is built.
func TestDirectoryNotWritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Config{NodeName: "n", Dir: filepath.Join(file, "n"), Bootstrap: bootstrap})
	if err == nil || !strings.Contains(err.Error(), "certificate directory") {
		t.Fatalf("New under a regular file: %v", err)
	}
}

// TestStartsAgainAfterStop: a node that stops and boots again starts the
// same ClientCertificate again, with a new manager (client-go's does not
// run after its Stop) that reads the certificate from the directory, and
// its clients present that manager's certificate.
func TestStartsAgainAfterStop(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "n1", time.Now().Add(time.Hour))
	c, err := New(Config{NodeName: "n1", Dir: filepath.Join(dir, "n1"), Bootstrap: bootstrap, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := c.current()
	c.Stop()
	if c.Current() == nil {
		t.Fatal("no certificate presented after Stop")
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("Start after Stop: %v", err)
	}
	defer c.Stop()
	if c.current() == first {
		t.Fatal("started the stopped manager again")
	}
	got, err := c.RESTConfig().Transport.(*http.Transport).TLSClientConfig.GetClientCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Leaf == nil || got != c.current().Current() || got.Leaf.Subject.CommonName != "system:node:n1" {
		t.Errorf("the clients present %v, want the new manager's certificate of n1", got.Leaf)
	}
}
