package nodestatus

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"
)

// fixedSource makes rand.Float64 return the same number, f/2^53, every time.
type fixedSource uint64

func (f fixedSource) Uint64() uint64 { return uint64(f) }

// statusPatches counts the node status writes a fake clientset has seen.
func statusPatches(c *fake.Clientset) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "patch" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

// TestReportDelay checks the kubelet's delayAfterNodeStatusChange: the first
// periodic report after a change comes ReportFrequency plus a one-time
// random delay in [-ReportFrequency/2, +ReportFrequency/2) later, and the
// ones after it at a fixed ReportFrequency.
func TestReportDelay(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rand  float64
		first time.Duration // when the first unchanged report falls due
	}{
		{"late", 0.9, 7 * time.Minute},
		{"early", 0.1, 3 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clk := testingclock.NewFakeClock(t0)
			id := identity()
			client := fake.NewClientset(InitialNode(id, t0))
			m := NewManager(Config{
				Identity: id, Client: client, Clock: clk,
				GetNode: func() (*corev1.Node, error) {
					return client.CoreV1().Nodes().Get(ctx, id.Name, metav1.GetOptions{})
				},
				RuntimeState:    func(context.Context) RuntimeState { return RuntimeState{Ready: true} },
				UpdateFrequency: 10 * time.Second, ReportFrequency: 5 * time.Minute,
			})
			m.rng = rand.New(fixedSource(tc.rand * (1 << 53)))
			syncAt := func(at time.Duration, wantPatches int) {
				t.Helper()
				clk.SetTime(t0.Add(at))
				if err := m.SyncNodeStatus(ctx); err != nil {
					t.Fatal(err)
				}
				if got := statusPatches(client); got != wantPatches {
					t.Fatalf("at %v: %d status patches, want %d", at, got, wantPatches)
				}
			}
			syncAt(0, 1)                                  // the start is a change
			syncAt(tc.first-10*time.Second, 1)            // unchanged, not due
			syncAt(tc.first, 2)                           // the delayed report
			syncAt(tc.first+5*time.Minute-time.Second, 2) // the delay is spent
			syncAt(tc.first+5*time.Minute, 3)
		})
	}
}
