package kubemark

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// spawner forks every child from one goroutine locked to one OS thread:
// Pdeathsig fires when the forking thread exits, not the process
// (golang/go#27505), and the runtime may retire an unlocked goroutine's
// thread mid-run, which would SIGKILL a healthy child. As in controlplane.
type spawner struct{ requests chan func() }

func newSpawner() *spawner {
	s := &spawner{requests: make(chan func())}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for f := range s.requests {
			f()
		}
	}()
	return s
}

func (s *spawner) run(f func()) {
	done := make(chan struct{})
	s.requests <- func() { defer close(done); f() }
	<-done
}

// close ends the spawner's thread; call it once every child is reaped.
func (s *spawner) close() { close(s.requests) }

// process is one hollow component.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{} // closed once reaped; waitErr is valid then
	waitErr error
}

func startProcess(s *spawner, name, path string, args, env []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kubemark: open the log of %s: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own group, so that Close signals whatever it forks too and a
	// terminal's Ctrl-C reaches only us; Pdeathsig so that it dies with us
	// if we die without Close.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	s.run(func() { err = cmd.Start() })
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("kubemark: start %s (%s): %w", name, path, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, logFile: logFile, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the child's group, SIGKILL after timeout, and
// returns once the child is reaped. The group gets SIGKILL in any case once
// the child is gone, so that nothing it forked outlives it.
func (p *process) stop(timeout time.Duration) error {
	defer p.logFile.Close()
	defer signalGroup(p.pid(), syscall.SIGKILL)
	if p.exited() {
		return nil
	}
	if err := signalGroup(p.pid(), syscall.SIGTERM); err != nil {
		return fmt.Errorf("kubemark: send SIGTERM to %s (pid %d): %w", p.name, p.pid(), err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	if err := signalGroup(p.pid(), syscall.SIGKILL); err != nil {
		return fmt.Errorf("kubemark: send SIGKILL to %s (pid %d): %w", p.name, p.pid(), err)
	}
	<-p.done
	return nil
}

// signalGroup signals the group of pid; a group already gone is no error.
func signalGroup(pid int, sig syscall.Signal) error {
	err := syscall.Kill(-pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// tailBytes bounds how much of a log logTail reads.
const tailBytes = 16 << 10

// logTail returns the last lines of the log at path for an error message;
// it never fails, it says why.
func logTail(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	offset := max(st.Size()-tailBytes, 0)
	buf := make([]byte, st.Size()-offset)
	if _, err := f.ReadAt(buf, offset); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	buf = bytes.TrimRight(buf, "\n")
	if len(buf) == 0 {
		return "(log is empty)"
	}
	for i := len(buf) - 1; i >= 0; i-- {
		if buf[i] == '\n' {
			if lines--; lines == 0 {
				return string(buf[i+1:])
			}
		}
	}
	return string(buf)
}
