// Package testutil holds what the tests of several packages share. It is
// imported by tests only.
package testutil

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Patience is how long WaitFor waits: long enough for a loaded 2-core
// machine running the race detector, short enough that a hung test fails
// with the condition's name rather than the test binary's timeout.
const Patience = 30 * time.Second

// WaitFor polls cond every millisecond until it holds, and fails the test,
// naming what it waited for, if it does not within Patience. Tests wait on
// conditions with it, never on sleeps that assume a machine's speed.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, Patience, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("timed out after %v waiting until %s", Patience, what)
	}
}
