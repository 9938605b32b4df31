package fakeruntime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/internal/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testclock "k8s.io/utils/clock/testing"
	utilexec "k8s.io/utils/exec"
)

// podWithBehaviour is podConfig with a fleetlet.io/behaviour annotation.
func podWithBehaviour(name, behaviour string) *runtimeapi.PodSandboxConfig {
	pod := podConfig(name)
	pod.Annotations[AnnotationBehaviour] = behaviour
	return pod
}

// createAttempt creates (not starts) attempt n of a container.
func createAttempt(t testing.TB, rt internalapi.RuntimeService, sbID string, pod *runtimeapi.PodSandboxConfig, name, image string, attempt uint32) string {
	t.Helper()
	cfg := containerConfig(pod, name, image)
	cfg.Metadata.Attempt = attempt
	id, err := rt.CreateContainer(context.Background(), sbID, cfg, pod)
	if err != nil {
		t.Fatalf("CreateContainer(%s, attempt %d): %v", name, attempt, err)
	}
	return id
}

// listed returns the container id as ListContainers shows it.
func listed(t testing.TB, rt internalapi.RuntimeService, id string) *runtimeapi.Container {
	t.Helper()
	cs, err := rt.ListContainers(context.Background(), &runtimeapi.ContainerFilter{Id: id})
	if err != nil || len(cs) != 1 {
		t.Fatalf("ListContainers(%s) = %v, %v; want the container", id, cs, err)
	}
	return cs[0]
}

// TestCrashLoop drives a container that exits 1 after 10 s through two
// attempts, as the agent's restarts would, and checks every view of it.
func TestCrashLoop(t *testing.T) {
	ctx := context.Background()
	rt, clk := newTestRuntime(t, Behaviour{})
	pod := podWithBehaviour("web-0", `{"app": {"runFor": "10s", "exitCode": 1}}`)
	sbID := runPod(t, rt, pod)

	first := createAttempt(t, rt, sbID, pod, "app", pauseImage, 0)
	if err := rt.StartContainer(ctx, first); err != nil {
		t.Fatal(err)
	}
	started := clk.Now()
	clk.Step(10*time.Second - time.Nanosecond)
	if got := listed(t, rt, first).State; got != running {
		t.Fatalf("1 ns before runFor: %v, want running", got)
	}
	if _, _, err := rt.ExecSync(ctx, first, []string{"true"}, time.Second); err != nil {
		t.Fatalf("ExecSync while running: %v", err)
	}
	// Ask well after the exit: it still exited at exactly start+10s.
	clk.Step(25 * time.Second)
	if got := listed(t, rt, first).State; got != exited {
		t.Fatalf("after runFor, ListContainers shows %v, want exited", got)
	}
	exitedOnly, _ := rt.ListContainers(ctx, &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: exited}})
	if len(exitedOnly) != 1 || exitedOnly[0].Id != first {
		t.Errorf("the exited filter lists %v", exitedOnly)
	}
	st := containerStatus(t, rt, first)
	if st.State != exited || st.ExitCode != 1 || st.Reason != "Error" ||
		st.StartedAt != started.UnixNano() || st.FinishedAt != started.Add(10*time.Second).UnixNano() {
		t.Fatalf("status = %v %d %q started %d finished %d; want exited 1 Error, finished 10 s after %d",
			st.State, st.ExitCode, st.Reason, st.StartedAt, st.FinishedAt, started.UnixNano())
	}
	_, _, err := rt.ExecSync(ctx, first, []string{"true"}, time.Second)
	wantCode(t, "ExecSync in an exited container", err, codes.FailedPrecondition)
	wantErrContains(t, "ExecSync in an exited container", err, "failed to exec in container: container is in CONTAINER_EXITED state")
	if err := rt.StopContainer(ctx, first, 30); err != nil {
		t.Fatalf("StopContainer of an exited container: %v", err)
	}
	if again := containerStatus(t, rt, first); again.ExitCode != 1 || again.FinishedAt != st.FinishedAt {
		t.Errorf("StopContainer changed an exited container: %v", again)
	}
	if err := rt.UpdateContainerResources(ctx, first, &runtimeapi.ContainerResources{}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("UpdateContainerResources of an exited container = %v, want FailedPrecondition", err)
	}

	// The restart is a new container that follows the behaviour from its
	// own start.
	second := createAttempt(t, rt, sbID, pod, "app", pauseImage, 1)
	if err := rt.StartContainer(ctx, second); err != nil {
		t.Fatal(err)
	}
	restarted := clk.Now()
	clk.Step(5 * time.Second)
	if got := listed(t, rt, second); got.State != running || got.Metadata.Attempt != 1 {
		t.Fatalf("attempt 1 = %v attempt %d, want running", got.State, got.Metadata.Attempt)
	}
	clk.Step(5 * time.Second)
	if st := containerStatus(t, rt, second); st.State != exited || st.ExitCode != 1 || st.FinishedAt != restarted.Add(10*time.Second).UnixNano() {
		t.Errorf("attempt 1 = %v exit %d finished %d, want exited 1 at %d", st.State, st.ExitCode, st.FinishedAt, restarted.Add(10*time.Second).UnixNano())
	}
	if st := containerStatus(t, rt, first); st.FinishedAt != started.Add(10*time.Second).UnixNano() {
		t.Error("attempt 0 changed when attempt 1 ran")
	}
}

