package fakeruntime

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestVersionStatusAndConfig(t *testing.T) {
	rt, _ := newTestRuntime(t, Behaviour{})
	ctx := context.Background()
	v, err := rt.Version(ctx, "v1")
	if err != nil || v.RuntimeName != "fleetlet-fake" || v.RuntimeApiVersion != "v1" || v.RuntimeVersion == "" {
		t.Fatalf("Version = %v, %v", v, err)
	}
	st, err := rt.Status(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	ready := map[string]bool{}
	for _, c := range st.Status.Conditions {
		ready[c.Type] = c.Status
	}
	if !ready[runtimeapi.RuntimeReady] || !ready[runtimeapi.NetworkReady] {
		t.Errorf("Status conditions = %v, want RuntimeReady and NetworkReady true", st.Status.Conditions)
	}
	cfg, err := rt.RuntimeConfig(ctx)
	if err != nil || cfg.GetLinux().GetCgroupDriver() != runtimeapi.CgroupDriver_CGROUPFS {
		t.Errorf("RuntimeConfig = %v, %v; want cgroupfs", cfg, err)
	}
	wantCode(t, "UpdateRuntimeConfig(bad CIDR)", rt.UpdateRuntimeConfig(ctx, &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: "10.0.0.0/33"}}), codes.InvalidArgument)
	wantCode(t, "UpdateRuntimeConfig(nil)", rt.UpdateRuntimeConfig(ctx, nil), codes.OK)
	wantCode(t, "Close", rt.Close(ctx), codes.OK)
}

func TestUnimplemented(t *testing.T) {
	rt, _ := newTestRuntime(t, Behaviour{})
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Exec":                      func() error { _, err := rt.Exec(ctx, &runtimeapi.ExecRequest{}); return err },
		"Attach":                    func() error { _, err := rt.Attach(ctx, &runtimeapi.AttachRequest{}); return err },
		"PortForward":               func() error { _, err := rt.PortForward(ctx, &runtimeapi.PortForwardRequest{}); return err },
		"CheckpointContainer":       func() error { return rt.CheckpointContainer(ctx, nil) },
		"UpdatePodSandboxResources": func() error { _, err := rt.UpdatePodSandboxResources(ctx, nil); return err },
		"CheckpointPod":             func() error { return rt.CheckpointPod(ctx, nil) },
		"RestorePod":                func() error { _, err := rt.RestorePod(ctx, nil); return err },
		"ListMetricDescriptors":     func() error { _, err := rt.ListMetricDescriptors(ctx); return err },
		"ListPodSandboxMetrics":     func() error { _, err := rt.ListPodSandboxMetrics(ctx); return err },
	} {
		err := call()
		wantCode(t, name, err, codes.Unimplemented)
		wantErrContains(t, name, err, name)
	}
}

func TestRunPodSandboxStatus(t *testing.T) {
	rt, clk := newTestRuntime(t, Behaviour{})
	cfg := podConfig("web-0")
	id := runPod(t, rt, cfg)
	if len(id) != 64 || !isHex(id) {
		t.Errorf("sandbox ID %q is not 64 hex digits", id)
	}
	st := sandboxStatus(t, rt, id)
	if st.Id != id || st.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("status id/state = %s/%v", st.Id, st.State)
	}
	if st.CreatedAt != clk.Now().UnixNano() {
		t.Errorf("created_at = %d, want the clock's %d", st.CreatedAt, clk.Now().UnixNano())
	}
	if md := st.Metadata; md.Name != "web-0" || md.Namespace != "default" || md.Uid != "uid-web-0" {
		t.Errorf("metadata = %v", md)
	}
	if !maps.Equal(st.Labels, cfg.Labels) || !maps.Equal(st.Annotations, cfg.Annotations) {
		t.Errorf("labels/annotations = %v/%v", st.Labels, st.Annotations)
	}
	if got := st.GetNetwork().GetIp(); got != "10.244.1.2" {
		t.Errorf("pod IP = %q, want 10.244.1.2 (the first after the gateway)", got)
	}
	if ns := st.GetLinux().GetNamespaces().GetOptions(); ns.GetNetwork() != runtimeapi.NamespaceMode_POD || ns.GetPid() != runtimeapi.NamespaceMode_CONTAINER {
		t.Errorf("namespace options = %v", ns)
	}

	// What a caller passes in is copied, and what it gets is its own
	// struct; the label and annotation maps it gets are shared and
	// read-only (see the package documentation).
	st.Metadata.Name = "changed"
	cfg.Labels["app"] = "changed-in-config"
	again := sandboxStatus(t, rt, id)
	if again.Labels["app"] != "web" || again.Metadata.Name != "web-0" {
		t.Errorf("internal state changed through a returned or passed-in value: %v", again)
	}
}

