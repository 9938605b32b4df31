package reports

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

func TestClassifyRequest(t *testing.T) {
	for _, tc := range []struct {
		method, url string
		want        apiKey
		watch       bool
	}{
		// Pods, as the driver and the agents use them.
		{"GET", "/api/v1/namespaces/default/pods/p1", apiKey{verb: "get", resource: "pods"}, false},
		{"HEAD", "/api/v1/namespaces/default/pods/p1", apiKey{verb: "get", resource: "pods"}, false},
		{"GET", "/api/v1/namespaces/default/pods?limit=500", apiKey{verb: "list", resource: "pods"}, false},
		{"GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&limit=500&resourceVersion=0", apiKey{verb: "list", resource: "pods"}, false},
		{"GET", "/api/v1/pods?allowWatchBookmarks=true&fieldSelector=spec.nodeName%3Dn1&resourceVersion=12&timeoutSeconds=417&watch=true", apiKey{verb: "watch", resource: "pods"}, true},
		{"GET", "/api/v1/pods?watch=1", apiKey{verb: "watch", resource: "pods"}, true},
		{"GET", "/api/v1/pods?watch", apiKey{verb: "watch", resource: "pods"}, true},
		{"GET", "/api/v1/pods?watch=false", apiKey{verb: "list", resource: "pods"}, false},
		{"GET", "/api/v1/pods?watch=0&watch=true", apiKey{verb: "list", resource: "pods"}, false},
		{"POST", "/api/v1/namespaces/default/pods", apiKey{verb: "create", resource: "pods"}, false},
		{"PATCH", "/api/v1/namespaces/default/pods/p1/status", apiKey{verb: "patch", resource: "pods", subresource: "status"}, false},
		{"PUT", "/api/v1/namespaces/default/pods/p1/status", apiKey{verb: "update", resource: "pods", subresource: "status"}, false},
		{"DELETE", "/api/v1/namespaces/default/pods/p1", apiKey{verb: "delete", resource: "pods"}, false},
		{"DELETE", "/api/v1/namespaces/default/pods?labelSelector=app%3Dload", apiKey{verb: "deletecollection", resource: "pods"}, false},
		{"POST", "/api/v1/namespaces/default/pods/p1/eviction", apiKey{verb: "create", resource: "pods", subresource: "eviction"}, false},
		{"POST", "/api/v1/namespaces/default/pods/p1/binding", apiKey{verb: "create", resource: "pods", subresource: "binding"}, false},
		{"GET", "/api/v1/namespaces/default/pods/p1/log?container=c", apiKey{verb: "get", resource: "pods", subresource: "log"}, false},
		{"GET", "/api/v1/namespaces/default/pods/p1/proxy/healthz", apiKey{verb: "get", resource: "pods", subresource: "proxy"}, false},
		// The deprecated verb-in-path forms.
		{"GET", "/api/v1/watch/namespaces/default/pods", apiKey{verb: "watch", resource: "pods"}, true},
		{"GET", "/api/v1/watch/nodes/n1", apiKey{verb: "watch", resource: "nodes"}, true},
		{"GET", "/api/v1/proxy/nodes/n1/healthz", apiKey{verb: "proxy", resource: "nodes"}, false},
		// Nodes: registration and status.
		{"POST", "/api/v1/nodes", apiKey{verb: "create", resource: "nodes"}, false},
		{"GET", "/api/v1/nodes/n1?resourceVersion=0", apiKey{verb: "get", resource: "nodes"}, false},
		{"GET", "/api/v1/nodes?fieldSelector=metadata.name%3Dn1&watch=true", apiKey{verb: "watch", resource: "nodes"}, true},
		{"PATCH", "/api/v1/nodes/n1/status", apiKey{verb: "patch", resource: "nodes", subresource: "status"}, false},
		{"PUT", "/api/v1/nodes/n1/status", apiKey{verb: "update", resource: "nodes", subresource: "status"}, false},
		// Leases.
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", apiKey{verb: "get", group: "coordination.k8s.io", resource: "leases"}, false},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", apiKey{verb: "update", group: "coordination.k8s.io", resource: "leases"}, false},
		{"POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", apiKey{verb: "create", group: "coordination.k8s.io", resource: "leases"}, false},
		// Events, in both groups.
		{"POST", "/api/v1/namespaces/default/events", apiKey{verb: "create", resource: "events"}, false},
		{"PATCH", "/api/v1/namespaces/default/events/p1.17a", apiKey{verb: "patch", resource: "events"}, false},
		{"POST", "/apis/events.k8s.io/v1/namespaces/default/events", apiKey{verb: "create", group: "events.k8s.io", resource: "events"}, false},
		// Namespaces name themselves, and have their own subresources.
		{"GET", "/api/v1/namespaces", apiKey{verb: "list", resource: "namespaces"}, false},
		{"GET", "/api/v1/namespaces/default", apiKey{verb: "get", resource: "namespaces"}, false},
		{"PUT", "/api/v1/namespaces/default/finalize", apiKey{verb: "update", resource: "namespaces", subresource: "finalize"}, false},
		{"GET", "/api/v1/namespaces/default/status", apiKey{verb: "get", resource: "namespaces", subresource: "status"}, false},
		{"DELETE", "/api/v1/namespaces/load-1", apiKey{verb: "delete", resource: "namespaces"}, false},
		// Other groups.
		{"GET", "/apis/apps/v1/namespaces/default/deployments?watch=true", apiKey{verb: "watch", group: "apps", resource: "deployments"}, true},
		{"PATCH", "/apis/apps/v1/namespaces/default/deployments/d/scale", apiKey{verb: "patch", group: "apps", resource: "deployments", subresource: "scale"}, false},
		{"DELETE", "/apis/apps/v1/namespaces/default/replicasets", apiKey{verb: "deletecollection", group: "apps", resource: "replicasets"}, false},
		// Not resources.
		{"GET", "/api", apiKey{verb: "get", path: "/api"}, false},
		{"GET", "/api/v1", apiKey{verb: "get", path: "/api/v1"}, false},
		{"GET", "/apis/apps/v1", apiKey{verb: "get", path: "/apis/apps/v1"}, false},
		{"GET", "/healthz", apiKey{verb: "get", path: "/healthz"}, false},
		{"GET", "/readyz?verbose", apiKey{verb: "get", path: "/readyz"}, false},
		{"GET", "/version", apiKey{verb: "get", path: "/version"}, false},
		{"GET", "/openapi/v3/apis/apps/v1?hash=ABC", apiKey{verb: "get", path: "/openapi/v3/apis"}, false},
		{"POST", "/metrics", apiKey{verb: "post", path: "/metrics"}, false},
	} {
		t.Run(tc.method+" "+tc.url, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.url, nil)
			got, watch := classifyRequest(req.Method, req.URL.Path, req.URL.RawQuery)
			if got != tc.want || watch != tc.watch {
				t.Errorf("got %+v watch=%v, want %+v watch=%v", got, watch, tc.want, tc.watch)
			}
		})
	}
}

