package fleet

import (
	"bufio"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
)

// The API server (1.37, WatchListCompression) gzips a watch-list stream when
// the client accepts gzip, as every client-go client does: each flush of the
// stream is a gzip member of its own, opened and closed within the flush, so
// that an idle watch holds no compressor on the server. Go's HTTP transport
// decodes such a body with one gzip.Reader for the stream's whole life, which
// holds the 32 KiB window and the decoder's tables: about 40 KiB per watch
// while it idles, 400 KiB for an agent's ten watches, the largest part of an
// idle agent's memory.
//
// gzipWatches decodes watch bodies itself instead, with a decoder taken from
// a fleet-wide pool for each member and put back at the member's end, so an
// idle watch holds none. The request the API server sees is the same (it
// asks for gzip, as Go's transport would), and so is the work the server
// does; only the client's memory differs. Go's transport leaves a body alone
// when the request sets Accept-Encoding itself, which is how this takes
// over. The http and x/net/http2 transports offer no hook for a decoder of
// one's own, hence the hand-written reader.
func gzipWatches(next http.RoundTripper) http.RoundTripper {
	return &gzipWatchTransport{next: next}
}

type gzipWatchTransport struct{ next http.RoundTripper }

// WrappedRoundTripper lets client-go find the transport underneath.
func (t *gzipWatchTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

// RoundTrip implements http.RoundTripper.
func (t *gzipWatchTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || !isWatch(req.URL.RawQuery) || req.Header.Get("Accept-Encoding") != "" || req.Header.Get("Range") != "" {
		return t.next.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	r.Header.Set("Accept-Encoding", "gzip")
	resp, err := t.next.RoundTrip(r)
	if err != nil || resp.Body == nil || !strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		return resp, err
	}
	// As Go's transport does for a body it decodes.
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	resp.Uncompressed = true
	resp.Body = &gzipMembers{body: resp.Body}
	return resp, nil
}

// gzipSourceBuffer is the read buffer under the decoder: the decoder needs a
// byte reader, and a watch event is read in a few reads of it.
const gzipSourceBuffer = 2 << 10

// isWatch reports whether a query asks for a watch: watch=true or watch=1,
// as the API server reads it.
func isWatch(rawQuery string) bool {
	for rawQuery != "" {
		var kv string
		kv, rawQuery, _ = strings.Cut(rawQuery, "&")
		if k, v, _ := strings.Cut(kv, "="); k == "watch" {
			return v == "true" || v == "1" || v == ""
		}
	}
	return false
}

// gzipReaders are the fleet's decoders, and gzipSources their read buffers,
// each lent to one gzip member at a time.
var gzipReaders, gzipSources sync.Pool

// gzipMembers reads a body of concatenated gzip members, holding a decoder
// and its read buffer only while it is inside one: between members, where
// an idle watch waits, it holds neither (the buffer is 2 KiB a watch, 20 KiB
// an agent, when kept).
type gzipMembers struct {
	body io.ReadCloser
	// src is the read buffer of the member being read, nil between
	// members unless it holds bytes of the next one.
	src *bufio.Reader
	// first is the first byte of a member, read before src was taken.
	first firstByte
	zr    *gzip.Reader
	err   error
}

// firstByte is a reader of one byte already read, then of the body.
type firstByte struct {
	b    [1]byte
	has  bool
	body io.Reader
}

func (f *firstByte) Read(p []byte) (int, error) {
	if f.has && len(p) > 0 {
		p[0], f.has = f.b[0], false
		return 1, nil
	}
	return f.body.Read(p)
}

func (g *gzipMembers) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	for {
		if g.zr == nil {
			if g.src == nil {
				// Wait for the next member with nothing lent: this is
				// where an idle watch waits.
				if _, err := io.ReadFull(g.body, g.first.b[:]); err != nil {
					g.err = err
					return 0, err
				}
				g.first.has, g.first.body = true, g.body
				g.src, _ = gzipSources.Get().(*bufio.Reader)
				if g.src == nil {
					g.src = bufio.NewReaderSize(&g.first, gzipSourceBuffer)
				} else {
					g.src.Reset(&g.first)
				}
			}
			zr, _ := gzipReaders.Get().(*gzip.Reader)
			var err error
			if zr == nil {
				zr, err = gzip.NewReader(g.src)
			} else {
				err = zr.Reset(g.src)
			}
			if err != nil {
				g.err = err
				g.release()
				return 0, err
			}
			zr.Multistream(false)
			g.zr = zr
		}
		n, err := g.zr.Read(p)
		if errors.Is(err, io.EOF) {
			// The member ended; its decoder goes back to the pool, and
			// so does its buffer unless the next member has begun in it.
			gzipReaders.Put(g.zr)
			g.zr = nil
			if g.src.Buffered() == 0 {
				g.releaseSource()
			}
			if n > 0 {
				return n, nil
			}
			continue
		}
		if err != nil {
			g.err = err
			g.release()
		}
		return n, err
	}
}

// release puts the decoder and the buffer back.
func (g *gzipMembers) release() {
	if g.zr != nil {
		gzipReaders.Put(g.zr)
		g.zr = nil
	}
	g.releaseSource()
}

func (g *gzipMembers) releaseSource() {
	if g.src != nil {
		// The pool keeps no reference to this body.
		g.src.Reset(nil)
		gzipSources.Put(g.src)
		g.src = nil
	}
}

// Close implements io.Closer. It may be called while a Read waits (a
// watch stopped from another goroutine): it only closes the body, and the
// Read that fails then puts back what it holds; what no Read puts back is
// left to the garbage collector.
func (g *gzipMembers) Close() error { return g.body.Close() }
