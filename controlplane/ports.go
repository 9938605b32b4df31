package controlplane

import (
	"fmt"
	"net"
	"strings"
)

// freePorts returns n distinct TCP ports on 127.0.0.1 that were free a moment
// ago. It holds every listener until all n are chosen, so the kernel cannot
// hand out the same port twice; it then closes them for the child to bind.
// Another process may take a port in between: callers retry on
// "address already in use" (see isAddrInUse).
func freePorts(n int) ([]int, error) {
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("controlplane: find a free port on 127.0.0.1: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// isAddrInUse tells whether a component's log says it lost the race for one
// of its ports; the text is the same from etcd and the Kubernetes binaries,
// as both print Go's syscall error.
func isAddrInUse(logTail string) bool {
	return strings.Contains(logTail, "address already in use")
}
