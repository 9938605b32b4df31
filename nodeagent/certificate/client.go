// Package certificate is the kubelet's client certificate: its TLS bootstrap
// from a bootstrap token, the certificate kept on disk, and its rotation
// before expiry, with client-go's certificate manager (the one the kubelet
// runs, k8s.io/kubernetes/pkg/kubelet/certificate) and a transport that
// presents whatever certificate the manager holds.
package certificate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	certificatesv1client "k8s.io/client-go/kubernetes/typed/certificates/v1"
	certificatesv1beta1client "k8s.io/client-go/kubernetes/typed/certificates/v1beta1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/klog/v2"
)

// Config describes one node's client certificate.
type Config struct {
	NodeName string
	// Dir holds the node's certificate and key, as the kubelet's
	// --cert-dir: kubelet-client-current.pem, a link to the dated file the
	// last rotation wrote. A certificate found there is used, not asked for.
	Dir string
	// Bootstrap is the identity that asks for the first certificate: the
	// bootstrap kubeconfig's token. Its host and CA are the node's too.
	Bootstrap *rest.Config
	// Wrap, if set, wraps the transports of the certificate requests, to
	// count them with the node's other requests.
	Wrap transport.WrapperFunc
	// Wait is how long Start waits for the first certificate: the kubelet
	// exits after 5 minutes without one.
	Wait time.Duration
}

// ClientCertificate is a node's client certificate and its manager. It can
// be started again after a Stop, as a node's kubelet starts again after a
// reboot with the certificate its directory holds: the node's clients,
// built once from RESTConfig, present the certificate of whichever manager
// runs.
type ClientCertificate struct {
	cfg    Config
	store  certificate.Store
	dialer *connrotation.Dialer
	rest   *rest.Config

	// managerMu guards manager, replaced when the ClientCertificate starts
	// again: client-go's manager cannot run after its Stop. stopped is set
	// by Stop.
	managerMu sync.Mutex
	manager   certificate.Manager
	stopped   bool

	mu        sync.Mutex
	bootstrap *certificateClient // made on the first request, dropped with the first certificate
	node      *certificateClient
	lastCert  *tls.Certificate
}

// DefaultWait is the kubelet's: UpdateTransport's exitAfter.
const DefaultWait = 5 * time.Minute

// New builds the node's certificate manager over its certificate directory,
// which must be writable, and the rest config that presents its
// certificate. Nothing talks to the API server until Start.
func New(cfg Config) (*ClientCertificate, error) {
	if cfg.Wait <= 0 {
		cfg.Wait = DefaultWait
	}
	// The directory above is checked for writing once, by the caller
	// (CheckWritable); here it is only made.
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("certificate directory of node %s: %w", cfg.NodeName, err)
	}
	// The kubelet's store: "kubelet-client" in its cert directory.
	store, err := certificate.NewFileStore("kubelet-client", cfg.Dir, cfg.Dir, "", "")
	if err != nil {
		return nil, fmt.Errorf("certificate store of node %s: %w", cfg.NodeName, err)
	}
	c := &ClientCertificate{cfg: cfg, store: store}
	if c.manager, err = c.newManager(); err != nil {
		return nil, err
	}
	c.rest, c.dialer, err = rotatingConfig(cfg.Bootstrap, c.Current)
	if err != nil {
		return nil, fmt.Errorf("client of node %s: %w", cfg.NodeName, err)
	}
	return c, nil
}

// newManager builds the node's certificate manager over its store, which
// it reads at once: the certificate the last manager wrote is the new one's.
func (c *ClientCertificate) newManager() (certificate.Manager, error) {
	m, err := certificate.NewManager(&certificate.Config{
		ClientsetFn: c.clientFor,
		// As NewKubeletClientCertificateManager's.
		Template: &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: "system:node:" + c.cfg.NodeName, Organization: []string{"system:nodes"}},
		},
		SignerName:       certificatesv1.KubeAPIServerClientKubeletSignerName,
		GetUsages:        certificate.DefaultKubeletClientGetUsages,
		CertificateStore: c.store,
		Name:             "kubelet-client",
	})
	if err != nil {
		return nil, fmt.Errorf("certificate manager of node %s: %w", c.cfg.NodeName, err)
	}
	return m, nil
}

// current is the manager that runs, or ran last.
func (c *ClientCertificate) current() certificate.Manager {
	c.managerMu.Lock()
	defer c.managerMu.Unlock()
	return c.manager
}

// CheckWritable makes dir if it is missing and checks that this process can
// write in it: the directory of a fleet's certificates, checked once before
// any node is built.
func CheckWritable(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".fleetlet-write-check-")
	if err != nil {
		return err
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}

// RESTConfig is the node's rest config: the bootstrap kubeconfig's server
// and CA, and a transport of its own that presents the current certificate.
// Every client built from it shares that transport.
func (c *ClientCertificate) RESTConfig() *rest.Config { return rest.CopyConfig(c.rest) }

// Current is the certificate the node presents, nil before the first.
func (c *ClientCertificate) Current() *tls.Certificate { return c.current().Current() }

