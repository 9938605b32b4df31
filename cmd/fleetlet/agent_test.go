package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"
	"google.golang.org/grpc"
	"k8s.io/client-go/rest"
)

func TestDialCRIErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A gRPC server that serves no CRI: a socket of another API.
	other := filepath.Join(dir, "other.sock")
	lis, err := net.Listen("unix", other)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	cases := []struct{ endpoint, want string }{
		{"unix:///x", "CRI endpoint unix:///x: no such socket; start containerd or pass --cri-endpoint"},
		{"unix://" + file, "CRI endpoint unix://" + file + ": " + file + " is not a socket; pass the runtime's socket with --cri-endpoint"},
		{"unix://" + other, "CRI endpoint unix://" + other + " does not answer the CRI v1 API ("},
		{"tcp://127.0.0.1:1", "want a unix:// socket"},
	}
	for _, tc := range cases {
		_, err := dialCRI(ctx, tc.endpoint)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: err = %v, want one line containing %q", tc.endpoint, err, tc.want)
		}
	}
}

// TestAgentCommandFailsOnAMissingSocket runs the command as a user would:
// the error is the one line main prints, and the command fails.
func TestAgentCommandFailsOnAMissingSocket(t *testing.T) {
	cmd := newRootCommand()
	cmd.SetArgs([]string{"agent", "--cri-endpoint", "unix:///x", "--kubeconfig", filepath.Join(t.TempDir(), "k"), "--node-ip", "192.0.2.10"})
	cmd.SetOut(&bytes.Buffer{})
	err := cmd.ExecuteContext(context.Background())
	if err == nil || err.Error() != "CRI endpoint unix:///x: no such socket; start containerd or pass --cri-endpoint" {
		t.Errorf("err = %v", err)
	}
}

func TestAgentOptions(t *testing.T) {
	v := viper.New()
	cmd := newAgentCommand()
	if err := v.BindPFlags(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	if _, err := agentOptionsFrom(v); err == nil || !strings.Contains(err.Error(), "--kubeconfig is required") {
		t.Errorf("no kubeconfig: err = %v", err)
	}
	v.Set("kubeconfig", "k")
	o, err := agentOptionsFrom(v)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if o.NodeName != strings.ToLower(host) {
		t.Errorf("node name %q, want the host name %q lower-cased", o.NodeName, host)
	}
	if o.NodeIP.IsLoopback() || o.NodeIP.IsUnspecified() {
		t.Errorf("node IP %s, want a non-loopback address", o.NodeIP)
	}
	if cpu := o.Capacity.Cpu().Value(); cpu != int64(runtime.NumCPU()) {
		t.Errorf("cpu %d, want %d", cpu, runtime.NumCPU())
	}
	mem, err := memTotal("/proc/meminfo")
	if err != nil || o.Capacity.Memory().Value() != mem || mem == 0 {
		t.Errorf("memory %v, want MemTotal %d (%v)", o.Capacity.Memory(), mem, err)
	}
	if o.Capacity.Pods().Value() != 110 || o.Capacity.StorageEphemeral().IsZero() {
		t.Errorf("capacity %v", o.Capacity)
	}
	if o.KubeletPort != 10250 || o.ClientCAFile != "" {
		t.Errorf("kubelet port %d, client CA file %q; want the kubelet's 10250 and the kubeconfig's CA", o.KubeletPort, o.ClientCAFile)
	}

	v.Set("node-ip", "10.1.2.3")
	v.Set("cpu", "3")
	v.Set("memory", "5Gi")
	v.Set("node-name", "n1")
	if o, err = agentOptionsFrom(v); err != nil {
		t.Fatal(err)
	}
	if o.NodeIP.String() != "10.1.2.3" || o.NodeName != "n1" || o.Capacity.Cpu().String() != "3" || o.Capacity.Memory().String() != "5Gi" {
		t.Errorf("given values not kept: %s %s %v", o.NodeName, o.NodeIP, o.Capacity)
	}
	v.Set("kubelet-port", 65536)
	if _, err := agentOptionsFrom(v); err == nil || !strings.Contains(err.Error(), "--kubelet-port 65536: want a TCP port") {
		t.Errorf("bad kubelet port: err = %v", err)
	}
	v.Set("kubelet-port", 0)
	v.Set("node-ip", "nope")
	if _, err := agentOptionsFrom(v); err == nil || !strings.Contains(err.Error(), `--node-ip "nope"`) {
		t.Errorf("bad node IP: err = %v", err)
	}
}

func TestClientCA(t *testing.T) {
	dir := t.TempDir()
	flagCA, kubeconfigCA := filepath.Join(dir, "flag.pem"), filepath.Join(dir, "kubeconfig.pem")
	for path, content := range map[string]string{flagCA: "flag CA", kubeconfigCA: "kubeconfig CA file"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		what, file string
		cfg        rest.Config
		want       string
	}{
		{"--client-ca-file first", flagCA, rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: []byte("kubeconfig CA")}}, "flag CA"},
		{"the kubeconfig's CA data", "", rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: []byte("kubeconfig CA")}}, "kubeconfig CA"},
		{"the kubeconfig's CA file", "", rest.Config{TLSClientConfig: rest.TLSClientConfig{CAFile: kubeconfigCA}}, "kubeconfig CA file"},
		{"none", "", rest.Config{}, ""},
	} {
		got, err := clientCA(tc.file, &tc.cfg)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.what, got, err, tc.want)
		}
	}
	if _, err := clientCA(filepath.Join(dir, "missing.pem"), &rest.Config{}); err == nil || !strings.HasPrefix(err.Error(), "--client-ca-file: ") {
		t.Errorf("a missing --client-ca-file: %v", err)
	}
}

