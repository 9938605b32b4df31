package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/fleetlet/fleetlet/fakeruntime"
)

// This file is how faults reach a fleet's nodes: their network to the API
// server (a partition), their power (a node down, then booted again), their
// runtimes and their pod workers. The load driver decides what fails when;
// the fleet only switches.

// link is a node's network to the API server, shared by its kubelet and
// its kube-proxy. Cut, it refuses every request before it leaves, as a
// node with no route to the API server fails to connect, and it breaks
// the responses being read (watches, mostly), as the connections under them
// break; restored, requests go out again and the clients reconnect with
// their own back-off.
//
// It is a RoundTripper rather than a dialer: a node's transport is either
// its own connection or its client certificate's rotating one, and both
// take a wrapper, where only the first takes a dial function.
type link struct {
	mu  sync.Mutex
	cut bool
	// open are the bodies of responses being read, closed by a cut.
	open map[*linkBody]struct{}
}

// errNoRoute is what a partitioned node's requests fail with: the error a
// dial returns when the node has no route to the API server.
var errNoRoute = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ENETUNREACH)}

func (l *link) wrap(rt http.RoundTripper) http.RoundTripper {
	return linkRoundTripper{link: l, next: rt}
}

// setCut cuts or restores the link.
func (l *link) setCut(cut bool) {
	l.mu.Lock()
	l.cut = cut
	var open []*linkBody
	if cut {
		for b := range l.open {
			open = append(open, b)
		}
		clear(l.open)
	}
	l.mu.Unlock()
	for _, b := range open {
		b.breakOff()
	}
}

func (l *link) isCut() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cut
}

type linkRoundTripper struct {
	link *link
	next http.RoundTripper
}