func findStat(t *testing.T, stats []APIStat, verb, resource, subresource string) APIStat {
	t.Helper()
	for _, s := range stats {
		if s.Verb == verb && s.Resource == resource && s.Subresource == subresource {
			return s
		}
	}
	t.Fatalf("no API row %s %s/%s in %+v", verb, resource, subresource, stats)
	return APIStat{}
}

func TestAPICounterOverHTTP(t *testing.T) {
	podBody := strings.Repeat("p", 100)
	chunk1, chunk2 := strings.Repeat("a", 64), strings.Repeat("b", 32)
	next := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Get("watch") == "true":
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, chunk1)
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, chunk2)
		case strings.HasSuffix(r.URL.Path, "/missing"):
			http.Error(w, "not found", http.StatusNotFound)
		case strings.HasSuffix(r.URL.Path, "/busy"):
			http.Error(w, "too many requests", http.StatusTooManyRequests)
		case strings.HasSuffix(r.URL.Path, "/broken"):
			http.Error(w, "internal error", http.StatusInternalServerError)
		case r.Method == http.MethodGet:
			io.WriteString(w, podBody)
		default:
			body, _ := io.ReadAll(r.Body)
			w.Write(body) // echo, so received bytes are known
		}
	}))
	defer srv.Close()

	counter := NewAPICounter()
	client := &http.Client{Transport: counter.Wrap(srv.Client().Transport)}
	do := func(method, path string, body io.Reader) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp
	}
	drain := func(resp *http.Response) {
		t.Helper()
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	for range 3 {
		drain(do("GET", "/api/v1/namespaces/default/pods/p1", nil))
	}
	patch := `{"status":{"phase":"Running"}}`
	drain(do("PATCH", "/api/v1/namespaces/default/pods/p1/status", strings.NewReader(patch)))
	drain(do("PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", strings.NewReader("lease-body")))
	drain(do("GET", "/api/v1/namespaces/default/pods/missing", nil))
	drain(do("GET", "/api/v1/namespaces/default/pods/busy", nil))
	drain(do("GET", "/api/v1/namespaces/default/pods/broken", nil))

	// A body of unknown length is counted as it is sent, and the caller's
	// request is left as it was.
	event := `{"kind":"Event"}`
	req, _ := http.NewRequest("POST", srv.URL+"/api/v1/namespaces/default/events", io.NopCloser(strings.NewReader(event)))
	origBody := req.Body
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	drain(resp)
	if req.Body != origBody {
		t.Errorf("RoundTrip replaced the caller's request body")
	}

	// A watch streams: bytes count as they are read, and the watch is open
	// until its body is closed.
	watch := do("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&watch=true", nil)
	if got := counter.OpenWatches(); got != 1 {
		t.Errorf("OpenWatches() = %d after the watch started, want 1", got)
	}
	buf := make([]byte, len(chunk1))
	if _, err := io.ReadFull(watch.Body, buf); err != nil {
		t.Fatal(err)
	}
	if got := findStat(t, counter.Snapshot(), "watch", "pods", "").BytesReceived; got != int64(len(chunk1)) {
		t.Errorf("watch bytes received mid-stream = %d, want %d", got, len(chunk1))
	}
	if got := findStat(t, counter.Snapshot(), "watch", "pods", "").OpenWatches; got != 1 {
		t.Errorf("the pods watch row has %d open watches mid-stream, want 1", got)
	}
	close(next)
	rest, err := io.ReadAll(watch.Body)
	if err != nil || string(rest) != chunk2 {
		t.Fatalf("rest of watch = %q, %v", rest, err)
	}
	watch.Body.Close()
	watch.Body.Close() // closing twice counts down once
	if got := counter.OpenWatches(); got != 0 {
		t.Errorf("OpenWatches() = %d after the watch closed, want 0", got)
	}
	if got := findStat(t, counter.Snapshot(), "watch", "pods", "").OpenWatches; got != 0 {
		t.Errorf("the pods watch row has %d open watches after it closed, want 0", got)
	}

	// A kube-proxy's requests are rows of their own.
	proxied := &http.Client{Transport: counter.WrapAs(ComponentKubeProxy)(srv.Client().Transport)}
	resp, err = proxied.Get(srv.URL + "/api/v1/namespaces/default/pods/p1")
	if err != nil {
		t.Fatal(err)
	}
	drain(resp)
	var kubelet, proxy int64
	for _, st := range counter.Snapshot() {
		if st.Verb == "get" && st.Resource == "pods" && st.Subresource == "" {
			if st.Component == ComponentKubeProxy {
				proxy += st.Count
			} else {
				kubelet += st.Count
			}
		}
	}
	if kubelet != 6 || proxy != 1 {
		t.Errorf("GET pods: %d from the kubelets, %d from kube-proxy; want 6 and 1", kubelet, proxy)
	}

	stats := counter.Snapshot()
	for _, tc := range []struct {
		verb, resource, subresource string
		count, sent, received       int64
		errors                      int64
		codes                       map[string]int64
	}{
		{"get", "pods", "", 6, 0, 3*100 + int64(len("not found\n")+len("too many requests\n")+len("internal error\n")), 2,
			map[string]int64{"2xx": 3, "4xx": 2, "5xx": 1}},
		{"patch", "pods", "status", 1, int64(len(patch)), int64(len(patch)), 0, map[string]int64{"2xx": 1}},
		{"update", "leases", "", 1, 10, 10, 0, map[string]int64{"2xx": 1}},
		{"create", "events", "", 1, int64(len(event)), int64(len(event)), 0, map[string]int64{"2xx": 1}},
		{"watch", "pods", "", 1, 0, int64(len(chunk1) + len(chunk2)), 0, map[string]int64{"2xx": 1}},
	} {
		s := findStat(t, stats, tc.verb, tc.resource, tc.subresource)
		if s.Count != tc.count || s.BytesSent != tc.sent || s.BytesReceived != tc.received || s.Errors != tc.errors {
			t.Errorf("%s %s/%s: count %d sent %d received %d errors %d; want %d %d %d %d",
				tc.verb, tc.resource, tc.subresource, s.Count, s.BytesSent, s.BytesReceived, s.Errors,
				tc.count, tc.sent, tc.received, tc.errors)
		}
		if !mapsEqual(s.Codes, tc.codes) {
			t.Errorf("%s %s/%s: codes %v, want %v", tc.verb, tc.resource, tc.subresource, s.Codes, tc.codes)
		}
		h, err := DecodeHistogram(s.Histogram)
		if err != nil {
			t.Fatalf("%s %s: decoding latency histogram: %v", tc.verb, tc.resource, err)
		}
		if h.TotalCount() != tc.count {
			t.Errorf("%s %s/%s: %d latencies recorded, want %d", tc.verb, tc.resource, tc.subresource, h.TotalCount(), tc.count)
		}
		// A loopback round trip takes tens of microseconds at least.
		if s.P50Ms <= 0 || s.P99Ms < s.P50Ms {
			t.Errorf("%s %s/%s: p50 %v ms, p99 %v ms; want 0 < p50 <= p99", tc.verb, tc.resource, tc.subresource, s.P50Ms, s.P99Ms)
		}
	}
	if got := findStat(t, stats, "update", "leases", "").Group; got != "coordination.k8s.io" {
		t.Errorf("leases group = %q", got)
	}

	// Sorted by component, resource, subresource, verb.
	var order []string
	for _, s := range stats {
		order = append(order, strings.TrimSpace(s.Component+" "+s.Verb+" "+s.Label()))
	}
	want := []string{"create events", "update leases.coordination.k8s.io", "get pods", "watch pods", "patch pods/status", "kube-proxy get pods"}
	if strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("order = %q, want %q", order, want)
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// upgraded is a 101 response body: the connection itself.
type upgraded struct{ io.ReadWriteCloser }

func TestAPICounterTransportErrorsAndUpgrades(t *testing.T) {
	counter := NewAPICounter()
	failing := counter.Wrap(roundTripFunc(func(*http.Request) (*http.Response, error) {
		return nil, errors.New("connection refused")
	}))
	req := httptest.NewRequest("PUT", "http://apiserver/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1", nil)
	if _, err := failing.RoundTrip(req); err == nil {
		t.Fatal("want the transport's error")
	}
	s := findStat(t, counter.Snapshot(), "update", "leases", "")
	if s.Count != 1 || s.Errors != 1 || len(s.Codes) != 0 {
		t.Errorf("failed request: count %d errors %d codes %v; want 1, 1, none", s.Count, s.Errors, s.Codes)
	}
	if h, _ := DecodeHistogram(s.Histogram); h.TotalCount() != 0 {
		t.Errorf("a request without response recorded a latency")
	}

	conn := upgraded{}
	upgrading := counter.Wrap(roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusSwitchingProtocols, Body: conn}, nil
	}))
	resp, err := upgrading.RoundTrip(httptest.NewRequest("POST", "http://apiserver/api/v1/namespaces/default/pods/p1/exec", nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := resp.Body.(io.ReadWriteCloser); !ok {
		t.Errorf("a 101 response's body lost its io.Writer: %T", resp.Body)
	}
}

// protobufWatchStream frames bodies as a protobuf watch stream does: each a
// 4-byte big-endian length, then the bytes.
func protobufWatchStream(bodies ...[]byte) []byte {
	var b []byte
	for _, body := range bodies {
		b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
		b = append(b, body...)
	}
	return b
}

func TestAPICounterWatchEvents(t *testing.T) {
	const protobufWatch = "application/vnd.kubernetes.protobuf;stream=watch"
	// Frames of every header shape: empty, one byte, lengths that need two
	// and three bytes, and bodies full of bytes that look like lengths and
	// newlines.
	frames := protobufWatchStream(
		[]byte("k8s\x00\n\x04Pod"),
		nil,
		[]byte{0},
		bytes.Repeat([]byte{'\n', 0xff, 0, 1}, 75),    // 300 bytes
		bytes.Repeat([]byte{0, 0, 0, 4, '\n'}, 14000), // 70000 bytes
		[]byte("bookmark"),
	)
	jsonLines := `{"type":"ADDED","object":{"kind":"Pod","metadata":{"annotations":{"a":"x\ny"}}}}` + "\n" +
		`{"type":"MODIFIED","object":{"kind":"Pod"}}` + "\n" +
		`{"type":"BOOKMARK","object":{"kind":"Pod"}}` + "\n"
	for _, tc := range []struct {
		name        string
		contentType string
		encoding    string
		code        int
		body        []byte
		want        int64
	}{
		{"protobuf", protobufWatch, "", 200, frames, 6},
		{"protobuf with spaces and quotes", `application/vnd.kubernetes.protobuf; stream="watch"`, "", 200, frames, 6},
		{"protobuf cut inside a header", protobufWatch, "", 200, append(slices.Clip(frames), 0, 0), 6},
		{"protobuf cut inside a frame", protobufWatch, "", 200, append(slices.Clip(frames), protobufWatchStream([]byte("partial"))[:8]...), 6},
		{"protobuf without stream=watch", "application/vnd.kubernetes.protobuf", "", 200, frames, 0},
		{"json", "application/json", "", 200, []byte(jsonLines), 3},
		{"json stream=watch", "application/json;stream=watch", "", 200, []byte(jsonLines), 3},
		{"json cut inside an event", "application/json", "", 200, []byte(jsonLines + `{"type":"ADD`), 3},
		{"cbor", "application/cbor;stream=watch", "", 200, []byte(jsonLines), 0},
		{"no content type", "", "", 200, frames, 0},
		{"still compressed", "application/json", "gzip", 200, []byte(jsonLines), 0},
		{"error status", "application/json", "", 500, []byte(`{"kind":"Status","code":500}` + "\n"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, oneByte := range []bool{true, false} {
				counter := NewAPICounter()
				rt := counter.Wrap(roundTripFunc(func(*http.Request) (*http.Response, error) {
					var body io.Reader = bytes.NewReader(tc.body)
					if oneByte {
						body = iotest.OneByteReader(body)
					}
					h := http.Header{}
					if tc.contentType != "" {
						h.Set("Content-Type", tc.contentType)
					}
					if tc.encoding != "" {
						h.Set("Content-Encoding", tc.encoding)
					}
					return &http.Response{StatusCode: tc.code, Header: h, Body: io.NopCloser(body)}, nil
				}))
				resp, err := rt.RoundTrip(httptest.NewRequest("GET", "http://apiserver/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&watch=true", nil))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				s := findStat(t, counter.Snapshot(), "watch", "pods", "")
				if s.Events != tc.want || s.BytesReceived != int64(len(tc.body)) {
					t.Errorf("one byte per Read %v: %d events, %d bytes; want %d events, %d bytes",
						oneByte, s.Events, s.BytesReceived, tc.want, len(tc.body))
				}
			}
		})
	}

	// A list is not a stream: its lines are not events.
	counter := NewAPICounter()
	rt := counter.Wrap(roundTripFunc(func(*http.Request) (*http.Response, error) {
		h := http.Header{"Content-Type": {"application/json"}}
		return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(jsonLines))}, nil
	}))
	resp, err := rt.RoundTrip(httptest.NewRequest("GET", "http://apiserver/api/v1/pods", nil))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if s := findStat(t, counter.Snapshot(), "list", "pods", ""); s.Events != 0 {
		t.Errorf("a list counted %d events, want 0", s.Events)
	}
}

