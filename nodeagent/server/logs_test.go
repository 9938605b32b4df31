package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"
)

func TestParseLogOptions(t *testing.T) {
	sinceTime := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		query    string
		want     LogOptions
		wantCode int
	}{
		{query: "", want: LogOptions{}},
		{query: "follow=true&timestamps=1&previous=false", want: LogOptions{Follow: true, Timestamps: true}},
		{query: "previous=true&follow=0", want: LogOptions{Previous: true}},
		{query: "tailLines=10", want: LogOptions{TailLines: ptr.To[int64](10)}},
		{query: "tailLines=0", want: LogOptions{TailLines: ptr.To[int64](0)}},
		{query: "tail=5", want: LogOptions{TailLines: ptr.To[int64](5)}},
		{query: "tail=all&tailLines=3", want: LogOptions{}},
		{query: "limitBytes=100", want: LogOptions{LimitBytes: ptr.To[int64](100)}},
		{query: "sinceSeconds=30", want: LogOptions{SinceTime: ptr.To(testNow.Add(-30 * time.Second))}},
		{query: "sinceTime=" + url.QueryEscape(sinceTime.Format(time.RFC3339)), want: LogOptions{SinceTime: &sinceTime}},
		{query: "stream=All", want: LogOptions{}},
		{query: "container=app&insecureSkipTLSVerifyBackend=true", want: LogOptions{}},
		{query: "tailLines=-1", wantCode: http.StatusUnprocessableEntity},
		{query: "limitBytes=0", wantCode: http.StatusUnprocessableEntity},
		{query: "sinceSeconds=0", wantCode: http.StatusUnprocessableEntity},
		{query: "sinceSeconds=5&sinceTime=" + url.QueryEscape(sinceTime.Format(time.RFC3339)), wantCode: http.StatusUnprocessableEntity},
		{query: "tailLines=ten", wantCode: http.StatusBadRequest},
		{query: "sinceTime=yesterday", wantCode: http.StatusBadRequest},
		{query: "stream=Stdout", wantCode: http.StatusBadRequest},
	} {
		t.Run(tc.query, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseLogOptions(q, testNow)
			if tc.wantCode != 0 {
				var e *logOptionsError
				if !errors.As(err, &e) || e.code != tc.wantCode {
					t.Fatalf("error = %v, want a %d", err, tc.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !sameLogOptions(got, tc.want) {
				t.Errorf("options = %s, want %s", describe(got), describe(tc.want))
			}
		})
	}
}

func sameLogOptions(a, b LogOptions) bool {
	if (a.SinceTime == nil) != (b.SinceTime == nil) || (a.SinceTime != nil && !a.SinceTime.Equal(*b.SinceTime)) {
		return false
	}
	a.SinceTime, b.SinceTime = nil, nil
	return reflect.DeepEqual(a, b)
}

func describe(o LogOptions) string {
	s := fmt.Sprintf("{Follow:%v Previous:%v Timestamps:%v", o.Follow, o.Previous, o.Timestamps)
	if o.TailLines != nil {
		s += fmt.Sprintf(" TailLines:%d", *o.TailLines)
	}
	if o.LimitBytes != nil {
		s += fmt.Sprintf(" LimitBytes:%d", *o.LimitBytes)
	}
	if o.SinceTime != nil {
		s += " SinceTime:" + o.SinceTime.Format(time.RFC3339Nano)
	}
	return s + "}"
}

func TestContainerLogs(t *testing.T) {
	rec := &recorder{}
	base, pool, _ := serveTLS(t, newTestServer(t, testConfig(rec)))
	c := tlsClient(pool, nil)

	code, body, hdr := send(t, c, http.MethodGet, base+"/containerLogs/default/web/app?timestamps=true&tailLines=2&sinceSeconds=60&limitBytes=512", testToken)
	if code != http.StatusOK || body != "log of default/web/app\n" {
		t.Fatalf("GET /containerLogs/default/web/app = %d %q", code, body)
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type = %q, want text/plain", ct)
	}
	want := LogOptions{Timestamps: true, TailLines: ptr.To[int64](2), LimitBytes: ptr.To[int64](512), SinceTime: ptr.To(testNow.Add(-time.Minute))}
	if got := rec.lastLogOpts(t); !sameLogOptions(got, want) {
		t.Errorf("Logs got %s, want %s", describe(got), describe(want))
	}

	for _, ctr := range []string{"init", "debug"} {
		if code, body, _ := send(t, c, http.MethodGet, base+"/containerLogs/default/web/"+ctr, testToken); code != http.StatusOK {
			t.Errorf("logs of the %s container = %d %q, want 200", ctr, code, body)
		}
	}

	for _, tc := range []struct {
		path     string
		wantCode int
		wantBody string
	}{
		{"/containerLogs/default/nope/app", http.StatusNotFound, `pod "default/nope" does not exist on node "node-1"`},
		{"/containerLogs/other/web/app", http.StatusNotFound, `pod "other/web" does not exist on node "node-1"`},
		{"/containerLogs/default/web/nope", http.StatusNotFound, `container "nope" not found in pod "default/web" on node "node-1"`},
		{"/containerLogs/default/web/app?tailLines=-3", http.StatusUnprocessableEntity, "invalid log request: tailLines -3 must be greater than or equal to 0"},
		{"/containerLogs/default/web/app?limitBytes=x", http.StatusBadRequest, `unable to decode query parameter limitBytes="x"`},
	} {
		code, body, _ := send(t, c, http.MethodGet, base+tc.path, testToken)
		if code != tc.wantCode || !strings.HasPrefix(body, tc.wantBody) {
			t.Errorf("GET %s = %d %q, want %d %q", tc.path, code, body, tc.wantCode, tc.wantBody)
		}
	}
}

func TestContainerLogsProviderError(t *testing.T) {
	cfg := testConfig(&recorder{})
	cfg.Logs = func(context.Context, string, string, string, LogOptions, io.Writer) error {
		return errors.New("previous terminated container \"app\" not found")
	}
	base, pool, _ := serveTLS(t, newTestServer(t, cfg))
	code, body, _ := send(t, tlsClient(pool, nil), http.MethodGet, base+"/containerLogs/default/web/app?previous=true", testToken)
	if code != http.StatusBadRequest || !strings.Contains(body, "previous terminated container") || !strings.Contains(body, testNode) {
		t.Errorf("GET logs with a failing provider = %d %q, want 400 with its error and the node", code, body)
	}
}

// TestContainerLogsFollowFlushes reads a followed log's first line while the
// provider is still writing, which only works if every write is flushed.
func TestContainerLogsFollowFlushes(t *testing.T) {
	cfg := testConfig(&recorder{})
	providerDone := make(chan struct{})
	cfg.Logs = func(ctx context.Context, _, _, _ string, opts LogOptions, w io.Writer) error {
		defer close(providerDone)
		if !opts.Follow {
			return errors.New("want follow")
		}
		if _, err := io.WriteString(w, "first line\n"); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	}
	base, pool, _ := serveTLS(t, newTestServer(t, cfg))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/containerLogs/default/web/app?follow=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := tlsClient(pool, nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "first line\n" {
		t.Fatalf("first followed line = %q, %v", line, err)
	}
	cancel()
	select {
	case <-providerDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the provider's context did not end within 30s of the client going away")
	}
}
