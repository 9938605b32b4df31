//go:build integration

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/viper"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/ptr"

	"github.com/fleetlet/fleetlet/reports"
)

// realRuntimeUnavailable says why this machine cannot run containerd for a
// test, or "" when it can: that needs root and a writable cgroup
// filesystem.
func realRuntimeUnavailable() string {
	if os.Geteuid() != 0 {
		return "the real-runtime test needs root to run containerd (run `sudo go test ./cmd/fleetlet -run TestAgentAgainstContainerd`)"
	}
	// cgroup v1 mounts a memory hierarchy of its own; v2 has one root.
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(root); err != nil {
		root = "/sys/fs/cgroup"
	}
	probe := filepath.Join(root, fmt.Sprintf("fleetlet-probe-%d", os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return fmt.Sprintf("the real-runtime test needs a writable cgroup filesystem to run containers: %v", err)
	}
	_ = os.Remove(probe)
	return ""
}

// stamps keeps the milestones the agent records, first stamp wins.
type stamps struct {
	mu sync.Mutex
	at map[types.UID]map[reports.Milestone]time.Time
}

func (s *stamps) Mark(pod types.UID, m reports.Milestone, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at[pod] == nil {
		s.at[pod] = map[reports.Milestone]time.Time{}
	}
	if prev, ok := s.at[pod][m]; !ok || at.Before(prev) {
		s.at[pod][m] = at
	}
}

func (s *stamps) of(pod types.UID) map[reports.Milestone]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[reports.Milestone]time.Time{}
	for k, v := range s.at[pod] {
		out[k] = v
	}
	return out
}

// hackScript runs one of hack/containerd's scripts and returns its stdout.
func hackScript(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join("..", "..", "hack", "containerd", name), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s %s: %v\n%s", name, strings.Join(args, " "), time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr.String()))
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return strings.TrimSpace(stdout.String()), nil
}

// leftovers lists what of a containerd instance under dir survived down.sh:
// processes naming dir, mounts under it, cgroups of its pods, CNI results
// of its sandboxes.
func leftovers(dir, cgroupRoot string, sandboxIDs []string) []string {
	var left []string
	for _, id := range sandboxIDs {
		if cached, _ := filepath.Glob("/var/lib/cni/results/*" + id + "*"); len(cached) > 0 {
			left = append(left, "CNI results "+strings.Join(cached, " "))
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(dir+"/")) {
			left = append(left, "process "+strings.ReplaceAll(string(bytes.TrimRight(b, "\x00")), "\x00", " "))
		}
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for line := range strings.Lines(string(mi)) {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
				left = append(left, "mount "+f[4])
			}
		}
	}
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*" + cgroupRoot)
	for _, c := range cgroups {
		left = append(left, "cgroup "+c)
	}
	return left
}