// TestBehaviourSources checks where a container's behaviour comes from: the
// node's default, the pod's "*" entry, the pod's entry for the container.
func TestBehaviourSources(t *testing.T) {
	rt, clk := newTestRuntime(t, Behaviour{Containers: ContainerBehaviour{RunFor: new(Duration(time.Minute)), ExitCode: new(int32(0))}})
	annotated := podWithBehaviour("annotated", `
"*": {exitCode: 3}
app: {runFor: 0s}
`)
	plain := podConfig("plain")
	sbA, sbP := runPod(t, rt, annotated), runPod(t, rt, plain)
	app := runContainer(t, rt, sbA, annotated, "app", pauseImage)
	sidecar := runContainer(t, rt, sbA, annotated, "sidecar", pauseImage)
	other := runContainer(t, rt, sbP, plain, "app", pauseImage)
	if rt.containers[other].model != rt.defaultModel {
		t.Error("a container of a pod without an annotation did not share the node's model")
	}
	clk.Step(time.Minute)
	for _, tc := range []struct {
		name, id  string
		wantState runtimeapi.ContainerState
		wantExit  int32
	}{
		{"named: runFor 0s overrides the default, runs until stopped", app, running, 0},
		{`"*": exitCode 3 merged over the default runFor`, sidecar, exited, 3},
		{"no annotation: the default", other, exited, 0},
	} {
		if st := containerStatus(t, rt, tc.id); st.State != tc.wantState || st.ExitCode != tc.wantExit {
			t.Errorf("%s: %v exit %d, want %v exit %d", tc.name, st.State, st.ExitCode, tc.wantState, tc.wantExit)
		}
	}
}

func TestMalformedAnnotation(t *testing.T) {
	rt, _ := newTestRuntime(t, Behaviour{})
	pod := podWithBehaviour("web-0", `{"app": {"runFor": "forever"}}`)
	sbID := runPod(t, rt, pod) // the sandbox does not care
	_, err := rt.CreateContainer(context.Background(), sbID, containerConfig(pod, "app", pauseImage), pod)
	wantCode(t, "CreateContainer with a malformed annotation", err, codes.InvalidArgument)
	for _, want := range []string{`CreateContainer "app"`, "annotation fleetlet.io/behaviour", "pod default/web-0", `invalid duration "forever"`} {
		wantErrContains(t, "CreateContainer with a malformed annotation", err, want)
	}
	if cs, _ := rt.ListContainers(context.Background(), nil); len(cs) != 0 {
		t.Errorf("a failed create left %d containers", len(cs))
	}
}

