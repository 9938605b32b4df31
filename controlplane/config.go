package controlplane

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"
)

// Component names: keys of Config.ExtraArgs and MetricsURLs, and the base
// names of the log files under Dir/logs.
const (
	ComponentEtcd              = "etcd"
	ComponentAPIServer         = "apiserver"
	ComponentScheduler         = "scheduler"
	ComponentControllerManager = "controller-manager"
)

// binaryName is the file name `make controlplane` gives a component, or "" for
// an unknown one.
func binaryName(component string) string {
	switch component {
	case ComponentEtcd:
		return "etcd"
	case ComponentAPIServer:
		return "kube-apiserver"
	case ComponentScheduler:
		return "kube-scheduler"
	case ComponentControllerManager:
		return "kube-controller-manager"
	}
	return ""
}

// startOrder is also the reverse of the stop order: each component needs the
// one before it, and stopping etcd first would leave the apiserver hanging.
// A function, not a variable, so that no caller can reorder it for everyone.
func startOrder() []string {
	return []string{ComponentEtcd, ComponentAPIServer, ComponentScheduler, ComponentControllerManager}
}

// Defaults applied by Start to zero fields of Config.
const (
	DefaultClusterCIDR      = "10.64.0.0/10"
	DefaultNodeCIDRMaskSize = 24
	DefaultServiceCIDR      = "10.96.0.0/16"
	DefaultStartTimeout     = 2 * time.Minute
	DefaultStopTimeout      = 10 * time.Second
)

// Config says where the binaries are, where the run's files go, and how the
// cluster's networks are laid out. Zero fields take the defaults above.
type Config struct {
	// BinDir holds etcd, kube-apiserver, kube-scheduler and kube-controller-manager.
	BinDir string
	// Dir is the run directory: pki/, kubeconfigs, etcd data and
	// logs/<component>.log. It must not hold etcd data from an earlier run,
	// because the certificates and ports are new on every start.
	Dir string
	// ClusterCIDR is the pod network the controller-manager cuts node CIDRs from.
	ClusterCIDR string
	// NodeCIDRMaskSize is the prefix length of each node's pod CIDR.
	NodeCIDRMaskSize int
	// ServiceCIDR is the range of ClusterIPs; its first address is the
	// kubernetes Service and is in the apiserver's serving certificate.
	ServiceCIDR string
	// StartTimeout bounds how long each component may take to become ready.
	StartTimeout time.Duration
	// StopTimeout bounds how long each component may take to exit after
	// SIGTERM before it gets SIGKILL.
	StopTimeout time.Duration
	// AuditLogPath, when set, has the API server write an audit log there:
	// one JSON audit.k8s.io/v1 Event per line, every request at Metadata
	// level (who, verb, URI, object reference, response code; no bodies),
	// its RequestReceived stage omitted, written before each response
	// (blocking mode) and never truncated or rotated, so that the log holds
	// every request. internal/audit reads it. A relative path is taken
	// from the current directory.
	AuditLogPath string
	// ExtraArgs are appended to a component's command line, keyed by the
	// Component* names. A scalar flag given twice takes the last value, so
	// these override the ones chosen here; a list flag (such as
	// --enable-admission-plugins) adds to them instead.
	ExtraArgs map[string][]string
}

// withDefaults returns a copy of c with defaults filled in, or an error
// naming the first field that cannot work.
func (c Config) withDefaults() (Config, error) {
	if c.BinDir == "" {
		return c, errors.New("controlplane: Config.BinDir is empty: set it to the directory `make controlplane` builds into (bin/ in the repository)")
	}
	if c.Dir == "" {
		return c, errors.New("controlplane: Config.Dir is empty: set it to a new directory for the run's certificates, data and logs")
	}
	if c.ClusterCIDR == "" {
		c.ClusterCIDR = DefaultClusterCIDR
	}
	if c.NodeCIDRMaskSize == 0 {
		c.NodeCIDRMaskSize = DefaultNodeCIDRMaskSize
	}
	if c.ServiceCIDR == "" {
		c.ServiceCIDR = DefaultServiceCIDR
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}

	_, cluster, err := net.ParseCIDR(c.ClusterCIDR)
	if err != nil || cluster.IP.To4() == nil {
		return c, fmt.Errorf("controlplane: ClusterCIDR %q is not an IPv4 CIDR such as %s", c.ClusterCIDR, DefaultClusterCIDR)
	}
	clusterBits, _ := cluster.Mask.Size()
	// The controller-manager's range allocator refuses node masks more than
	// 16 bits longer than the cluster's: say so here rather than in its log.
	if c.NodeCIDRMaskSize <= clusterBits || c.NodeCIDRMaskSize > 32 || c.NodeCIDRMaskSize-clusterBits > 16 {
		return c, fmt.Errorf("controlplane: NodeCIDRMaskSize %d does not fit ClusterCIDR %s: it must be longer than /%d, at most /32 and at most 16 bits longer than the cluster's", c.NodeCIDRMaskSize, c.ClusterCIDR, clusterBits)
	}
	_, service, err := net.ParseCIDR(c.ServiceCIDR)
	if err != nil || service.IP.To4() == nil {
		return c, fmt.Errorf("controlplane: ServiceCIDR %q is not an IPv4 CIDR such as %s", c.ServiceCIDR, DefaultServiceCIDR)
	}
	if ones, _ := service.Mask.Size(); ones > 30 {
		return c, fmt.Errorf("controlplane: ServiceCIDR %s is too small: it needs room for the kubernetes Service and others (use /30 or larger)", c.ServiceCIDR)
	}
	if c.StartTimeout < 0 || c.StopTimeout < 0 {
		return c, fmt.Errorf("controlplane: StartTimeout %s and StopTimeout %s must not be negative", c.StartTimeout, c.StopTimeout)
	}
	if c.AuditLogPath != "" {
		abs, err := filepath.Abs(c.AuditLogPath)
		if err != nil {
			return c, fmt.Errorf("controlplane: AuditLogPath %q: %w", c.AuditLogPath, err)
		}
		c.AuditLogPath = abs
	}
	for name := range c.ExtraArgs {
		if binaryName(name) == "" {
			return c, fmt.Errorf("controlplane: ExtraArgs has unknown component %q: use one of %q, %q, %q, %q", name, ComponentEtcd, ComponentAPIServer, ComponentScheduler, ComponentControllerManager)
		}
	}
	return c, nil
}

// firstServiceIP is the address the apiserver gives the kubernetes Service,
// so in-cluster clients dial it and it must be in the serving certificate.
func firstServiceIP(serviceCIDR string) (net.IP, error) {
	_, n, err := net.ParseCIDR(serviceCIDR)
	if err != nil {
		return nil, fmt.Errorf("controlplane: ServiceCIDR %q: %w", serviceCIDR, err)
	}
	ip := make(net.IP, len(n.IP.To4()))
	copy(ip, n.IP.To4())
	ip[len(ip)-1]++
	return ip, nil
}
