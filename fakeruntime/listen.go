package fakeruntime

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// MaxSocketPathLen is the longest path a unix socket can be bound to on
	// Linux: sun_path holds 108 bytes, one of them the terminating NUL.
	MaxSocketPathLen = 107
	// unixScheme is how crictl and the kubelet write a unix socket endpoint.
	unixScheme = "unix://"
	// exampleSocket is the path error messages suggest.
	exampleSocket = "/tmp/fleetlet.sock"
	// probeTimeout bounds the dial that tells a live socket from a stale one.
	// Connecting to a unix socket does not wait on the network, so this only
	// guards against a wedged peer.
	probeTimeout = 2 * time.Second
)

// Listen checks socket, the path of a unix socket or a unix:// endpoint
// (unix:///run/fake.sock, as crictl users write it), and listens on it. It
// returns the listener and the cleaned filesystem path it listens on.
//
// Listen refuses, without creating or deleting anything, an empty path, an
// endpoint of any other scheme, a path longer than MaxSocketPathLen bytes, a
// path where a regular file, directory, symbolic link or other non-socket
// file already is, and a socket another server is listening on. A stale
// socket, which nobody listens on, is removed and replaced. Only once the
// checks pass does Listen create the socket's parent directory if it is
// missing.
//
// Closing the listener removes the socket file, unless another server has
// replaced it in the meantime. Serve it with ServeListener.
func Listen(socket string) (lis net.Listener, path string, err error) {
	path, err = socketPath(socket)
	if err != nil {
		return nil, "", err
	}
	if err := prepareSocketPath(path); err != nil {
		return nil, "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, "", fmt.Errorf("fake CRI socket %s: create its directory: %v; create the directory yourself or choose another path", path, unwrapPathError(err))
	}
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			// Something appeared at the path since the checks: say what.
			if perr := prepareSocketPath(path); perr != nil {
				return nil, "", perr
			}
		}
		return nil, "", fmt.Errorf("fake CRI socket %s: listen: %v; check that its directory is writable, or choose another path", path, unwrapOpError(err))
	}
	// The listener must not unlink the path on close by itself: by then
	// another server may have replaced the socket. socketListener removes
	// only the file it created.
	ul.SetUnlinkOnClose(false)
	created, err := os.Lstat(path)
	if err != nil {
		_ = ul.Close()
		return nil, "", fmt.Errorf("fake CRI socket %s: the socket vanished as soon as it was created: %v; check that nothing else manages this path", path, unwrapPathError(err))
	}
	return &socketListener{UnixListener: ul, path: path, created: created}, path, nil
}

// socketPath turns the socket argument, a path or a unix:// endpoint, into a
// cleaned filesystem path, and refuses one that cannot name a unix socket.
func socketPath(socket string) (string, error) {
	if socket == "" {
		return "", fmt.Errorf("fake CRI socket: no path given; pass a path such as %s or an endpoint such as %s%s", exampleSocket, unixScheme, exampleSocket)
	}
	path := socket
	switch scheme, ok := endpointScheme(socket); {
	case ok && scheme == "unix":
		path = strings.TrimPrefix(socket, unixScheme)
		if !strings.HasPrefix(path, "/") {
			return "", fmt.Errorf("fake CRI socket %s: a unix:// endpoint needs an absolute path after unix://; write it as %s%s, or pass the plain path", socket, unixScheme, exampleSocket)
		}
	case ok:
		return "", fmt.Errorf("fake CRI socket %s: scheme %q is not supported; pass a path or a unix:// endpoint, such as %s%s", socket, scheme, unixScheme, exampleSocket)
	case strings.HasPrefix(socket, "unix:"):
		// unix:/path or unix:path would otherwise create a directory named
		// "unix:" in the working directory.
		return "", fmt.Errorf("fake CRI socket %s: a unix endpoint is written unix:///absolute/path; write it as %s%s, or pass the plain path", socket, unixScheme, exampleSocket)
	}
	path = filepath.Clean(path)
	if strings.HasPrefix(path, "@") {
		// Go binds a name starting with @ in Linux's abstract namespace,
		// which has no file to check, serve crictl from or clean up.
		return "", fmt.Errorf("fake CRI socket %s: a name starting with @ is a Linux abstract socket, not a file; pass ./%s to mean the file", path, path)
	}
	if len(path) > MaxSocketPathLen {
		return "", fmt.Errorf("fake CRI socket %s: the path is %d bytes, longer than the %d a unix socket allows; choose a path of at most %d bytes, such as %s", path, len(path), MaxSocketPathLen, MaxSocketPathLen, exampleSocket)
	}
	return path, nil
}

