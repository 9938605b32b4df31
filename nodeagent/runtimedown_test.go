package nodeagent

import (
	"context"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/fleetlet/fleetlet/fakeruntime"
	"github.com/fleetlet/fleetlet/nodeagent/nodestatus"
	"github.com/fleetlet/fleetlet/nodeagent/pleg"
)

// downCRI is the node's fake runtime behind a switch: while down, its Status
// and its lists fail as a runtime's socket that nobody answers; while only
// listsDown, its lists alone fail, as a runtime whose Status answers but
// whose container store hangs.
//
// It records when its Status and its list of every container (the PLEG's
// relist) last succeeded, so that a test bounds what follows from those
// times rather than from when it flipped the switch: the fake clock moves on
// while the agent's loops catch up, so the last good call may be a few
// seconds older.
type downCRI struct {
	*fakeruntime.Runtime
	clock           clock.PassiveClock
	down, listsDown atomic.Bool

	mu                 sync.Mutex
	statusOK, relistOK time.Time
}

// lastOK is when Status, and a list of every container, last succeeded.
func (d *downCRI) lastOK() (status, relist time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.statusOK, d.relistOK
}

var errCRIUnavailable = grpcstatus.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial unix /run/containerd/containerd.sock: connect: connection refused"`)

func (d *downCRI) listsFail() bool { return d.down.Load() || d.listsDown.Load() }

func (d *downCRI) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	if d.down.Load() {
		return nil, errCRIUnavailable
	}
	d.mu.Lock()
	d.statusOK = d.clock.Now()
	d.mu.Unlock()
	return d.Runtime.Status(ctx, verbose)
}

func (d *downCRI) ListContainers(ctx context.Context, f *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	if d.listsFail() {
		return nil, errCRIUnavailable
	}
	// The PLEG's relist asks with an empty filter; the node's other lists
	// of every container (stats, GC) with none.
	if f != nil && f.String() == "" {
		d.mu.Lock()
		d.relistOK = d.clock.Now()
		d.mu.Unlock()
	}
	return d.Runtime.ListContainers(ctx, f)
}

func (d *downCRI) ListPodSandbox(ctx context.Context, f *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	if d.listsFail() {
		return nil, errCRIUnavailable
	}
	return d.Runtime.ListPodSandbox(ctx, f)
}

func (d *downCRI) ListContainerStats(ctx context.Context, f *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	if d.listsFail() {
		return nil, errCRIUnavailable
	}
	return d.Runtime.ListContainerStats(ctx, f)
}

func (d *downCRI) ListPodSandboxStats(ctx context.Context, f *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	if d.listsFail() {
		return nil, errCRIUnavailable
	}
	return d.Runtime.ListPodSandboxStats(ctx, f)
}

func (d *downCRI) ListImages(ctx context.Context, f *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	if d.listsFail() {
		return nil, errCRIUnavailable
	}
	return d.Runtime.ListImages(ctx, f)
}

// startAgentOnDownCRI starts the harness's agent on its fake runtime behind
// a downCRI, and waits until the node is Ready.
func startAgentOnDownCRI(t *testing.T) (*harness, *downCRI) {
	t.Helper()
	cri := &downCRI{}
	h := startAgent(t, func(c *Config) {
		cri.clock = c.Clock
		cri.Runtime = c.Runtime.(*fakeruntime.Runtime)
		c.Runtime, c.Images = cri, cri
	})
	h.eventually(t, "the node is Ready", func() bool { return h.readyCondition(t).Status == corev1.ConditionTrue })
	return h, cri
}

func (h *harness) readyCondition(t *testing.T) corev1.NodeCondition {
	t.Helper()
	if node := h.node(t); node != nil {
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c
			}
		}
	}
	return corev1.NodeCondition{}
}

// slack is how much later than the kubelet's bound a change may be seen:
// the fake clock moves on while the agent's loops catch up with it.
const slack = 5 * time.Second

// within fails the test unless at is in [from, to].
func within(t *testing.T, what string, at, from, to time.Time) {
	t.Helper()
	if at.Before(from) || at.After(to) {
		t.Errorf("%s at %v, want within [%v, %v]", what, at.Format(time.TimeOnly), from.Format(time.TimeOnly), to.Format(time.TimeOnly))
	}
}

var plegMessage = regexp.MustCompile(`^PLEG is not healthy: pleg was last seen active 3m[0-9.]+s ago; threshold is 3m0s$`)

