package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/nodeagent"
	"github.com/fleetlet/fleetlet/nodeagent/kuberuntime"
	"github.com/fleetlet/fleetlet/nodeagent/server"
	"github.com/fleetlet/fleetlet/reports"
)

// The kubelet's defaults for a real node's paths and CRI calls.
const (
	defaultCRIEndpoint    = "unix:///run/containerd/containerd.sock"
	defaultRootDir        = "/var/lib/kubelet"
	defaultPodLogsDir     = "/var/log/pods"
	runtimeRequestTimeout = 2 * time.Minute
	defaultKubeletPort    = 10250
	// criConnectTimeout bounds the first Version call: a socket that
	// accepts but never answers must not hang the start.
	criConnectTimeout = 15 * time.Second
)

func newAgentCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run one node agent against a real CRI runtime, registering this host as a node",
		Long: "Run one node agent (the small kubelet a fleet multiplies) on this host, against a real CRI " +
			"runtime such as containerd, registered with the cluster of --kubeconfig. The node's name, address " +
			"and capacity come from the host unless given.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := agentOptionsFrom(agentSettings(cmd))
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			cri, err := dialCRI(ctx, opts.Endpoint)
			if err != nil {
				return err
			}
			defer cri.Close()
			restCfg, err := loadKubeconfig(opts.Kubeconfig)
			if err != nil {
				return err
			}
			return runAgent(ctx, opts, cri, restCfg, reports.Discard{})
		},
	}
	addFlags(cmd, agentFlags)
	return cmd
}

func agentFlags(fs *pflag.FlagSet) {
	// It shadows the root's --config: here, as on a kubelet, it is the
	// kubelet's config file.
	fs.String("config", "", "the kubelet's --config: a KubeletConfiguration file (kubelet.config.k8s.io/v1beta1) such as /var/lib/kubelet/config.yaml; "+
		"the flags given override its values, as the kubelet's do")
	fs.String("cri-endpoint", defaultCRIEndpoint, "the CRI runtime's socket (the config file's containerRuntimeEndpoint)")
	fs.String("kubeconfig", "", "kubeconfig of the cluster to register with (required; also FLEETLET_KUBECONFIG)")
	fs.String("node-name", "", "the Node's name (default: the host name, lower-cased)")
	fs.String("node-ip", "", "the Node's InternalIP (default: the host's primary non-loopback address)")
	fs.String("cpu", "", "cpu capacity, such as 4 (default: the host's cores)")
	fs.String("memory", "", "memory capacity, such as 8Gi (default: MemTotal of /proc/meminfo)")
	fs.Int32("max-pods", 110, "the kubelet's maxPods (the config file's maxPods)")
	fs.String("root-dir", defaultRootDir, "the kubelet's --root-dir: pods' volumes live under <root-dir>/pods")
	fs.String("pod-logs-dir", defaultPodLogsDir, "root of the pods' log directories (the config file's podLogsDir)")
	fs.String("cgroup-root", "/", "the kubelet's --cgroup-root: pods run under <cgroup-root>/kubepods (cgroupfs layout; the config file's cgroupRoot)")
	fs.Int("kubelet-port", defaultKubeletPort, "port of the kubelet API on the node IP (0: any free port, advertised in the Node's daemonEndpoints; the config file's port)")
	fs.String("client-ca-file", "", "the kubelet's --client-ca-file: CA bundle of the client certificates the kubelet API accepts "+
		"(the config file's authentication.x509.clientCAFile; default: the kubeconfig's CA)")
}

// agentSettings binds the agent's flags and FLEETLET_* environment, as
// settings does, but reads no fleetlet config file: the agent's --config
// is the kubelet's.
func agentSettings(cmd *cobra.Command) *viper.Viper {
	v := viper.New()
	v.SetEnvPrefix("FLEETLET")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	// Binding a command's own flag set cannot fail.
	_ = v.BindPFlags(cmd.Flags())
	setVerbosity(v.GetInt("v"))
	return v
}

// agentOptions are `fleetlet agent`'s settings, defaulted from the host.
type agentOptions struct {
	Endpoint   string
	Kubeconfig string
	NodeName   string
	NodeIP     net.IP
	Capacity   corev1.ResourceList
	MaxPods    int32
	RootDir    string
	PodLogsDir string
	CgroupRoot string
	// KubeletPort is the kubelet API's port; 0 takes any free port.
	KubeletPort int
	// ClientCAFile is the CA bundle of accepted client certificates; empty
	// means the kubeconfig's CA.
	ClientCAFile string
	// Kubelet is the node's kubelet configuration: the config file's, or
	// the kubelet's defaults, with the flags given applied, validated.
	Kubelet *kubeletconfig.KubeletConfiguration
}

