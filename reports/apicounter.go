package reports

import (
	"bytes"
	"cmp"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// APICounter counts the requests a client sends to the apiserver, at the
// client's transport: by verb and resource as the apiserver names them, the
// bytes each way, the latency to the response headers, and the outcome. This
// is how the heartbeat load of a fleet is measured, so it sits in the hot path
// of every agent: counters are atomics per (verb, resource) key, keys are
// found under a read lock without allocating, and only the latency histogram
// takes a short per-key lock.
type APICounter struct {
	mu    sync.RWMutex
	stats map[apiKey]*apiStat

	openWatches atomic.Int64
	// rates counts requests per second by verb, for the report's chart.
	rates rateTable
	// avail finds the stretches in which no request was answered.
	avail availability
}

// apiKey identifies a row of the API table. Its strings are the apiserver's
// names, cut out of the request URL.
type apiKey struct {
	// component is the client that sent it: "" for the kubelet's part of an
	// agent (and the fleet's shared clients), ComponentKubeProxy for its
	// kube-proxy.
	component                          string
	verb, group, resource, subresource string
	// path is set only for requests that are not for a resource (discovery,
	// /healthz, /version), cut short so it stays a bounded label.
	path string
}

type apiStat struct {
	count, bytesSent, bytesReceived, errors atomic.Int64
	// events counts the events this key's watches have delivered.
	events atomic.Int64
	// open counts this key's watches whose body is not closed yet.
	open atomic.Int64
	// codes[c] counts responses with status c×100 to c×100+99; codes[0] the
	// ones outside 100-599.
	codes [6]atomic.Int64

	mu   sync.Mutex
	hist *hdrhistogram.Histogram
}

// NewAPICounter returns an APICounter with nothing counted.
func NewAPICounter() *APICounter {
	a := &APICounter{stats: make(map[apiKey]*apiStat)}
	a.rates.init(time.Now())
	return a
}

// Wrap returns rt with counting around it. Its signature fits
// rest.Config.WrapTransport.
func (a *APICounter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return &countingTransport{counter: a, next: rt}
}

// ComponentKubeProxy names the requests of the agents' kube-proxies.
const ComponentKubeProxy = "kube-proxy"

// WrapAs is Wrap for a client of the named component, whose requests are
// counted in rows of their own: the kube-proxies' watches of Services are
// not the kubelets'.
func (a *APICounter) WrapAs(component string) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return &countingTransport{counter: a, next: rt, component: component}
	}
}

// OpenWatches returns the number of watch responses whose body has not been
// closed yet: the watches this process holds open.
func (a *APICounter) OpenWatches() int {
	return int(a.openWatches.Load())
}