func TestRunPodSandboxErrors(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		noCIDR    bool
		config    *runtimeapi.PodSandboxConfig
		wantCode  codes.Code
		wantInErr string
		wantIP    string
	}{
		{name: "no pod CIDR", noCIDR: true, config: podConfig("a"), wantCode: codes.FailedPrecondition, wantInErr: "network is not ready"},
		{name: "host network without pod CIDR", noCIDR: true, config: hostNetworkPodConfig("a"), wantCode: codes.OK},
		{name: "host network has no pod IP", config: hostNetworkPodConfig("a"), wantCode: codes.OK},
		{name: "pod network", config: podConfig("a"), wantCode: codes.OK, wantIP: "10.244.1.2"},
		{name: "no metadata", config: &runtimeapi.PodSandboxConfig{}, wantCode: codes.InvalidArgument},
		{name: "no uid", config: &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "a", Namespace: "b"}}, wantCode: codes.InvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt := New(Config{Seed: 1})
			if !tc.noCIDR {
				setPodCIDR(t, rt, testPodCIDR)
			}
			id, err := rt.RunPodSandbox(ctx, tc.config, "")
			wantCode(t, "RunPodSandbox", err, tc.wantCode)
			if tc.wantInErr != "" {
				wantErrContains(t, "RunPodSandbox", err, tc.wantInErr)
			}
			if err != nil {
				if n, _ := rt.ListPodSandbox(ctx, nil); len(n) != 0 {
					t.Errorf("a failed RunPodSandbox left %d sandboxes", len(n))
				}
				return
			}
			if got := sandboxStatus(t, rt, id).GetNetwork().GetIp(); got != tc.wantIP {
				t.Errorf("pod IP = %q, want %q", got, tc.wantIP)
			}
		})
	}
}