// agentOptionsFrom reads and checks the kubelet config file and the flags,
// filling what is not given from the host.
func agentOptionsFrom(v *viper.Viper) (agentOptions, error) {
	o := agentOptions{Kubeconfig: v.GetString("kubeconfig"), NodeName: v.GetString("node-name"), RootDir: v.GetString("root-dir")}
	if o.Kubeconfig == "" {
		return o, errors.New("--kubeconfig is required (or FLEETLET_KUBECONFIG): the agent registers this host with that cluster")
	}
	kc, err := agentKubelet(v)
	if err != nil {
		return o, err
	}
	o.Kubelet = kc
	o.Endpoint, o.MaxPods, o.PodLogsDir = kc.ContainerRuntimeEndpoint, kc.MaxPods, kc.PodLogsDir
	o.CgroupRoot, o.KubeletPort, o.ClientCAFile = cmp.Or(kc.CgroupRoot, "/"), int(kc.Port), kc.Authentication.X509.ClientCAFile
	if o.NodeName == "" {
		host, err := os.Hostname()
		if err != nil {
			return o, fmt.Errorf("reading the host name: %w; pass --node-name", err)
		}
		// The kubelet lower-cases the host name: Node names are DNS names.
		o.NodeName = strings.ToLower(host)
	}
	if s := v.GetString("node-ip"); s != "" {
		if o.NodeIP = net.ParseIP(s); o.NodeIP == nil {
			return o, fmt.Errorf("--node-ip %q is not an IP address", s)
		}
	} else {
		ip, err := primaryIP()
		if err != nil {
			return o, err
		}
		o.NodeIP = ip
	}
	capacity, err := hostCapacity(v.GetString("cpu"), v.GetString("memory"), o.RootDir)
	if err != nil {
		return o, err
	}
	capacity[corev1.ResourcePods] = *resource.NewQuantity(int64(o.MaxPods), resource.DecimalSI)
	o.Capacity = capacity
	return o, nil
}

// agentKubelet is the node's kubelet configuration: the --config file's
// (LoadKubeletConfigFile), or the kubelet's defaults without one, then the
// flags given on the command line or in the environment, which win over
// the file as the kubelet's flags do; then validated as the agent's is.
func agentKubelet(v *viper.Viper) (*kubeletconfig.KubeletConfiguration, error) {
	path := v.GetString("config")
	kc := &kubeletconfig.KubeletConfiguration{}
	nodeagent.SetKubeletDefaults(kc)
	if path != "" {
		var err error
		if kc, err = nodeagent.LoadKubeletConfigFile(path); err != nil {
			return nil, err
		}
	}
	// flags names the flags given by the fields they set, for errors.
	flags := map[string]string{}
	set := func(flag, field string) bool {
		if !v.IsSet(flag) {
			return false
		}
		flags[field] = flag
		return true
	}
	if set("cri-endpoint", "containerRuntimeEndpoint") {
		kc.ContainerRuntimeEndpoint = v.GetString("cri-endpoint")
	}
	if set("max-pods", "maxPods") {
		kc.MaxPods = v.GetInt32("max-pods")
	}
	if set("pod-logs-dir", "podLogsDir") {
		kc.PodLogsDir = v.GetString("pod-logs-dir")
	}
	if set("cgroup-root", "cgroupRoot") {
		kc.CgroupRoot = v.GetString("cgroup-root")
	}
	if set("client-ca-file", "authentication.x509.clientCAFile") {
		kc.Authentication.X509.ClientCAFile = v.GetString("client-ca-file")
	}
	if set("kubelet-port", "port") {
		port := v.GetInt("kubelet-port")
		if port < 0 || port > 65535 {
			return nil, fmt.Errorf("--kubelet-port %d: want a TCP port, or 0 for any free one", port)
		}
		kc.Port = int32(port)
	}
	if p := kc.CgroupRoot; v.IsSet("cgroup-root") && !filepath.IsAbs(p) {
		return nil, fmt.Errorf("--cgroup-root %q: want an absolute cgroup path such as /", p)
	}
	if errs := nodeagent.ValidateKubeletConfiguration(kc); len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
			if flag, ok := flags[e.Field]; ok {
				msgs[i] = "--" + flag + " " + msgs[i]
			}
		}
		where := "the kubelet's settings"
		if path != "" {
			where = "kubelet config file " + path
		}
		return nil, fmt.Errorf("%s: %s", where, strings.Join(msgs, "; "))
	}
	return kc, nil
}

