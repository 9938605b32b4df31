package controlplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// maxPortAttempts bounds retries of a component whose port another process
// took between our probe and its bind: one retry almost always suffices, and
// a port that keeps failing means something else is wrong.
const maxPortAttempts = 3

// pollInterval is how often readiness is probed; components take seconds to
// start, so finer polling would only add load on a busy machine.
const pollInterval = 250 * time.Millisecond

// ControlPlane is a running control plane. Call Stop when done with it,
// also after a failed run: children are not tied to any context.
type ControlPlane struct {
	cfg        Config
	logger     klog.Logger
	pki        *pkiFiles
	spawner    *spawner
	httpClient *http.Client
	transport  *http.Transport

	etcdURL         string
	apiserverURL    string
	adminKubeconfig string
	// bootstrapKubeconfig holds bootstrapToken, kubeadm-style, for nodes'
	// TLS bootstrap.
	bootstrapKubeconfig string
	bootstrapToken      string
	metricsURLs         map[string]string
	// procs is in start order; Stop walks it backwards. started holds
	// each ready component with its ports, so that Restart can start it
	// again as it was. mu guards both against Kill and Restart.
	mu      sync.Mutex
	procs   []*process
	started map[string]startedComponent

	stopOnce sync.Once
	stopErr  error
}

// Start writes certificates and kubeconfigs into cfg.Dir and starts etcd,
// kube-apiserver, kube-scheduler and kube-controller-manager, each only once
// the one before it is ready. ctx bounds the start only and gives the logger;
// cancelling it later does not stop the control plane, Stop does. On error,
// whatever was started has been stopped.
func Start(ctx context.Context, cfg Config) (*ControlPlane, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkBinaries(cfg.BinDir); err != nil {
		return nil, err
	}
	if err := prepareDir(cfg.Dir); err != nil {
		return nil, err
	}
	serviceIP, err := firstServiceIP(cfg.ServiceCIDR)
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	p, err := writePKI(filepath.Join(cfg.Dir, "pki"), serviceIP, begin)
	if err != nil {
		return nil, err
	}
	httpClient, transport, err := newHTTPClient(p)
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{
		cfg:         cfg,
		logger:      klog.FromContext(ctx).WithName("controlplane"),
		pki:         p,
		spawner:     newSpawner(),
		httpClient:  httpClient,
		transport:   transport,
		metricsURLs: map[string]string{},
	}
	if err := cp.start(ctx); err != nil {
		if stopErr := cp.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		return nil, err
	}
	cp.logger.Info("Control plane ready", "apiserver", cp.apiserverURL, "kubeconfig", cp.adminKubeconfig, "dir", cfg.Dir, "duration", time.Since(begin).Round(time.Millisecond))
	return cp, nil
}

func (cp *ControlPlane) start(ctx context.Context) error {
	ports, err := cp.startComponent(ctx, cp.etcdComponent())
	if err != nil {
		return err
	}
	cp.etcdURL = loopbackURL("http", ports[0])

	var auditPolicy string
	if cp.cfg.AuditLogPath != "" {
		if auditPolicy, err = writeAuditPolicy(cp.cfg.Dir, cp.cfg.AuditLogPath); err != nil {
			return err
		}
	}
	if ports, err = cp.startComponent(ctx, cp.apiserverComponent(cp.etcdURL, auditPolicy)); err != nil {
		return err
	}
	cp.apiserverURL = loopbackURL("https", ports[0])
	cp.metricsURLs[ComponentAPIServer] = cp.apiserverURL + "/metrics"

	// Written only now that the apiserver's port is known and final.
	paths := map[string]string{}
	for _, k := range []struct {
		name, user string
		client     pemPair
	}{
		{"admin", "fleetlet-admin", cp.pki.adminClient},
		{"scheduler", "system:kube-scheduler", cp.pki.schedulerClient},
		{"controller-manager", "system:kube-controller-manager", cp.pki.controllerClient},
	} {
		paths[k.name] = filepath.Join(cp.cfg.Dir, k.name+".kubeconfig")
		if err := writeKubeconfig(paths[k.name], cp.apiserverURL, cp.pki.ca.certPEM, k.client, k.user); err != nil {
			return err
		}
	}
	cp.adminKubeconfig = paths["admin"]
	if err := cp.setUpNodeBootstrap(ctx); err != nil {
		return err
	}

	if ports, err = cp.startComponent(ctx, cp.schedulerComponent(paths["scheduler"])); err != nil {
		return err
	}
	cp.metricsURLs[ComponentScheduler] = loopbackURL("https", ports[0]) + "/metrics"

	if ports, err = cp.startComponent(ctx, cp.controllerManagerComponent(paths["controller-manager"])); err != nil {
		return err
	}
	cp.metricsURLs[ComponentControllerManager] = loopbackURL("https", ports[0]) + "/metrics"
	return nil
}

