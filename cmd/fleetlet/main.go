// Command fleetlet emulates a fleet of Kubernetes nodes, each a small
// kubelet, against a real control plane, drives load through it, and reports
// what the control plane and the nodes measured.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleetlet: %v\n", err)
		os.Exit(1)
	}
}
