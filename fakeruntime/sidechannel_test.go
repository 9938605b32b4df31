package fakeruntime

import (
	"context"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// TestSideChannelOverTheSocket asks a served fake for a network probe and
// for logs through CRI's ExecSync, as an agent in another process does.
func TestSideChannelOverTheSocket(t *testing.T) {
	ctx := context.Background()
	rt, clk := newTestRuntime(t, Behaviour{})
	rs, _ := dialForTest(t, serveForTest(t, rt), false)
	pod := podWithBehaviour("web-0", `
app:
  readiness: [{after: 0s, succeed: true}, {after: 30s, succeed: false}]
  logs: {every: 10s, line: serving}
`)
	id := runContainer(t, rt, runPod(t, rt, pod), pod, "app", pauseImage)

	for _, step := range []struct {
		at    time.Duration
		ready bool
	}{{0, true}, {31 * time.Second, false}} {
		clk.SetTime(testEpoch.Add(step.at))
		ok, err := ProbeNetworkOver(ctx, rs.ExecSync, id, Readiness)
		if err != nil || ok != step.ready {
			t.Errorf("readiness at +%v over the socket: %v, %v; want %v", step.at, ok, err, step.ready)
		}
	}
	_, err := ProbeNetworkOver(ctx, rs.ExecSync, id, "health")
	wantCode(t, "a probe of an unknown kind", err, codes.InvalidArgument)

	lines, err := ContainerLogsOver(ctx, rs.ExecSync, id, testEpoch.Add(time.Second), -1)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := rt.ContainerLogs(id, testEpoch.Add(time.Second), -1)
	if len(want) != 3 || !reflect.DeepEqual(lines, want) {
		t.Errorf("logs over the socket %v, want the in-process %v", lines, want)
	}
	if lines, err := ContainerLogsOver(ctx, rs.ExecSync, id, time.Time{}, 1); err != nil || len(lines) != 1 || lines[0].Text != "serving" {
		t.Errorf("the last line over the socket: %v, %v", lines, err)
	}

	// Any other command is the container's exec behaviour, as before.
	if _, _, err := rs.ExecSync(ctx, id, []string{"true"}, time.Second); err != nil {
		t.Errorf("exec true: %v", err)
	}
}