// startComponent starts c and waits until it is ready, retrying with new
// ports if it lost one of them to another process. It returns the ports the
// ready component listens on.
func (cp *ControlPlane) startComponent(ctx context.Context, c component) ([]int, error) {
	bin := filepath.Join(cp.cfg.BinDir, binaryName(c.name))
	logPath := filepath.Join(cp.cfg.Dir, "logs", c.name+".log")
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("controlplane: start cancelled before starting %s: %w", c.name, err)
		}
		ports, err := freePorts(c.ports)
		if err != nil {
			return nil, err
		}
		args := append(c.args(ports), cp.cfg.ExtraArgs[c.name]...)
		begin := time.Now()
		proc, err := startProcess(cp.spawner, c.name, bin, args, logPath)
		if err != nil {
			return nil, err
		}
		// Recorded before waiting, so that Stop reaps it whatever happens next.
		cp.procs = append(cp.procs, proc)
		err = cp.waitReady(ctx, c, proc, ports)
		if err == nil {
			cp.mu.Lock()
			if cp.started == nil {
				cp.started = map[string]startedComponent{}
			}
			cp.started[c.name] = startedComponent{component: c, ports: ports, proc: proc}
			cp.mu.Unlock()
			cp.logger.Info("Component ready", "component", c.name, "pid", proc.pid(), "ports", ports, "duration", time.Since(begin).Round(time.Millisecond))
			return ports, nil
		}
		var exited *exitedError
		if !errors.As(err, &exited) || !isAddrInUse(exited.tail) || attempt == maxPortAttempts {
			return nil, err
		}
		cp.logger.Info("Component lost a port to another process, retrying with new ports", "component", c.name, "ports", ports, "attempt", attempt)
		// Reaped already; drop it so Stop does not look at it again.
		cp.procs = cp.procs[:len(cp.procs)-1]
		proc.logFile.Close()
	}
}

// exitedError is a component that exited before it was ready.
type exitedError struct {
	name, logPath, tail string
	waitErr             error
}

func (e *exitedError) Error() string {
	return fmt.Sprintf("controlplane: %s exited before it was ready (%v); see %s, last lines:\n%s", e.name, e.waitErr, e.logPath, e.tail)
}

// waitReady polls c's probe until it succeeds, the child exits, the start
// timeout passes or ctx ends, whichever comes first.
func (cp *ControlPlane) waitReady(ctx context.Context, c component, proc *process, ports []int) error {
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, pollInterval, cp.cfg.StartTimeout, true, func(ctx context.Context) (bool, error) {
		if proc.exited() {
			return false, &exitedError{name: c.name, logPath: proc.logPath, tail: logTail(proc.logPath), waitErr: proc.waitErr}
		}
		if lastErr = c.probe(ctx, ports); lastErr != nil {
			return false, nil
		}
		return true, nil
	})
	if err == nil {
		return nil
	}
	var exited *exitedError
	if errors.As(err, &exited) {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("controlplane: start cancelled while waiting for %s to become ready: %w", c.name, ctx.Err())
	}
	return fmt.Errorf("controlplane: %s not ready after %s (last probe: %v); a loaded machine may need a longer Config.StartTimeout; see %s, last lines:\n%s",
		c.name, cp.cfg.StartTimeout, lastErr, proc.logPath, logTail(proc.logPath))
}