func TestStopWhileRunForEnds(t *testing.T) {
	ctx := context.Background()
	rt, clk := newTestRuntime(t, Behaviour{StopLatency: 30 * time.Second})
	pod := podWithBehaviour("web-0", `{"app": {"runFor": "10s", "exitCode": 2}}`)
	sbID := runPod(t, rt, pod)
	id := runContainer(t, rt, sbID, pod, "app", pauseImage)
	started := clk.Now()
	done := make(chan error, 1)
	go func() { done <- rt.StopContainer(ctx, id, 60) }()
	testutil.WaitFor(t, "StopContainer to wait for its latency", clk.HasWaiters)
	clk.Step(30 * time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// It exited by itself before the stop took effect.
	if st := containerStatus(t, rt, id); st.ExitCode != 2 || st.FinishedAt != started.Add(10*time.Second).UnixNano() {
		t.Errorf("status = exit %d finished %d; want its own exit 2 at 10 s", st.ExitCode, st.FinishedAt)
	}

	// Killing the sandbox later leaves an exited container's exit alone.
	other := runContainer(t, rt, sbID, pod, "other", pauseImage)
	id2 := createAttempt(t, rt, sbID, pod, "app", pauseImage, 1)
	if err := rt.StartContainer(ctx, id2); err != nil {
		t.Fatal(err)
	}
	clk.Step(11 * time.Second)
	if err := rt.StopPodSandbox(ctx, sbID); err != nil {
		t.Fatal(err)
	}
	if st := containerStatus(t, rt, id2); st.ExitCode != 2 {
		t.Errorf("after StopPodSandbox the exited container reads exit %d, want its own 2", st.ExitCode)
	}
	if st := containerStatus(t, rt, other); st.ExitCode != exitCodeKilled {
		t.Errorf("after StopPodSandbox the running container reads exit %d, want %d", st.ExitCode, exitCodeKilled)
	}
}

func TestProbeNetwork(t *testing.T) {
	rt, clk := newTestRuntime(t, Behaviour{})
	pod := podWithBehaviour("web-0", `
app:
  readiness: [{after: 0s, succeed: true}, {after: 30s, succeed: false}, {after: 60s, succeed: true}]
  startup: [{after: 0s, succeed: false}, {after: 5s, succeed: true}]
  runFor: 90s
`)
	sbID := runPod(t, rt, pod)
	id := runContainer(t, rt, sbID, pod, "app", pauseImage)
	probe := func(kind ProbeKind) bool {
		t.Helper()
		ok, err := rt.ProbeNetwork(id, kind)
		if err != nil {
			t.Fatalf("ProbeNetwork(%s) at +%s: %v", kind, clk.Since(testEpoch), err)
		}
		return ok
	}
	for _, step := range []struct {
		to                        time.Duration // since the start
		ready, live, startupProbe bool
	}{
		{0, true, true, false},
		{5 * time.Second, true, true, true},
		{29 * time.Second, true, true, true},
		{30 * time.Second, false, true, true},
		{59 * time.Second, false, true, true},
		{60 * time.Second, true, true, true},
	} {
		clk.SetTime(testEpoch.Add(step.to))
		if r, l, s := probe(Readiness), probe(Liveness), probe(Startup); r != step.ready || l != step.live || s != step.startupProbe {
			t.Errorf("at +%s: readiness %v liveness %v startup %v; want %v %v %v", step.to, r, l, s, step.ready, step.live, step.startupProbe)
		}
	}

	_, err := rt.ProbeNetwork(id, "health")
	wantCode(t, "ProbeNetwork of an unknown kind", err, codes.InvalidArgument)
	_, err = rt.ProbeNetwork("missing", Readiness)
	wantCode(t, "ProbeNetwork of an unknown container", err, codes.NotFound)
	notStarted := createAttempt(t, rt, sbID, pod, "other", pauseImage, 0)
	_, err = rt.ProbeNetwork(notStarted, Readiness)
	wantCode(t, "ProbeNetwork of a created container", err, codes.FailedPrecondition)
	clk.SetTime(testEpoch.Add(90 * time.Second))
	_, err = rt.ProbeNetwork(id, Readiness)
	wantCode(t, "ProbeNetwork of an exited container", err, codes.FailedPrecondition)
	wantErrContains(t, "ProbeNetwork of an exited container", err, "CONTAINER_EXITED")
}

const execBehaviour = `
app:
  exec:
    - command: cat /tmp/healthy
      steps: [{after: 0s, succeed: true}, {after: 1m, succeed: false}]
      stdout: "ok\n"
    - command: "*"
      steps: [{after: 0s, succeed: false}]
      exitCode: 126
`

func TestExecSyncBehaviour(t *testing.T) {
	ctx := context.Background()
	rt, clk := newTestRuntime(t, Behaviour{})
	pod := podWithBehaviour("web-0", execBehaviour)
	id := runContainer(t, rt, runPod(t, rt, pod), pod, "app", pauseImage)

	stdout, _, err := rt.ExecSync(ctx, id, []string{"cat", "/tmp/healthy"}, time.Second)
	if err != nil || string(stdout) != "ok\n" {
		t.Fatalf("ExecSync before the failure = %q, %v; want ok", stdout, err)
	}
	clk.Step(time.Minute)
	stdout, _, err = rt.ExecSync(ctx, id, []string{"cat", "/tmp/healthy"}, time.Second)
	wantExitError(t, "ExecSync after the failure", err, 1)
	if string(stdout) != "ok\n" {
		t.Errorf("a failing command printed %q, want its stdout", stdout)
	}
	_, _, err = rt.ExecSync(ctx, id, []string{"ls"}, time.Second)
	wantExitError(t, "ExecSync of a wildcard command", err, 126)
}

// wantExitError checks err is what cri-client returns for a command that
// exits with code: a utilexec.CodeExitError, which the kubelet's prober
// recognises as utilexec.ExitError.
func wantExitError(t testing.TB, what string, err error, code int) {
	t.Helper()
	var exitErr utilexec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitStatus() != code {
		t.Fatalf("%s: err %v (%T), want a utilexec.ExitError with status %d", what, err, err, code)
	}
	if _, ok := err.(utilexec.CodeExitError); !ok {
		t.Errorf("%s: err is %T, want utilexec.CodeExitError as cri-client returns", what, err)
	}
}

func TestPullErrors(t *testing.T) {
	const unauthorizedMsg = `failed to pull and unpack image "docker.io/library/busybox:latest": failed to resolve reference "docker.io/library/busybox:latest": pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed`
	const notFoundMsg = `failed to pull and unpack image "docker.io/library/busybox:latest": failed to resolve reference "docker.io/library/busybox:latest": docker.io/library/busybox:latest: not found`
	withPullError := func(v string) *runtimeapi.PodSandboxConfig {
		pod := podConfig("web-0")
		pod.Annotations[AnnotationPullError] = v
		return pod
	}
	tests := []struct {
		name     string
		images   map[string]ImageBehaviour
		image    string
		pod      *runtimeapi.PodSandboxConfig
		wantCode codes.Code
		wantMsg  string
	}{
		{"image behaviour: unauthorized", map[string]ImageBehaviour{"busybox": {PullError: PullErrorUnauthorized}}, "busybox:latest", nil, codes.Unknown, unauthorizedMsg},
		{"image behaviour: not found", map[string]ImageBehaviour{"docker.io/library/busybox": {PullError: PullErrorNotFound}}, "busybox", podConfig("web-0"), codes.NotFound, notFoundMsg},
		{"image behaviour of another image", map[string]ImageBehaviour{"nginx": {PullError: PullErrorNotFound}}, "busybox", nil, codes.OK, ""},
		{"pod annotation: unauthorized", nil, "busybox", withPullError("unauthorized"), codes.Unknown, unauthorizedMsg},
		{"pod annotation wins over the image", map[string]ImageBehaviour{"busybox": {PullError: PullErrorUnauthorized}}, "busybox", withPullError("notfound"), codes.NotFound, notFoundMsg},
		{"pod annotation not a pull error", nil, "busybox", withPullError("timeout"), codes.InvalidArgument, `annotation fleetlet.io/pull-error is "timeout"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt, _ := newTestRuntime(t, Behaviour{Images: tc.images})
			_, err := rt.PullImage(context.Background(), &runtimeapi.ImageSpec{Image: tc.image}, nil, tc.pod)
			wantCode(t, "PullImage", err, tc.wantCode)
			if tc.wantCode == codes.OK {
				return
			}
			if msg := status.Convert(err).Message(); !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("message %q, want %q", msg, tc.wantMsg)
			}
			if resp, _ := rt.ImageStatus(context.Background(), &runtimeapi.ImageSpec{Image: tc.image}, false); resp.Image != nil {
				t.Error("a failed pull left the image present")
			}
		})
	}
}

func TestImageBehaviourLatencyAndSize(t *testing.T) {
	rt, clk := newTestRuntime(t, Behaviour{
		PullLatency: time.Second,
		Images: map[string]ImageBehaviour{
			"busybox": {PullLatency: new(Duration(10 * time.Second)), SizeBytes: 1234, PullError: PullErrorNotFound},
			"nginx":   {PullLatency: new(Duration(0))},
		},
	})
	// A failing pull fails only after its latency, as a registry answers.
	done := make(chan error, 1)
	go func() {
		_, err := rt.PullImage(context.Background(), &runtimeapi.ImageSpec{Image: "busybox"}, nil, nil)
		done <- err
	}()
	testutil.WaitFor(t, "the pull to wait", clk.HasWaiters)
	clk.Step(10*time.Second - time.Nanosecond)
	select {
	case err := <-done:
		t.Fatalf("the pull returned (%v) before its 10 s", err)
	default:
	}
	clk.Step(time.Nanosecond)
	wantCode(t, "PullImage after its latency", <-done, codes.NotFound)

	// A zero latency set for the image overrides the node's second.
	pull(t, rt, "nginx")
	if clk.HasWaiters() {
		t.Error("a pull with an image latency of 0 waited")
	}
	sized := New(Config{Behaviour: Behaviour{Images: map[string]ImageBehaviour{"busybox:1.36": {SizeBytes: 1234}}}, PreloadedImages: []string{busyboxImage}})
	imgs, _ := sized.ListImages(context.Background(), nil)
	if len(imgs) != 1 || imgs[0].Size != 1234 {
		t.Errorf("preloaded image = %v, want the image's size 1234", imgs)
	}
}

// TestContainerLatencies checks the per-container latency overrides and
// their jitter, on the fake clock.
func TestContainerLatencies(t *testing.T) {
	ctx := context.Background()
	rt, clk := newTestRuntime(t, Behaviour{ContainerStartLatency: time.Hour})
	pod := podWithBehaviour("web-0", `{"app": {"startLatency": "5s", "stopLatency": "10s", "jitter": 0.5}}`)
	sbID := runPod(t, rt, pod)
	id := createAttempt(t, rt, sbID, pod, "app", pauseImage, 0)
	key := jitterKey(42, id)
	wantStart := jittered(5*time.Second, 0.5, key, saltStart)
	wantStop := jittered(10*time.Second, 0.5, key, saltStop)
	if wantStart == 5*time.Second || wantStart < 2500*time.Millisecond || wantStart >= 7500*time.Millisecond {
		t.Fatalf("jittered start latency %s: not jittered, or out of bounds", wantStart)
	}
	waitExactly := func(what string, d time.Duration, call func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- call() }()
		testutil.WaitFor(t, what+" to wait", clk.HasWaiters)
		clk.Step(d - time.Nanosecond)
		select {
		case err := <-done:
			t.Fatalf("%s returned (%v) before %s", what, err, d)
		default:
		}
		clk.Step(time.Nanosecond)
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	waitExactly("StartContainer", wantStart, func() error { return rt.StartContainer(ctx, id) })
	waitExactly("StopContainer", wantStop, func() error { return rt.StopContainer(ctx, id, 30) })
	if st := containerStatus(t, rt, id); st.State != exited || st.ExitCode != 0 {
		t.Errorf("after the stop: %v exit %d", st.State, st.ExitCode)
	}
}

// TestJitterReplays checks that two runtimes with one seed, driven alike,
// give the same containers the same jittered lives, and another seed does
// not.
func TestJitterReplays(t *testing.T) {
	finish := func(seed uint64) []int64 {
		clk := testclock.NewFakeClock(testEpoch)
		rt := New(Config{Clock: clk, Seed: seed, PreloadedImages: []string{pauseImage},
			Behaviour: Behaviour{Containers: ContainerBehaviour{RunFor: new(Duration(time.Minute)), Jitter: new(0.5)}}})
		setPodCIDR(t, rt, testPodCIDR)
		var ids []string
		for _, name := range []string{"a", "b", "c"} {
			pod := podConfig(name)
			ids = append(ids, runContainer(t, rt, runPod(t, rt, pod), pod, "app", pauseImage))
		}
		clk.Step(2 * time.Minute)
		var out []int64
		for _, id := range ids {
			st := containerStatus(t, rt, id)
			if st.State != exited {
				t.Fatalf("container still %v after twice its runFor", st.State)
			}
			out = append(out, st.FinishedAt-st.StartedAt)
		}
		return out
	}
	first, again, other := finish(7), finish(7), finish(8)
	for i := range first {
		if d := time.Duration(first[i]); d < 30*time.Second || d >= 90*time.Second {
			t.Errorf("container %d ran %s, outside 1m±50%%", i, d)
		}
	}
	if first[0] == first[1] && first[1] == first[2] {
		t.Errorf("three containers ran alike (%v): no jitter", first)
	}
	if !equalInts(first, again) {
		t.Errorf("the same seed gave %v then %v", first, again)
	}
	if equalInts(first, other) {
		t.Errorf("another seed gave the same %v", first)
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestBehaviourThroughSocket checks the behaviour model through
// k8s.io/cri-client and the unix socket: exit codes of ExecSync come back as
// cri-client returns them for containerd, pull errors keep their code and
// message, and a container's exit shows in lists.
func TestBehaviourThroughSocket(t *testing.T) {
	ctx := context.Background()
	clk := testclock.NewFakeClock(testEpoch)
	rt := New(Config{Clock: clk, Seed: 3, PreloadedImages: []string{pauseImage},
		Behaviour: Behaviour{Images: map[string]ImageBehaviour{"nginx": {PullError: PullErrorNotFound}}}})
	setPodCIDR(t, rt, testPodCIDR)
	rs, is := dialForTest(t, serveForTest(t, rt), false)

	pod := podWithBehaviour("web-0", execBehaviour+"  runFor: 2m\n  exitCode: 1\n")
	sbID, err := rs.RunPodSandbox(ctx, pod, "")
	if err != nil {
		t.Fatal(err)
	}
	id := createAttempt(t, rs, sbID, pod, "app", pauseImage, 0)
	if err := rs.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if stdout, _, err := rs.ExecSync(ctx, id, []string{"cat", "/tmp/healthy"}, time.Second); err != nil || string(stdout) != "ok\n" {
		t.Fatalf("ExecSync = %q, %v", stdout, err)
	}
	clk.Step(time.Minute)
	_, _, err = rs.ExecSync(ctx, id, []string{"cat", "/tmp/healthy"}, time.Second)
	wantExitError(t, "ExecSync through the socket", err, 1)
	_, _, err = rs.ExecSync(ctx, id, []string{"ls"}, time.Second)
	wantExitError(t, "ExecSync of a wildcard through the socket", err, 126)

	clk.Step(time.Minute)
	if got := listed(t, rs, id); got.State != exited {
		t.Errorf("after runFor the socket lists %v, want exited", got.State)
	}
	if st, err := rs.ContainerStatus(ctx, id, false); err != nil || st.GetStatus().GetExitCode() != 1 || st.GetStatus().GetReason() != "Error" {
		t.Errorf("ContainerStatus = %v, %v; want exit 1 Error", st, err)
	}
	_, _, err = rs.ExecSync(ctx, id, []string{"true"}, time.Second)
	wantCode(t, "ExecSync of an exited container through the socket", err, codes.FailedPrecondition)

	_, err = is.PullImage(ctx, &runtimeapi.ImageSpec{Image: "nginx:latest"}, nil, pod)
	wantCode(t, "PullImage of a missing image through the socket", err, codes.NotFound)
	wantErrContains(t, "PullImage of a missing image through the socket", err, `docker.io/library/nginx:latest: not found`)
	pod.Annotations[AnnotationPullError] = PullErrorUnauthorized
	_, err = is.PullImage(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}, nil, pod)
	wantCode(t, "PullImage for a pod with a pull error through the socket", err, codes.Unknown)
	wantErrContains(t, "PullImage for a pod with a pull error through the socket", err, "pull access denied")

	bad := podWithBehaviour("web-1", `{"app": {"runFor": 30}}`)
	badSandbox, err := rs.RunPodSandbox(ctx, bad, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = rs.CreateContainer(ctx, badSandbox, containerConfig(bad, "app", pauseImage), bad)
	wantCode(t, "CreateContainer with a malformed annotation through the socket", err, codes.InvalidArgument)
	wantErrContains(t, "CreateContainer with a malformed annotation through the socket", err, "fleetlet.io/behaviour of pod default/web-1")
}
