//go:build !unix

package prober

import "net"

// probeDialer is a plain dialer where SO_LINGER is not set the Unix way.
func probeDialer() *net.Dialer { return &net.Dialer{} }