// primaryIP is the address the host's default route leaves from: a UDP
// "connection" only asks the kernel for a route, and sends nothing. Without
// a default route, the first global unicast address stands in.
func primaryIP() (net.IP, error) {
	if conn, err := net.Dial("udp4", "192.0.2.1:9"); err == nil {
		ip := conn.LocalAddr().(*net.UDPAddr).IP
		_ = conn.Close()
		if !ip.IsLoopback() {
			return ip, nil
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing the host's addresses for the node IP: %w; pass --node-ip", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() {
			return n.IP, nil
		}
	}
	return nil, errors.New("the host has no non-loopback address for the node IP; pass --node-ip")
}

// hostCapacity is the node's cpu, memory and ephemeral storage: what is
// given, or the host's cores, MemTotal, and the size of the filesystem
// holding rootDir (as the kubelet's is that of its root directory).
func hostCapacity(cpu, memory, rootDir string) (corev1.ResourceList, error) {
	list := corev1.ResourceList{}
	if cpu == "" {
		list[corev1.ResourceCPU] = *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI)
	} else {
		q, err := resource.ParseQuantity(cpu)
		if err != nil {
			return nil, fmt.Errorf("--cpu %q: %w", cpu, err)
		}
		list[corev1.ResourceCPU] = q
	}
	if memory == "" {
		total, err := memTotal("/proc/meminfo")
		if err != nil {
			return nil, fmt.Errorf("%w; pass --memory", err)
		}
		list[corev1.ResourceMemory] = *resource.NewQuantity(total, resource.BinarySI)
	} else {
		q, err := resource.ParseQuantity(memory)
		if err != nil {
			return nil, fmt.Errorf("--memory %q: %w", memory, err)
		}
		list[corev1.ResourceMemory] = q
	}
	// The root directory may not exist yet: its nearest existing parent is
	// on the same filesystem.
	dir := rootDir
	var st syscall.Statfs_t
	for syscall.Statfs(dir, &st) != nil && dir != filepath.Dir(dir) {
		dir = filepath.Dir(dir)
	}
	list[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(st.Blocks)*st.Bsize, resource.BinarySI)
	return list, nil
}

// memTotal reads MemTotal, in bytes, from a meminfo file.
func memTotal(path string) (int64, error) {
	return meminfoField(path, "MemTotal:")
}

// meminfoField reads one line of a meminfo file, such as "MemTotal:", in
// bytes.
func meminfoField(path, name string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("reading the host's memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && fields[0] == name && fields[2] == "kB" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %s %q: %w", path, strings.TrimSuffix(name, ":"), fields[1], err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("%s has no %s line in kB", path, strings.TrimSuffix(name, ":"))
}

// capSysResource is CAP_SYS_RESOURCE's bit in /proc/<pid>/status CapEff
// (linux/capability.h); the syscall package does not name capabilities.
const capSysResource = 24

// minOOMScoreAdj is the lowest oom_score_adj a runtime on this host may set:
// any with CAP_SYS_RESOURCE, else no lower than this process's own (the
// runtime runs with the same privileges as the agent beside it).
func minOOMScoreAdj() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for line := range strings.Lines(string(status)) {
			if caps, ok := strings.CutPrefix(line, "CapEff:"); ok {
				if eff, err := strconv.ParseUint(strings.TrimSpace(caps), 16, 64); err == nil && eff&(1<<capSysResource) != 0 {
					return -1000
				}
			}
		}
	}
	own, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(own)), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// criRuntime is a connection to a real CRI runtime.
type criRuntime struct {
	Runtime internalapi.RuntimeService
	Images  internalapi.ImageManagerService
	Name    string
	Version string
}

func (r *criRuntime) Close() {
	_ = r.Runtime.Close(context.Background())
	_ = r.Images.Close(context.Background())
}

