package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// frontProxyClientName is the only client the apiserver accepts identity
// headers from.
const frontProxyClientName = "front-proxy-client"

// certValidity outlives any run by far; every start makes new certificates,
// so nothing ever needs renewing.
const certValidity = 365 * 24 * time.Hour

// certAuthority signs every certificate of a run. One CA serves both as the
// client CA and as the issuer of serving certificates, as kubeadm's does: the
// whole cluster lives on loopback for one run and trusts one party, so a
// second CA would add files and flags but no protection. It also means that a
// client config holding the CA can verify every component it talks to,
// including the scheduler and the controller-manager.
//
// The front proxy gets a CA of its own, as in kubeadm: the apiserver lets any
// certificate from that CA assert a user in request headers, so it must not
// be the CA that signs thousands of node certificates.
type certAuthority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// certSpec is what differs between the certificates a run needs.
type certSpec struct {
	commonName    string
	organizations []string
	dnsNames      []string
	ips           []net.IP
	usage         x509.ExtKeyUsage
}

// newKey returns an ECDSA P-256 key: signing and handshakes cost a fraction
// of RSA's, which matters when thousands of node identities are minted.
func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func newCA(commonName string, now time.Time) (*certAuthority, error) {
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("controlplane: generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, fmt.Errorf("controlplane: generate CA serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("controlplane: sign CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("controlplane: parse CA certificate: %w", err)
	}
	return &certAuthority{cert: cert, key: key, certPEM: encodeCert(der)}, nil
}

// issue returns a new key and a certificate for it signed by ca.
func (ca *certAuthority) issue(spec certSpec, now time.Time) (pemPair, error) {
	key, err := newKey()
	if err != nil {
		return pemPair{}, fmt.Errorf("controlplane: generate key for %q: %w", spec.commonName, err)
	}
	serial, err := newSerial()
	if err != nil {
		return pemPair{}, fmt.Errorf("controlplane: generate serial for %q: %w", spec.commonName, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: spec.commonName, Organization: spec.organizations},
		DNSNames:     spec.dnsNames,
		IPAddresses:  spec.ips,
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{spec.usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return pemPair{}, fmt.Errorf("controlplane: sign certificate for %q: %w", spec.commonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return pemPair{}, fmt.Errorf("controlplane: encode key for %q: %w", spec.commonName, err)
	}
	return pemPair{cert: encodeCert(der), key: keyPEM}, nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// apiserverServingSpec names every way a client reaches the apiserver: over
// loopback from this process, and as the kubernetes Service from inside
// the cluster (by name or by the Service's ClusterIP).
func apiserverServingSpec(serviceIP net.IP) certSpec {
	return certSpec{
		commonName: "kube-apiserver",
		dnsNames: []string{
			"localhost",
			"kubernetes",
			"kubernetes.default",
			"kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local",
		},
		ips:   []net.IP{net.IPv4(127, 0, 0, 1), serviceIP},
		usage: x509.ExtKeyUsageServerAuth,
	}
}

// loopbackServingSpec is for the scheduler and the controller-manager. Giving
// them certificates from our CA, rather than letting them make self-signed
// ones, lets health checks and metrics scrapes verify them like the apiserver.
func loopbackServingSpec(commonName string) certSpec {
	return certSpec{
		commonName: commonName,
		dnsNames:   []string{"localhost"},
		ips:        []net.IP{net.IPv4(127, 0, 0, 1)},
		usage:      x509.ExtKeyUsageServerAuth,
	}
}

func clientSpec(commonName string, organizations ...string) certSpec {
	return certSpec{commonName: commonName, organizations: organizations, usage: x509.ExtKeyUsageClientAuth}
}

// pemPair is a certificate and its private key, both PEM.
type pemPair struct{ cert, key []byte }

// filePair is where a certificate and its private key were written.
type filePair struct{ cert, key string }

// pkiFiles is what writePKI made: the files the components read, and the
// client credentials that only ever go into kubeconfigs or rest.Configs.
type pkiFiles struct {
	ca *certAuthority

	caFiles           filePair
	frontProxyCA      filePair
	frontProxyClient  filePair
	apiserverServing  filePair
	kubeletClient     filePair
	schedulerServing  filePair
	controllerServing filePair
	serviceAccountKey string
	serviceAccountPub string
	adminClient       pemPair
	proxyClient       pemPair
	schedulerClient   pemPair
	controllerClient  pemPair
}

// writePKI creates dir and writes into it the CA, every serving and client
// certificate the components read from files, and the service-account key
// pair.
func writePKI(dir string, serviceIP net.IP, now time.Time) (*pkiFiles, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("controlplane: create PKI directory: %w", err)
	}
	ca, err := newCA("fleetlet-ca", now)
	if err != nil {
		return nil, err
	}
	p := &pkiFiles{ca: ca}
	caKeyPEM, err := encodeKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("controlplane: encode CA key: %w", err)
	}
	if p.caFiles, err = writePair(dir, "ca", pemPair{ca.certPEM, caKeyPEM}); err != nil {
		return nil, err
	}

	frontProxyCA, err := newCA("fleetlet-front-proxy-ca", now)
	if err != nil {
		return nil, err
	}
	frontProxyKeyPEM, err := encodeKey(frontProxyCA.key)
	if err != nil {
		return nil, fmt.Errorf("controlplane: encode front-proxy CA key: %w", err)
	}
	if p.frontProxyCA, err = writePair(dir, "front-proxy-ca", pemPair{frontProxyCA.certPEM, frontProxyKeyPEM}); err != nil {
		return nil, err
	}
	// The apiserver presents this when it proxies to aggregated API servers
	// (metrics-server and the like); having the front proxy configured also
	// completes the extension-apiserver-authentication ConfigMap that the
	// scheduler and controller-manager read, which they otherwise retry and
	// log as an error forever.
	pair, err := frontProxyCA.issue(clientSpec(frontProxyClientName), now)
	if err != nil {
		return nil, err
	}
	if p.frontProxyClient, err = writePair(dir, "front-proxy-client", pair); err != nil {
		return nil, err
	}

	files := []struct {
		name string
		spec certSpec
		to   *filePair
	}{
		{"apiserver", apiserverServingSpec(serviceIP), &p.apiserverServing},
		// The apiserver presents this to kubelets for logs, exec and
		// port-forward; system:masters spares us the RBAC binding kubeadm makes.
		{"apiserver-kubelet-client", clientSpec("kube-apiserver-kubelet-client", "system:masters"), &p.kubeletClient},
		{"scheduler-serving", loopbackServingSpec("kube-scheduler"), &p.schedulerServing},
		{"controller-manager-serving", loopbackServingSpec("kube-controller-manager"), &p.controllerServing},
	}
	for _, f := range files {
		pair, err := ca.issue(f.spec, now)
		if err != nil {
			return nil, err
		}
		if *f.to, err = writePair(dir, f.name, pair); err != nil {
			return nil, err
		}
	}

	clients := []struct {
		spec certSpec
		to   *pemPair
	}{
		{clientSpec("fleetlet-admin", "system:masters"), &p.adminClient},
		// The bootstrap RBAC policy binds its roles to these exact user names.
		{clientSpec("system:kube-scheduler"), &p.schedulerClient},
		{clientSpec("system:kube-controller-manager"), &p.controllerClient},
		// Every node's kube-proxy, as on clusters where they share one
		// credential: system:node-proxier is bound to this user.
		{clientSpec("system:kube-proxy"), &p.proxyClient},
	}
	for _, c := range clients {
		if *c.to, err = ca.issue(c.spec, now); err != nil {
			return nil, err
		}
	}

	// The apiserver signs service-account tokens with the private key and
	// verifies them with the public one; the controller-manager signs the
	// tokens of legacy service-account secrets with the private key too.
	saKey, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("controlplane: generate service-account key: %w", err)
	}
	saKeyPEM, err := encodeKey(saKey)
	if err != nil {
		return nil, fmt.Errorf("controlplane: encode service-account key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("controlplane: encode service-account public key: %w", err)
	}
	p.serviceAccountKey = filepath.Join(dir, "sa.key")
	p.serviceAccountPub = filepath.Join(dir, "sa.pub")
	if err := writeFile(p.serviceAccountKey, saKeyPEM); err != nil {
		return nil, err
	}
	if err := writeFile(p.serviceAccountPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})); err != nil {
		return nil, err
	}
	return p, nil
}

