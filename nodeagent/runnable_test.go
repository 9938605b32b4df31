package nodeagent

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleetlet/fleetlet/internal/testutil"
)

// journal records what the parts of a test did, in order.
type journal struct {
	mu      sync.Mutex
	entries []string
}

func (j *journal) add(e string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, e)
}

func (j *journal) list() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.entries)
}

// recordedLoop runs until its context ends, noting its start and its end.
func recordedLoop(j *journal, name string) part {
	return part{name, newLoop(func(ctx context.Context) {
		j.add("start " + name)
		<-ctx.Done()
		j.add("stop " + name)
	})}
}

// recordedStep notes its start and its undoing, failing with err.
func recordedStep(j *journal, name string, err error) part {
	return part{name, step{
		start: func(context.Context) error { j.add("start " + name); return err },
		stop:  func() { j.add("stop " + name) },
	}}
}

func TestRunPartsStartsInOrderAndStopsInReverse(t *testing.T) {
	var j journal
	ctx, cancel := context.WithCancel(context.Background())
	parts := []part{
		recordedStep(&j, "a", nil),
		{"absent", nil},
		recordedLoop(&j, "b"),
		recordedStep(&j, "c", nil),
		recordedLoop(&j, "d"),
	}
	done := make(chan error, 1)
	go func() { done <- runParts(ctx, parts) }()
	testutil.WaitFor(t, "every part has started", func() bool { return len(j.list()) == 4 })
	// A loop notes its start from its own goroutine, perhaps after the
	// step that follows it.
	if got := j.list(); slices.Index(got, "start a") != 0 || !slices.Contains(got, "start b") || !slices.Contains(got, "start c") || !slices.Contains(got, "start d") {
		t.Errorf("start = %v, want a first, then b, c and d", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("runParts = %v", err)
	}
	// Every loop sees its context end at once; each part is released only
	// once the parts after it have stopped: d before c's undoing, b before
	// a's, c before a.
	got := j.list()[4:]
	before := func(x, y string) bool {
		i, k := slices.Index(got, x), slices.Index(got, y)
		return i >= 0 && k >= 0 && i < k
	}
	if len(got) != 4 || !before("stop d", "stop c") || !before("stop b", "stop a") || !before("stop c", "stop a") {
		t.Errorf("stop = %v, want d before c, b before a, c before a", got)
	}
}

func TestRunPartsStopsWhatStartedWhenAPartFails(t *testing.T) {
	var j journal
	failed := errors.New("no runtime")
	parts := []part{
		recordedStep(&j, "a", nil),
		recordedLoop(&j, "b"),
		recordedStep(&j, "c", failed),
		recordedStep(&j, "never", nil),
	}
	err := runParts(context.Background(), parts)
	if !errors.Is(err, failed) {
		t.Fatalf("runParts = %v, want %v", err, failed)
	}
	got := j.list()
	if slices.Contains(got, "start never") || slices.Contains(got, "stop c") {
		t.Errorf("journal = %v: a part after the failure started, or the failed one was undone", got)
	}
	if want := []string{"stop b", "stop a"}; !slices.Equal(got[len(got)-2:], want) {
		t.Errorf("journal = %v, want it to end with %v", got, want)
	}
}

// TestRunPartsEndsAWaitingStart ends the agent while a part waits in its
// start, as a registration retries: the start gives up, and what had
// started stops.
func TestRunPartsEndsAWaitingStart(t *testing.T) {
	var j journal
	ctx, cancel := context.WithCancel(context.Background())
	parts := []part{
		recordedLoop(&j, "a"),
		{"waits", step{start: func(ctx context.Context) error {
			j.add("start waits")
			<-ctx.Done()
			return ctx.Err()
		}}},
	}
	done := make(chan error, 1)
	go func() { done <- runParts(ctx, parts) }()
	testutil.WaitFor(t, "the second part waits", func() bool { return slices.Contains(j.list(), "start waits") })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("runParts = %v, want the waiting start's context.Canceled", err)
		}
	case <-time.After(testutil.Patience):
		t.Fatal("runParts did not return after its context ended")
	}
	if got := j.list(); got[len(got)-1] != "stop a" {
		t.Errorf("journal = %v, want the loop stopped", got)
	}
}
