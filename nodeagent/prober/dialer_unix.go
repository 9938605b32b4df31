//go:build unix

package prober

import (
	"net"
	"syscall"
)

// probeDialer dials with SO_LINGER set to 1 s, as the kubelet's probes do:
// a probe's connection is closed at once, and without it thousands of probes
// leave thousands of sockets in TIME_WAIT on the node.
func probeDialer() *net.Dialer {
	return &net.Dialer{
		Control: func(_, _ string, c syscall.RawConn) error {
			// Best effort, as the kubelet's: a socket that keeps the default
			// linger still probes correctly.
			return c.Control(func(fd uintptr) {
				_ = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 1})
			})
		},
	}
}
