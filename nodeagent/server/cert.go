package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// selfSignedValidity is the lifetime the kubelet gives its self-signed
// serving certificate (client-go util/cert GenerateSelfSignedCertKey).
const selfSignedValidity = 365 * 24 * time.Hour

// SelfSignedCert makes a serving certificate for the given addresses and
// names, valid from an hour before now for a year, as the kubelet makes one
// when it has no certificate configured. ECDSA P-256 instead of the kubelet's
// RSA 2048 because a fleet makes one for thousands of node IPs and RSA key
// generation costs tens of milliseconds; the API server does not verify
// kubelet certificates unless given --kubelet-certificate-authority.
func SelfSignedCert(hosts []net.IP, names []string, now time.Time) (*tls.Certificate, error) {
	if len(hosts) == 0 && len(names) == 0 {
		return nil, errors.New("kubelet serving certificate: no IP addresses or DNS names to certify; pass the nodes' IPs")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("kubelet serving certificate: generating an ECDSA P-256 key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("kubelet serving certificate: generating a serial number: %w", err)
	}
	cn := "fleetlet-kubelet"
	if len(names) > 0 {
		cn = names[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s@%d", cn, now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(selfSignedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           hosts,
		DNSNames:              names,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("kubelet serving certificate: signing it: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("kubelet serving certificate: parsing what was signed: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}
