package staticpods

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// poolNodes is the size of the fleet the benchmarks model: one pool of
// 2,000 nodes sharing a static pod directory.
const poolNodes = 2000

// poolDir writes a directory of three manifests, as a control-plane
// node's: etcd and two others of its size.
func poolDir(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	for _, name := range []string{"etcd", "apiserver", "scheduler"} {
		data := []byte(strings.Replace(etcdYAML, "name: etcd\n", "name: "+name+"\n", 1))
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

// BenchmarkDecode is the cost of one manifest read as the kubelet reads
// it at every fileCheckFrequency: decoding, defaulting, hashing.
func BenchmarkDecode(b *testing.B) {
	data := []byte(etcdYAML)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode("/etc/kubernetes/manifests/etcd.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkForNode is what each node pays for a manifest that changed:
// its pod, named and hashed for it.
func BenchmarkForNode(b *testing.B) {
	m, err := Decode("/etc/kubernetes/manifests/etcd.yaml", []byte(etcdYAML))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.ForNode("pool-a-1234"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPerNodeListing is one fileCheckFrequency of a pool whose
// nodes each read the directory as a kubelet does: every node decodes
// every manifest again (an op is the whole pool's period).
func BenchmarkPerNodeListing(b *testing.B) {
	dir := poolDir(b)
	logger := klog.Background()
	sources := make([]*FileSource, poolNodes)
	for i := range sources {
		sources[i] = NewFileSource(FileSourceConfig{Path: dir})
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, s := range sources {
			if _, err := s.extractFromDir(logger); err != nil {
				b.Fatal(err)
			}
			// As the kubelet: nothing kept from the last read.
			s.decoded = map[string]*Manifest{}
		}
	}
}

// poolSources subscribes a pool's nodes to one FileSource of dir.
func poolSources(b *testing.B, dir string) *FileSource {
	b.Helper()
	files := NewFileSource(FileSourceConfig{Path: dir})
	nop := func(*corev1.Pod) {}
	for i := range poolNodes {
		node := NewNodeSource(NodeSourceConfig{NodeName: fmt.Sprintf("pool-a-%d", i), Files: files,
			Handler: Handler{Add: nop, Update: nop, Remove: nop}})
		if err := node.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(node.Wait)
	}
	files.list(klog.Background())
	return files
}

// BenchmarkSharedListing is the same period with the pool's one
// FileSource: the directory read once, unchanged files not decoded, and
// no node told anything (an op is the whole pool's period).
func BenchmarkSharedListing(b *testing.B) {
	files := poolSources(b, poolDir(b))
	logger := klog.Background()
	b.ReportAllocs()
	for b.Loop() {
		files.list(logger)
	}
}

// BenchmarkSharedChange is a manifest edited under a pool's FileSource:
// decoded once, then every node makes its pod of it and replaces the old
// one (an op is one edit seen by the whole pool).
func BenchmarkSharedChange(b *testing.B) {
	dir := poolDir(b)
	files := poolSources(b, dir)
	logger := klog.Background()
	path := filepath.Join(dir, "etcd.yaml")
	versions := [][]byte{[]byte(etcdYAML), []byte(strings.Replace(etcdYAML, "etcd:3.6.0-0", "etcd:3.6.1-0", 1))}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if err := os.WriteFile(path, versions[i%2], 0o600); err != nil {
			b.Fatal(err)
		}
		files.consume(logger, fsnotify.Event{Name: path, Op: fsnotify.Write})
	}
}