// APIStat is one row of the API table: the requests of one verb on one
// resource. Latencies are to the response headers, in milliseconds with the
// histogram's 0.1% error; for a watch that is the time to establish it.
type APIStat struct {
	// Component is the client that sent the requests: empty for the
	// kubelets, "kube-proxy" for the agents' kube-proxies.
	Component string `json:"component,omitempty"`
	Verb      string `json:"verb"`
	// Group is the API group, empty for the core group.
	Group       string `json:"group,omitempty"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
	// Path is the URL path, cut to three segments, of a request that is not
	// for a resource (discovery, /healthz, /version); Resource is then empty.
	Path  string `json:"path,omitempty"`
	Count int64  `json:"count"`
	// BytesSent counts request bodies; BytesReceived response bodies as the
	// client read them (after the transport's gzip decoding, if any), so a
	// watch counts what it has streamed so far. Headers are not counted.
	BytesSent     int64   `json:"bytesSent"`
	BytesReceived int64   `json:"bytesReceived"`
	P50Ms         float64 `json:"p50Ms"`
	P99Ms         float64 `json:"p99Ms"`
	// Errors counts requests that failed for reasons of load or breakage: no
	// response at all (connection error, timeout), 429 Too Many Requests, or
	// a 5xx. Other 4xx (404, 409) are ordinary protocol outcomes and are only
	// in Codes.
	Errors int64 `json:"errors"`
	// Codes counts responses by status class: "2xx", "4xx", ...
	Codes map[string]int64 `json:"codes,omitempty"`
	// Histogram is the latency histogram in the report's geometry (see
	// NewHistogram), encoded like PhaseSummary.Histogram.
	Histogram string `json:"histogram,omitempty"`
	// OpenWatches, on a watch row, is how many of its watches were open
	// when the counts were taken: the watches the fleet holds.
	OpenWatches int64 `json:"openWatches,omitempty"`
	// Events, on a watch row, counts the events its watches received,
	// including the initial events of a streaming list and bookmarks: one
	// per frame of a protobuf watch stream, one per line of a JSON one. A
	// watch in any other encoding (CBOR) counts none.
	Events int64 `json:"events,omitempty"`
}

// Label is the row's name for people: resource[.group][/subresource], or the
// path of a non-resource request.
func (s APIStat) Label() string {
	if s.Resource == "" {
		return s.Path
	}
	l := s.Resource
	if s.Group != "" {
		l += "." + s.Group
	}
	if s.Subresource != "" {
		l += "/" + s.Subresource
	}
	return l
}

// Snapshot returns the counts so far, sorted by resource, subresource, verb
// (then group and path), with requests for no resource last. It encodes every
// latency histogram, so it is meant for the end of a run, not for a progress
// line.
func (a *APICounter) Snapshot() []APIStat {
	a.mu.RLock()
	keys := make([]apiKey, 0, len(a.stats))
	stats := make([]*apiStat, 0, len(a.stats))
	for k, s := range a.stats {
		keys = append(keys, k)
		stats = append(stats, s)
	}
	a.mu.RUnlock()

	out := make([]APIStat, len(keys))
	for i, k := range keys {
		s := stats[i]
		// Copy the histogram under its lock, summarize outside it, so that
		// agents recording latencies do not wait on the encoding.
		s.mu.Lock()
		h := s.hist.Clone()
		s.mu.Unlock()
		st := statsOf(h)

		var codes map[string]int64
		for c := range s.codes {
			n := s.codes[c].Load()
			if n == 0 {
				continue
			}
			if codes == nil {
				codes = make(map[string]int64)
			}
			codes[codeClassName(c)] = n
		}
		out[i] = APIStat{
			Component:     k.component,
			OpenWatches:   s.open.Load(),
			Verb:          k.verb,
			Group:         k.group,
			Resource:      k.resource,
			Subresource:   k.subresource,
			Path:          k.path,
			Count:         s.count.Load(),
			BytesSent:     s.bytesSent.Load(),
			BytesReceived: s.bytesReceived.Load(),
			Events:        s.events.Load(),
			P50Ms:         st.p50,
			P99Ms:         st.p99,
			Errors:        s.errors.Load(),
			Codes:         codes,
			Histogram:     encodeHistogram(h),
		}
	}
	slices.SortFunc(out, compareAPIStats)
	return out
}

// codeClassName names the index of apiStat.codes.
func codeClassName(c int) string {
	if c < 1 || c > 5 {
		return "other"
	}
	return strconv.Itoa(c) + "xx"
}

func compareAPIStats(x, y APIStat) int {
	// Non-resource requests (empty Resource) go last.
	if xr, yr := x.Resource == "", y.Resource == ""; xr != yr {
		if xr {
			return 1
		}
		return -1
	}
	return cmp.Or(
		cmp.Compare(x.Component, y.Component),
		cmp.Compare(x.Resource, y.Resource),
		cmp.Compare(x.Subresource, y.Subresource),
		cmp.Compare(x.Verb, y.Verb),
		cmp.Compare(x.Group, y.Group),
		cmp.Compare(x.Path, y.Path),
	)
}

// stat returns the counters of k, creating them on first use. The common case
// is a map hit under the read lock, which does not allocate.
func (a *APICounter) stat(k apiKey) *apiStat {
	a.mu.RLock()
	s := a.stats[k]
	a.mu.RUnlock()
	if s != nil {
		return s
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if s = a.stats[k]; s != nil {
		return s
	}
	// The key's strings are slices of one request's URL; copy them so the
	// map does not keep that URL alive for the whole run.
	k = apiKey{
		component:   k.component,
		verb:        strings.Clone(k.verb),
		group:       strings.Clone(k.group),
		resource:    strings.Clone(k.resource),
		subresource: strings.Clone(k.subresource),
		path:        strings.Clone(k.path),
	}
	s = &apiStat{hist: NewHistogram()}
	a.stats[k] = s
	return s
}

type countingTransport struct {
	counter   *APICounter
	next      http.RoundTripper
	component string
}

// WrappedRoundTripper lets client-go (k8s.io/apimachinery/pkg/util/net) find
// the transport underneath, as it does through its own wrappers.
func (t *countingTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

// RoundTrip implements http.RoundTripper.
func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	k, watch := classifyRequest(req.Method, req.URL.Path, req.URL.RawQuery)
	k.component = t.component
	s := t.counter.stat(k)
	s.count.Add(1)

	if req.Body != nil && req.Body != http.NoBody {
		if req.ContentLength > 0 {
			s.bytesSent.Add(req.ContentLength)
		} else {
			// Unknown length: count the body as the transport sends it. A
			// RoundTripper must not modify the caller's request, so send a
			// shallow copy.
			r := *req
			r.Body = &countingReader{rc: req.Body, n: &s.bytesSent}
			req = &r
		}
	}

	// The latency includes waiting inside the transport for a connection or
	// an HTTP/2 stream, which is how a shared connection's stream limit shows
	// up; client-go's rate limiter waits above the transport and is not in it.
	start := time.Now()
	t.counter.rates.add(start, seriesVerbIndex(k.verb))
	resp, err := t.next.RoundTrip(req)
	elapsed := time.Since(start)
	t.counter.avail.observe(start.Add(elapsed), req, resp, err)
	if err != nil {
		s.errors.Add(1)
		return resp, err
	}

	code := resp.StatusCode
	class := code / 100
	if class < 1 || class > 5 {
		class = 0
	}
	s.codes[class].Add(1)
	if code == http.StatusTooManyRequests || class == 5 {
		s.errors.Add(1)
	}
	s.mu.Lock()
	recordMicros(s.hist, elapsed)
	s.mu.Unlock()

	// A 101 response's body is the upgraded connection (exec, port-forward),
	// which callers use as an io.ReadWriteCloser: leave it unwrapped.
	if resp.Body != nil && code != http.StatusSwitchingProtocols {
		body := &countingReader{rc: resp.Body, n: &s.bytesReceived}
		if watch {
			body.open = [2]*atomic.Int64{&t.counter.openWatches, &s.open}
			for _, o := range body.open {
				o.Add(1)
			}
			if class == 2 {
				body.events = &s.events
				body.framing = watchFramingOf(resp.Header)
			}
		}
		resp.Body = body
	}
	return resp, nil
}

// countingReader counts the bytes read through it into n, and, for a watch,
// holds one count of open until it is closed and counts the events of its
// stream into events.
type countingReader struct {
	rc io.ReadCloser
	n  *atomic.Int64
	// open are the fleet's and the row's counts of open watches.
	open   [2]*atomic.Int64
	closed atomic.Bool

	// events is the row's count of watch events; nil when the body is not
	// a watch stream (not a watch, or an error response).
	events  *atomic.Int64
	framing watchFraming
	// The protobuf framer's state between Reads: hdr bytes of the current
	// frame's length header have been read, adding up to size so far; once
	// the header is whole, left bytes of the frame remain.
	hdr  int
	size uint32
	left uint32
}

// watchFraming is how a watch stream delimits its events.
type watchFraming uint8

const (
	// framingNone counts no events: an encoding whose events are not
	// delimited in the stream (CBOR sends one item after another).
	framingNone watchFraming = iota
	// framingLength is the protobuf stream's: each event a 4-byte
	// big-endian length and that many bytes
	// (k8s.io/apimachinery/pkg/util/framer).
	framingLength
	// framingLines is the JSON stream's: each event one JSON object and a
	// newline, and JSON escapes the newlines inside strings.
	framingLines
)

// watchFramingOf reads a watch response's Content-Type, without
// allocating: application/vnd.kubernetes.protobuf;stream=watch is framed
// by lengths, application/json (with or without ;stream=watch) by lines,
// anything else not at all. A body the transport left compressed (a caller
// that asked for gzip itself) is not framed either.
func watchFramingOf(h http.Header) watchFraming {
	if ce := h.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return framingNone
	}
	mediaType, params, _ := strings.Cut(h.Get("Content-Type"), ";")
	mediaType = strings.TrimSpace(mediaType)
	switch {
	case strings.EqualFold(mediaType, "application/json"):
		return framingLines
	case strings.EqualFold(mediaType, "application/vnd.kubernetes.protobuf"):
		for params != "" {
			var param string
			param, params, _ = strings.Cut(params, ";")
			key, value, _ := strings.Cut(param, "=")
			if strings.EqualFold(strings.TrimSpace(key), "stream") && strings.EqualFold(strings.Trim(strings.TrimSpace(value), `"`), "watch") {
				return framingLength
			}
		}
	}
	return framingNone
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	if n > 0 {
		r.n.Add(int64(n))
		if r.events != nil {
			if e := r.countEvents(p[:n]); e > 0 {
				r.events.Add(e)
			}
		}
	}
	return n, err
}

