package fakeruntime

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestStopOutcome(t *testing.T) {
	tests := []struct {
		name        string
		stopLatency time.Duration
		timeout     int64
		wantWait    time.Duration
		wantCode    int32
		wantReason  string
	}{
		{"graceful, instant", 0, 30, 0, 0, "Completed"},
		{"graceful, within the grace period", 2 * time.Second, 30, 2 * time.Second, 0, "Completed"},
		{"exactly the grace period", 30 * time.Second, 30, 30 * time.Second, 0, "Completed"},
		{"killed when the grace period ends", time.Minute, 30, 30 * time.Second, 137, "Error"},
		{"no grace period: killed at once", 2 * time.Second, 0, 0, 137, "Error"},
		{"negative grace period: killed at once", 2 * time.Second, -1, 0, 137, "Error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wait, code, reason := stopOutcome(tc.stopLatency, tc.timeout)
			if wait != tc.wantWait || code != tc.wantCode || reason != tc.wantReason {
				t.Errorf("stopOutcome(%s, %d) = %s, %d, %q; want %s, %d, %q", tc.stopLatency, tc.timeout, wait, code, reason, tc.wantWait, tc.wantCode, tc.wantReason)
			}
		})
	}
}

func TestContainerLifecycle(t *testing.T) {
	ctx := context.Background()
	type env struct {
		rt   *Runtime
		pod  *runtimeapi.PodSandboxConfig
		sbID string
	}
	create := func(e env, name, image string) (string, error) {
		return e.rt.CreateContainer(ctx, e.sbID, containerConfig(e.pod, name, image), e.pod)
	}
	tests := []struct {
		name string
		// act returns the container to check (if any) and the error of the
		// call under test.
		act        func(t *testing.T, e env) (string, error)
		wantCode   codes.Code
		wantInErr  string
		wantState  runtimeapi.ContainerState
		wantExit   int32
		wantReason string
		wantGone   bool
	}{
		{name: "create", act: func(t *testing.T, e env) (string, error) { return create(e, "app", busyboxImage) },
			wantState: runtimeapi.ContainerState_CONTAINER_CREATED},
		{name: "create by image ID", act: func(t *testing.T, e env) (string, error) {
			return create(e, "app", pull(t, e.rt, busyboxImage))
		}, wantState: runtimeapi.ContainerState_CONTAINER_CREATED},
		{name: "create with a missing image", act: func(t *testing.T, e env) (string, error) { return create(e, "app", "nginx:1.27") },
			wantCode: codes.NotFound, wantInErr: `image "nginx:1.27" not found`},
		{name: "create in a missing sandbox", act: func(t *testing.T, e env) (string, error) {
			return e.rt.CreateContainer(ctx, "missing", containerConfig(e.pod, "app", busyboxImage), e.pod)
		}, wantCode: codes.NotFound},
		{name: "create in a stopped sandbox", act: func(t *testing.T, e env) (string, error) {
			_ = e.rt.StopPodSandbox(ctx, e.sbID)
			return create(e, "app", busyboxImage)
		}, wantCode: codes.NotFound, wantInErr: "not ready"},
		{name: "create twice for one attempt", act: func(t *testing.T, e env) (string, error) {
			id, _ := create(e, "app", busyboxImage)
			_, err := create(e, "app", busyboxImage)
			return id, err
		}, wantCode: codes.AlreadyExists, wantState: runtimeapi.ContainerState_CONTAINER_CREATED},
		{name: "create without metadata", act: func(t *testing.T, e env) (string, error) {
			return e.rt.CreateContainer(ctx, e.sbID, &runtimeapi.ContainerConfig{Image: &runtimeapi.ImageSpec{Image: busyboxImage}}, e.pod)
		}, wantCode: codes.InvalidArgument},
		{name: "start", act: func(t *testing.T, e env) (string, error) {
			id, _ := create(e, "app", busyboxImage)
			return id, e.rt.StartContainer(ctx, id)
		}, wantState: runtimeapi.ContainerState_CONTAINER_RUNNING},
		{name: "start twice", act: func(t *testing.T, e env) (string, error) {
			id, _ := create(e, "app", busyboxImage)
			_ = e.rt.StartContainer(ctx, id)
			return id, e.rt.StartContainer(ctx, id)
		}, wantCode: codes.FailedPrecondition, wantState: runtimeapi.ContainerState_CONTAINER_RUNNING},
		{name: "start in a stopped sandbox", act: func(t *testing.T, e env) (string, error) {
			id, _ := create(e, "app", busyboxImage)
			_ = e.rt.StopPodSandbox(ctx, e.sbID)
			return id, e.rt.StartContainer(ctx, id)
		}, wantCode: codes.FailedPrecondition, wantState: runtimeapi.ContainerState_CONTAINER_CREATED},
		{name: "start unknown", act: func(t *testing.T, e env) (string, error) { return "", e.rt.StartContainer(ctx, "unknown") },
			wantCode: codes.NotFound},
		{name: "stop gracefully", act: func(t *testing.T, e env) (string, error) {
			id := runContainer(t, e.rt, e.sbID, e.pod, "app", busyboxImage)
			return id, e.rt.StopContainer(ctx, id, 30)
		}, wantState: runtimeapi.ContainerState_CONTAINER_EXITED, wantExit: 0, wantReason: "Completed"},
		{name: "stop with no grace period", act: func(t *testing.T, e env) (string, error) {
			id := runContainer(t, e.rt, e.sbID, e.pod, "app", busyboxImage)
			return id, e.rt.StopContainer(ctx, id, 0)
		}, wantState: runtimeapi.ContainerState_CONTAINER_EXITED, wantExit: 137, wantReason: "Error"},
		{name: "stop twice", act: func(t *testing.T, e env) (string, error) {
			id := runContainer(t, e.rt, e.sbID, e.pod, "app", busyboxImage)
			_ = e.rt.StopContainer(ctx, id, 30)
			return id, e.rt.StopContainer(ctx, id, 0)
		}, wantState: runtimeapi.ContainerState_CONTAINER_EXITED, wantExit: 0, wantReason: "Completed"},
		{name: "stop a created container", act: func(t *testing.T, e env) (string, error) {
			id, _ := create(e, "app", busyboxImage)
			return id, e.rt.StopContainer(ctx, id, 30)
		}, wantState: runtimeapi.ContainerState_CONTAINER_CREATED},
		{name: "stop unknown", act: func(t *testing.T, e env) (string, error) { return "", e.rt.StopContainer(ctx, "unknown", 30) },
			wantCode: codes.NotFound},
		{name: "remove running", act: func(t *testing.T, e env) (string, error) {
			id := runContainer(t, e.rt, e.sbID, e.pod, "app", busyboxImage)
			return id, e.rt.RemoveContainer(ctx, id)
		}, wantGone: true},
		{name: "remove twice", act: func(t *testing.T, e env) (string, error) {
			id := runContainer(t, e.rt, e.sbID, e.pod, "app", busyboxImage)
			_ = e.rt.RemoveContainer(ctx, id)
			return id, e.rt.RemoveContainer(ctx, id)
		}, wantGone: true},
		{name: "remove unknown", act: func(t *testing.T, e env) (string, error) { return "", e.rt.RemoveContainer(ctx, "unknown") }},
		{name: "create again after remove", act: func(t *testing.T, e env) (string, error) {
			id, _ := create(e, "app", busyboxImage)
			_ = e.rt.RemoveContainer(ctx, id)
			return create(e, "app", busyboxImage)
		}, wantState: runtimeapi.ContainerState_CONTAINER_CREATED},
		{name: "exec in running", act: func(t *testing.T, e env) (string, error) {
			id := runContainer(t, e.rt, e.sbID, e.pod, "app", busyboxImage)
			stdout, stderr, err := e.rt.ExecSync(ctx, id, []string{"true"}, time.Second)
			if len(stdout) != 0 || len(stderr) != 0 {
				t.Errorf("ExecSync output %q %q, want none", stdout, stderr)
			}
			return id, err
		}, wantState: runtimeapi.ContainerState_CONTAINER_RUNNING},
		{name: "exec in created", act: func(t *testing.T, e env) (string, error) {
			id, _ := create(e, "app", busyboxImage)
			_, _, err := e.rt.ExecSync(ctx, id, []string{"true"}, time.Second)
			return id, err
		}, wantCode: codes.FailedPrecondition, wantState: runtimeapi.ContainerState_CONTAINER_CREATED},
		{name: "update resources of exited", act: func(t *testing.T, e env) (string, error) {
			id := runContainer(t, e.rt, e.sbID, e.pod, "app", busyboxImage)
			_ = e.rt.StopContainer(ctx, id, 30)
			return id, e.rt.UpdateContainerResources(ctx, id, &runtimeapi.ContainerResources{})
		}, wantCode: codes.FailedPrecondition, wantState: runtimeapi.ContainerState_CONTAINER_EXITED, wantReason: "Completed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt, _ := newTestRuntime(t, Behaviour{})
			pull(t, rt, busyboxImage)
			pod := podConfig("web-0")
			e := env{rt: rt, pod: pod, sbID: runPod(t, rt, pod)}

			id, err := tc.act(t, e)
			wantCode(t, tc.name, err, tc.wantCode)
			if tc.wantInErr != "" {
				wantErrContains(t, tc.name, err, tc.wantInErr)
			}
			if tc.wantGone {
				_, err := rt.ContainerStatus(ctx, id, false)
				wantCode(t, "ContainerStatus after remove", err, codes.NotFound)
				if got := rt.sandboxes[e.sbID].containers; len(got) != 0 {
					t.Errorf("sandbox still lists containers %v", got)
				}
				return
			}
			if id == "" {
				return
			}
			st := containerStatus(t, rt, id)
			if st.State != tc.wantState || st.ExitCode != tc.wantExit || st.Reason != tc.wantReason {
				t.Errorf("state %v exit %d reason %q; want %v %d %q", st.State, st.ExitCode, st.Reason, tc.wantState, tc.wantExit, tc.wantReason)
			}
		})
	}
}

