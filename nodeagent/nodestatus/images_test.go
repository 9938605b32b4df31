package nodestatus

import (
	"fmt"
	"slices"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func image(id string, size uint64, digests, tags []string) *runtimeapi.Image {
	return &runtimeapi.Image{Id: id, Size: size, RepoDigests: digests, RepoTags: tags}
}

func TestContainerImagesOrderAndNames(t *testing.T) {
	list := []*runtimeapi.Image{
		image("sha256:a", 100, nil, []string{"registry.k8s.io/pause:3.10"}),
		image("sha256:b", 300, []string{"docker.io/library/nginx@sha256:1"}, []string{"docker.io/library/nginx:1.27", "docker.io/library/nginx:latest"}),
		// Equal sizes: the larger ID first, as the kubelet's ByImageSize.
		image("sha256:c", 200, nil, []string{"c:1"}),
		image("sha256:d", 200, []string{"d@sha256:1"}, nil),
		// Seven names: the first five, digests before tags.
		image("sha256:e", 50, []string{"e@sha256:1", "e@sha256:2"}, []string{"e:1", "e:2", "e:3", "e:4", "e:5"}),
		image("sha256:f", 10, nil, nil),
	}
	before := slices.Clone(list)
	got := ContainerImages(list, DefaultMaxImages)
	want := []struct {
		names []string
		size  int64
	}{
		{[]string{"docker.io/library/nginx@sha256:1", "docker.io/library/nginx:1.27", "docker.io/library/nginx:latest"}, 300},
		{[]string{"d@sha256:1"}, 200},
		{[]string{"c:1"}, 200},
		{[]string{"registry.k8s.io/pause:3.10"}, 100},
		{[]string{"e@sha256:1", "e@sha256:2", "e:1", "e:2", "e:3"}, 50},
		{[]string{}, 10},
	}
	if len(got) != len(want) {
		t.Fatalf("%d images, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		if !slices.Equal(got[i].Names, w.names) || got[i].SizeBytes != w.size {
			t.Errorf("images[%d] = %v %d, want %v %d", i, got[i].Names, got[i].SizeBytes, w.names, w.size)
		}
	}
	if got[5].Names == nil {
		t.Error("an image without names has null names; the kubelet writes an empty list")
	}
	if !slices.Equal(list, before) {
		t.Error("ContainerImages reordered its input, which the image cache may share")
	}
}

func TestContainerImagesCap(t *testing.T) {
	var list []*runtimeapi.Image
	for i := range 60 {
		list = append(list, image(fmt.Sprintf("sha256:%02d", i), uint64(1000+i), nil, []string{fmt.Sprintf("img:%d", i)}))
	}
	got := ContainerImages(list, DefaultMaxImages)
	if len(got) != 50 {
		t.Fatalf("%d images, want the kubelet's nodeStatusMaxImages 50", len(got))
	}
	// The 50 largest: sizes 1059 down to 1010.
	if got[0].SizeBytes != 1059 || got[49].SizeBytes != 1010 {
		t.Errorf("kept sizes %d..%d, want 1059..1010", got[0].SizeBytes, got[49].SizeBytes)
	}
	if n := len(ContainerImages(list, -1)); n != 60 {
		t.Errorf("nodeStatusMaxImages -1 reports %d images, want all 60", n)
	}
	if n := len(ContainerImages(list, 0)); n != 0 {
		t.Errorf("nodeStatusMaxImages 0 reports %d images, want none", n)
	}
}