func writePair(dir, name string, pair pemPair) (filePair, error) {
	f := filePair{cert: filepath.Join(dir, name+".crt"), key: filepath.Join(dir, name+".key")}
	if err := writeFile(f.cert, pair.cert); err != nil {
		return filePair{}, err
	}
	if err := writeFile(f.key, pair.key); err != nil {
		return filePair{}, err
	}
	return f, nil
}

// writeFile keeps keys and certificates private to the user: the admin key
// is cluster-admin for anyone who can read it.
func writeFile(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("controlplane: write %s: %w", path, err)
	}
	return nil
}

// writeKubeconfig embeds the credentials rather than pointing at files, so
// the kubeconfig can be copied elsewhere and still work.
func writeKubeconfig(path, server string, caPEM []byte, client pemPair, user string) error {
	const name = "fleetlet"
	cfg := clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{
			name: {Server: server, CertificateAuthorityData: caPEM},
		},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{
			user: {ClientCertificateData: client.cert, ClientKeyData: client.key},
		},
		Contexts: map[string]*clientcmdapi.Context{
			name: {Cluster: name, AuthInfo: user},
		},
		CurrentContext: name,
	}
	if err := clientcmd.WriteToFile(cfg, path); err != nil {
		return fmt.Errorf("controlplane: write kubeconfig %s: %w", path, err)
	}
	return nil
}
