package fakeruntime

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestNormaliseImageRef(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{in: "busybox", want: "docker.io/library/busybox:latest"},
		{in: "busybox:1.36", want: "docker.io/library/busybox:1.36"},
		{in: "library/busybox", want: "docker.io/library/busybox:latest"},
		{in: "docker.io/busybox", want: "docker.io/library/busybox:latest"},
		{in: "index.docker.io/library/busybox:1", want: "docker.io/library/busybox:1"},
		{in: "bitnami/redis:7", want: "docker.io/bitnami/redis:7"},
		{in: "registry.k8s.io/pause:3.10", want: "registry.k8s.io/pause:3.10"},
		{in: "localhost/app", want: "localhost/app:latest"},
		{in: "localhost:5000/team/app:v2", want: "localhost:5000/team/app:v2"},
		{in: "quay.io/org/app@" + digest, want: "quay.io/org/app@" + digest},
		{in: "busybox:1.36@" + digest, want: "docker.io/library/busybox:1.36@" + digest},
		{in: "", wantErr: true},
		{in: "BusyBox", wantErr: true},
		{in: "busybox:", wantErr: true},
		{in: "busybox@nodigest", wantErr: true},
		{in: "quay.io/", wantErr: true},
		{in: "a//b", wantErr: true},
	}
	for _, tc := range tests {
		got, err := normaliseImageRef(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("normaliseImageRef(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestPullImage(t *testing.T) {
	ctx := context.Background()
	rt, _ := newTestRuntime(t, Behaviour{ImageSizeBytes: 1000})
	id := pull(t, rt, "busybox")
	if !strings.HasPrefix(id, "sha256:") || len(id) != len("sha256:")+64 {
		t.Fatalf("image ref %q is not a sha256 image ID", id)
	}
	// The ID depends on the name only: another node, another run, another
	// spelling of the same reference all agree.
	other, _ := newTestRuntime(t, Behaviour{})
	if id2 := pull(t, other, "docker.io/library/busybox:latest"); id2 != id {
		t.Errorf("same image, different IDs: %s and %s", id, id2)
	}
	if id3 := pull(t, rt, "busybox:1.36"); id3 == id {
		t.Error("different tags got the same ID")
	}

	resp, err := rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: "busybox"}, false)
	if err != nil {
		t.Fatal(err)
	}
	img := resp.Image
	if img.GetId() != id || img.Size != 1000 || !slices.Equal(img.RepoTags, []string{"docker.io/library/busybox:latest"}) {
		t.Fatalf("image = %v", img)
	}
	if len(img.RepoDigests) != 1 || !strings.HasPrefix(img.RepoDigests[0], "docker.io/library/busybox@sha256:") {
		t.Errorf("repo digests = %v", img.RepoDigests)
	}
	if img.Pinned {
		t.Error("a pulled image is pinned")
	}

	// Every way of naming it finds it.
	for _, ref := range []string{id, strings.TrimPrefix(id, "sha256:"), "busybox:latest", "docker.io/library/busybox", img.RepoDigests[0]} {
		resp, err := rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: ref}, false)
		if err != nil || resp.Image.GetId() != id {
			t.Errorf("ImageStatus(%q) = %v, %v; want %s", ref, resp.GetImage(), err, id)
		}
	}
	// Pulling by the digest of an image pulled by tag changes nothing.
	if got := pull(t, rt, img.RepoDigests[0]); got != id {
		t.Errorf("pull by digest = %s, want the tagged image %s", got, id)
	}
	// The returned image is a copy.
	img.RepoTags[0] = "changed"
	if resp, _ := rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: id}, false); resp.Image.RepoTags[0] == "changed" {
		t.Error("internal state changed through a returned image")
	}

	_, err = rt.PullImage(ctx, &runtimeapi.ImageSpec{Image: "Bad:Name"}, nil, nil)
	wantCode(t, "PullImage(bad name)", err, codes.InvalidArgument)
}