func TestSandboxLifecycle(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		// act runs on a fresh runtime with one ready sandbox (one running
		// and one created container in it) and returns the error of the
		// call under test.
		act       func(rt *Runtime, sbID string) error
		wantCode  codes.Code
		wantState runtimeapi.PodSandboxState
		gone      bool // the sandbox and its containers are removed
	}{
		{name: "stop", act: func(rt *Runtime, id string) error { return rt.StopPodSandbox(ctx, id) }, wantState: runtimeapi.PodSandboxState_SANDBOX_NOTREADY},
		{name: "stop twice", act: func(rt *Runtime, id string) error {
			_ = rt.StopPodSandbox(ctx, id)
			return rt.StopPodSandbox(ctx, id)
		}, wantState: runtimeapi.PodSandboxState_SANDBOX_NOTREADY},
		{name: "stop by ID prefix", act: func(rt *Runtime, id string) error { return rt.StopPodSandbox(ctx, id[:12]) }, wantState: runtimeapi.PodSandboxState_SANDBOX_NOTREADY},
		{name: "stop unknown", act: func(rt *Runtime, id string) error { return rt.StopPodSandbox(ctx, "unknown") }, wantState: runtimeapi.PodSandboxState_SANDBOX_READY},
		{name: "remove stopped", act: func(rt *Runtime, id string) error {
			_ = rt.StopPodSandbox(ctx, id)
			return rt.RemovePodSandbox(ctx, id)
		}, gone: true},
		{name: "remove ready (forced)", act: func(rt *Runtime, id string) error { return rt.RemovePodSandbox(ctx, id) }, gone: true},
		{name: "remove twice", act: func(rt *Runtime, id string) error {
			_ = rt.RemovePodSandbox(ctx, id)
			return rt.RemovePodSandbox(ctx, id)
		}, gone: true},
		{name: "remove unknown", act: func(rt *Runtime, id string) error { return rt.RemovePodSandbox(ctx, "unknown") }, wantState: runtimeapi.PodSandboxState_SANDBOX_READY},
		{name: "run again for the same attempt", act: func(rt *Runtime, id string) error {
			_, err := rt.RunPodSandbox(ctx, podConfig("web-0"), "")
			return err
		}, wantCode: codes.AlreadyExists, wantState: runtimeapi.PodSandboxState_SANDBOX_READY},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt, _ := newTestRuntime(t, Behaviour{})
			pod := podConfig("web-0")
			sbID := runPod(t, rt, pod)
			running := runContainer(t, rt, sbID, pod, "app", pauseImage)
			created, err := rt.CreateContainer(ctx, sbID, containerConfig(pod, "sidecar", pauseImage), pod)
			if err != nil {
				t.Fatal(err)
			}

			wantCode(t, tc.name, tc.act(rt, sbID), tc.wantCode)

			resp, err := rt.PodSandboxStatus(ctx, sbID, false)
			if tc.gone {
				wantCode(t, "PodSandboxStatus after remove", err, codes.NotFound)
				if cs, _ := rt.ListContainers(ctx, nil); len(cs) != 0 {
					t.Errorf("%d containers left after their sandbox was removed", len(cs))
				}
				if len(rt.names) != 0 {
					t.Errorf("names still reserved after remove: %v", rt.names)
				}
				// The name is free again.
				runPod(t, rt, podConfig("web-0"))
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status.State != tc.wantState {
				t.Errorf("state = %v, want %v", resp.Status.State, tc.wantState)
			}
			wantContainer := runtimeapi.ContainerState_CONTAINER_RUNNING
			if tc.wantState == runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
				wantContainer = runtimeapi.ContainerState_CONTAINER_EXITED
				if st := containerStatus(t, rt, running); st.ExitCode != 137 || st.Reason != "Error" || st.FinishedAt == 0 {
					t.Errorf("container killed with its sandbox: exit %d reason %q finished %d; want 137 Error", st.ExitCode, st.Reason, st.FinishedAt)
				}
			}
			if got := containerStatus(t, rt, running).State; got != wantContainer {
				t.Errorf("running container is %v, want %v", got, wantContainer)
			}
			// A container that never started stays CREATED, as in containerd.
			if got := containerStatus(t, rt, created).State; got != runtimeapi.ContainerState_CONTAINER_CREATED {
				t.Errorf("created container is %v, want CONTAINER_CREATED", got)
			}
		})
	}
}

