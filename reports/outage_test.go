package reports

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestAvailabilityFindsOutages(t *testing.T) {
	var a availability
	req, _ := http.NewRequest(http.MethodGet, "https://apiserver/api/v1/pods", nil)
	ok := &http.Response{StatusCode: http.StatusOK}
	refused := errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	t0 := time.Unix(1_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

	a.observe(at(0), req, ok, nil)
	// One failure alone, answered again 1 s later: not an outage.
	a.observe(at(1), req, nil, refused)
	a.observe(at(2), req, &http.Response{StatusCode: http.StatusTooManyRequests}, nil)
	// The server goes away at 10 s for 60 s: refused, then 503s while it
	// starts.
	for s := 10.0; s < 60; s += 0.5 {
		a.observe(at(s), req, nil, refused)
	}
	a.observe(at(65), req, &http.Response{StatusCode: http.StatusServiceUnavailable}, nil)
	// A request its caller cancelled says nothing about the server.
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	a.observe(at(66), req.WithContext(cancelled), nil, context.Canceled)
	a.observe(at(70), req, ok, nil)
	a.observe(at(71), req, ok, nil)

	got := a.snapshot(at(80))
	if len(got) != 1 {
		t.Fatalf("outages %+v, want one", got)
	}
	o := got[0]
	if !o.Start.Equal(at(10)) || !o.End.Equal(at(70)) || o.Seconds != 60 || o.FailedRequests != 101 {
		t.Errorf("outage %+v, want 10 s to 70 s with 101 requests unanswered", o)
	}

	// One that goes on when the report is made.
	a.observe(at(100), req, nil, refused)
	if got := a.snapshot(at(103)); len(got) != 1 {
		t.Errorf("3 s without an answer is no outage yet: %+v", got)
	}
	got = a.snapshot(at(130))
	if len(got) != 2 || !got[1].End.IsZero() || got[1].Seconds != 30 {
		t.Errorf("outages %+v, want the second still going, 30 s so far", got)
	}
}

func TestOutagesInTheReport(t *testing.T) {
	rep := &Report{Outages: []Outage{
		{Start: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), End: time.Date(2026, 12, 2, 10, 1, 2, 0, time.UTC), Seconds: 62.3,
			FailedRequests: 1234, NodesNotReady: 11, ReadyAgainSeconds: 64, NodeNotReadyEvents: 121},
		{Start: time.Date(2026, 12, 2, 10, 5, 0, 0, time.UTC), Seconds: 8, FailedRequests: 7},
	}}
	var md strings.Builder
	if err := RenderMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## API server outages",
		"| **Outage 1: 10:00:00 UTC, for 62.3 s** | 1234 requests unanswered; 11 nodes NotReady, all Ready again 64 s after it ended; 121 NodeNotReady events |",
		"| **Outage 2: 10:05:00 UTC, still going at the report, 8.0 s so far** | 7 requests unanswered; no node NotReady; 0 NodeNotReady events |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}
	var html strings.Builder
	if err := RenderHTML(&html, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(html.String(), `<section id="outages">`) {
		t.Errorf("HTML has no outages section")
	}
}
