// Package testutil holds what the tests of several packages share. It is
// imported by tests only.
package testutil

import (
	"context"
	"runtime"
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

// SettledGoroutines is the number of goroutines once it has held still for
// five samples 10 ms apart (for at most 5 s): transient ones, such as a
// timer's callback, come and go. Tests that bound the goroutines a part
// costs count with it, since a fleet multiplies each by thousands of nodes.
func SettledGoroutines() int {
	last, same := -1, 0
	for range 500 {
		n := runtime.NumGoroutine()
		if n == last {
			if same++; same == 5 {
				return n
			}
		} else {
			last, same = n, 0
		}
		time.Sleep(10 * time.Millisecond)
	}
	return last
}
