package controlplane

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFreePorts(t *testing.T) {
	ports, err := freePorts(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || p > 65535 || seen[p] {
			t.Fatalf("ports %v: want 8 distinct valid ports", ports)
		}
		seen[p] = true
	}
	// The listeners are closed, so the child can bind the port.
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0]))
	if err != nil {
		t.Fatalf("port %d is not free after freePorts returned: %v", ports[0], err)
	}
	l.Close()
}

func TestIsAddrInUse(t *testing.T) {
	etcd := `{"level":"fatal","msg":"discovery failed","error":"listen tcp 127.0.0.1:2380: bind: address already in use"}`
	apiserver := `E0101 failed to create listener: failed to listen on 127.0.0.1:6443: listen tcp 127.0.0.1:6443: bind: address already in use`
	if !isAddrInUse(etcd) || !isAddrInUse(apiserver) {
		t.Error("address-in-use logs not recognised")
	}
	if isAddrInUse("open /x/ca.crt: no such file or directory") {
		t.Error("unrelated failure taken for a port conflict")
	}
}

func TestTailLines(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	var many strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&many, "line %d\n", i)
	}
	long := strings.Repeat("x", 2*tailBytes)
	tests := []struct {
		name, content string
		n             int
		want          string
	}{
		{"empty", "", 20, ""},
		{"fewer lines than asked", "a\nb\n", 20, "a\nb"},
		{"no trailing newline", "a\nb\nc", 2, "b\nc"},
		{"last of many", many.String(), 3, "line 98\nline 99\nline 100"},
		{"exactly n", "a\nb\nc\n", 3, "a\nb\nc"},
		{"trailing blank lines", "a\nb\n\n\n", 1, "b"},
		{"longer than the read window", "first\n" + long + "\nlast\n", 5, long[len(long)-(tailBytes-len("\nlast\n")):] + "\nlast"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tailLines(write(fmt.Sprint(i), tt.content), tt.n)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", clip(got), clip(tt.want))
			}
		})
	}
	if _, err := tailLines(filepath.Join(dir, "missing"), 5); err == nil {
		t.Error("no error for a missing file")
	}
	if got := logTail(filepath.Join(dir, "missing")); !strings.Contains(got, "cannot read log") {
		t.Errorf("logTail of a missing file = %q", got)
	}
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:20] + "..." + s[len(s)-20:]
	}
	return s
}

// waitForLog waits until the child's log contains want, so a test acts only
// once the child has reached that point, however slow the machine.
func waitForLog(t *testing.T, p *process, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		data, _ := os.ReadFile(p.logPath)
		if strings.Contains(string(data), want) {
			return
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("child never logged %q (exited: %v); log: %q", want, p.exited(), data)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive tells whether pid is a live process: a zombie is dead, and one
// reparented to a PID 1 that does not reap would stay a zombie forever.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name, which may hold spaces.
	rest := stat[strings.LastIndexByte(string(stat), ')')+1:]
	return !strings.HasPrefix(strings.TrimSpace(string(rest)), "Z")
}

func assertGone(t *testing.T, pid int) {
	t.Helper()
	if alive(pid) {
		t.Errorf("pid %d still alive after stop", pid)
	}
}

func TestProcessStop(t *testing.T) {
	s := newSpawner()
	defer s.close()
	dir := t.TempDir()

	t.Run("exits on SIGTERM", func(t *testing.T) {
		p, err := startProcess(s, "polite", "/bin/sh", []string{"-c", "echo ready; exec sleep 600"}, filepath.Join(dir, "polite.log"))
		if err != nil {
			t.Fatal(err)
		}
		waitForLog(t, p, "ready")
		killed, err := p.stop(time.Minute)
		if err != nil || killed {
			t.Errorf("stop() = %v, %v; want no SIGKILL and no error", killed, err)
		}
		assertGone(t, p.pid())
		// A second stop of a reaped child is a no-op.
		if killed, err := p.stop(time.Minute); err != nil || killed {
			t.Errorf("second stop() = %v, %v", killed, err)
		}
	})

	t.Run("ignores SIGTERM", func(t *testing.T) {
		// The grandchild shares the group, so SIGKILL must reach it too.
		p, err := startProcess(s, "stubborn", "/bin/sh", []string{"-c", `trap "" TERM; sleep 600 & echo "child $!"; echo ready; wait`}, filepath.Join(dir, "stubborn.log"))
		if err != nil {
			t.Fatal(err)
		}
		waitForLog(t, p, "ready")
		var child int
		data, _ := os.ReadFile(p.logPath)
		if _, err := fmt.Sscanf(string(data), "child %d", &child); err != nil {
			t.Fatalf("read grandchild pid from %q: %v", data, err)
		}
		killed, err := p.stop(100 * time.Millisecond)
		if err != nil || !killed {
			t.Errorf("stop() = %v, %v; want SIGKILL and no error", killed, err)
		}
		assertGone(t, p.pid())
		// SIGKILL to the group is delivered at once, but the grandchild is
		// not ours to wait for: poll until it is dead.
		deadline := time.Now().Add(time.Minute)
		for alive(child) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		assertGone(t, child)
	})
}

// TestChildDiesWithParent checks Pdeathsig: a helper process (this test
// binary, re-executed) starts a child and is then SIGKILLed, so it cannot
// call Stop; the child must die too.
func TestChildDiesWithParent(t *testing.T) {
	if os.Getenv("FLEETLET_PDEATHSIG_HELPER") != "" {
		s := newSpawner()
		p, err := startProcess(s, "orphan", "/bin/sleep", []string{"600"}, filepath.Join(os.Getenv("FLEETLET_PDEATHSIG_HELPER"), "orphan.log"))
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Printf("child %d\n", p.pid())
		select {}
	}

	helper := exec.Command(os.Args[0], "-test.run=^TestChildDiesWithParent$")
	helper.Env = append(os.Environ(), "FLEETLET_PDEATHSIG_HELPER="+t.TempDir())
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	var child int
	if _, err := fmt.Fscanf(out, "child %d\n", &child); err != nil {
		helper.Process.Kill()
		helper.Wait()
		t.Fatalf("helper did not report its child: %v", err)
	}
	if !alive(child) {
		t.Fatalf("child %d not running before its parent died", child)
	}
	helper.Process.Kill()
	helper.Wait()
	deadline := time.Now().Add(time.Minute)
	for alive(child) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(child) {
		syscall.Kill(child, syscall.SIGKILL)
		t.Fatalf("child %d outlived its killed parent: Pdeathsig did not fire", child)
	}
}
