package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/fleetlet/fleetlet/fakeruntime"
)

// This file is how faults reach a fleet's nodes: their network to the API
// server (a partition), their power (a node down, then booted again), their
// runtimes and their pod workers. The load driver decides what fails when;
// the fleet only switches.

// link is a node's network to the API server, shared by its kubelet and
// its kube-proxy. Cut, it drops everything as a partitioned network does,
// without a word back: a new request waits, as a dial whose SYNs go
// unanswered, until the link is restored (it then goes out) or its
// context ends or the dialer's timeout passes (dial tcp: i/o timeout); a
// response or watch being read gets nothing more until the link is
// restored, when what the server sent meanwhile arrives as TCP would
// deliver it, unless the cut outlasts HTTP/2's health check, which then
// finds the connection dead and fails it (http2: client connection lost).
// The clients then retry with their own back-off, and it matters how fast
// their attempts fail: failing them at once, as "network unreachable"
// would, drives client-go's reflector back-off to its 30 s cap within a
// minute, and a node would take as long to be Ready after the cut.
//
// It is a RoundTripper rather than a dialer: a node's transport is either
// its own connection or its client certificate's rotating one, and both
// take a wrapper, where only the first takes a dial function.
type link struct {
	// dialTimeout and connTimeout, when set, replace partitionDialTimeout
	// and partitionConnTimeout (tests).
	dialTimeout, connTimeout time.Duration

	mu  sync.Mutex
	cut bool
	// restored is closed when the current cut ends; dead when it has
	// outlasted connTimeout, and the connections are found dead.
	restored, dead chan struct{}
	// cutAt is when the current cut began.
	cutAt time.Time
	// open are the bodies of responses being read: a cut outlasting the
	// connection timeout breaks them.
	open map[*linkBody]struct{}
	// kill breaks the open bodies once the cut outlasts connTimeout.
	kill *time.Timer
}

const (
	// partitionDialTimeout is how long a request waits on a cut link
	// before it fails as a dial that timed out: the agents' dialer timeout.
	partitionDialTimeout = 30 * time.Second
	// partitionConnTimeout is how long an open connection survives a cut:
	// client-go's HTTP/2 health check pings a connection idle for 30 s
	// (ReadIdleTimeout) and gives up 15 s later (PingTimeout).
	partitionConnTimeout = 45 * time.Second
)

var (
	// errDialTimeout is what a request that waited out the dial timeout on
	// a cut link fails with.
	errDialTimeout = &net.OpError{Op: "dial", Net: "tcp", Err: timeoutError{}}
	// errConnLost is what a read fails with once the health check has
	// found a connection dead: golang.org/x/net/http2's error.
	errConnLost = errors.New("http2: client connection lost")
)

// timeoutError is a net.Error that timed out, as a dial's.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func (l *link) wrap(rt http.RoundTripper) http.RoundTripper {
	return linkRoundTripper{link: l, next: rt}
}

// setCut cuts or restores the link.
func (l *link) setCut(cut bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cut == l.cut {
		return
	}
	l.cut = cut
	if cut {
		l.restored, l.dead, l.cutAt = make(chan struct{}), make(chan struct{}), time.Now()
		l.kill = time.AfterFunc(cmp.Or(l.connTimeout, partitionConnTimeout), l.breakOpen)
		return
	}
	l.kill.Stop()
	close(l.restored)
}

// breakOpen fails every open body, if the link is still cut.
func (l *link) breakOpen() {
	l.mu.Lock()
	if !l.cut {
		l.mu.Unlock()
		return
	}
	close(l.dead)
	open := make([]*linkBody, 0, len(l.open))
	for b := range l.open {
		open = append(open, b)
	}
	clear(l.open)
	l.mu.Unlock()
	for _, b := range open {
		b.breakOff()
	}
}

// state is the current cut's channels (see link), nil when the link is
// up.
func (l *link) state() (restored, dead <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.cut {
		return nil, nil
	}
	return l.restored, l.dead
}

type linkRoundTripper struct {
	link *link
	next http.RoundTripper
}

func (t linkRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if restored, _ := t.link.state(); restored != nil {
		start := time.Now()
		timer := time.NewTimer(cmp.Or(t.link.dialTimeout, partitionDialTimeout))
		defer timer.Stop()
		select {
		case <-restored:
			// It goes out at its next SYN, not the moment the network is
			// back.
			if err := sendAfter(req.Context(), timer.C, retransmitAfter(time.Since(start), synRTO)); err != nil {
				closeBody(req)
				return nil, err
			}
		case <-req.Context().Done():
			closeBody(req)
			return nil, req.Context().Err()
		case <-timer.C:
			closeBody(req)
			return nil, errDialTimeout
		}
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	b := &linkBody{ReadCloser: resp.Body, link: t.link}
	// An answer that arrives during a cut is held with the rest.
	if err := b.hold(req.Context().Done()); err != nil {
		_ = resp.Body.Close()
		return nil, err
	}
	l := t.link
	l.mu.Lock()
	if l.open == nil {
		l.open = map[*linkBody]struct{}{}
	}
	l.open[b] = struct{}{}
	l.mu.Unlock()
	resp.Body = b
	return resp, nil
}

// WrappedRoundTripper lets client-go reach the transport under the link:
// a kubelet closes its idle connections after failed heartbeats through
// it.
func (t linkRoundTripper) WrappedRoundTripper() http.RoundTripper { return t.next }

// closeBody closes a request's body, as a RoundTripper must even when it
// fails.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// linkBody is a response body on a link: what it reads during a cut is
// held until the link is restored, and a cut outlasting the connection
// timeout breaks it.
type linkBody struct {
	io.ReadCloser
	link *link

	mu     sync.Mutex
	broken bool
}

// hold waits while the link is cut: until it is restored (nil), the
// connection is found dead (errConnLost), or done is closed.
func (b *linkBody) hold(done <-chan struct{}) error {
	for {
		restored, dead := b.link.state()
		if restored == nil {
			return nil
		}
		l := b.link
		l.mu.Lock()
		cutAt := l.cutAt
		l.mu.Unlock()
		select {
		case <-restored:
			// What was sent arrives with TCP's next retransmission.
			t := time.NewTimer(retransmitAfter(time.Since(cutAt), dataRTO))
			select {
			case <-t.C:
			case <-done:
				t.Stop()
				return context.Canceled
			}
		case <-dead:
			return errConnLost
		case <-done:
			return context.Canceled
		}
	}
}

// TCP's first retransmission timeouts, which double at each retry: 1 s for
// a SYN (RFC 6298's initial RTO, Linux's), 200 ms for data (Linux's
// TCP_RTO_MIN, on a path as short as loopback).
const (
	synRTO  = time.Second
	dataRTO = 200 * time.Millisecond
)

// retransmitAfter is how long after elapsed (the time since the first
// send) TCP sends again, the timeout starting at rto and doubling: what
// was waiting when a network came back goes out then, up to 16 s later
// for a dial, not at once.
func retransmitAfter(elapsed, rto time.Duration) time.Duration {
	at := rto
	for at < elapsed {
		rto *= 2
		at += rto
	}
	return at - elapsed
}

// sendAfter waits d, unless ctx ends or timeout fires first (errDialTimeout).
func sendAfter(ctx context.Context, timeout <-chan time.Time, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-timeout:
		return errDialTimeout
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *linkBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	broken := b.broken
	b.mu.Unlock()
	if broken {
		return 0, errConnLost
	}
	if err != nil || n == 0 {
		return n, err
	}
	if err := b.hold(nil); err != nil {
		return 0, err
	}
	return n, nil
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