// TestAPICounterWatchEventsOverHTTP counts a JSON watch's events as a
// real transport delivers them, in chunks.
func TestAPICounterWatchEventsOverHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		for i := range 5 {
			fmt.Fprintf(w, `{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"p%d"}}}`+"\n", i)
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	counter := NewAPICounter()
	client := &http.Client{Transport: counter.Wrap(srv.Client().Transport)}
	resp, err := client.Get(srv.URL + "/api/v1/pods?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got := findStat(t, counter.Snapshot(), "watch", "pods", "").Events; got != 5 {
		t.Errorf("%d events, want 5", got)
	}
}

// loopReader serves data over and over.
type loopReader struct {
	data []byte
	off  int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.data[l.off:])
	l.off = (l.off + n) % len(l.data)
	return n, nil
}

func TestCountingReaderDoesNotAllocate(t *testing.T) {
	var n, events atomic.Int64
	stream := protobufWatchStream(bytes.Repeat([]byte("x"), 100), bytes.Repeat([]byte("y"), 1000))
	r := &countingReader{rc: io.NopCloser(&loopReader{data: stream}), n: &n, events: &events, framing: framingLength}
	buf := make([]byte, 333) // not a multiple of any frame, so headers split
	if allocs := testing.AllocsPerRun(1000, func() { r.Read(buf) }); allocs != 0 {
		t.Errorf("Read allocates %v times, want 0", allocs)
	}
	if events.Load() == 0 {
		t.Errorf("no events counted")
	}
}