// endpointScheme reports the scheme of an endpoint written scheme://...,
// where scheme is a URL scheme (RFC 3986: a letter, then letters, digits,
// +, - or .).
func endpointScheme(s string) (string, bool) {
	i := strings.Index(s, "://")
	if i <= 0 {
		return "", false
	}
	for j, c := range s[:i] {
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !letter && (j == 0 || !('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return "", false
		}
	}
	return strings.ToLower(s[:i]), true
}

// prepareSocketPath checks what is at path: nothing, or a stale socket,
// which it removes, is fine; anything else is an error saying what is there
// and what to do.
func prepareSocketPath(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("fake CRI socket %s: a parent of the path is not a directory; choose another path, such as %s", path, exampleSocket)
	case err != nil:
		return fmt.Errorf("fake CRI socket %s: %v; check the path and its permissions, or choose another path", path, unwrapPathError(err))
	}
	switch mode := fi.Mode(); {
	case mode.IsRegular():
		return fmt.Errorf("socket %s is a regular file, not a socket; move the file away if it is not needed, or choose another path", path)
	case mode.IsDir():
		return fmt.Errorf("socket %s is a directory, not a socket; choose a path inside it, such as %s", path, socketInside(path))
	case mode&fs.ModeSymlink != 0:
		return fmt.Errorf("socket %s is a symbolic link, not a socket; pass the path it points to, or remove the link", path)
	case mode&fs.ModeSocket == 0:
		return fmt.Errorf("socket %s is a %s file, not a socket; choose another path", path, fileKind(mode))
	}
	conn, err := net.DialTimeout("unix", path, probeTimeout)
	switch {
	case err == nil:
		_ = conn.Close()
		return fmt.Errorf("socket %s is in use by another server", path)
	case errors.Is(err, syscall.EAGAIN):
		// A listener whose accept queue is full: alive, only busy.
		return fmt.Errorf("socket %s is in use by another server", path)
	case !errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("fake CRI socket %s: cannot tell whether a server listens on it: %v; stop the server using it, or remove the socket if none does", path, unwrapOpError(err))
	}
	// Nobody listens: a runtime died without cleaning up. Remove that socket,
	// and only that one: another server may have replaced it since.
	now, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("fake CRI socket %s: %v; check the path and its permissions, or choose another path", path, unwrapPathError(err))
	case !sameFile(fi, now):
		return fmt.Errorf("socket %s is in use by another server", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("fake CRI socket %s: remove the stale socket: %v; remove it yourself or choose another path", path, unwrapPathError(err))
	}
	return nil
}

// socketInside suggests a socket path inside dir, or the example path when
// that would be too long.
func socketInside(dir string) string {
	if p := filepath.Join(dir, "fleetlet.sock"); len(p) <= MaxSocketPathLen {
		return p
	}
	return exampleSocket
}

func fileKind(mode fs.FileMode) string {
	switch {
	case mode&fs.ModeNamedPipe != 0:
		return "named pipe"
	case mode&fs.ModeCharDevice != 0:
		return "character device"
	case mode&fs.ModeDevice != 0:
		return "device"
	}
	return "special"
}

// sameFile reports whether two Lstat results are of one file. The
// modification time guards against a new socket reusing a removed one's
// inode number.
func sameFile(a, b fs.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime())
}

// unwrapPathError drops the operation and path of an *fs.PathError, which the
// messages here already name.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// unwrapOpError drops the operation and addresses of a *net.OpError down to
// its system call error.
func unwrapOpError(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Err
	}
	return err
}

// socketListener is the listener Listen returns. Closing it removes the
// socket file it created, and never a socket another server put at the path
// after this one.
type socketListener struct {
	*net.UnixListener
	path    string
	created fs.FileInfo

	removeOnce sync.Once
	removeErr  error
	replaced   bool
}

// Close stops listening and removes the socket file, if it is still the one
// Listen created. It is safe to call more than once, and concurrently.
func (l *socketListener) Close() error {
	err := l.UnixListener.Close()
	if rmErr := l.removeSocket(); rmErr != nil {
		return errors.Join(err, rmErr)
	}
	return err
}

// removeSocket removes the socket file once, and reports what it did each
// time it is called.
func (l *socketListener) removeSocket() error {
	l.removeOnce.Do(func() {
		fi, err := os.Lstat(l.path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return
		case err != nil:
			l.removeErr = fmt.Errorf("fake CRI socket %s: check the socket before removing it: %v; remove it yourself if no server uses it", l.path, unwrapPathError(err))
			return
		case !sameFile(l.created, fi):
			l.replaced = true
			return
		}
		if err := os.Remove(l.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			l.removeErr = fmt.Errorf("fake CRI socket %s: remove the socket: %v; remove it yourself", l.path, unwrapPathError(err))
		}
	})
	return l.removeErr
}
