package fleet

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestGzipWatchesDecodeMembers serves a watch as the API server does with
// WatchListCompression, each flush one gzip member, and reads every event
// through gzipWatches: the server is asked for gzip, as Go's transport asks,
// and a request that is not a watch is left to Go's transport.
func TestGzipWatchesDecodeMembers(t *testing.T) {
	events := []string{`{"type":"ADDED"}`, `{"type":"BOOKMARK"}`, `{"type":"MODIFIED"}`}
	var acceptEncoding string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		acceptEncoding = r.Header.Get("Accept-Encoding")
		if r.URL.Query().Get("watch") == "" {
			io.WriteString(w, "a list")
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusOK)
		for _, e := range events {
			zw := gzip.NewWriter(w)
			io.WriteString(zw, e+"\n")
			zw.Close()
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	client := &http.Client{Transport: gzipWatches(srv.Client().Transport)}

	resp, err := client.Get(srv.URL + "/api/v1/pods?watch=true&sendInitialEvents=true")
	if err != nil {
		t.Fatal(err)
	}
	if acceptEncoding != "gzip" {
		t.Errorf("the server saw Accept-Encoding %q, want gzip as Go's transport sends", acceptEncoding)
	}
	if _, ok := resp.Body.(*gzipMembers); !ok || resp.Header.Get("Content-Encoding") != "" || !resp.Uncompressed {
		t.Errorf("the watch body is a %T with Content-Encoding %q (Uncompressed %v)", resp.Body, resp.Header.Get("Content-Encoding"), resp.Uncompressed)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(events, "\n") + "\n"; string(got) != want {
		t.Errorf("decoded %q, want %q", got, want)
	}

	resp, err = client.Get(srv.URL + "/api/v1/pods")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, ok := resp.Body.(*gzipMembers); ok {
		t.Error("a list went through the watch decoder")
	}
}

// TestGzipMembersWaitsWithNothingLent checks the point of it all: between
// two members, while the reader waits for the next, it holds no decoder and
// no read buffer.
func TestGzipMembersWaitsWithNothingLent(t *testing.T) {
	member := func(s string) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		io.WriteString(zw, s)
		zw.Close()
		return b.Bytes()
	}
	pr, pw := io.Pipe()
	go func() {
		// Two writes: a pipe's read returns one write's bytes at most, so
		// the first member's buffer holds nothing of the second.
		pw.Write(member("one"))
		pw.Write(member("two"))
		pw.Close()
	}()
	g := &gzipMembers{}
	// The body's reads come from g.Read, on this goroutine: what g holds at
	// each is read without a race.
	var afterFirst bool
	var waits, idle int
	g.body = spyBody{ReadCloser: pr, read: func() {
		if afterFirst {
			waits++
			if g.zr == nil && g.src == nil {
				idle++
			}
		}
	}}
	buf := make([]byte, 16)
	if n, err := io.ReadFull(g, buf[:3]); err != nil || string(buf[:n]) != "one" {
		t.Fatalf("first member: %q, %v", buf[:n], err)
	}
	afterFirst = true
	if n, err := io.ReadFull(g, buf[:3]); err != nil || string(buf[:n]) != "two" {
		t.Fatalf("second member: %q, %v", buf[:n], err)
	}
	if idle == 0 {
		t.Errorf("none of the %d reads of the body after the first member waited with nothing lent", waits)
	}
	if _, err := g.Read(buf); err != io.EOF {
		t.Fatalf("after the last member: %v, want EOF", err)
	}
	if g.zr != nil || g.src != nil {
		t.Error("a decoder or a buffer is held after the body ended")
	}
}

// spyBody calls read before each read of the body.
type spyBody struct {
	io.ReadCloser
	read func()
}

func (s spyBody) Read(p []byte) (int, error) {
	s.read()
	return s.ReadCloser.Read(p)
}

func TestIsWatch(t *testing.T) {
	for q, want := range map[string]bool{
		"watch=true": true, "watch=1": true, "fieldSelector=a&watch=true&x=y": true,
		"watch=false": false, "": false, "watchy=true": false, "labelSelector=watch%3Dtrue": false,
	} {
		if got := isWatch(q); got != want {
			t.Errorf("isWatch(%q) = %v, want %v", q, got, want)
		}
	}
}