func TestListPodSandboxFilter(t *testing.T) {
	rt, _ := newTestRuntime(t, Behaviour{})
	ctx := context.Background()
	a := runPod(t, rt, podConfig("a"))
	bCfg := podConfig("b")
	bCfg.Labels["app"] = "db"
	b := runPod(t, rt, bCfg)
	c := runPod(t, rt, podConfig("c"))
	if err := rt.StopPodSandbox(ctx, c); err != nil {
		t.Fatal(err)
	}
	ready := &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}
	notReady := &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}
	tests := []struct {
		name   string
		filter *runtimeapi.PodSandboxFilter
		want   []string
	}{
		{"nil filter, oldest first", nil, []string{a, b, c}},
		{"empty filter", &runtimeapi.PodSandboxFilter{}, []string{a, b, c}},
		{"id", &runtimeapi.PodSandboxFilter{Id: b}, []string{b}},
		{"id prefix", &runtimeapi.PodSandboxFilter{Id: b[:10]}, []string{b}},
		{"unknown id", &runtimeapi.PodSandboxFilter{Id: "nope"}, nil},
		{"ready", &runtimeapi.PodSandboxFilter{State: ready}, []string{a, b}},
		{"not ready", &runtimeapi.PodSandboxFilter{State: notReady}, []string{c}},
		{"label", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "web"}}, []string{a, c}},
		{"label and state", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "web"}, State: ready}, []string{a}},
		{"two labels", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "db", "io.kubernetes.pod.name": "b"}}, []string{b}},
		{"missing label", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"tier": "x"}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			items, err := rt.ListPodSandbox(ctx, tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range items {
				got = append(got, it.Id)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodIPAllocationAndRelease(t *testing.T) {
	rt, _ := newTestRuntime(t, Behaviour{})
	ctx := context.Background()
	setPodCIDR(t, rt, "10.0.0.0/29") // .2 to .6 are usable: network, gateway and broadcast are not
	ipOf := func(id string) string { return sandboxStatus(t, rt, id).GetNetwork().GetIp() }

	var ids []string
	for i, want := range []string{"10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"} {
		id := runPod(t, rt, podConfig(string(rune('a'+i))))
		if got := ipOf(id); got != want {
			t.Fatalf("pod %d got IP %s, want %s", i, got, want)
		}
		ids = append(ids, id)
	}
	_, err := rt.RunPodSandbox(ctx, podConfig("full"), "")
	wantCode(t, "RunPodSandbox on a full range", err, codes.ResourceExhausted)
	// A host-network pod needs no IP.
	runPod(t, rt, hostNetworkPodConfig("host"))

	// Stopping releases the IP (CRI: StopPodSandbox reclaims network
	// resources) but the stopped sandbox still reports it, as containerd.
	if err := rt.StopPodSandbox(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	if got := ipOf(ids[1]); got != "10.0.0.3" {
		t.Errorf("stopped sandbox reports IP %q, want the one it had", got)
	}
	if got := ipOf(runPod(t, rt, podConfig("reuse-1"))); got != "10.0.0.3" {
		t.Errorf("after a stop got IP %s, want the released 10.0.0.3", got)
	}
	// Removing a sandbox that was never stopped releases its IP too, and
	// removing the stopped one again releases nothing twice.
	if err := rt.RemovePodSandbox(ctx, ids[3]); err != nil {
		t.Fatal(err)
	}
	if err := rt.RemovePodSandbox(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	if got := ipOf(runPod(t, rt, podConfig("reuse-2"))); got != "10.0.0.5" {
		t.Errorf("after a remove got IP %s, want the released 10.0.0.5", got)
	}
	if len(rt.network.used) != 5 {
		t.Errorf("%d IPs in use, want 5", len(rt.network.used))
	}
}

func TestDualStackPodIPs(t *testing.T) {
	rt, _ := newTestRuntime(t, Behaviour{})
	setPodCIDR(t, rt, "10.1.0.0/24,fd00:10:1::/64")
	st := sandboxStatus(t, rt, runPod(t, rt, podConfig("a")))
	if st.Network.Ip != "10.1.0.2" || len(st.Network.AdditionalIps) != 1 || st.Network.AdditionalIps[0].Ip != "fd00:10:1::2" {
		t.Errorf("network = %v, want 10.1.0.2 and fd00:10:1::2", st.Network)
	}
}

func TestCreatedAtFollowsClock(t *testing.T) {
	rt, clk := newTestRuntime(t, Behaviour{})
	a := runPod(t, rt, podConfig("a"))
	clk.Step(time.Second)
	b := runPod(t, rt, podConfig("b"))
	if d := sandboxStatus(t, rt, b).CreatedAt - sandboxStatus(t, rt, a).CreatedAt; d != int64(time.Second) {
		t.Errorf("created_at differ by %d ns, want 1s", d)
	}
}