// countEvents returns how many events end in b, the next bytes of the
// stream. An event is counted when the client has all of it: a protobuf
// frame when its last byte is read, a JSON event at its newline.
func (r *countingReader) countEvents(b []byte) int64 {
	switch r.framing {
	case framingLines:
		return int64(bytes.Count(b, newline))
	case framingLength:
		var e int64
		for len(b) > 0 {
			if r.hdr < 4 {
				r.size = r.size<<8 | uint32(b[0])
				r.hdr++
				b = b[1:]
				if r.hdr < 4 {
					continue
				}
				r.left = r.size
				if r.left > 0 {
					continue
				}
			} else {
				k := uint32(min(uint64(len(b)), uint64(r.left)))
				b = b[k:]
				r.left -= k
				if r.left > 0 {
					continue
				}
			}
			e++
			r.hdr, r.size = 0, 0
		}
		return e
	}
	return 0
}

var newline = []byte{'\n'}

func (r *countingReader) Close() error {
	// Close may be called more than once (client-go's watch decoder and its
	// caller both close); the watch must be counted down once.
	if r.closed.CompareAndSwap(false, true) && r.open[0] != nil {
		for _, o := range r.open {
			o.Add(-1)
		}
	}
	return r.rc.Close()
}

// Verbs as the apiserver names them (k8s.io/apiserver/pkg/endpoints/request).
const (
	verbGet              = "get"
	verbList             = "list"
	verbWatch            = "watch"
	verbCreate           = "create"
	verbUpdate           = "update"
	verbPatch            = "patch"
	verbDelete           = "delete"
	verbDeleteCollection = "deletecollection"
	verbProxy            = "proxy"
)