func (t linkRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.link.isCut() {
		if req.Body != nil {
			_ = req.Body.Close() // a RoundTripper must close it, even on error
		}
		return nil, errNoRoute
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	b := &linkBody{ReadCloser: resp.Body, link: t.link}
	l := t.link
	l.mu.Lock()
	if l.cut {
		// Cut while the request was out: its answer is lost with it.
		l.mu.Unlock()
		_ = resp.Body.Close()
		return nil, errNoRoute
	}
	if l.open == nil {
		l.open = map[*linkBody]struct{}{}
	}
	l.open[b] = struct{}{}
	l.mu.Unlock()
	resp.Body = b
	return resp, nil
}

// linkBody is a response body a cut breaks: its reads then fail as the
// read of a connection that was reset.
type linkBody struct {
	io.ReadCloser
	link *link

	mu     sync.Mutex
	broken bool
}

func (b *linkBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	broken := b.broken
	b.mu.Unlock()
	if broken {
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	}
	return n, err
}

// breakOff fails the body's reads from now on and closes it, which ends a
// read blocked on it.
func (b *linkBody) breakOff() {
	b.mu.Lock()
	b.broken = true
	b.mu.Unlock()
	_ = b.ReadCloser.Close()
}

func (b *linkBody) Close() error {
	b.link.mu.Lock()
	delete(b.link.open, b)
	b.link.mu.Unlock()
	return b.ReadCloser.Close()
}

// power is a node's power state and the agent run it switches.
type power struct {
	// off is set from a power cut until the node boots again; on is
	// closed when it boots.
	off bool
	on  chan struct{}
	// stop ends the running agent; stopped is closed when its Run has
	// returned. Both nil until the agent first starts.
	stop    context.CancelFunc
	stopped chan struct{}
}

// runMember runs m's agent until ctx ends, through power cuts: a node
// powered off waits, agentless, until it is powered on, then runs the new
// agent PowerOn built for it.
func (f *Fleet) runMember(ctx context.Context, m *Member) error {
	for {
		agentCtx, stop := context.WithCancel(ctx)
		m.mu.Lock()
		agent := m.agent
		m.power.stop, m.power.stopped = stop, make(chan struct{})
		stopped := m.power.stopped
		m.mu.Unlock()
		if metrics := f.cfg.Metrics; metrics != nil {
			metrics.running.Inc()
		}
		err := agent.Run(agentCtx)
		stop()
		if metrics := f.cfg.Metrics; metrics != nil {
			metrics.running.Dec()
		}
		m.mu.Lock()
		close(stopped)
		off, on := m.power.off, m.power.on
		m.mu.Unlock()
		if !off {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-on:
		}
	}
}

// member is the fleet's node of that name.
func (f *Fleet) member(name string) (*Member, error) {
	for _, m := range f.members {
		if m.Name == name {
			return m, nil
		}
	}
	return nil, fmt.Errorf("fleet: no node %s in this fleet", name)
}

// Partition cuts node's network to the API server, or restores it: its
// kubelet's and kube-proxy's requests fail to connect and their watches
// break, while the node goes on running its pods.
func (f *Fleet) Partition(node string, cut bool) error {
	m, err := f.member(node)
	if err != nil {
		return err
	}
	m.link.setCut(cut)
	return nil
}

// PowerOff stops node's agent as a power cut stops a machine: no lease, no
// status, no kubelet API, its pods left as the API server has them. It
// returns once the agent has stopped, or when ctx ends. A node already off
// stays off.
func (f *Fleet) PowerOff(ctx context.Context, node string) error {
	m, err := f.member(node)
	if err != nil {
		return err
	}
	m.mu.Lock()
	if m.power.off {
		m.mu.Unlock()
		return nil
	}
	if m.power.stop == nil {
		m.mu.Unlock()
		return fmt.Errorf("fleet: node %s has not started; power it off once the fleet is up", node)
	}
	m.power.off, m.power.on = true, make(chan struct{})
	stop, stopped := m.power.stop, m.power.stopped
	m.mu.Unlock()
	stop()
	select {
	case <-stopped:
		klog.FromContext(ctx).V(2).Info("Node powered off", "node", node)
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fleet: node %s powering off: %w", node, context.Cause(ctx))
	}
}

// PowerOn boots a node PowerOff stopped, as a rebooted machine: its
// runtime keeps its images but no container (the kubelet recreates its
// pods' sandboxes), and a new agent registers, reports and syncs its pods.
// A node that is on stays as it is.
func (f *Fleet) PowerOn(node string) error {
	m, err := f.member(node)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.power.off {
		return nil
	}
	if m.rt.Faults == nil {
		return fmt.Errorf("fleet: node %s runs a runtime the fleet cannot reboot (not the fake runtime)", node)
	}
	m.rt.Faults.Reboot()
	m.runtimeFault = fakeruntime.Fault{}
	agent, err := f.newAgent(m)
	if err != nil {
		return fmt.Errorf("fleet: booting node %s: %w", node, err)
	}
	m.agent, m.power.off = agent, false
	close(m.power.on)
	return nil
}

// errNoRuntimeFaults refuses a runtime fault on a node whose runtime is
// not the fleet's fake.
var errNoRuntimeFaults = errors.New("its runtime is not the fake runtime, whose faults the fleet sets")

// UpdateRuntimeFault changes what is wrong with node's runtime: change
// edits the fault in place (several faults may be on one node at once).
func (f *Fleet) UpdateRuntimeFault(node string, change func(*fakeruntime.Fault)) error {
	m, err := f.member(node)
	if err != nil {
		return err
	}
	if m.rt.Faults == nil {
		return fmt.Errorf("fleet: node %s: %w", node, errNoRuntimeFaults)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	change(&m.runtimeFault)
	m.rt.Faults.SetFault(m.runtimeFault)
	return nil
}

// StallPodWorkers stops node's pod workers, or lets them go on, while the
// rest of its agent stays healthy.
func (f *Fleet) StallPodWorkers(node string, stalled bool) error {
	m, err := f.member(node)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.agent.StallPodWorkers(stalled)
	return nil
}

// Labels are the node's labels from its pool (fleetlet.io/pool among
// them), which fault selectors match.
func (m *Member) Labels() map[string]string { return withPoolLabel(m.pool) }
