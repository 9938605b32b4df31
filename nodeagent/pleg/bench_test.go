package pleg

import (
	"context"
	"fmt"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// BenchmarkRelist is one node's relist every second: 10 pods of one
// container each, none changed since the last relist, which is what an
// idle node does all day.
func BenchmarkRelist(b *testing.B) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Now())
	rt := newRuntime(b, clk)
	for i := range 10 {
		createContainer(b, rt, fmt.Sprintf("pod-%d", i))
	}
	g := NewGeneric(rt, clk, RelistPeriod)
	if err := g.Relist(ctx); err != nil {
		b.Fatal(err)
	}
	drain(g)
	b.ReportAllocs()
	for b.Loop() {
		if err := g.Relist(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if events := drain(g); len(events) != 0 {
		b.Fatalf("%d events from an unchanged runtime", len(events))
	}
}