func TestContainerStatusFields(t *testing.T) {
	rt, clk := newTestRuntime(t, Behaviour{})
	ctx := context.Background()
	imageID := pull(t, rt, busyboxImage)
	pod := podConfig("web-0")
	sbID := runPod(t, rt, pod)

	cfg := containerConfig(pod, "app", imageID) // the kubelet passes the image ID
	cfg.Image.UserSpecifiedImage = busyboxImage
	created := clk.Now()
	id, err := rt.CreateContainer(ctx, sbID, cfg, pod)
	if err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	if err := rt.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	if err := rt.StopContainer(ctx, id, 30); err != nil {
		t.Fatal(err)
	}

	st := containerStatus(t, rt, id)
	if st.Id != id || st.Metadata.GetName() != "app" {
		t.Errorf("id/metadata = %s/%v", st.Id, st.Metadata)
	}
	if st.CreatedAt != created.UnixNano() || st.StartedAt != created.Add(time.Second).UnixNano() || st.FinishedAt != created.Add(2*time.Second).UnixNano() {
		t.Errorf("created/started/finished = %d/%d/%d, want one second apart from %d", st.CreatedAt, st.StartedAt, st.FinishedAt, created.UnixNano())
	}
	if st.Image.GetImage() != "docker.io/library/busybox:1.36" || st.Image.GetUserSpecifiedImage() != busyboxImage {
		t.Errorf("image spec = %v, want the repo tag and the user's spelling", st.Image)
	}
	img, err := rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: imageID}, false)
	if err != nil {
		t.Fatal(err)
	}
	// containerd's: the repo digest as image_ref (the kubelet's imageID),
	// the image's ID as image_id.
	if digest := img.GetImage().GetRepoDigests()[0]; st.ImageRef != digest || st.ImageId != imageID {
		t.Errorf("image_ref/image_id = %s/%s, want %s/%s", st.ImageRef, st.ImageId, digest, imageID)
	}
	if u := st.GetUser().GetLinux(); u == nil || u.Uid != 0 || u.Gid != 0 || !slices.Equal(u.SupplementalGroups, []int64{0}) {
		t.Errorf("user = %v, want root with group 0, as an image without a USER runs", st.GetUser())
	}
	if want := "/var/log/pods/default_web-0_uid-web-0/app/0.log"; st.LogPath != want {
		t.Errorf("log path = %q, want %q", st.LogPath, want)
	}
	if st.Labels["io.kubernetes.container.name"] != "app" || st.Annotations["io.kubernetes.container.restartCount"] != "0" {
		t.Errorf("labels/annotations = %v/%v", st.Labels, st.Annotations)
	}
	if st.Resources.GetLinux().GetMemoryLimitInBytes() != 128<<20 {
		t.Errorf("resources = %v, want those of the config", st.Resources)
	}

	// Returned values are copies, but for the label and annotation maps,
	// which are shared and read-only (see the package documentation).
	st.Resources.Linux.MemoryLimitInBytes = 1
	cfg.Labels["io.kubernetes.container.name"] = "changed-in-config"
	cfg.Linux.Resources.CpuShares = 1
	again := containerStatus(t, rt, id)
	if again.Labels["io.kubernetes.container.name"] != "app" || again.Resources.Linux.MemoryLimitInBytes != 128<<20 || again.Resources.Linux.CpuShares != 102 {
		t.Errorf("internal state changed through a returned or passed-in value: %v", again)
	}
}