// TestAgentAgainstContainerd runs one agent against a real containerd and
// the real control plane, and checks through the API server and the CRI
// socket what it did: the host registered as a Ready node, a pod Ready by
// an exec probe, its log, exec and port-forward through the API server and
// its stats from the kubelet port, a crashing container restarted with the
// kubelet's back-off, and deleted pods gone from containerd.
func TestAgentAgainstContainerd(t *testing.T) {
	if reason := realRuntimeUnavailable(); reason != "" {
		t.Skip(reason)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	bins := binDir(t)

	// containerd under a short directory: socket paths are limited to 108
	// bytes.
	dir, err := os.MkdirTemp("", "fltctrd-")
	if err != nil {
		t.Fatal(err)
	}
	var cgroupRoot string
	var sandboxIDs []string
	t.Cleanup(func() {
		_, err := hackScript(t, "down.sh", dir)
		if err != nil {
			t.Errorf("down.sh: %v", err)
		}
		if left := leftovers(dir, cgroupRoot, sandboxIDs); len(left) > 0 {
			t.Errorf("down.sh left behind:\n%s", strings.Join(left, "\n"))
		}
		_ = os.RemoveAll(dir)
	})
	setup := time.Now()
	socket, err := hackScript(t, "up.sh", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("containerd up in %v", time.Since(setup).Round(time.Millisecond))
	b, err := os.ReadFile(filepath.Join(dir, "cgroup-root"))
	if err != nil {
		t.Fatal(err)
	}
	cgroupRoot = strings.TrimSpace(string(b))

	v := viper.New()
	v.Set("bin-dir", bins)
	v.Set("kubeconfig", "")
	cl, err := openCluster(ctx, "", v.GetString("bin-dir"), filepath.Join(t.TempDir(), "controlplane"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Stop() })
	client, err := kubernetes.NewForConfig(cl.admin)
	if err != nil {
		t.Fatal(err)
	}

	if err := viperFromAgentFlags(v); err != nil {
		t.Fatal(err)
	}
	v.Set("cri-endpoint", "unix://"+socket)
	v.Set("kubeconfig", cl.kubeconfig)
	v.Set("root-dir", filepath.Join(dir, "kubelet"))
	v.Set("pod-logs-dir", filepath.Join(dir, "pod-logs"))
	v.Set("cgroup-root", cgroupRoot)
	v.Set("kubelet-port", 0)
	opts, err := agentOptionsFrom(v)
	if err != nil {
		t.Fatal(err)
	}
	cri, err := dialCRI(ctx, opts.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer cri.Close()
	nodeCfg, err := cl.nodeConfig(opts.NodeName)
	if err != nil {
		t.Fatal(err)
	}
	rec := &stamps{at: map[types.UID]map[reports.Milestone]time.Time{}}
	agentCtx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan error, 1)
	go func() { agentDone <- runAgent(agentCtx, opts, cri, nodeCfg, rec) }()
	defer func() {
		stopAgent()
		if err := <-agentDone; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	// fleet.WaitForNodesReady watches fleet nodes only (by their pool
	// label); this node is the host.
	var node *corev1.Node
	readyErr := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, opts.NodeName, metav1.GetOptions{})
		if err == nil {
			node = n
		}
		return err == nil && nodeReady(n) == corev1.ConditionTrue, nil
	})
	if readyErr != nil {
		var conds []corev1.NodeCondition
		if node != nil {
			conds = node.Status.Conditions
		}
		t.Fatalf("node %s not Ready: %v; conditions %v", opts.NodeName, readyErr, conds)
	}
	if rt := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(rt, "containerd://") {
		t.Errorf("node runtime %q, want containerd://", rt)
	}
	if !slices.ContainsFunc(node.Status.Addresses, func(a corev1.NodeAddress) bool {
		return a.Type == corev1.NodeInternalIP && a.Address == opts.NodeIP.String()
	}) {
		t.Errorf("node addresses %v, want InternalIP %s", node.Status.Addresses, opts.NodeIP)
	}

	// The ServiceAccount admission plugin refuses pods until the
	// controller-manager has made the namespace's default account.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no default service account: %v", err)
	}
	pods := client.CoreV1().Pods("default")
	newPod := func(name, script string, probe *corev1.Probe) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr.To[int64](2),
				// The pods need no API token: only the runtime is under test.
				AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{
					Name: "main", Image: "localhost/busybox:latest", ImagePullPolicy: corev1.PullNever,
					Command: []string{"sh", "-c", script}, ReadinessProbe: probe,
				}},
			},
		}
	}
	// httpd answers port-forwards: it daemonizes before the readiness file
	// exists, so a Ready pod listens.
	ready, err := pods.Create(ctx, newPod("ready", "echo hello from a real runtime; mkdir /www; echo pong >/www/index.html; httpd -p 8080 -h /www; touch /tmp/ready; exec sleep 3600", &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/ready"}}}, PeriodSeconds: 1,
	}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	crash, err := pods.Create(ctx, newPod("crash", "echo crashing; exit 3", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Ready, with every startup milestone stamped.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, "ready", metav1.GetOptions{})
		return err == nil && condition(p.Status.Conditions, corev1.PodReady) == corev1.ConditionTrue, nil
	})
	if err != nil {
		t.Fatalf("pod ready not Ready: %v", err)
	}
	t.Logf("pod ready Ready %v after its create", time.Since(created).Round(time.Millisecond))
	milestones := rec.of(ready.UID)
	order := []reports.Milestone{reports.Scheduled, reports.AgentObserved, reports.SandboxReady, reports.ImagesPulled, reports.ContainersStarted, reports.RunningReported, reports.ReadyReported}
	for i, m := range order {
		at, ok := milestones[m]
		if !ok {
			t.Errorf("milestone %s not recorded", m)
			continue
		}
		if i > 0 {
			t.Logf("phase %s_to_%s: %v", order[i-1], m, at.Sub(milestones[order[i-1]]).Round(time.Microsecond))
		}
	}
	t.Logf("phase agent_observed_to_ready_reported: %v", milestones[reports.ReadyReported].Sub(milestones[reports.AgentObserved]).Round(time.Microsecond))
	logFile := filepath.Join(opts.PodLogsDir, fmt.Sprintf("default_ready_%s", ready.UID), "main", "0.log")
	if b, err := os.ReadFile(logFile); err != nil || !bytes.Contains(b, []byte("hello from a real runtime")) {
		t.Errorf("container log %s: %q, %v", logFile, b, err)
	}
	podCgroup := filepath.Join("/sys/fs/cgroup/memory", cgroupRoot, "kubepods/besteffort", "pod"+string(ready.UID))
	if _, err := os.Stat(podCgroup); err != nil {
		t.Errorf("pod cgroup: %v", err)
	}

	// The kubelet API, while the crashing pod waits out its back-off.
	checkRealKubeletAPI(ctx, t, cl.admin, client, node, ready)

	// Crash loop: restarted at once, then after the 10 s back-off, and
	// waiting in CrashLoopBackOff in between.
	var sawBackOff bool
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, "crash", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, nil
		}
		cs := p.Status.ContainerStatuses[0]
		if w := cs.State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" {
			sawBackOff = true
		}
		return cs.RestartCount >= 2 && sawBackOff, nil
	})
	if err != nil {
		t.Fatalf("crash: restartCount ≥ 2 with CrashLoopBackOff not seen: %v", err)
	}
	crashed := containersOf(ctx, t, cri, crash.UID)
	attempts := map[uint32]*runtimeapi.ContainerStatus{}
	for _, c := range crashed {
		st, err := cri.Runtime.ContainerStatus(ctx, c.Id, false)
		if status.Code(err) == codes.NotFound {
			// Removed by the agent's container GC since the list: an
			// older attempt than the two it keeps.
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		attempts[c.Metadata.Attempt] = st.Status
	}
	// The agent keeps the newest dead container and its predecessor: the
	// back-off is between one attempt's exit and the next one's start, 10 s
	// after the first failure and doubling, as the kubelet's. On a loaded
	// machine the list may come an attempt or two later than the wait
	// above: the newest pair left is checked.
	checked := false
	for k := uint32(len(crashed) + 8); k >= 1; k-- {
		prev, next := attempts[k], attempts[k+1]
		if prev == nil || next == nil {
			continue
		}
		backOff := 10 * time.Second << (k - 1)
		gap := time.Duration(next.StartedAt - prev.FinishedAt)
		t.Logf("crash: attempt %d exited %d, attempt %d started %v later", k, prev.ExitCode, k+1, gap.Round(time.Millisecond))
		if prev.ExitCode != 3 || gap < backOff*9/10 || gap > 4*backOff {
			t.Errorf("attempt %d exit %d, restart after %v: want exit 3 and the %v back-off", k, prev.ExitCode, gap, backOff)
		}
		checked = true
		break
	}
	if !checked {
		// Only the newest attempt was left (the agent's GC took the rest):
		// it must have crashed as the pod says, and the gap cannot be seen.
		newest := uint32(0)
		for k := range attempts {
			newest = max(newest, k)
		}
		if st := attempts[newest]; newest < 2 || st == nil || st.ExitCode != 3 {
			t.Errorf("containers of the crashing pod by attempt: %v, want attempt 2 or later, exited 3", attempts)
		} else {
			t.Logf("crash: only attempt %d left, exited %d; no pair to time the back-off between", newest, st.ExitCode)
		}
	}

	// Deleting the pods removes their containers and sandboxes from
	// containerd, their log directories and their cgroups.
	for _, uid := range []types.UID{ready.UID, crash.UID} {
		sandboxes, err := cri.Runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(uid)}})
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range sandboxes {
			sandboxIDs = append(sandboxIDs, sb.Id)
		}
	}
	for _, name := range []string{"ready", "crash"} {
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		left, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil || len(left.Items) > 0 {
			return false, nil
		}
		for _, uid := range []types.UID{ready.UID, crash.UID} {
			sandboxes, err := cri.Runtime.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(uid)}})
			if err != nil || len(sandboxes) > 0 || len(containersOf(ctx, t, cri, uid)) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("pods, containers or sandboxes left 2 minutes after the deletion: %v", err)
	}
	if _, err := os.Stat(podCgroup); !os.IsNotExist(err) {
		t.Errorf("pod cgroup %s after the pod is gone: %v", podCgroup, err)
	}
	if _, err := os.Stat(filepath.Dir(filepath.Dir(logFile))); !os.IsNotExist(err) {
		t.Errorf("pod log directory after the pod is gone: %v", err)
	}
}

