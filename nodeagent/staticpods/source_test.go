package staticpods

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
)

func manifestYAML(name, image string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: kube-system}\nspec: {containers: [{name: c, image: %s}]}\n", name, image)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// events records what a NodeSource tells its handler, one line per call.
type events struct {
	mu    sync.Mutex
	lines []string
	pods  map[string]*corev1.Pod
}

func (e *events) handler() Handler {
	record := func(op string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.lines = append(e.lines, op+" "+p.Name)
			if e.pods == nil {
				e.pods = map[string]*corev1.Pod{}
			}
			if op == "remove" {
				delete(e.pods, p.Name)
			} else {
				e.pods[p.Name] = p
			}
		}
	}
	return Handler{Add: record("add"), Update: record("update"), Remove: record("remove"), Listed: func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.lines = append(e.lines, "listed")
	}}
}

// take returns the calls since the last take.
func (e *events) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.lines
	e.lines = nil
	return out
}

func (e *events) pod(name string) *corev1.Pod {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pods[name]
}

func expectCalls(t *testing.T, e *events, want ...string) {
	t.Helper()
	if got := e.take(); !slices.Equal(got, want) {
		t.Errorf("handler calls %q, want %q", got, want)
	}
}

func newTestSource(t *testing.T, path string, inline ...*Manifest) (*FileSource, *NodeSource, *events, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	files := NewFileSource(FileSourceConfig{Path: path, Inline: inline, Clock: clk})
	e := &events{}
	node := NewNodeSource(NodeSourceConfig{NodeName: "n1", Files: files, Handler: e.handler(), Clock: clk})
	if err := node.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Wait)
	return files, node, e, clk
}

// TestFileSourceReadsTheDirectory covers the kubelet's listing: one pod a
// file, YAML or JSON, dot files and directories skipped, a bad file
// skipped and the others kept; and the node's pods with their source
// annotations.
func TestFileSourceReadsTheDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), manifestYAML("a", "busybox:1"))
	writeFile(t, filepath.Join(dir, "b.json"), `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"i"}]}}`)
	writeFile(t, filepath.Join(dir, ".a.yaml.swp"), manifestYAML("hidden", "i"))
	writeFile(t, filepath.Join(dir, "broken.yaml"), "apiVersion: v1\nkind: Pod\n")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub", "c.yaml"), manifestYAML("c", "i"))

	files, node, e, clk := newTestSource(t, dir)
	if node.HasSynced() || files.HasSynced() {
		t.Fatal("synced before the directory was read")
	}
	files.list(klog.Background())
	expectCalls(t, e, "add a-n1", "add b-n1", "listed")
	if !node.HasSynced() || !files.HasSynced() {
		t.Error("not synced after the directory was read")
	}
	a := e.pod("a-n1")
	if a.Namespace != "kube-system" || a.Annotations[ConfigSourceAnnotationKey] != SourceFile ||
		a.Annotations[ConfigFirstSeenAnnotationKey] != clk.Now().Format(time.RFC3339Nano) || !IsStaticPod(a) || IsMirrorPod(a) {
		t.Errorf("pod a: %s/%s annotations %v", a.Namespace, a.Name, a.Annotations)
	}
	if b := e.pod("b-n1"); b.Namespace != "default" {
		t.Errorf("pod b namespace %q, want default", b.Namespace)
	}

	// Read again, nothing changed: nobody is told anything.
	files.list(klog.Background())
	expectCalls(t, e)

	// A file removed between two reads takes its pod.
	if err := os.Remove(filepath.Join(dir, "b.json")); err != nil {
		t.Fatal(err)
	}
	files.list(klog.Background())
	expectCalls(t, e, "remove b-n1", "listed")
}