func TestUpdateContainerResources(t *testing.T) {
	rt, _ := newTestRuntime(t, Behaviour{})
	ctx := context.Background()
	pod := podConfig("web-0")
	id := runContainer(t, rt, runPod(t, rt, pod), pod, "app", pauseImage)
	res := &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{CpuQuota: 50000, CpuPeriod: 100000, MemoryLimitInBytes: 256 << 20}}
	if err := rt.UpdateContainerResources(ctx, id, res); err != nil {
		t.Fatal(err)
	}
	res.Linux.CpuQuota = 1 // the runtime keeps its own copy
	got := containerStatus(t, rt, id).Resources.GetLinux()
	if got.CpuQuota != 50000 || got.MemoryLimitInBytes != 256<<20 {
		t.Errorf("resources = %v", got)
	}
	wantCode(t, "UpdateContainerResources(unknown)", rt.UpdateContainerResources(ctx, "unknown", res), codes.NotFound)
}

func TestListContainersFilter(t *testing.T) {
	rt, _ := newTestRuntime(t, Behaviour{})
	ctx := context.Background()
	podA, podB := podConfig("a"), podConfig("b")
	sbA, sbB := runPod(t, rt, podA), runPod(t, rt, podB)
	a1 := runContainer(t, rt, sbA, podA, "app", pauseImage)
	a2, err := rt.CreateContainer(ctx, sbA, containerConfig(podA, "sidecar", pauseImage), podA)
	if err != nil {
		t.Fatal(err)
	}
	b1 := runContainer(t, rt, sbB, podB, "app", pauseImage)
	if err := rt.StopContainer(ctx, b1, 30); err != nil {
		t.Fatal(err)
	}
	state := func(s runtimeapi.ContainerState) *runtimeapi.ContainerStateValue {
		return &runtimeapi.ContainerStateValue{State: s}
	}
	tests := []struct {
		name   string
		filter *runtimeapi.ContainerFilter
		want   []string
	}{
		{"nil filter, oldest first", nil, []string{a1, a2, b1}},
		{"id", &runtimeapi.ContainerFilter{Id: a2}, []string{a2}},
		{"id prefix", &runtimeapi.ContainerFilter{Id: a2[:8]}, []string{a2}},
		{"sandbox", &runtimeapi.ContainerFilter{PodSandboxId: sbA}, []string{a1, a2}},
		{"sandbox prefix", &runtimeapi.ContainerFilter{PodSandboxId: sbB[:8]}, []string{b1}},
		{"running", &runtimeapi.ContainerFilter{State: state(runtimeapi.ContainerState_CONTAINER_RUNNING)}, []string{a1}},
		{"created", &runtimeapi.ContainerFilter{State: state(runtimeapi.ContainerState_CONTAINER_CREATED)}, []string{a2}},
		{"exited", &runtimeapi.ContainerFilter{State: state(runtimeapi.ContainerState_CONTAINER_EXITED)}, []string{b1}},
		{"label", &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": "uid-b"}}, []string{b1}},
		{"label and sandbox", &runtimeapi.ContainerFilter{PodSandboxId: sbA, LabelSelector: map[string]string{"io.kubernetes.container.name": "app"}}, []string{a1}},
		{"no match", &runtimeapi.ContainerFilter{PodSandboxId: sbB, State: state(runtimeapi.ContainerState_CONTAINER_RUNNING)}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			items, err := rt.ListContainers(ctx, tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range items {
				got = append(got, it.Id)
				if it.PodSandboxId == "" || it.Metadata.GetName() == "" || it.ImageRef == "" || it.CreatedAt == 0 {
					t.Errorf("incomplete list item %v", it)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestIDPrefixLookup(t *testing.T) {
	rt, _ := newTestRuntime(t, Behaviour{})
	pod := podConfig("web-0")
	id := runContainer(t, rt, runPod(t, rt, pod), pod, "app", pauseImage)
	if got := containerStatus(t, rt, id[:6]).Id; got != id {
		t.Errorf("prefix lookup found %s, want %s", got, id)
	}
	_, err := rt.ContainerStatus(context.Background(), "", false)
	wantCode(t, "ContainerStatus(\"\")", err, codes.NotFound)
	// An ambiguous prefix is an error, never a guess.
	if _, err := lookupLocked(map[string]*container{"abc1": {}, "abc2": {}}, "container", "abc"); err == nil {
		t.Error("ambiguous prefix resolved")
	} else {
		wantCode(t, "ambiguous prefix", err, codes.InvalidArgument)
	}
}

// TestVerboseContainerStatus: as containerd's, a verbose status carries the
// config the container was created from, so that `crictl inspect` shows its
// environment and mounts.
func TestVerboseContainerStatus(t *testing.T) {
	rt, _ := newTestRuntime(t, Behaviour{})
	ctx := context.Background()
	imageID := pull(t, rt, busyboxImage)
	pod := podConfig("web-0")
	sbID := runPod(t, rt, pod)
	cfg := containerConfig(pod, "app", imageID)
	cfg.Envs = []*runtimeapi.KeyValue{{Key: "POD_NAME", Value: []byte("web-0")}}
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/scratch", HostPath: "/var/lib/kubelet/pods/u/volumes/scratch"}}
	id, err := rt.CreateContainer(ctx, sbID, cfg, pod)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := rt.ContainerStatus(ctx, id, false)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Info != nil || len(plain.Status.Mounts) != 1 || plain.Status.Mounts[0].ContainerPath != "/scratch" {
		t.Errorf("plain status: info %v, mounts %v; want no info and the config's mount", plain.Info, plain.Status.Mounts)
	}
	verbose, err := rt.ContainerStatus(ctx, id, true)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		SandboxID string          `json:"sandboxID"`
		Config    json.RawMessage `json:"config"`
	}
	config := &runtimeapi.ContainerConfig{}
	if err := json.Unmarshal([]byte(verbose.Info["info"]), &info); err != nil {
		t.Fatalf("verbose info %q: %v", verbose.Info["info"], err)
	}
	if err := protojson.Unmarshal(info.Config, config); err != nil {
		t.Fatalf("verbose info's config %s: %v", info.Config, err)
	}
	if info.SandboxID != sbID || len(config.GetEnvs()) != 1 || string(config.Envs[0].Value) != "web-0" || config.GetMetadata().GetName() != "app" {
		t.Errorf("verbose info = %s, want the sandbox and the config with its environment", verbose.Info["info"])
	}
}

// TestContainerStatusUser: the user a container's status reports, as
// containerd 2 makes it from the config's security context for an image
// without a USER.
func TestContainerStatusUser(t *testing.T) {
	cases := []struct {
		name string
		sc   *runtimeapi.LinuxContainerSecurityContext
		want *runtimeapi.LinuxContainerUser
	}{
		{name: "no security context: root", want: &runtimeapi.LinuxContainerUser{SupplementalGroups: []int64{0}}},
		{
			name: "the pod's fsGroup and supplementalGroups join group 0, sorted",
			sc:   &runtimeapi.LinuxContainerSecurityContext{SupplementalGroups: []int64{2000, 1000, 3000}},
			want: &runtimeapi.LinuxContainerUser{SupplementalGroups: []int64{0, 1000, 2000, 3000}},
		},
		{
			name: "runAsUser and runAsGroup, the primary group among the groups once",
			sc: &runtimeapi.LinuxContainerSecurityContext{
				RunAsUser: &runtimeapi.Int64Value{Value: 1000}, RunAsGroup: &runtimeapi.Int64Value{Value: 3000},
				SupplementalGroups: []int64{4000, 3000},
			},
			want: &runtimeapi.LinuxContainerUser{Uid: 1000, Gid: 3000, SupplementalGroups: []int64{3000, 4000}},
		},
		{
			name: "runAsUser alone: group 0, as for a uid the image's /etc/passwd lacks",
			sc:   &runtimeapi.LinuxContainerSecurityContext{RunAsUser: &runtimeapi.Int64Value{Value: 1000}},
			want: &runtimeapi.LinuxContainerUser{Uid: 1000, SupplementalGroups: []int64{0}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rt, _ := newTestRuntime(t, Behaviour{})
			imageID := pull(t, rt, busyboxImage)
			pod := podConfig("web-0")
			cfg := containerConfig(pod, "app", imageID)
			cfg.Linux.SecurityContext = tc.sc
			id, err := rt.CreateContainer(context.Background(), runPod(t, rt, pod), cfg, pod)
			if err != nil {
				t.Fatal(err)
			}
			got := containerStatus(t, rt, id).GetUser().GetLinux()
			if got.GetUid() != tc.want.Uid || got.GetGid() != tc.want.Gid || !slices.Equal(got.GetSupplementalGroups(), tc.want.SupplementalGroups) {
				t.Errorf("user = %v, want %v", got, tc.want)
			}
		})
	}
}
