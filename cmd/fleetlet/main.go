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

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// controller-runtime (the load driver's object client) logs through its own
// global logger, which warns with a stack trace when nothing set it: send it
// to klog, where everything else in the process logs. In init, so that tests,
// which start runs without main, get it too.
func init() {
	ctrllog.SetLogger(klog.NewKlogr())
}

func main() {
	setGCPercent()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleetlet: %v\n", err)
		os.Exit(1)
	}
}
