package fleet

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// seen records what a node's handler was told, as "add web", "update web",
// "delete web".
type seen struct {
	mu     sync.Mutex
	events []string
}

func (s *seen) handler() cache.ResourceEventHandler {
	name := func(obj any) string {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		return obj.(metav1.Object).GetName()
	}
	record := func(e string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.events = append(s.events, e)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { record("add " + name(obj)) },
		UpdateFunc: func(_, obj any) { record("update " + name(obj)) },
		DeleteFunc: func(obj any) { record("delete " + name(obj)) },
	}
}

func (s *seen) has(e string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.events, e)
}

func (s *seen) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("timed out waiting until %s", what)
	}
}

func boundPod(name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PodSpec{NodeName: node}}
}

func TestSharedInformersRouteEventsByNode(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
		boundPod("early", "n1"),
		boundPod("unbound", ""),
	)
	s := NewSharedInformers(client)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	waitFor(t, "the informers sync", s.HasSynced)

	// Registered after the sync: the pod and node already known are
	// replayed as adds.
	var n1Pods, n2Pods, n1Node seen
	removeN1 := s.AddPodHandler("n1", n1Pods.handler())
	s.AddPodHandler("n2", n2Pods.handler())
	s.AddNodeHandler("n1", n1Node.handler())
	if got := n1Pods.list(); !slices.Equal(got, []string{"add early"}) {
		t.Errorf("n1's pods on registration = %v, want [add early]", got)
	}
	if got := n1Node.list(); !slices.Equal(got, []string{"add n1"}) {
		t.Errorf("n1's node on registration = %v, want [add n1]", got)
	}
	if obj, ok, _ := s.Nodes().GetByKey("n2"); !ok || obj.(*corev1.Node).Name != "n2" {
		t.Errorf("Nodes().GetByKey(n2) = %v, %v", obj, ok)
	}

	pods := client.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, boundPod("web", "n2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "n2 hears of its new pod", func() bool { return n2Pods.has("add web") })
	if err := pods.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "n2 hears of its pod's deletion", func() bool { return n2Pods.has("delete web") })
	if got := n1Pods.list(); !slices.Equal(got, []string{"add early"}) {
		t.Errorf("n1 heard of another node's pods: %v", got)
	}

	removeN1()
	if _, err := pods.Create(ctx, boundPod("late", "n1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod for n2 after n1's pod: once n2 has it, n1's event is past too.
	if _, err := pods.Create(ctx, boundPod("marker", "n2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "n2 hears of the marker", func() bool { return n2Pods.has("add marker") })
	if n1Pods.has("add late") {
		t.Error("a removed handler still received events")
	}

	cancel()
	<-done
}

func TestNewRejectsSharedModeWithoutAnIdentity(t *testing.T) {
	_, err := New(Config{WatchMode: WatchShared, ClientConfig: nil, NewRuntime: nil})
	if err == nil {
		t.Fatal("New accepted the shared watch mode without SharedClientConfig")
	}
}
