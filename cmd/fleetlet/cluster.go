package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleetlet/fleetlet/controlplane"
)

// cluster is the control plane a fleet registers with: ours, started from
// the binaries `make controlplane` builds, or an existing one.
type cluster struct {
	admin *rest.Config
	// nodeConfig returns a node's credentials: its own system:node client
	// certificate on our control plane, so NodeRestriction and the Node
	// authorizer treat it as a kubelet; the kubeconfig's on another cluster.
	nodeConfig func(name string) (*rest.Config, error)
	// proxyConfig returns a node's kube-proxy credentials: system:kube-proxy
	// on our control plane, the kubeconfig's on another cluster.
	proxyConfig func(name string) (*rest.Config, error)
	kubeconfig  string
	cp          *controlplane.ControlPlane
	// shared is set when cp was started by someone else, who stops it:
	// Stop leaves it running.
	shared bool
	// metricsURLs are scraped before and after the load, with admin's
	// credentials: the apiserver's and, on our control plane, the scheduler's.
	metricsURLs []string
	// clientCAPEM is the CA the agents' kubelet API trusts for client
	// certificates: our cluster CA, or on another cluster the CA of its
	// kubeconfig, which signs the API server's kubelet client certificate
	// on kubeadm-made clusters (tokens are reviewed either way).
	clientCAPEM []byte
}

func clusterFlags(fs *pflag.FlagSet) {
	fs.String("kubeconfig", "", "use the cluster of this kubeconfig instead of starting the embedded control plane (also KUBECONFIG)")
	fs.String("bin-dir", "", "directory holding etcd, kube-apiserver, kube-scheduler and kube-controller-manager (default: the directory of the fleetlet binary)")
}

// openCluster connects to the cluster of kubeconfig, or, when it is "",
// starts ours from the binaries in binDir (default: beside this binary) with
// its data under dir.
func openCluster(ctx context.Context, kubeconfig, binDir, dir string) (*cluster, error) {
	if kubeconfig != "" {
		return externalCluster(kubeconfig)
	}
	if binDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("locating the fleetlet binary to find the control plane next to it: %w; pass --bin-dir", err)
		}
		binDir = filepath.Dir(exe)
	}
	cp, err := controlplane.Start(ctx, controlplane.Config{BinDir: binDir, Dir: dir})
	if err != nil {
		return nil, err
	}
	return embeddedCluster(cp), nil
}

// embeddedCluster is a cluster on our control plane cp: its nodes get
// certificates of their own from its CA.
func embeddedCluster(cp *controlplane.ControlPlane) *cluster {
	urls := cp.MetricsURLs()
	return &cluster{
		admin: cp.AdminRESTConfig(), nodeConfig: cp.NodeRESTConfig, kubeconfig: cp.AdminKubeconfig(), cp: cp,
		proxyConfig: func(string) (*rest.Config, error) { return cp.ProxyRESTConfig(), nil },
		metricsURLs: []string{urls[controlplane.ComponentAPIServer], urls[controlplane.ComponentScheduler]},
		clientCAPEM: cp.CACertPEM(),
	}
}

func externalCluster(path string) (*cluster, error) {
	cfg, err := loadKubeconfig(path)
	if err != nil {
		return nil, err
	}
	probe := rest.CopyConfig(cfg)
	probe.Timeout = 10 * time.Second
	client, err := kubernetes.NewForConfig(probe)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	if _, err := client.Discovery().ServerVersion(); err != nil {
		return nil, fmt.Errorf("API server %s of kubeconfig %s is unreachable: %v; check the cluster, or drop --kubeconfig/KUBECONFIG to start the embedded control plane", cfg.Host, path, err)
	}
	caPEM := cfg.CAData
	if len(caPEM) == 0 && cfg.CAFile != "" {
		if caPEM, err = os.ReadFile(cfg.CAFile); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: reading its CA: %w", path, err)
		}
	}
	return &cluster{
		clientCAPEM: caPEM,
		admin:       cfg,
		nodeConfig:  func(string) (*rest.Config, error) { return rest.CopyConfig(cfg), nil },
		proxyConfig: func(string) (*rest.Config, error) { return rest.CopyConfig(cfg), nil },
		kubeconfig:  path,
		metricsURLs: []string{strings.TrimSuffix(cfg.Host, "/") + "/metrics"},
	}, nil
}

// Stop stops our control plane, if we started one.
func (c *cluster) Stop() error {
	if c.cp == nil || c.shared {
		return nil
	}
	return c.cp.Stop()
}