// Start starts the manager, which asks for a certificate at once if the
// directory held none (or an expired one) and rotates it at 70 to 90 % of
// its lifetime, and waits for a certificate for at most cfg.Wait. After a
// Stop, it starts a new manager, with the certificate the directory holds.
func (c *ClientCertificate) Start(ctx context.Context) error {
	c.managerMu.Lock()
	if c.stopped {
		m, err := c.newManager()
		if err != nil {
			c.managerMu.Unlock()
			return err
		}
		c.manager, c.stopped = m, false
	}
	m := c.manager
	c.managerMu.Unlock()
	c.lastCert = m.Current()
	m.Start()
	if c.lastCert != nil {
		return nil
	}
	start := time.Now()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for m.Current() == nil {
		select {
		case <-ctx.Done():
			c.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
		if time.Since(start) > c.cfg.Wait {
			c.Stop()
			return fmt.Errorf("node %s has no client certificate after %v: its CSR (signer %s, user of the bootstrap token) was not approved or not signed; check `kubectl get csr`, the controller-manager's csrapproving and csrsigning controllers, and that the bootstrap token's group may create certificatesigningrequests/nodeclient",
				c.cfg.NodeName, c.cfg.Wait, certificatesv1.KubeAPIServerClientKubeletSignerName)
		}
	}
	c.mu.Lock()
	c.bootstrap = nil // the bootstrap identity is not used again
	c.mu.Unlock()
	c.lastCert = m.Current()
	return nil
}

// Run closes the node's connections whenever the certificate was rotated,
// checking every 10 s, as the kubelet's UpdateTransport: open connections
// would go on presenting the old one.
func (c *ClientCertificate) Run(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if cur := c.Current(); cur != nil && cur != c.lastCert {
			c.lastCert = cur
			klog.FromContext(ctx).Info("Certificate rotation detected, shutting down client connections to start using new credentials")
			c.dialer.CloseAll()
		}
	}
}

// Stop stops the manager; the certificate it holds is still presented.
func (c *ClientCertificate) Stop() {
	c.managerMu.Lock()
	defer c.managerMu.Unlock()
	c.manager.Stop()
	c.stopped = true
}

// CloseAll closes every connection of the node's transport.
func (c *ClientCertificate) CloseAll() { c.dialer.CloseAll() }

// clientFor is the manager's ClientsetFn: the bootstrap identity until the
// node has a certificate, then its own, as the kubelet's. Each is made
// once, with a connection of its own, and carries only the certificates
// API groups: the manager calls nothing else, and a full clientset per node
// would be 28 KiB for nothing.
func (c *ClientCertificate) clientFor(current *tls.Certificate) (kubernetes.Interface, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	if current == nil {
		if c.bootstrap == nil {
			cfg := rest.CopyConfig(c.cfg.Bootstrap)
			cfg.UserAgent = "fleetlet/" + c.cfg.NodeName + " (bootstrap)"
			// A dial function of its own: a connection per node, as
			// kubelets bootstrapping together open.
			cfg.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
			if c.cfg.Wrap != nil {
				cfg.Wrap(c.cfg.Wrap)
			}
			if c.bootstrap, err = newCertificateClient(cfg); err != nil {
				return nil, err
			}
		}
		return c.bootstrap, nil
	}
	if c.node == nil {
		cfg := c.RESTConfig()
		cfg.UserAgent = "fleetlet/" + c.cfg.NodeName
		if c.cfg.Wrap != nil {
			cfg.Wrap(c.cfg.Wrap)
		}
		if c.node, err = newCertificateClient(cfg); err != nil {
			return nil, err
		}
	}
	return c.node, nil
}

// certificateClient answers the certificates API groups; any other group
// falls through to the nil interface and panics, which the manager never
// asks.
type certificateClient struct {
	kubernetes.Interface
	v1      *certificatesv1client.CertificatesV1Client
	v1beta1 *certificatesv1beta1client.CertificatesV1beta1Client
}

func newCertificateClient(cfg *rest.Config) (*certificateClient, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	c := &certificateClient{}
	if c.v1, err = certificatesv1client.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, err
	}
	if c.v1beta1, err = certificatesv1beta1client.NewForConfigAndClient(cfg, httpClient); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *certificateClient) CertificatesV1() certificatesv1client.CertificatesV1Interface {
	return c.v1
}

func (c *certificateClient) CertificatesV1beta1() certificatesv1beta1client.CertificatesV1beta1Interface {
	return c.v1beta1
}

// rotatingConfig is the kubelet's addCertRotation: a rest config for
// bootstrap's server whose TLS handshakes present the current certificate,
// through a dialer whose connections can all be closed.
func rotatingConfig(bootstrap *rest.Config, current func() *tls.Certificate) (*rest.Config, *connrotation.Dialer, error) {
	if bootstrap == nil {
		return nil, nil, errors.New("no bootstrap kubeconfig")
	}
	anon := rest.AnonymousClientConfig(bootstrap)
	tlsConfig, err := rest.TLSConfigFor(anon)
	if err != nil {
		return nil, nil, fmt.Errorf("TLS of the bootstrap kubeconfig: %w", err)
	}
	if tlsConfig == nil {
		return nil, nil, fmt.Errorf("bootstrap kubeconfig's server %s is not https: a node's client certificate needs TLS", bootstrap.Host)
	}
	tlsConfig.Certificates = nil
	tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if cert := current(); cert != nil {
			return cert, nil
		}
		return &tls.Certificate{}, nil
	}
	d := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	cfg := anon
	cfg.Transport = utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConnsPerHost: 25,
		DialContext:         d.DialContext,
	})
	// The transport carries the TLS settings now; client-go refuses both.
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	return cfg, d, nil
}
