package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream/wsstream"
	utilexec "k8s.io/utils/exec"
)

// The kubelet's streaming defaults (KubeletConfiguration
// streamingConnectionIdleTimeout, and the CRI streaming server's creation
// timeout).
const (
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = remotecommand.DefaultStreamCreationTimeout
)

// execSync runs cmd through the Exec provider and reports a non-zero exit
// the way the CRI client does, as a utilexec.ExitError.
func (s *Server) execSync(ctx context.Context, namespace, pod, container string, cmd []string, timeout time.Duration) (stdout, stderr []byte, err error) {
	stdout, stderr, code, err := s.cfg.Exec(ctx, namespace, pod, container, cmd, timeout)
	if err != nil {
		return nil, nil, fmt.Errorf("running %q in container %q of pod %q on node %q: %w", strings.Join(cmd, " "), container, namespace+"/"+pod, s.cfg.NodeName, err)
	}
	if code != 0 {
		return stdout, stderr, utilexec.CodeExitError{
			Err:  fmt.Errorf("command '%s' exited with %d: %s", strings.Join(cmd, " "), code, stderr),
			Code: int(code),
		}
	}
	return stdout, stderr, nil
}

// run serves POST /run/...?cmd=..., the kubelet's one-shot exec: the command
// is split on spaces, and stdout then stderr are answered as the body (with
// the kubelet's JSON content type, though the body is raw output).
func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	namespace, pod, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	if s.cfg.Exec == nil {
		s.notProvided(w, "run")
		return
	}
	if !s.lookupContainer(w, namespace, pod, container) {
		return
	}
	cmd := strings.Split(r.FormValue("cmd"), " ")
	stdout, stderr, err := s.execSync(r.Context(), namespace, pod, container, cmd, 0)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	data := slices.Concat(stdout, stderr)
	if len(data) == 0 {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(data); err != nil {
		klog.FromContext(r.Context()).V(4).Info("Writing /run response failed", "err", err)
	}
}

// exec serves the remotecommand protocol (SPDY v1 to v4, and the
// pre-v5 websocket protocols) through the CRI streaming library the kubelet
// uses, for non-interactive commands: the command runs to completion through
// Exec and its output and exit status are sent back. v5 websockets, which
// reach this server because its Node declares ExtendWebSocketsToKubelet,
// are served by execV5.
func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	namespace, pod, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	if s.cfg.Exec == nil {
		s.notProvided(w, "exec")
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.lookupContainer(w, namespace, pod, container) {
		return
	}
	if wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		s.execV5(w, r, namespace, pod, container, r.URL.Query()["command"], opts)
		return
	}
	if opts.Stdin || opts.TTY {
		writeError(w, http.StatusBadRequest, s.interactiveRefused())
		return
	}
	executor := &syncExecutor{s: s, namespace: namespace}
	remotecommand.ServeExec(w, r, executor, pod, r.PathValue("uid"), container, r.URL.Query()["command"],
		opts, streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

// interactiveRefused is why an exec with stdin or a TTY is refused when
// the runtime has no streaming server.
func (s *Server) interactiveRefused() string {
	return fmt.Sprintf("interactive exec (stdin or tty) is not supported on node %q: its commands run to completion through CRI ExecSync; run kubectl exec without -i and -t", s.cfg.NodeName)
}

// syncExecutor adapts the ExecSync-shaped provider to the streaming
// library's Executor for one request's namespace.
type syncExecutor struct {
	s         *Server
	namespace string
}

func (e *syncExecutor) ExecInContainer(ctx context.Context, pod string, _ string, container string, cmd []string, _ io.Reader, out, errOut io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize, timeout time.Duration) error {
	stdout, stderr, err := e.s.execSync(ctx, e.namespace, pod, container, cmd, timeout)
	if _, ok := err.(utilexec.ExitError); err != nil && !ok {
		return err
	}
	// Close the output streams so the client sees them end before the
	// status arrives on the error stream.
	if out != nil {
		_, _ = out.Write(stdout)
		_ = out.Close()
	}
	if errOut != nil {
		_, _ = errOut.Write(stderr)
		_ = errOut.Close()
	}
	return err
}