// TestFileSourceChanges covers the watch's events: a change of a manifest
// replaces its pod (a new hash, a new UID: removed, then added), a broken
// edit keeps the pod as it was until the next listing, a removal or rename
// takes it, dot files are ignored.
func TestFileSourceChanges(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.yaml")
	writeFile(t, path, manifestYAML("a", "busybox:1"))
	files, node, e, clk := newTestSource(t, dir)
	logger := klog.Background()
	files.list(logger)
	expectCalls(t, e, "add a-n1", "listed")
	first := e.pod("a-n1")
	seen := first.Annotations[ConfigFirstSeenAnnotationKey]

	// A write of the same bytes: no change.
	files.consume(logger, fsnotify.Event{Name: path, Op: fsnotify.Write})
	expectCalls(t, e)

	clk.Step(time.Minute)
	writeFile(t, path, manifestYAML("a", "busybox:2"))
	files.consume(logger, fsnotify.Event{Name: path, Op: fsnotify.Write})
	expectCalls(t, e, "remove a-n1", "add a-n1", "listed")
	second := e.pod("a-n1")
	if second.UID == first.UID || second.Spec.Containers[0].Image != "busybox:2" {
		t.Errorf("after the edit: UID %s (was %s), image %s", second.UID, first.UID, second.Spec.Containers[0].Image)
	}
	if second.Annotations[ConfigFirstSeenAnnotationKey] == seen {
		t.Error("the replacing pod kept the first-seen time of the one it replaced")
	}

	// Half-written: the kubelet keeps what it had.
	writeFile(t, path, "apiVersion: v1\nkind: Po")
	files.consume(logger, fsnotify.Event{Name: path, Op: fsnotify.Write})
	expectCalls(t, e)
	writeFile(t, path, manifestYAML("a", "busybox:2"))
	files.consume(logger, fsnotify.Event{Name: path, Op: fsnotify.Write})
	expectCalls(t, e)

	// A dot file (an editor's swap file) is not a manifest.
	swap := filepath.Join(dir, ".a.yaml.swp")
	writeFile(t, swap, manifestYAML("swap", "i"))
	files.consume(logger, fsnotify.Event{Name: swap, Op: fsnotify.Create})
	expectCalls(t, e)

	// A new file, then its rename away and the removal of the first.
	other := filepath.Join(dir, "b.yaml")
	writeFile(t, other, manifestYAML("b", "i"))
	files.consume(logger, fsnotify.Event{Name: other, Op: fsnotify.Create})
	expectCalls(t, e, "add b-n1", "listed")
	files.consume(logger, fsnotify.Event{Name: other, Op: fsnotify.Rename})
	expectCalls(t, e, "remove b-n1", "listed")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	files.consume(logger, fsnotify.Event{Name: path, Op: fsnotify.Remove})
	expectCalls(t, e, "remove a-n1", "listed")
	if len(node.Pods()) != 0 {
		t.Errorf("pods left: %v", node.Pods())
	}
}

// TestFileSourceRun runs the source as the kubelet does: read at once, a
// file created is seen through inotify, and a directory missing at the
// start is read at the next period.
func TestFileSourceRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "manifests")
	files, node, e, clk := newTestSource(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); files.Run(ctx) }()
	defer func() { cancel(); <-done }()

	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
			func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
	// A missing directory counts as read, with no pods.
	poll("the missing directory counts as read", node.HasSynced)
	expectCalls(t, e, "listed")

	// Created while the watch waits to retry: only the next listing sees it.
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "a.yaml"), manifestYAML("a", "i"))
	clk.Step(DefaultFileCheckFrequency)
	poll("the next listing finds the manifest", func() bool { return e.pod("a-n1") != nil })

	// With the watch set up (its retry was due a second after the
	// failure), a new file is seen without another listing: the clock
	// moves on by less than a period.
	steps := 0
	poll("the watch sees a new file", func() bool {
		if steps < 5 {
			clk.Step(watchRetryPeriod)
			steps++
		}
		writeFile(t, filepath.Join(dir, "new.yaml"), manifestYAML("new", "i"))
		return e.pod("new-n1") != nil
	})
}