// TestRuntimeDownMakesTheNodeNotReady: a runtime that stops answering makes
// the node NotReady as the kubelet's: not at once but once its last good
// Status is maxWaitForContainerRuntime (30 s) old, at the status update
// after (every 10 s), with the kubelet's reason and message; the PLEG's
// relists fail too, and past 3 min its message joins. Back, the node is
// Ready at the first status update after the next Status (every 5 s).
func TestRuntimeDownMakesTheNodeNotReady(t *testing.T) {
	h, cri := startAgentOnDownCRI(t)
	cri.down.Store(true)
	h.eventually(t, "the node is NotReady", func() bool { return h.readyCondition(t).Status == corev1.ConditionFalse })
	c := h.readyCondition(t)
	if c.Reason != "KubeletNotReady" || c.Message != "container runtime is down" {
		t.Errorf("Ready False %s %q, want KubeletNotReady %q", c.Reason, c.Message, "container runtime is down")
	}
	statusOK, relistOK := cri.lastOK()
	within(t, "NotReady", c.LastTransitionTime.Time,
		statusOK.Add(nodestatus.MaxWaitForContainerRuntime), statusOK.Add(nodestatus.MaxWaitForContainerRuntime+10*time.Second+slack))

	h.eventually(t, "the PLEG's message joins", func() bool { return h.readyCondition(t).Message != "container runtime is down" })
	c = h.readyCondition(t)
	if got, ok := bracketed(c.Message); c.Status != corev1.ConditionFalse || !ok || len(got) != 2 ||
		got[0] != "container runtime is down" || !plegMessage.MatchString(got[1]) {
		t.Errorf("Ready %s %q, want False with [container runtime is down, PLEG is not healthy: ...]", c.Status, c.Message)
	}
	within(t, "the PLEG's message", h.clock.Now(), relistOK.Add(pleg.RelistThreshold), relistOK.Add(pleg.RelistThreshold+pleg.RelistPeriod+10*time.Second+slack))

	back := h.clock.Now()
	cri.down.Store(false)
	h.eventually(t, "the node is Ready again", func() bool { return h.readyCondition(t).Status == corev1.ConditionTrue })
	c = h.readyCondition(t)
	if c.Reason != "KubeletReady" || c.Message != "kubelet is posting ready status" {
		t.Errorf("Ready True %s %q, want the kubelet's", c.Reason, c.Message)
	}
	within(t, "Ready again", c.LastTransitionTime.Time, back, back.Add(nodestatus.RuntimeUpPeriod+10*time.Second+slack))
}

// TestFailingRelistsMakeTheNodeNotReady: a runtime whose Status answers but
// whose lists fail leaves the node Ready until the PLEG has not relisted
// for its threshold, 3 min; then the node is NotReady with the kubelet's
// PLEG message, and Ready again once a relist succeeds.
func TestFailingRelistsMakeTheNodeNotReady(t *testing.T) {
	h, cri := startAgentOnDownCRI(t)
	cri.listsDown.Store(true)
	h.eventually(t, "the node is NotReady", func() bool { return h.readyCondition(t).Status == corev1.ConditionFalse })
	c := h.readyCondition(t)
	if c.Reason != "KubeletNotReady" || !plegMessage.MatchString(c.Message) {
		t.Errorf("Ready False %s %q, want KubeletNotReady %q", c.Reason, c.Message, plegMessage)
	}
	_, relistOK := cri.lastOK()
	within(t, "NotReady", c.LastTransitionTime.Time, relistOK.Add(pleg.RelistThreshold), relistOK.Add(pleg.RelistThreshold+pleg.RelistPeriod+10*time.Second+slack))
	if ok, err := h.agent.pleg.Healthy(); ok {
		t.Error("PLEG Healthy() = true with its relists failing for 3 min")
	} else if !plegMessage.MatchString("PLEG is not healthy: " + err.Error()) {
		t.Errorf("PLEG Healthy() error %q, want the kubelet's", err)
	}

	back := h.clock.Now()
	cri.listsDown.Store(false)
	h.eventually(t, "the node is Ready again", func() bool { return h.readyCondition(t).Status == corev1.ConditionTrue })
	within(t, "Ready again", h.readyCondition(t).LastTransitionTime.Time, back, back.Add(pleg.RelistPeriod+10*time.Second+slack))
	if ok, err := h.agent.pleg.Healthy(); !ok {
		t.Errorf("PLEG unhealthy after its relists succeed again: %v", err)
	}
}

// bracketed splits an aggregated error's message, "[a, b]", into its parts.
func bracketed(msg string) ([]string, bool) {
	if len(msg) < 2 || msg[0] != '[' || msg[len(msg)-1] != ']' {
		return nil, false
	}
	return regexp.MustCompile(`, `).Split(msg[1:len(msg)-1], -1), true
}
