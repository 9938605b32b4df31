package server

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/util/flushwriter"
	"k8s.io/klog/v2"
)

// LogOptions are a container log request's v1.PodLogOptions, as the Logs
// provider must honour them (the kubelet's runtime log reader semantics).
type LogOptions struct {
	// Follow keeps streaming new lines until the request's context ends.
	Follow bool
	// Previous asks for the last terminated instance of the container.
	Previous bool
	// Timestamps prefixes each line with its RFC3339Nano time and a space.
	Timestamps bool
	// TailLines, when set, starts that many lines from the end (0: none).
	TailLines *int64
	// LimitBytes, when set, stops after that many bytes of output.
	LimitBytes *int64
	// SinceTime, when set, skips lines logged before it. A request's
	// sinceSeconds is resolved here against the server's clock, as the
	// kubelet's runtime resolves it against now.
	SinceTime *time.Time
}

// logOptionsError is a log query the kubelet refuses, with its status code.
type logOptionsError struct {
	code int
	msg  string
}

func (e *logOptionsError) Error() string { return e.msg }

// parseLogOptions reads the query the API server sends for
// pods/log (follow, previous, timestamps, sinceSeconds, sinceTime,
// tailLines, limitBytes, stream; "tail" is the legacy tailLines, "all"
// meaning none), with the v1 query conversions and the validation the
// kubelet applies: 400 for what does not parse, 422 for what is invalid.
// Hand-written because the url.Values conversion for PodLogOptions is
// generated only inside k8s.io/kubernetes; the field conversions are
// apimachinery's.
func parseLogOptions(query url.Values, now time.Time) (LogOptions, error) {
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	if tail := q.Get("tail"); tail != "" {
		q["tailLines"] = []string{tail}
		if tail == "all" {
			delete(q, "tailLines")
		}
	}
	var (
		opts         LogOptions
		sinceSeconds *int64
		sinceTime    *metav1.Time
		stream       string
	)
	decode := func(name string, convert func(in *[]string) error) error {
		v, ok := q[name]
		if !ok || len(v) == 0 {
			return nil
		}
		if err := convert(&v); err != nil {
			return &logOptionsError{code: http.StatusBadRequest, msg: fmt.Sprintf("unable to decode query parameter %s=%q: %v", name, v[0], err)}
		}
		return nil
	}
	for _, err := range []error{
		decode("follow", func(in *[]string) error { return runtime.Convert_Slice_string_To_bool(in, &opts.Follow, nil) }),
		decode("previous", func(in *[]string) error { return runtime.Convert_Slice_string_To_bool(in, &opts.Previous, nil) }),
		decode("timestamps", func(in *[]string) error { return runtime.Convert_Slice_string_To_bool(in, &opts.Timestamps, nil) }),
		decode("tailLines", func(in *[]string) error {
			return runtime.Convert_Slice_string_To_Pointer_int64(in, &opts.TailLines, nil)
		}),
		decode("limitBytes", func(in *[]string) error {
			return runtime.Convert_Slice_string_To_Pointer_int64(in, &opts.LimitBytes, nil)
		}),
		decode("sinceSeconds", func(in *[]string) error { return runtime.Convert_Slice_string_To_Pointer_int64(in, &sinceSeconds, nil) }),
		decode("sinceTime", func(in *[]string) error { return metav1.Convert_Slice_string_To_Pointer_v1_Time(in, &sinceTime, nil) }),
		decode("stream", func(in *[]string) error { return runtime.Convert_Slice_string_To_string(in, &stream, nil) }),
	} {
		if err != nil {
			return LogOptions{}, err
		}
	}
	invalid := func(format string, args ...any) (LogOptions, error) {
		return LogOptions{}, &logOptionsError{code: http.StatusUnprocessableEntity, msg: "invalid log request: " + fmt.Sprintf(format, args...)}
	}
	switch {
	case opts.TailLines != nil && *opts.TailLines < 0:
		return invalid("tailLines %d must be greater than or equal to 0", *opts.TailLines)
	case opts.LimitBytes != nil && *opts.LimitBytes < 1:
		return invalid("limitBytes %d must be greater than 0", *opts.LimitBytes)
	case sinceSeconds != nil && sinceTime != nil:
		return invalid("at most one of sinceTime or sinceSeconds may be specified")
	case sinceSeconds != nil && *sinceSeconds < 1:
		return invalid("sinceSeconds %d must be greater than 0", *sinceSeconds)
	}
	// PodLogsQuerySplitStreams is alpha and off in 1.37, so the kubelet
	// serves only the combined stream.
	if stream != "" && stream != string(corev1.LogStreamAll) {
		return LogOptions{}, &logOptionsError{code: http.StatusBadRequest, msg: fmt.Sprintf("unable to return the given log stream: %q. Please enable PodLogsQuerySplitStreams feature gate in kubelet", stream)}
	}
	switch {
	case sinceTime != nil:
		t := sinceTime.Time
		opts.SinceTime = &t
	case sinceSeconds != nil:
		t := now.Add(-time.Duration(*sinceSeconds) * time.Second)
		opts.SinceTime = &t
	}
	return opts, nil
}

// containerLogs serves /containerLogs/{namespace}/{pod}/{container} as plain
// text, flushed after every write so that follow streams line by line.
func (s *Server) containerLogs(w http.ResponseWriter, r *http.Request) {
	namespace, pod, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	if s.cfg.Logs == nil {
		s.notProvided(w, "container logs")
		return
	}
	opts, err := parseLogOptions(r.URL.Query(), s.cfg.Clock.Now())
	if err != nil {
		code := http.StatusBadRequest
		if e, ok := err.(*logOptionsError); ok {
			code = e.code
		}
		writeError(w, code, err.Error())
		return
	}
	if !s.lookupContainer(w, namespace, pod, container) {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	cw := &countingWriter{w: flushwriter.Wrap(w)}
	if err := s.cfg.Logs(r.Context(), namespace, pod, container, opts, cw); err != nil {
		klog.FromContext(r.Context()).V(2).Info("Reading container logs failed", "pod", klog.KRef(namespace, pod), "container", container, "err", err)
		if cw.n == 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("reading logs of container %q in pod %q on node %q: %v", container, namespace+"/"+pod, s.cfg.NodeName, err))
		}
	}
}

// countingWriter tells whether the response has begun, after which an
// error can no longer change the status and only ends the stream.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