func TestFileSourceSingleFileAndInline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etcd.yaml")
	writeFile(t, path, manifestYAML("etcd", "i"))
	inline, err := FromPod("staticPods[0]", &corev1.Pod{})
	if err == nil {
		t.Fatalf("a pod without a name: %v", inline)
	}
	p := mustDecode(t, "staticPods[0]", manifestYAML("agent", "i"))
	shadowed := mustDecode(t, "staticPods[1]", manifestYAML("etcd", "inline"))
	files, _, e, _ := newTestSource(t, path, p, shadowed)
	files.list(klog.Background())
	got := e.take()
	slices.Sort(got)
	if want := []string{"add agent-n1", "add etcd-n1", "listed"}; !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	if img := e.pod("etcd-n1").Spec.Containers[0].Image; img != "i" {
		t.Errorf("etcd from %q: the file must replace the inline pod of its name", img)
	}

	// Inline only: read from the start.
	only := NewFileSource(FileSourceConfig{Inline: []*Manifest{p}})
	if !only.HasSynced() {
		t.Error("a source of inline pods only is not synced at once")
	}
	var got2 []*Manifest
	cancel := only.Subscribe(func(ms []*Manifest) { got2 = ms })
	cancel()
	if len(got2) != 1 || got2[0] != p {
		t.Errorf("inline source delivered %v", got2)
	}
}

// TestNodeSourceMerge covers the merge of the kubelet's pod config: one
// pod of a full name, the first; a manifest with its own UID updated in
// place, its first-seen time kept; a change of nothing the kubelet acts on
// is no update.
func TestNodeSourceMerge(t *testing.T) {
	e := &events{}
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	node := NewNodeSource(NodeSourceConfig{NodeName: "n1", Handler: e.handler(), Clock: clk})
	withUID := func(image, label string) *Manifest {
		return mustDecode(t, "/m/u.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: u, uid: fixed, labels: {l: "+label+"}}\n"+
			"spec: {containers: [{name: c, image: "+image+"}]}\n")
	}
	dup1, dup2 := mustDecode(t, "/m/a.yaml", manifestYAML("a", "one")), mustDecode(t, "/m/b.yaml", manifestYAML("a", "two"))
	node.update([]*Manifest{dup1, dup2, withUID("i", "red")})
	expectCalls(t, e, "add a-n1", "add u-n1", "listed")
	if img := e.pod("a-n1").Spec.Containers[0].Image; img != "one" {
		t.Errorf("duplicate names: the pod of %q ran, want the first file's", img)
	}
	seen := e.pod("u-n1").Annotations[ConfigFirstSeenAnnotationKey]

	clk.Step(time.Minute)
	node.update([]*Manifest{dup1, dup2, withUID("i2", "red")})
	expectCalls(t, e, "update u-n1", "listed")
	u := e.pod("u-n1")
	if u.UID != types.UID("fixed") || u.Spec.Containers[0].Image != "i2" || u.Annotations[ConfigFirstSeenAnnotationKey] != seen {
		t.Errorf("updated pod: UID %s image %s seen %q (first %q)", u.UID, u.Spec.Containers[0].Image, u.Annotations[ConfigFirstSeenAnnotationKey], seen)
	}
	// The same content decoded again is a new Manifest, but no update.
	node.update([]*Manifest{dup1, dup2, withUID("i2", "red")})
	expectCalls(t, e, "listed")
	// A label is something the kubelet acts on.
	node.update([]*Manifest{dup1, dup2, withUID("i2", "blue")})
	expectCalls(t, e, "update u-n1", "listed")
	// The first of the duplicates gone, the second takes its name.
	node.update([]*Manifest{dup2})
	got := e.take()
	if want := []string{"remove a-n1", "remove u-n1", "add a-n1", "listed"}; !slices.Equal(sortedRemoves(got), want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	if img := e.pod("a-n1").Spec.Containers[0].Image; img != "two" {
		t.Errorf("image %q, want two", img)
	}
}

// sortedRemoves sorts the leading removes, which come in map order.
func sortedRemoves(calls []string) []string {
	n := 0
	for n < len(calls) && strings.HasPrefix(calls[n], "remove ") {
		n++
	}
	out := slices.Clone(calls)
	slices.Sort(out[:n])
	return out
}
