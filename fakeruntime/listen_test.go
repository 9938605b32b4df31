package fakeruntime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serveListenerForTest serves a fresh runtime on lis until the test ends,
// and checks that ServeListener then returns nil.
func serveListenerForTest(t *testing.T, lis net.Listener) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeListener(ctx, lis, New(Config{})) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("ServeListener returned %v after its context ended, want nil", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("ServeListener did not return after its context ended")
		}
	})
}

// staleSocket leaves a socket file at path that nobody listens on, as a
// runtime that died would.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
}

// wantVersion fails the test unless a CRI client gets a version over socket.
func wantVersion(t *testing.T, socket string) {
	t.Helper()
	rs, _ := dialForTest(t, socket, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := rs.Version(ctx, "v1"); err != nil {
		t.Fatalf("Version over %s: %v", socket, err)
	}
}

// pathOfLen returns a path of exactly n bytes in dir, or, when dir's own
// path is too long for that (a long TMPDIR), in a new directory under /tmp.
func pathOfLen(t *testing.T, dir string, n int) string {
	t.Helper()
	if n-len(dir)-len("/.sock") < 1 {
		short, err := os.MkdirTemp("/tmp", "fl")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(short) })
		dir = short
	}
	return filepath.Join(dir, strings.Repeat("s", n-len(dir)-len("/.sock"))+".sock")
}

func TestListen(t *testing.T) {
	tests := []struct {
		name string
		// setup prepares dir and returns Listen's argument and the path it
		// should listen on.
		setup func(t *testing.T, dir string) (arg, path string)
		// wantErr is the exact error, given the argument and path; "" wants
		// Listen to succeed.
		wantErr func(arg, path string) string
		// check runs after Listen, and after serving its listener when
		// Listen succeeded.
		check func(t *testing.T, dir, path string)
	}{{
		name: "live socket refused and still served",
		setup: func(t *testing.T, dir string) (string, string) {
			p := filepath.Join(dir, "cri.sock")
			lis, _, err := Listen(p)
			if err != nil {
				t.Fatalf("first Listen: %v", err)
			}
			serveListenerForTest(t, lis)
			return p, p
		},
		wantErr: func(_, path string) string { return fmt.Sprintf("socket %s is in use by another server", path) },
		check: func(t *testing.T, _, path string) {
			wantSocket(t, path)
			wantVersion(t, path)
		},
	}, {
		name: "stale socket reused",
		setup: func(t *testing.T, dir string) (string, string) {
			p := filepath.Join(dir, "cri.sock")
			staleSocket(t, p)
			return p, p
		},
	}, {
		name: "missing parent directory created",
		setup: func(t *testing.T, dir string) (string, string) {
			p := filepath.Join(dir, "run", "fleetlet", "cri.sock")
			return p, p
		},
	}, {
		name: "unix endpoint accepted",
		setup: func(t *testing.T, dir string) (string, string) {
			p := filepath.Join(dir, "cri.sock")
			return "unix://" + p, p
		},
		check: func(t *testing.T, dir string, _ string) {
			wantNothingAt(t, filepath.Join(dir, "unix:"))
		},
	}, {
		name: "unclean path cleaned",
		setup: func(t *testing.T, dir string) (string, string) {
			return dir + "//sub/../cri.sock", filepath.Join(dir, "cri.sock")
		},
	}, {
		name: "path of the longest length accepted",
		setup: func(t *testing.T, dir string) (string, string) {
			p := pathOfLen(t, dir, MaxSocketPathLen)
			return p, p
		},
	}, {
		name: "path one byte too long refused",
		setup: func(t *testing.T, dir string) (string, string) {
			p := pathOfLen(t, dir, MaxSocketPathLen+1)
			return p, p
		},
		wantErr: func(_, path string) string {
			return fmt.Sprintf("fake CRI socket %s: the path is 108 bytes, longer than the 107 a unix socket allows; choose a path of at most 107 bytes, such as /tmp/fleetlet.sock", path)
		},
		check: func(t *testing.T, _, path string) { wantNothingAt(t, path) },
	}, {
		name: "too long path refused with nothing created",
		setup: func(t *testing.T, dir string) (string, string) {
			p := filepath.Join(dir, "sub", strings.Repeat("s", 120)+".sock")
			return p, p
		},
		wantErr: func(_, path string) string {
			return fmt.Sprintf("fake CRI socket %s: the path is %d bytes, longer than the 107 a unix socket allows; choose a path of at most 107 bytes, such as /tmp/fleetlet.sock", path, len(path))
		},
		check: func(t *testing.T, dir, _ string) { wantNothingAt(t, filepath.Join(dir, "sub")) },
	}, {
		name: "regular file kept and refused",
		setup: func(t *testing.T, dir string) (string, string) {
			p := filepath.Join(dir, "cri.sock")
			if err := os.WriteFile(p, []byte("data"), 0o600); err != nil {
				t.Fatal(err)
			}
			return p, p
		},
		wantErr: func(_, path string) string {
			return fmt.Sprintf("socket %s is a regular file, not a socket; move the file away if it is not needed, or choose another path", path)
		},
		check: func(t *testing.T, _, path string) {
			if data, err := os.ReadFile(path); err != nil || string(data) != "data" {
				t.Errorf("regular file now holds %q (err %v), want %q", data, err, "data")
			}
		},
	}, {
		name: "directory refused",
		setup: func(t *testing.T, dir string) (string, string) {
			p := filepath.Join(dir, "cri.sock")
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			return p, p
		},
		wantErr: func(_, path string) string {
			return fmt.Sprintf("socket %s is a directory, not a socket; choose a path inside it, such as %s", path, socketInside(path))
		},
		check: func(t *testing.T, _, path string) {
			if fi, err := os.Lstat(path); err != nil || !fi.IsDir() {
				t.Errorf("directory changed: %v, %v", fi, err)
			}
		},
	}, {
		name: "symbolic link refused",
		setup: func(t *testing.T, dir string) (string, string) {
			p := filepath.Join(dir, "cri.sock")
			if err := os.Symlink(filepath.Join(dir, "elsewhere.sock"), p); err != nil {
				t.Fatal(err)
			}
			return p, p
		},
		wantErr: func(_, path string) string {
			return fmt.Sprintf("socket %s is a symbolic link, not a socket; pass the path it points to, or remove the link", path)
		},
		check: func(t *testing.T, _, path string) {
			if fi, err := os.Lstat(path); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				t.Errorf("symbolic link changed: %v, %v", fi, err)
			}
		},
	}, {
		name: "http endpoint refused",
		setup: func(t *testing.T, dir string) (string, string) {
			return "http://" + dir + "/cri.sock", ""
		},
		wantErr: func(arg, _ string) string {
			return fmt.Sprintf("fake CRI socket %s: scheme \"http\" is not supported; pass a path or a unix:// endpoint, such as unix:///tmp/fleetlet.sock", arg)
		},
		check: func(t *testing.T, dir, _ string) { wantNothingAt(t, filepath.Join(dir, "cri.sock")) },
	}, {
		name: "relative unix endpoint refused",
		setup: func(t *testing.T, dir string) (string, string) {
			return "unix://cri.sock", ""
		},
		wantErr: func(arg, _ string) string {
			return fmt.Sprintf("fake CRI socket %s: a unix:// endpoint needs an absolute path after unix://; write it as unix:///tmp/fleetlet.sock, or pass the plain path", arg)
		},
	}, {
		name: "unix endpoint without slashes refused",
		setup: func(t *testing.T, dir string) (string, string) {
			return "unix:" + dir + "/cri.sock", ""
		},
		wantErr: func(arg, _ string) string {
			return fmt.Sprintf("fake CRI socket %s: a unix endpoint is written unix:///absolute/path; write it as unix:///tmp/fleetlet.sock, or pass the plain path", arg)
		},
	}, {
		name: "empty refused",
		setup: func(t *testing.T, dir string) (string, string) {
			return "", ""
		},
		wantErr: func(string, string) string {
			return "fake CRI socket: no path given; pass a path such as /tmp/fleetlet.sock or an endpoint such as unix:///tmp/fleetlet.sock"
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			arg, wantPath := tt.setup(t, dir)
			lis, path, err := Listen(arg)
			if tt.wantErr != nil {
				want := tt.wantErr(arg, wantPath)
				if err == nil {
					_ = lis.Close()
					t.Fatalf("Listen(%q) = %s, want error %q", arg, path, want)
				}
				if err.Error() != want {
					t.Fatalf("Listen(%q) error:\n got %s\nwant %s", arg, err, want)
				}
			} else {
				if err != nil {
					t.Fatalf("Listen(%q): %v", arg, err)
				}
				if path != wantPath {
					t.Errorf("Listen(%q) path = %s, want %s", arg, path, wantPath)
				}
				serveListenerForTest(t, lis)
				wantSocket(t, wantPath)
				wantVersion(t, wantPath)
			}
			if tt.check != nil {
				tt.check(t, dir, wantPath)
			}
		})
	}
}

