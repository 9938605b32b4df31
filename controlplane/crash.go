package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"time"
)

// startedComponent is a component as it was started: its definition, the
// ports it listens on, and its current process.
type startedComponent struct {
	component component
	ports     []int
	proc      *process
	restarts  int
}

// Kill kills a running component (ComponentAPIServer, say) with SIGKILL,
// as a crash or the OOM killer would, and returns once it is reaped. The
// rest of the control plane keeps running; Restart starts the component
// again. It is how the outage tests take the API server away.
func (cp *ControlPlane) Kill(name string) error {
	cp.mu.Lock()
	sc, ok := cp.started[name]
	cp.mu.Unlock()
	if !ok {
		return fmt.Errorf("controlplane: no component %q has been started", name)
	}
	if sc.proc.exited() {
		return nil
	}
	if err := signalGroup(sc.proc.pid(), syscall.SIGKILL); err != nil {
		return fmt.Errorf("controlplane: send SIGKILL to %s (pid %d): %w", name, sc.proc.pid(), err)
	}
	<-sc.proc.done
	sc.proc.logFile.Close()
	cp.logger.Info("Component killed", "component", name, "pid", sc.proc.pid())
	return nil
}

// Restart starts a component that was killed (or exited) again, with the
// arguments and ports it had, and waits until it is ready, as a supervisor
// (systemd, the kubelet of a static pod) restarts a crashed component. Its
// log goes to a new file, <name>.restart-<n>.log beside the first. A
// component that still runs is left alone.
func (cp *ControlPlane) Restart(ctx context.Context, name string) error {
	cp.mu.Lock()
	sc, ok := cp.started[name]
	cp.mu.Unlock()
	if !ok {
		return fmt.Errorf("controlplane: no component %q has been started", name)
	}
	if !sc.proc.exited() {
		return nil
	}
	sc.restarts++
	logPath := filepath.Join(cp.cfg.Dir, "logs", fmt.Sprintf("%s.restart-%d.log", name, sc.restarts))
	args := append(sc.component.args(sc.ports), cp.cfg.ExtraArgs[name]...)
	begin := time.Now()
	proc, err := startProcess(cp.spawner, name, filepath.Join(cp.cfg.BinDir, binaryName(name)), args, logPath)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	for i, p := range cp.procs {
		if p == sc.proc {
			cp.procs[i] = proc
		}
	}
	sc.proc = proc
	cp.started[name] = sc
	cp.mu.Unlock()
	if err := cp.waitReady(ctx, sc.component, proc, sc.ports); err != nil {
		return err
	}
	cp.logger.Info("Component restarted", "component", name, "pid", proc.pid(), "ports", sc.ports, "duration", time.Since(begin).Round(time.Millisecond))
	return nil
}
