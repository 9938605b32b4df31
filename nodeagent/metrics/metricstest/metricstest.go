// Package metricstest reads the agent's metric families back as a scraper
// does, for the tests of the packages that record them.
package metricstest

import (
	"net/http/httptest"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fleetlet/fleetlet/nodeagent/metrics"
)

// Parse writes families in the text exposition a scrape gets and parses it
// back: the families by name. It does not release families.
func Parse(tb testing.TB, families metrics.Families) map[string]*dto.MetricFamily {
	tb.Helper()
	rec := httptest.NewRecorder()
	if err := metrics.Write(rec, expfmt.NewFormat(expfmt.TypeTextPlain), families); err != nil {
		tb.Fatal(err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		tb.Fatalf("the exposition does not parse: %v", err)
	}
	return fams
}