// BenchmarkAPICounterRoundTrip measures what counting adds to a request: the
// same canned response with and without the counter, from all cores at once,
// on keys that already exist (the steady state of a fleet).
func BenchmarkAPICounterRoundTrip(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 512)
	canned := roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(bytes.NewReader(payload))}, nil
	})
	paths := []struct{ method, url string }{
		{"PUT", "http://apiserver/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"},
		{"PATCH", "http://apiserver/api/v1/nodes/n1/status"},
		{"PATCH", "http://apiserver/api/v1/namespaces/default/pods/p1/status"},
		{"GET", "http://apiserver/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&watch=true"},
	}
	reqs := make([]*http.Request, len(paths))
	for i, p := range paths {
		reqs[i] = httptest.NewRequest(p.method, p.url, nil)
	}
	buf := make([]byte, 1024)
	for _, bc := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"bare", canned},
		{"counted", NewAPICounter().Wrap(canned)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, len(buf))
				i := 0
				for pb.Next() {
					resp, err := bc.rt.RoundTrip(reqs[i%len(reqs)])
					if err != nil {
						b.Fatal(err)
					}
					for {
						if _, err := resp.Body.Read(buf); err != nil {
							break
						}
					}
					resp.Body.Close()
					i++
				}
			})
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestWrappersNameTheirTransport: client-go reaches a client's transport
// through every wrapper to close its idle connections (the kubelet's
// onHeartbeatFailure); a wrapper that hides it makes that a no-op.
func TestWrappersNameTheirTransport(t *testing.T) {
	base := &http.Transport{}
	for name, rt := range map[string]http.RoundTripper{
		"APICounter":    NewAPICounter().Wrap(base),
		"LeaseLateness": NewLeaseLateness(0).Wrap(base),
	} {
		w, ok := rt.(utilnet.RoundTripperWrapper)
		if !ok || w.WrappedRoundTripper() != base {
			t.Errorf("%s.Wrap hides the transport it wraps", name)
		}
	}
}