// maxPathParts is the most URL segments a resource request needs to be named:
// apis/{group}/{version}/watch/namespaces/{ns}/{resource}/{name}/{subresource}.
const maxPathParts = 9

// classifyRequest names a request the way the apiserver's RequestInfoFactory
// does, and says whether it is a watch. It does not allocate: the names are
// slices of path. Where it differs: a fieldSelector on metadata.name does not
// turn a deletecollection into a delete, and a method the apiserver does not
// know gets its lower-cased name instead of an empty verb.
func classifyRequest(method, path, rawQuery string) (k apiKey, watch bool) {
	var parts [maxPathParts]string
	n := 0
	rest := strings.Trim(path, "/")
	for rest != "" && n < maxPathParts {
		parts[n], rest, _ = strings.Cut(rest, "/")
		n++
	}
	p := parts[:n]

	nonResource := func() (apiKey, bool) {
		return apiKey{verb: httpVerb(method), path: shortPath(path)}, false
	}
	if len(p) < 3 {
		return nonResource()
	}
	switch p[0] {
	case "api":
		p = p[2:] // api/{version}
	case "apis":
		if len(p) < 4 {
			return nonResource() // discovery: apis/{group}/{version}
		}
		k.group = p[1]
		p = p[3:] // apis/{group}/{version}
	default:
		return nonResource()
	}

	// The deprecated verb-in-path form: .../watch/namespaces/ns/pods.
	if p[0] == verbWatch || p[0] == verbProxy {
		if len(p) < 2 {
			return nonResource()
		}
		k.verb = p[0]
		p = p[1:]
	} else {
		switch method {
		case http.MethodPost:
			k.verb = verbCreate
		case http.MethodGet, http.MethodHead:
			k.verb = verbGet
		case http.MethodPut:
			k.verb = verbUpdate
		case http.MethodPatch:
			k.verb = verbPatch
		case http.MethodDelete:
			k.verb = verbDelete
		default:
			k.verb = httpVerb(method)
		}
	}

	// namespaces/{ns}/{resource}/... names the resource; namespaces/{ns},
	// namespaces/{ns}/status and namespaces/{ns}/finalize are the namespace.
	if p[0] == "namespaces" && len(p) > 2 && p[2] != "status" && p[2] != "finalize" {
		p = p[2:]
	}
	var name string
	k.resource = p[0]
	if len(p) >= 2 {
		name = p[1]
	}
	if len(p) >= 3 && k.verb != verbProxy {
		k.subresource = p[2]
	}

	if name == "" && k.verb == verbGet {
		if watchRequested(rawQuery) {
			k.verb = verbWatch
		} else {
			k.verb = verbList
		}
	}
	if name == "" && k.verb == verbDelete {
		k.verb = verbDeleteCollection
	}
	return k, k.verb == verbWatch
}

// watchRequested reads the watch query parameter as the apiserver does: the
// first value counts, and anything but "0" or "false" means true.
func watchRequested(rawQuery string) bool {
	for rawQuery != "" {
		var kv string
		kv, rawQuery, _ = strings.Cut(rawQuery, "&")
		key, value, _ := strings.Cut(kv, "=")
		if key != "watch" {
			continue
		}
		return value != "0" && !strings.EqualFold(value, "false")
	}
	return false
}

func httpVerb(method string) string {
	switch method {
	case http.MethodGet, "":
		return "get"
	case http.MethodHead:
		return "head"
	case http.MethodPost:
		return "post"
	case http.MethodPut:
		return "put"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return strings.ToLower(method)
}

// shortPath cuts a non-resource path to its first three segments, so that
// paths with names or hashes in them (/openapi/v3/apis/apps/v1?hash=...) stay
// one row.
func shortPath(path string) string {
	seen := 0
	for i := 1; i < len(path); i++ {
		if path[i] == '/' {
			seen++
			if seen == 3 {
				return path[:i]
			}
		}
	}
	return path
}