func TestPullByDigest(t *testing.T) {
	rt, _ := newTestRuntime(t, Behaviour{})
	ref := "quay.io/org/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	id := pull(t, rt, ref)
	resp, _ := rt.ImageStatus(context.Background(), &runtimeapi.ImageSpec{Image: ref}, false)
	if resp.Image.GetId() != id || len(resp.Image.RepoTags) != 0 || !slices.Equal(resp.Image.RepoDigests, []string{ref}) {
		t.Errorf("image = %v, want only the repo digest %s", resp.Image, ref)
	}
}

func TestImageStatusAbsentIsNil(t *testing.T) {
	rt, _ := newTestRuntime(t, Behaviour{})
	for _, ref := range []string{"nginx", "sha256:" + strings.Repeat("0", 64), "", "Not Valid"} {
		resp, err := rt.ImageStatus(context.Background(), &runtimeapi.ImageSpec{Image: ref}, false)
		if err != nil || resp == nil || resp.Image != nil {
			t.Errorf("ImageStatus(%q) = %v, %v; want a response with a nil image", ref, resp, err)
		}
	}
}

func TestPreloadedImages(t *testing.T) {
	rt := New(Config{PreloadedImages: []string{pauseImage, "Invalid Ref"}})
	images, err := rt.ListImages(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(images) != 1 || images[0].RepoTags[0] != pauseImage || !images[0].Pinned || images[0].Size != 10<<20 {
		t.Errorf("images = %v, want the pinned pause image of 10 MiB", images)
	}
	if err := (Config{PreloadedImages: []string{"Invalid Ref"}}).Validate(); err == nil {
		t.Error("Validate accepted an invalid preloaded image")
	}
}

func TestListAndRemoveImages(t *testing.T) {
	ctx := context.Background()
	rt, _ := newTestRuntime(t, Behaviour{})
	bb := pull(t, rt, busyboxImage)
	ng := pull(t, rt, "nginx")

	all, _ := rt.ListImages(ctx, nil)
	if len(all) != 3 {
		t.Fatalf("ListImages = %d images, want pause, busybox and nginx", len(all))
	}
	filtered, _ := rt.ListImages(ctx, &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: "nginx:latest"}})
	if len(filtered) != 1 || filtered[0].Id != ng {
		t.Errorf("filtered list = %v, want nginx", filtered)
	}
	none, _ := rt.ListImages(ctx, &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: "redis"}})
	if len(none) != 0 {
		t.Errorf("filter for an absent image listed %v", none)
	}

	for i := 0; i < 2; i++ { // removing is idempotent
		if err := rt.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: busyboxImage}); err != nil {
			t.Fatalf("RemoveImage #%d: %v", i, err)
		}
	}
	if resp, _ := rt.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: bb}, false); resp.Image != nil {
		t.Error("removed image still present by ID")
	}
	for name := range rt.imageNames {
		if strings.Contains(name, "busybox") {
			t.Errorf("name %s of a removed image still indexed", name)
		}
	}
	if err := rt.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: "never-pulled"}); err != nil {
		t.Errorf("RemoveImage(absent) = %v", err)
	}
}

func TestImageFsInfo(t *testing.T) {
	ctx := context.Background()
	rt, clk := newTestRuntime(t, Behaviour{ImageSizeBytes: 5 << 20})
	used := func() uint64 {
		t.Helper()
		resp, err := rt.ImageFsInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.ImageFilesystems) != 1 {
			t.Fatalf("image filesystems = %v, want one", resp.ImageFilesystems)
		}
		fs := resp.ImageFilesystems[0]
		if fs.FsId.GetMountpoint() == "" || fs.Timestamp != clk.Now().UnixNano() {
			t.Errorf("filesystem = %v", fs)
		}
		return fs.UsedBytes.GetValue()
	}
	if got := used(); got != 5<<20 {
		t.Errorf("used with the pause image = %d, want %d", got, 5<<20)
	}
	pull(t, rt, "busybox")
	pull(t, rt, "nginx")
	pull(t, rt, "nginx") // present already: counted once
	if got := used(); got != 15<<20 {
		t.Errorf("used with three images = %d, want %d", got, 15<<20)
	}
	_ = rt.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: "nginx"})
	if got := used(); got != 10<<20 {
		t.Errorf("used after a remove = %d, want %d", got, 10<<20)
	}
}