func TestMemTotal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meminfo")
	if err := os.WriteFile(path, []byte("MemTotal:        2048 kB\nMemFree:  1 kB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := memTotal(path); err != nil || n != 2048*1024 {
		t.Errorf("memTotal = %d, %v", n, err)
	}
}

// TestAgentOptionsFromConfigFile: the kubelet config file gives the node's
// settings; the flags given (or FLEETLET_* variables) win over it, as the
// kubelet's flags do; the flags left at their defaults do not.
func TestAgentOptionsFromConfigFile(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, []byte(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
maxPods: 20
port: 10255
staticPodPath: manifests
fileCheckFrequency: 5s
podLogsDir: /srv/logs
cgroupRoot: /fleet
containerRuntimeEndpoint: unix:///run/crio/crio.sock
authentication: {x509: {clientCAFile: pki/ca.crt}}
nodeStatusUpdateFrequency: 20s
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newAgentCommand()
	v := agentSettings(cmd)
	v.Set("kubeconfig", "k")
	v.Set("node-ip", "10.1.2.3")
	v.Set("config", config)
	o, err := agentOptionsFrom(v)
	if err != nil {
		t.Fatal(err)
	}
	kc := o.Kubelet
	if o.MaxPods != 20 || o.Capacity.Pods().Value() != 20 || o.KubeletPort != 10255 || o.PodLogsDir != "/srv/logs" ||
		o.CgroupRoot != "/fleet" || o.Endpoint != "unix:///run/crio/crio.sock" || o.ClientCAFile != filepath.Join(dir, "pki/ca.crt") {
		t.Errorf("options from the file: %+v", o)
	}
	if kc.StaticPodPath != filepath.Join(dir, "manifests") || kc.FileCheckFrequency.Duration != 5*time.Second ||
		kc.NodeStatusUpdateFrequency.Duration != 20*time.Second || kc.NodeStatusReportFrequency.Duration != 20*time.Second {
		t.Errorf("kubelet settings: staticPodPath %q fileCheckFrequency %v node status %v/%v",
			kc.StaticPodPath, kc.FileCheckFrequency, kc.NodeStatusUpdateFrequency, kc.NodeStatusReportFrequency)
	}

	// Flags and the environment win over the file.
	t.Setenv("FLEETLET_POD_LOGS_DIR", "/env/logs")
	v = agentSettings(cmd)
	for k, val := range map[string]any{
		"kubeconfig": "k", "node-ip": "10.1.2.3", "config": config,
		"max-pods": 30, "kubelet-port": 0, "cri-endpoint": "unix:///run/containerd/containerd.sock", "client-ca-file": "/etc/ca.pem",
	} {
		v.Set(k, val)
	}
	if o, err = agentOptionsFrom(v); err != nil {
		t.Fatal(err)
	}
	if o.MaxPods != 30 || o.Kubelet.MaxPods != 30 || o.KubeletPort != 0 || o.PodLogsDir != "/env/logs" ||
		o.Endpoint != "unix:///run/containerd/containerd.sock" || o.ClientCAFile != "/etc/ca.pem" || o.CgroupRoot != "/fleet" {
		t.Errorf("options with flags: %+v", o)
	}

	// No file: the kubelet's defaults.
	v = viper.New()
	if err := v.BindPFlags(newAgentCommand().Flags()); err != nil {
		t.Fatal(err)
	}
	v.Set("kubeconfig", "k")
	v.Set("node-ip", "10.1.2.3")
	if o, err = agentOptionsFrom(v); err != nil {
		t.Fatal(err)
	}
	if o.Kubelet.StaticPodPath != "" || o.Kubelet.FileCheckFrequency.Duration != 20*time.Second || o.Endpoint != defaultCRIEndpoint ||
		o.PodLogsDir != defaultPodLogsDir || o.CgroupRoot != "/" || o.KubeletPort != defaultKubeletPort || o.MaxPods != 110 {
		t.Errorf("defaults: %+v", o)
	}
}

// TestAgentConfigShadowsTheRootConfig: `fleetlet agent --config` is the
// kubelet's config file, not fleetlet's file of flag values.
func TestAgentConfigShadowsTheRootConfig(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: -3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newRootCommand()
	cmd.SetArgs([]string{"agent", "--config", config, "--kubeconfig", filepath.Join(dir, "k"), "--node-ip", "192.0.2.10"})
	cmd.SetOut(&bytes.Buffer{})
	err := cmd.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), "kubelet config file "+config+": maxPods: Invalid value: -3") {
		t.Errorf("err = %v, want the kubelet config file's maxPods refused", err)
	}
}