// TestServeListenerRemovesOnlyItsSocket stops ServeListener and checks what
// is left at the path: nothing when the socket was its own, the other
// server's socket when one replaced it.
func TestServeListenerRemovesOnlyItsSocket(t *testing.T) {
	tests := []struct {
		name string
		// replace, if set, puts another server's socket at the path while
		// the first serves; it returns that server's listener.
		replace func(t *testing.T, path string) net.Listener
	}{{
		name: "own socket removed on stop",
	}, {
		name: "socket of another server kept",
		replace: func(t *testing.T, path string) net.Listener {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			lis, _, err := Listen(path)
			if err != nil {
				t.Fatalf("second Listen after removing the first socket: %v", err)
			}
			return lis
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cri.sock")
			lis, _, err := Listen(path)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			served := make(chan error, 1)
			go func() { served <- ServeListener(ctx, lis, New(Config{})) }()
			wantVersion(t, path)

			var other net.Listener
			if tt.replace != nil {
				other = tt.replace(t, path)
				defer other.Close()
			}
			cancel()
			select {
			case err := <-served:
				if err != nil {
					t.Fatalf("ServeListener = %v, want nil", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("ServeListener did not return after its context ended")
			}

			if other == nil {
				wantNothingAt(t, path)
				return
			}
			wantSocket(t, path)
			// The other server's socket still takes connections.
			accepted := make(chan error, 1)
			go func() {
				conn, err := other.Accept()
				if err == nil {
					_ = conn.Close()
				}
				accepted <- err
			}()
			conn, err := net.DialTimeout("unix", path, 10*time.Second)
			if err != nil {
				t.Fatalf("dial the other server's socket: %v", err)
			}
			_ = conn.Close()
			select {
			case err := <-accepted:
				if err != nil {
					t.Fatalf("the other server's Accept: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the other server accepted no connection")
			}
		})
	}
}

// TestListenerCloseRemovesSocket checks that a listener from Listen cleans
// up when closed without being served.
func TestListenerCloseRemovesSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cri.sock")
	lis, _, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	wantSocket(t, path)
	if err := lis.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wantNothingAt(t, path)
	if err := lis.Close(); err == nil || !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close = %v, want net.ErrClosed", err)
	}
}

func wantSocket(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&fs.ModeSocket == 0 {
		t.Fatalf("want a socket at %s: %v, %v", path, fi, err)
	}
}

func wantNothingAt(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("want nothing at %s, got err %v", path, err)
	}
}