func containersOf(ctx context.Context, t *testing.T, cri *criRuntime, uid types.UID) []*runtimeapi.Container {
	t.Helper()
	cs, err := cri.Runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(uid)}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// checkDebugAttach does what `kubectl debug -it POD --image=busybox
// --target=main -- sh` does: it adds an ephemeral container with stdin and
// a TTY through the ephemeralcontainers subresource, waits for it to run,
// and attaches to it as kubectl 1.30 and later do (v5 websockets to the
// API server, passed on to the agent because its Node declares
// ExtendWebSocketsToKubelet, translated to SPDY towards containerd). A
// line typed into the shell is run, and `exit` ends the container.
func checkDebugAttach(ctx context.Context, t *testing.T, admin *rest.Config, client kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	pods := client.CoreV1().Pods(pod.Namespace)
	current, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	current.Spec.EphemeralContainers = append(current.Spec.EphemeralContainers, corev1.EphemeralContainer{
		TargetContainerName: "main",
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: "localhost/busybox:latest", ImagePullPolicy: corev1.PullNever,
			Command: []string{"sh"}, Stdin: true, TTY: true, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		},
	})
	if _, err := pods.UpdateEphemeralContainers(ctx, pod.Name, current, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("adding an ephemeral container to %s: %v", pod.Name, err)
	}
	// debuggerIs waits up to a minute for the debugger's status to meet ok.
	debuggerIs := func(ok func(corev1.ContainerStatus) bool) error {
		return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			i := slices.IndexFunc(p.Status.EphemeralContainerStatuses, func(cs corev1.ContainerStatus) bool { return cs.Name == "debugger" })
			return i >= 0 && ok(p.Status.EphemeralContainerStatuses[i]), nil
		})
	}
	err = debuggerIs(func(cs corev1.ContainerStatus) bool { return cs.State.Running != nil })
	if err != nil {
		t.Fatalf("ephemeral container debugger of %s not running in 1 min: %v", pod.Name, err)
	}

	u := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: "debugger", Stdin: true, Stdout: true, TTY: true}, scheme.ParameterCodec).URL()
	ex, err := remotecommand.NewWebSocketExecutor(admin, http.MethodGet, u.String())
	if err != nil {
		t.Fatal(err)
	}
	// Typed as a person would: a line, and once its answer is on the
	// screen (the computed debug-42, which the echoed input does not
	// hold), exit. Stdin stays open until then, as a terminal's does.
	attachCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stdin, typed := io.Pipe()
	screen := &watchedBuffer{want: "debug-42", seen: make(chan struct{})}
	go func() {
		_, _ = io.WriteString(typed, "echo debug-$((40+2))\n")
		select {
		case <-screen.seen:
			_, _ = io.WriteString(typed, "exit\n")
		case <-attachCtx.Done():
		}
		_ = typed.Close()
	}()
	err = ex.StreamWithContext(attachCtx, remotecommand.StreamOptions{Stdin: stdin, Stdout: screen, Tty: true})
	if out := screen.String(); err != nil || !strings.Contains(out, "debug-42") {
		t.Errorf("kubectl attach -it to the ephemeral container: %q, %v; want the shell's answer debug-42", out, err)
	}
	err = debuggerIs(func(cs corev1.ContainerStatus) bool {
		return cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0 && cs.RestartCount == 0
	})
	if err != nil {
		t.Errorf("ephemeral container debugger not terminated with exit 0 and no restart within 1 min of its shell's exit: %v", err)
	}
}