// dialCRI connects to a CRI runtime and checks that it answers the CRI v1
// Version call, with a one-line error saying what to do when it does not.
func dialCRI(ctx context.Context, endpoint string) (*criRuntime, error) {
	path, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok {
		return nil, fmt.Errorf("CRI endpoint %s: want a unix:// socket such as %s", endpoint, defaultCRIEndpoint)
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("CRI endpoint %s: no such socket; start containerd or pass --cri-endpoint", endpoint)
	case err != nil:
		return nil, fmt.Errorf("CRI endpoint %s: %w", endpoint, err)
	case fi.Mode()&fs.ModeSocket == 0:
		return nil, fmt.Errorf("CRI endpoint %s: %s is not a socket; pass the runtime's socket with --cri-endpoint", endpoint, path)
	}
	notCRI := func(err error) error {
		return fmt.Errorf("CRI endpoint %s does not answer the CRI v1 API (%v); is it containerd's (or CRI-O's) socket, with the CRI plugin enabled?", endpoint, err)
	}
	vctx, cancel := context.WithTimeout(ctx, criConnectTimeout)
	defer cancel()
	rt, err := remote.NewRemoteRuntimeService(vctx, endpoint, runtimeRequestTimeout, nil, false)
	if err != nil {
		return nil, notCRI(err)
	}
	images, err := remote.NewRemoteImageService(vctx, endpoint, runtimeRequestTimeout, nil, false)
	if err != nil {
		_ = rt.Close(ctx)
		return nil, notCRI(err)
	}
	c := &criRuntime{Runtime: rt, Images: images}
	ver, err := rt.Version(vctx, "v1")
	if err != nil {
		c.Close()
		return nil, notCRI(err)
	}
	c.Name, c.Version = ver.RuntimeName, ver.RuntimeVersion
	return c, nil
}

// runAgent runs one node agent on this host, over cri, until ctx ends.
func runAgent(ctx context.Context, o agentOptions, cri *criRuntime, restCfg *rest.Config, rec reports.Recorder) error {
	klog.FromContext(ctx).Info("Connected to the CRI runtime", "endpoint", o.Endpoint, "runtime", cri.Name, "version", cri.Version)

	kc := o.Kubelet
	restCfg = rest.CopyConfig(restCfg)
	restCfg.QPS = float32(ptr.Deref(kc.KubeAPIQPS, 50))
	restCfg.Burst = int(kc.KubeAPIBurst)
	restCfg.UserAgent = "fleetlet/" + o.NodeName
	clients, err := nodeagent.NewKubeletClients(restCfg, kc)
	if err != nil {
		return fmt.Errorf("API client for node %s: %w", o.NodeName, err)
	}
	serving, err := agentServing(ctx, o, restCfg, clients.Main)
	if err != nil {
		return err
	}
	cfg := nodeagent.Config{
		NodeName: o.NodeName, NodeIP: o.NodeIP, Capacity: o.Capacity, Kubelet: kc,
		Runtime: cri.Runtime, Images: cri.Images, Recorder: rec, Serving: serving,
		PodsDir: filepath.Join(o.RootDir, "pods"),
		Host: &kuberuntime.Host{
			PodLogsDir: o.PodLogsDir, CgroupRoot: o.CgroupRoot, MinOOMScoreAdj: minOOMScoreAdj(),
		},
	}
	clients.Wire(&cfg)
	agent, err := nodeagent.New(cfg)
	if err != nil {
		return err
	}
	return agent.Run(ctx)
}

// agentServing is how the agent serves the kubelet API, as a kubelet with
// webhook authentication and authorization does: client certificates of the
// client CA, or bearer tokens and access checked by TokenReview and
// SubjectAccessReview sent with the agent's own identity (a node's may send
// both); and a self-signed serving certificate for the node's IP and name.
func agentServing(ctx context.Context, o agentOptions, restCfg *rest.Config, client kubernetes.Interface) (*nodeagent.ServingConfig, error) {
	caPEM, err := clientCA(o.ClientCAFile, restCfg)
	if err != nil {
		return nil, err
	}
	if len(caPEM) == 0 {
		klog.FromContext(ctx).Info("The kubelet API accepts no client certificates: the kubeconfig has no CA; pass --client-ca-file", "node", o.NodeName)
	}
	authn, authz, err := server.NewDelegatingAuth(client, caPEM)
	if err != nil {
		return nil, err
	}
	cert, err := server.SelfSignedCert([]net.IP{o.NodeIP}, []string{o.NodeName}, time.Now())
	if err != nil {
		return nil, err
	}
	return &nodeagent.ServingConfig{Port: o.KubeletPort, Cert: cert, Authenticator: authn, Authorizer: authz}, nil
}

// clientCA is the PEM of --client-ca-file, else of the kubeconfig's CA (the
// cluster CA, which signs the API server's kubelet client certificate in a
// kubeadm-style cluster).
func clientCA(file string, restCfg *rest.Config) ([]byte, error) {
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--client-ca-file: %w", err)
		}
		return b, nil
	case len(restCfg.CAData) > 0:
		return restCfg.CAData, nil
	case restCfg.CAFile != "":
		b, err := os.ReadFile(restCfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("the kubeconfig's certificate authority: %w; pass --client-ca-file", err)
		}
		return b, nil
	}
	return nil, nil
}
