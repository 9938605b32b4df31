package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	constants "k8s.io/apimachinery/pkg/util/remotecommand"
	translator "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream/wsstream"
	utilexec "k8s.io/utils/exec"
)

// A Node that declares ExtendWebSocketsToKubelet gets exec and attach from
// the API server as v5 websockets (v5.channel.k8s.io) and port-forward as
// websockets tunneling SPDY, proxied unchanged; without it the API server
// translates both to SPDY itself. The kubelet's getExec, getAttach and
// getPortForward (pkg/kubelet/server/server.go) translate them in its place,
// with the API server's own translators, towards the runtime's streaming
// server: streamTranslation and portForwardTunnel below do the same.

// streamTranslation is the handler for a v5 websocket exec or attach to
// the runtime's streaming server at u, or nil when r is not one.
func streamTranslation(r *http.Request, opts *remotecommand.Options) func(u *url.URL) http.Handler {
	if !wsstream.IsWebSocketRequestWithStreamCloseProtocol(r) {
		return nil
	}
	return func(u *url.URL) http.Handler {
		return translator.NewStreamTranslatorHandler(u, nil, 0, translator.Options{
			Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr, Tty: opts.TTY,
		})
	}
}

// writeStatusDeadline is the API server translator's for the status frame.
const writeStatusDeadline = 10 * time.Second

// execV5 serves a v5 websocket exec of a node whose runtime has no
// streaming server, through ExecSync: stdout and stderr are written once
// the command has finished, then its status on the error channel, as the
// translator writes it (Success; Failure with NonZeroExitCode and the code
// as an ExitCode cause; an internal error otherwise).
//
// Written by hand: the API server's websocket side of the translator
// (webSocketServerStreams in k8s.io/apiserver/pkg/util/proxy) is
// unexported, and the kubelet only ever reaches v5 through it towards a
// runtime's SPDY server, which the fake runtime does not have. The
// channels and the protocol are wsstream's, as there.
func (s *Server) execV5(w http.ResponseWriter, r *http.Request, namespace, pod, container string, cmd []string, opts *remotecommand.Options) {
	channels := make([]wsstream.ChannelType, 5)
	channels[constants.StreamStdIn] = wsstream.IgnoreChannel
	channels[constants.StreamStdOut] = wsstream.IgnoreChannel
	if opts.Stdout {
		channels[constants.StreamStdOut] = wsstream.WriteChannel
	}
	channels[constants.StreamStdErr] = wsstream.IgnoreChannel
	if opts.Stderr {
		channels[constants.StreamStdErr] = wsstream.WriteChannel
	}
	channels[constants.StreamErr] = wsstream.WriteChannel
	channels[constants.StreamResize] = wsstream.ReadChannel
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		constants.StreamProtocolV5Name: {Binary: true, Channels: channels},
	})
	conn.SetIdleTimeout(streamIdleTimeout)
	_, streams, err := conn.Open(w, r)
	if err != nil {
		klog.FromContext(r.Context()).V(2).Info("Opening a v5 websocket exec failed", "path", r.URL.Path, "err", err)
		return
	}
	defer func() { _ = conn.Close() }()

	// Refused after the upgrade, on the error channel, where a websocket
	// client reads the message whole; before it, the client parses the
	// body of a refused handshake as a Status and can lose it.
	if opts.Stdin || opts.TTY {
		writeStatus(conn, streams, apierrors.NewBadRequest(s.interactiveRefused()).ErrStatus)
		return
	}
	stdout, stderr, err := s.execSync(r.Context(), namespace, pod, container, cmd, 0)
	if _, isExit := err.(utilexec.ExitError); err == nil || isExit {
		if opts.Stdout && len(stdout) > 0 {
			_, _ = streams[constants.StreamStdOut].Write(stdout)
		}
		if opts.Stderr && len(stderr) > 0 {
			_, _ = streams[constants.StreamStdErr].Write(stderr)
		}
	}
	status := metav1.Status{Status: metav1.StatusSuccess}
	switch e := err.(type) {
	case nil:
	case utilexec.ExitError:
		status = metav1.Status{
			Status: metav1.StatusFailure, Reason: constants.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", e),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: constants.ExitCodeCauseType, Message: strconv.Itoa(e.ExitStatus())}}},
		}
	default:
		status = apierrors.NewInternalError(err).ErrStatus
	}
	writeStatus(conn, streams, status)
}

// writeStatus writes the exec's outcome on the error channel.
func writeStatus(conn *wsstream.Conn, streams []io.ReadWriteCloser, status metav1.Status) {
	bs, err := json.Marshal(status)
	if err != nil {
		return
	}
	conn.SetWriteDeadline(writeStatusDeadline)
	_, _ = streams[constants.StreamErr].Write(bs)
}
