package controlplane

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

// spawner forks every child from one goroutine locked to one OS thread.
// Pdeathsig fires when the thread that forked the child exits, not the
// process (golang/go#27505): an unlocked goroutine may fork from a thread the
// runtime later retires, which would SIGKILL a healthy etcd mid-run. The
// locked thread lives until the control plane has stopped.
type spawner struct {
	requests chan func()
}

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

// run calls f on the spawner's thread and returns when it has.
func (s *spawner) run(f func()) {
	done := make(chan struct{})
	s.requests <- func() {
		defer close(done)
		f()
	}
	<-done
}

// close ends the spawner's goroutine; call it only once every child is reaped.
func (s *spawner) close() { close(s.requests) }

// process is one running component.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	logFile *os.File
	// done is closed once the child has been reaped; waitErr is valid then.
	done    chan struct{}
	waitErr error
}

// startProcess runs path with args, output to logPath (truncated, so that
// the log of a retry is only that attempt's).
func startProcess(s *spawner, name, path string, args []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("controlplane: open %s log: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own group keeps a terminal's Ctrl-C away from the children, so
		// that fleetlet can stop them in order, and lets Stop signal the
		// whole group.
		Setpgid: true,
		// No orphans if fleetlet dies without calling Stop.
		Pdeathsig: syscall.SIGKILL,
	}
	s.run(func() { err = cmd.Start() })
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("controlplane: start %s (%s): %w", name, path, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, logFile: logFile, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// exited tells whether the child has exited (and been reaped).
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the child's group, escalates to SIGKILL after
// timeout, and returns once the child is reaped. It reports whether SIGKILL
// was needed.
func (p *process) stop(timeout time.Duration) (killed bool, err error) {
	defer p.logFile.Close()
	if p.exited() {
		return false, nil
	}
	if err := signalGroup(p.pid(), syscall.SIGTERM); err != nil {
		return false, fmt.Errorf("controlplane: send SIGTERM to %s (pid %d): %w", p.name, p.pid(), err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return false, nil
	case <-timer.C:
	}
	if err := signalGroup(p.pid(), syscall.SIGKILL); err != nil {
		return true, fmt.Errorf("controlplane: send SIGKILL to %s (pid %d): %w", p.name, p.pid(), err)
	}
	// SIGKILL cannot be ignored: the only wait left is the kernel's.
	<-p.done
	return true, nil
}

// signalGroup signals the child's whole process group; a group that is
// already gone is not an error, since the goal is that it be gone.
func signalGroup(pid int, sig syscall.Signal) error {
	err := syscall.Kill(-pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// tailBytes bounds how much of a log tailLines reads: the last lines of a
// component that failed are near the end, and its log may be large.
const tailBytes = 64 << 10

// tailLines returns the last n lines of the file at path, without a trailing
// newline. A line longer than tailBytes is cut from its start.
func tailLines(path string, n int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	offset := max(st.Size()-tailBytes, 0)
	buf := make([]byte, st.Size()-offset)
	if _, err := f.ReadAt(buf, offset); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return lastLines(buf, n), nil
}

func lastLines(buf []byte, n int) string {
	buf = bytes.TrimRight(buf, "\n")
	if n <= 0 || len(buf) == 0 {
		return ""
	}
	end := len(buf)
	for i := len(buf) - 1; i >= 0; i-- {
		if buf[i] == '\n' {
			n--
			if n == 0 {
				return string(buf[i+1 : end])
			}
		}
	}
	return string(buf[:end])
}

// logTail is tailLines for error messages: it never fails, it says why.
func logTail(path string) string {
	const lines = 20
	tail, err := tailLines(path, lines)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	if tail == "" {
		return "(log is empty)"
	}
	return tail
}