// watchedBuffer is a terminal's screen: it closes seen once want shows.
type watchedBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *watchedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

func (w *watchedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// viperFromAgentFlags gives v the agent command's flag defaults, as the
// command line would.
func viperFromAgentFlags(v *viper.Viper) error {
	return v.BindPFlags(newAgentCommand().Flags())
}

// checkRealKubeletAPI does what kubectl logs, exec and port-forward do with the
// pod through the API server, which calls the agent's kubelet API, and
// reads the agent's /stats/summary directly, as metrics-server does.
func checkRealKubeletAPI(ctx context.Context, t *testing.T, admin *rest.Config, client kubernetes.Interface, node *corev1.Node, pod *corev1.Pod) {
	pods := client.CoreV1().Pods(pod.Namespace)
	start := time.Now()
	logs, err := pods.GetLogs(pod.Name, &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
	if err != nil || !bytes.Contains(logs, []byte("hello from a real runtime")) {
		t.Errorf("kubectl logs %s: %q, %v; want its printed line", pod.Name, logs, err)
	}
	t.Logf("logs through the API server in %v", time.Since(start).Round(time.Millisecond))

	// kubectl exec speaks websockets (v5) to the API server, which passes
	// them on to the kubelet API (the Node declares
	// ExtendWebSocketsToKubelet), which translates them to SPDY towards
	// containerd's streaming server.
	execIn := func(stdin string, command ...string) (string, string, error) {
		u := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: "main", Command: command, Stdin: stdin != "", Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
		ex, err := remotecommand.NewWebSocketExecutor(admin, http.MethodGet, u.String())
		if err != nil {
			return "", "", err
		}
		var stdout, stderr bytes.Buffer
		opts := remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}
		if stdin != "" {
			opts.Stdin = strings.NewReader(stdin)
		}
		execCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err = ex.StreamWithContext(execCtx, opts)
		return stdout.String(), stderr.String(), err
	}
	start = time.Now()
	if out, errOut, err := execIn("", "echo", "hi"); err != nil || out != "hi\n" {
		t.Errorf("kubectl exec %s -- echo hi: %q, %q, %v; want \"hi\\n\"", pod.Name, out, errOut, err)
	}
	t.Logf("exec echo hi through the API server in %v", time.Since(start).Round(time.Millisecond))
	if out, errOut, err := execIn("typed in\n", "cat"); err != nil || out != "typed in\n" {
		t.Errorf("kubectl exec -i %s -- cat: %q, %q, %v; want the input back", pod.Name, out, errOut, err)
	}

	// kubectl debug -it: an ephemeral container with stdin and a TTY,
	// started on the running pod, then attached to over v5 websockets.
	start = time.Now()
	checkDebugAttach(ctx, t, admin, client, pod)
	t.Logf("kubectl debug -it: ephemeral container started, attached and exited in %v", time.Since(start).Round(time.Millisecond))

	// kubectl port-forward: SPDY tunnelled in websockets to the API server,
	// falling back to SPDY.
	start = time.Now()
	pfURL := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	tunnel, err := portforward.NewSPDYOverWebsocketDialer(pfURL, admin)
	if err != nil {
		t.Fatal(err)
	}
	rt, upgrader, err := spdy.RoundTripperFor(admin)
	if err != nil {
		t.Fatal(err)
	}
	dialer := portforward.NewFallbackDialer(tunnel, spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, pfURL),
		func(err error) bool { return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err) })
	stop, readyCh := make(chan struct{}), make(chan struct{})
	var pfOut, pfErr bytes.Buffer
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:8080"}, stop, readyCh, &pfOut, &pfErr)
	if err != nil {
		t.Fatal(err)
	}
	pfDone := make(chan error, 1)
	go func() { pfDone <- fw.ForwardPorts() }()
	defer func() {
		close(stop)
		if err := <-pfDone; err != nil {
			t.Errorf("port-forward: %v", err)
		}
	}()
	select {
	case <-readyCh:
	case err := <-pfDone:
		pfDone <- err
		t.Fatalf("port-forward ended before it was ready: %v; %s", err, pfErr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("port-forward not ready in 30 s: %s", pfErr.String())
	}
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	httpClient := &http.Client{Timeout: 30 * time.Second}
	resp, err := httpClient.Get(fmt.Sprintf("http://127.0.0.1:%d/", ports[0].Local))
	if err != nil {
		t.Fatalf("GET through the port-forward: %v; %s", err, pfErr.String())
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || string(body) != "pong\n" {
		t.Errorf("GET through the port-forward to port 8080: %d %q, %v; want httpd's pong", resp.StatusCode, body, err)
	}
	t.Logf("port-forward ready and answered in %v", time.Since(start).Round(time.Millisecond))

	// metrics-server reads /stats/summary from the kubelet port with its
	// client certificate; the agent's own certificate is self-signed, and
	// like the API server without --kubelet-certificate-authority the test
	// does not verify it.
	var nodeIP string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}
	summaryURL := "https://" + net.JoinHostPort(nodeIP, strconv.Itoa(int(node.Status.DaemonEndpoints.KubeletEndpoint.Port))) + "/stats/summary"
	anonymous := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err = anonymous.Get(summaryURL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous GET %s: %d, want 401", summaryURL, resp.StatusCode)
	}
	tlsCfg, err := rest.TLSConfigFor(admin)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg.RootCAs, tlsCfg.InsecureSkipVerify = nil, true
	authorized := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	var workingSet uint64
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		resp, err := authorized.Get(summaryURL)
		if err != nil {
			return false, err
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return false, fmt.Errorf("GET %s as admin: %d %s", summaryURL, resp.StatusCode, b)
		}
		var summary statsapi.Summary
		if err := json.NewDecoder(resp.Body).Decode(&summary); err != nil {
			return false, err
		}
		for _, ps := range summary.Pods {
			if ps.PodRef.UID == string(pod.UID) && ps.Memory != nil && ps.Memory.WorkingSetBytes != nil {
				workingSet = *ps.Memory.WorkingSetBytes
			}
		}
		return workingSet > 0, nil
	})
	if err != nil {
		t.Errorf("/stats/summary: pod %s with a non-zero memory working set not seen: %v", pod.Name, err)
	}
	t.Logf("/stats/summary: pod %s working set %d bytes", pod.Name, workingSet)
}