// checkBinaries fails before anything is written or started if a binary is
// missing, naming every missing one.
func checkBinaries(binDir string) error {
	var missing []string
	for _, c := range startOrder() {
		path := filepath.Join(binDir, binaryName(c))
		st, err := os.Stat(path)
		switch {
		case err != nil:
			missing = append(missing, path)
		case st.IsDir() || st.Mode().Perm()&0o111 == 0:
			missing = append(missing, path+" (not an executable file)")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("controlplane: control plane binaries missing: %s: run `make controlplane` to build them into bin/, or set the binary directory to where they are", strings.Join(missing, ", "))
	}
	return nil
}

// prepareDir refuses a directory holding an earlier run's etcd data: the
// new certificates, service-account key and ports would not match what that
// data remembers.
func prepareDir(dir string) error {
	etcdDir := filepath.Join(dir, "etcd")
	if _, err := os.Stat(etcdDir); err == nil {
		return fmt.Errorf("controlplane: %s holds etcd data from an earlier run: use a new run directory or remove it", etcdDir)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("controlplane: check run directory: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return fmt.Errorf("controlplane: create run directory: %w", err)
	}
	return nil
}

// newHTTPClient is for probes: it trusts our CA only and presents the admin
// certificate, which /metrics on every component accepts. Its own transport,
// not client-go's cached ones, so Stop can close its connections.
func newHTTPClient(p *pkiFiles) (*http.Client, *http.Transport, error) {
	cert, err := tls.X509KeyPair(p.adminClient.cert, p.adminClient.key)
	if err != nil {
		return nil, nil, fmt.Errorf("controlplane: load admin client certificate: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.ca.cert)
	transport := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
	}
	return &http.Client{Transport: transport}, transport, nil
}

// AdminKubeconfig is the path of a kubeconfig with a system:masters client
// certificate embedded, for kubectl and other tools.
func (cp *ControlPlane) AdminKubeconfig() string { return cp.adminKubeconfig }

// APIServerURL is the apiserver's https URL on 127.0.0.1.
func (cp *ControlPlane) APIServerURL() string { return cp.apiserverURL }

// EtcdURL is etcd's plain-http client URL on 127.0.0.1; its /metrics is
// there too.
func (cp *ControlPlane) EtcdURL() string { return cp.etcdURL }

// CACertPEM is the CA that signed every serving and client certificate; a
// fresh copy each call.
func (cp *ControlPlane) CACertPEM() []byte { return bytes.Clone(cp.pki.ca.certPEM) }

// AdminRESTConfig is cluster-admin (system:masters). Each call returns a new
// copy that the caller may change, e.g. to set QPS.
func (cp *ControlPlane) AdminRESTConfig() *rest.Config {
	return cp.restConfig(cp.pki.adminClient)
}

// ProxyRESTConfig is kube-proxy's identity (CN=system:kube-proxy), which
// the bootstrap policy's system:node-proxier role lets list and watch
// Services, EndpointSlices, ServiceCIDRs and Nodes and write events. Each
// call returns a new copy.
func (cp *ControlPlane) ProxyRESTConfig() *rest.Config {
	return cp.restConfig(cp.pki.proxyClient)
}

// NodeRESTConfig returns a config whose client certificate identifies the
// kubelet of nodeName (CN=system:node:<nodeName>, O=system:nodes), so the
// Node authorizer and NodeRestriction treat it as that node. Each call mints
// a new certificate; ECDSA makes that cheap enough for thousands of nodes.
func (cp *ControlPlane) NodeRESTConfig(nodeName string) (*rest.Config, error) {
	if errs := validation.IsDNS1123Subdomain(nodeName); len(errs) > 0 {
		return nil, fmt.Errorf("controlplane: node name %q is not a valid Node name: %s", nodeName, strings.Join(errs, "; "))
	}
	pair, err := cp.pki.ca.issue(clientSpec("system:node:"+nodeName, "system:nodes"), time.Now())
	if err != nil {
		return nil, fmt.Errorf("controlplane: credentials for node %q: %w", nodeName, err)
	}
	return cp.restConfig(pair), nil
}

// WriteKubeconfig writes to path a kubeconfig for this API server whose
// client certificate, newly minted by the cluster CA, says commonName and
// orgs: the user name and groups the API server authenticates it as. For a
// kubelet: "system:node:<name>", "system:nodes"; for kube-proxy:
// "system:kube-proxy" (the bootstrap policy binds system:node-proxier to
// that user). The credentials are embedded, so the file stands alone; it
// is written private to the user, since it holds a key.
func (cp *ControlPlane) WriteKubeconfig(path, commonName string, orgs ...string) error {
	if commonName == "" {
		return errors.New("controlplane: WriteKubeconfig needs a common name, the user the API server will see")
	}
	pair, err := cp.pki.ca.issue(clientSpec(commonName, orgs...), time.Now())
	if err != nil {
		return fmt.Errorf("controlplane: credentials for %q: %w", commonName, err)
	}
	return writeKubeconfig(path, cp.apiserverURL, cp.pki.ca.certPEM, pair, commonName)
}

// AuditLogPath is where the API server writes its audit log (absolute),
// or "" when Config.AuditLogPath was not set.
func (cp *ControlPlane) AuditLogPath() string { return cp.cfg.AuditLogPath }

func (cp *ControlPlane) restConfig(client pemPair) *rest.Config {
	return &rest.Config{
		Host: cp.apiserverURL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   bytes.Clone(cp.pki.ca.certPEM),
			CertData: bytes.Clone(client.cert),
			KeyData:  bytes.Clone(client.key),
		},
	}
}

// MetricsURLs maps "apiserver", "scheduler" and "controller-manager" to the
// https URL of their /metrics, readable with AdminRESTConfig's credentials
// and verifiable with its CA.
func (cp *ControlPlane) MetricsURLs() map[string]string { return maps.Clone(cp.metricsURLs) }

// Stop stops the components in the reverse order of their start, each with
// SIGTERM then, after Config.StopTimeout, SIGKILL, and returns once every
// child has been reaped. It is safe to call more than once and from several
// goroutines; later calls return the first call's result.
func (cp *ControlPlane) Stop() error {
	cp.stopOnce.Do(func() { cp.stopErr = cp.stop() })
	return cp.stopErr
}

func (cp *ControlPlane) stop() error {
	var errs []error
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for i := len(cp.procs) - 1; i >= 0; i-- {
		p := cp.procs[i]
		begin := time.Now()
		killed, err := p.stop(cp.cfg.StopTimeout)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if killed {
			cp.logger.Info("Component ignored SIGTERM, killed it", "component", p.name, "pid", p.pid(), "stopTimeout", cp.cfg.StopTimeout)
		} else {
			cp.logger.V(2).Info("Component stopped", "component", p.name, "pid", p.pid(), "duration", time.Since(begin).Round(time.Millisecond))
		}
	}
	cp.spawner.close()
	cp.transport.CloseIdleConnections()
	return errors.Join(errs...)
}
