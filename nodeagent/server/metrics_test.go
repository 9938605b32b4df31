package server

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/fleetlet/fleetlet/nodeagent/metrics"
)

var testGaugeDesc = metrics.NewDesc("test_gauge", "A gauge.", dto.MetricType_GAUGE, nil, "path")

// gatherer serves one gauge labelled with the endpoint's path.
func gatherer(path string) func(context.Context) metrics.Families {
	return func(context.Context) metrics.Families {
		f := testGaugeDesc.Family(1)
		f.Add(1, path)
		return metrics.Gather(f)
	}
}

func TestMetricsEndpoints(t *testing.T) {
	rec := &recorder{}
	cfg := testConfig(rec)
	cfg.Metrics, cfg.ProbeMetrics, cfg.CadvisorMetrics = gatherer("/metrics"), gatherer("/metrics/probes"), gatherer("/metrics/cadvisor")
	base, pool, _ := serveTLS(t, newTestServer(t, cfg))
	c := tlsClient(pool, nil)
	for _, path := range []string{"/metrics", "/metrics/probes", "/metrics/cadvisor"} {
		for _, accept := range []string{"", string(expfmt.FmtProtoDelim)} {
			req, _ := http.NewRequest(http.MethodGet, base+path, nil)
			req.Header.Set("Authorization", "Bearer "+testToken)
			if accept != "" {
				req.Header.Set("Accept", accept)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			_ = resp.Body.Close()
			format := expfmt.ResponseFormat(resp.Header)
			want := expfmt.TypeTextPlain
			if accept != "" {
				want = expfmt.TypeProtoDelim
			}
			if resp.StatusCode != http.StatusOK || format.FormatType() != want {
				t.Errorf("GET %s (Accept %q) = %d %s, want 200 in format %v", path, accept, resp.StatusCode, format, want)
				continue
			}
			var mf dto.MetricFamily
			if err := expfmt.NewDecoder(&body, format).Decode(&mf); err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			if mf.GetName() != "test_gauge" || mf.GetMetric()[0].GetLabel()[0].GetValue() != path {
				t.Errorf("GET %s served %v, want its own families", path, &mf)
			}
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, a := range rec.attrs {
		if a.GetSubresource() != "metrics" || a.GetVerb() != "get" {
			t.Errorf("%s authorized as %s nodes/%s, want get nodes/metrics", a.GetPath(), a.GetVerb(), a.GetSubresource())
		}
	}
	if len(rec.attrs) != 6 {
		t.Errorf("%d authorizations, want one per request", len(rec.attrs))
	}

	code, body, _ := send(t, c, http.MethodGet, base+"/metrics", "")
	if code != http.StatusUnauthorized {
		t.Errorf("anonymous /metrics = %d %q, want 401", code, body)
	}
}
