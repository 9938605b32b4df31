package fakeruntime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// imageFsMountpoint names the one filesystem ImageFsInfo reports. Nothing is
// mounted there; the name only has to be stable.
const imageFsMountpoint = "/var/lib/fleetlet-fake/images"

// image is the record of one image. Its slices are never handed out.
type image struct {
	id          string // "sha256:" and 64 hex digits
	repoTags    []string
	repoDigests []string
	size        uint64
	pinned      bool
}

// displayName is how a container's status names its image: the first repo
// tag, else the first repo digest, as containerd does.
func (img *image) displayName() string {
	if len(img.repoTags) > 0 {
		return img.repoTags[0]
	}
	if len(img.repoDigests) > 0 {
		return img.repoDigests[0]
	}
	return img.id
}

func (img *image) toProto() *runtimeapi.Image {
	return &runtimeapi.Image{
		Id:          img.id,
		RepoTags:    slices.Clone(img.repoTags),
		RepoDigests: slices.Clone(img.repoDigests),
		Size:        img.size,
		Pinned:      img.pinned,
	}
}

// newImage makes the record of ref as a registry would serve it. Its ID and
// digest are derived from the normalised name, so every node and every run
// agrees on them.
func (r *Runtime) newImage(ref string) (*image, error) {
	name, err := normaliseImageRef(ref)
	if err != nil {
		return nil, err
	}
	return r.newImageNamed(name, r.imageBehaviour(ref, name)), nil
}

// newImageNamed is newImage for ref already normalised to name, with its
// behaviour ib.
func (r *Runtime) newImageNamed(name string, ib ImageBehaviour) *image {
	size := r.behaviour.ImageSizeBytes
	if ib.SizeBytes > 0 {
		size = ib.SizeBytes
	}
	img := &image{size: uint64(size)}
	if repo, digest, ok := strings.Cut(name, "@"); ok {
		// Pulled by digest: containerd records the digest and no tag.
		if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
			repo = repo[:i]
		}
		img.repoDigests = []string{repo + "@" + digest}
		img.id = "sha256:" + hashHex("fleetlet-fake image config\x00"+img.repoDigests[0])
		return img
	}
	repo := name[:strings.LastIndexByte(name, ':')]
	img.repoTags = []string{name}
	img.repoDigests = []string{repo + "@sha256:" + hashHex("fleetlet-fake manifest\x00"+name)}
	img.id = "sha256:" + hashHex("fleetlet-fake image config\x00"+name)
	return img
}

// indexImageBehaviours keys the behaviours both as written and as
// normalised, so that a pull finds its behaviour with one or two map
// lookups however the pod spells the image. A key as written wins over one
// that only normalises to it; among keys that normalise alike (Validate
// reports them) the first in sorted order wins, so that a replay does not
// depend on map order. Keys that do not parse stay reachable as written.
func indexImageBehaviours(images map[string]ImageBehaviour) map[string]ImageBehaviour {
	if len(images) == 0 {
		return nil
	}
	index := make(map[string]ImageBehaviour, 2*len(images))
	for _, ref := range slices.Sorted(maps.Keys(images)) {
		ib := images[ref]
		ib.PullLatency = clonePtr(ib.PullLatency) // keep none of the caller's pointers
		index[ref] = ib
		name, err := normaliseImageRef(ref)
		if err != nil {
			continue
		}
		if _, written := images[name]; written {
			continue
		}
		if _, taken := index[name]; !taken {
			index[name] = ib
		}
	}
	return index
}

// imageBehaviour is the behaviour of the image ref, normalised to name: the
// key written as ref wins over one that only normalises to the same name.
func (r *Runtime) imageBehaviour(ref, name string) ImageBehaviour {
	if r.imageBehaviours == nil {
		return ImageBehaviour{}
	}
	if ib, ok := r.imageBehaviours[ref]; ok {
		return ib
	}
	return r.imageBehaviours[name]
}

// pullError is the error containerd's CRI plugin returns when the registry
// refuses a pull, for the image normalised to name: code Unknown for an
// authorization failure, NotFound for a missing tag (containerd maps its
// errdefs.ErrNotFound to that code).
func pullError(name, reason string) error {
	prefix := fmt.Sprintf("failed to pull and unpack image %q: failed to resolve reference %q: ", name, name)
	if reason == PullErrorNotFound {
		return status.Error(codes.NotFound, prefix+name+": not found")
	}
	return status.Error(codes.Unknown, prefix+"pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed")
}

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// addImageLocked stores img, or adds its names to the image with its ID.
func (r *Runtime) addImageLocked(img *image) *image {
	if old, ok := r.images[img.id]; ok {
		for _, t := range img.repoTags {
			if !slices.Contains(old.repoTags, t) {
				old.repoTags = append(old.repoTags, t)
			}
		}
		for _, d := range img.repoDigests {
			if !slices.Contains(old.repoDigests, d) {
				old.repoDigests = append(old.repoDigests, d)
			}
		}
		old.pinned = old.pinned || img.pinned
		img = old
	} else {
		r.images[img.id] = img
	}
	for _, n := range img.repoTags {
		r.imageNames[n] = img.id
	}
	for _, n := range img.repoDigests {
		r.imageNames[n] = img.id
	}
	return img
}

// lookupImageLocked finds an image by ID (with or without "sha256:"), by
// repo tag or by repo digest, in any spelling a registry accepts
// ("busybox" is "docker.io/library/busybox:latest"). It returns nil when the
// image is absent.
func (r *Runtime) lookupImageLocked(ref string) *image {
	if img, ok := r.images[ref]; ok {
		return img
	}
	if len(ref) == 64 && isHex(ref) {
		if img, ok := r.images["sha256:"+ref]; ok {
			return img
		}
	}
	if id, ok := r.imageNames[ref]; ok {
		return r.images[id]
	}
	name, err := normaliseImageRef(ref)
	if err != nil {
		return nil
	}
	if id, ok := r.imageNames[name]; ok {
		return r.images[id]
	}
	// "repo:tag@digest" is found by its digest.
	if repo, digest, ok := strings.Cut(name, "@"); ok {
		if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
			if id, ok := r.imageNames[repo[:i]+"@"+digest]; ok {
				return r.images[id]
			}
		}
	}
	return nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// PullImage makes the image present after the pull latency (the node's
// PullLatency, or the image's own) and returns its ID, which is what the
// kubelet passes on to CreateContainer. Pulling an image already present
// takes the same time and changes nothing. A pull error, from the image's
// behaviour, the pod's fleetlet.io/pull-error annotation (podSandboxConfig
// carries the pod's annotations) or the node's Fault.PullError, fails it
// after the latency as containerd fails it; present or not, since containerd
// asks the registry first.
func (r *Runtime) PullImage(ctx context.Context, spec *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	st, err := r.enter(ctx, "PullImage")
	if err != nil {
		return "", err
	}
	ref := spec.GetImage()
	name, err := normaliseImageRef(ref)
	if err != nil {
		return "", status.Errorf(codes.InvalidArgument, "PullImage %q: %v", ref, err)
	}
	ib := r.imageBehaviour(ref, name)
	failWith := ib.PullError
	if v, ok := podSandboxConfig.GetAnnotations()[AnnotationPullError]; ok {
		if !validPullError(v) {
			md := podSandboxConfig.GetMetadata()
			return "", status.Errorf(codes.InvalidArgument, "PullImage %q for pod %s/%s: annotation %s is %q; use %q or %q, or remove it",
				ref, md.GetNamespace(), md.GetName(), AnnotationPullError, v, PullErrorUnauthorized, PullErrorNotFound)
		}
		failWith = v // the pod is more specific than the image
	}
	if st.fault.PullError != "" {
		failWith = st.fault.PullError // the registry itself is broken
	}
	latency := r.behaviour.PullLatency
	if ib.PullLatency != nil {
		latency = max(time.Duration(*ib.PullLatency), 0)
	}
	if err := r.wait(ctx, st.slowed(latency)); err != nil {
		return "", ctxError("PullImage "+ref, err)
	}
	var img *image
	if failWith == "" {
		img = r.newImageNamed(name, ib)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.rebootedLocked(st); err != nil {
		return "", err
	}
	if failWith != "" {
		return "", pullError(name, failWith)
	}
	// A digest of an image already pulled by tag names that image.
	if existing := r.lookupImageLocked(ref); existing != nil {
		return existing.id, nil
	}
	return r.addImageLocked(img).id, nil
}

// ImageStatus returns the image, or a response with a nil Image when it is
// absent, as CRI specifies (not an error).
func (r *Runtime) ImageStatus(ctx context.Context, spec *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	if _, err := r.enter(ctx, "ImageStatus"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	resp := &runtimeapi.ImageStatusResponse{}
	if img := r.lookupImageLocked(spec.GetImage()); img != nil {
		resp.Image = img.toProto()
	}
	return resp, nil
}

// ListImages returns the images, ordered by ID; a filter with an image
// returns just that one, if present.
func (r *Runtime) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	if _, err := r.enter(ctx, "ListImages"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ref := filter.GetImage().GetImage(); ref != "" {
		if img := r.lookupImageLocked(ref); img != nil {
			return []*runtimeapi.Image{img.toProto()}, nil
		}
		return []*runtimeapi.Image{}, nil
	}
	out := make([]*runtimeapi.Image, 0, len(r.images))
	for _, img := range r.images {
		out = append(out, img.toProto())
	}
	slices.SortFunc(out, func(a, b *runtimeapi.Image) int { return strings.Compare(a.Id, b.Id) })
	return out, nil
}

// RemoveImage removes the image with all its tags, as CRI specifies. Removing
// an absent image is not an error. Like containerd it does not check whether
// a container uses the image: the kubelet's image GC does.
func (r *Runtime) RemoveImage(ctx context.Context, spec *runtimeapi.ImageSpec) error {
	if _, err := r.enter(ctx, "RemoveImage"); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	img := r.lookupImageLocked(spec.GetImage())
	if img == nil {
		return nil
	}
	for _, n := range img.repoTags {
		delete(r.imageNames, n)
	}
	for _, n := range img.repoDigests {
		delete(r.imageNames, n)
	}
	delete(r.images, img.id)
	return nil
}

// ImageFsInfo reports one image filesystem using the sum of the image sizes,
// and the container filesystem on the same mount (so not a split image
// filesystem) using the sum of the containers' writable layers, each at
// this moment (see ContainerStats). Inodes are estimated from bytes: one per
// 16 KiB begun, per image and per writable layer.
func (r *Runtime) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	if _, err := r.enter(ctx, "ImageFsInfo"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	now := r.now()
	var imageBytes, imageInodes uint64
	for _, img := range r.images {
		imageBytes += img.size
		imageInodes += inodes(img.size)
	}
	var layerBytes, layerInodes uint64
	for _, c := range r.containers {
		c.settle(now)
		b := c.usageAt(now).writableLayer
		layerBytes += b
		layerInodes += inodes(b)
	}
	r.mu.Unlock()
	fs := func(used, inodes uint64) []*runtimeapi.FilesystemUsage {
		return []*runtimeapi.FilesystemUsage{{
			Timestamp:  now,
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: imageFsMountpoint},
			UsedBytes:  &runtimeapi.UInt64Value{Value: used},
			InodesUsed: &runtimeapi.UInt64Value{Value: inodes},
		}}
	}
	return &runtimeapi.ImageFsInfoResponse{
		ImageFilesystems:     fs(imageBytes, imageInodes),
		ContainerFilesystems: fs(layerBytes, layerInodes),
	}, nil
}

// normaliseImageRef spells an image reference the way containerd stores it:
// a registry host (docker.io by default), "library/" for official Docker Hub
// images, and ":latest" when neither tag nor digest is given. It is a small
// subset of github.com/distribution/reference, which is not in our module
// graph: it checks only what a fake needs to reject.
func normaliseImageRef(ref string) (string, error) {
	if ref == "" {
		return "", fmt.Errorf("empty image reference")
	}
	name, digest, hasDigest := strings.Cut(ref, "@")
	if hasDigest {
		algo, hexPart, ok := strings.Cut(digest, ":")
		if !ok || algo == "" || hexPart == "" {
			return "", fmt.Errorf("invalid image reference %q: digest %q is not algorithm:hex", ref, digest)
		}
	}
	tag := ""
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		name, tag = name[:i], name[i+1:]
		if tag == "" {
			return "", fmt.Errorf("invalid image reference %q: empty tag", ref)
		}
	}
	domain, path := "docker.io", name
	if i := strings.IndexByte(name, '/'); i >= 0 {
		if first := name[:i]; strings.ContainsAny(first, ".:") || first == "localhost" {
			domain, path = first, name[i+1:]
		}
	}
	if domain == "index.docker.io" {
		domain = "docker.io"
	}
	if path == "" || strings.HasPrefix(path, "/") || strings.HasSuffix(path, "/") || strings.Contains(path, "//") {
		return "", fmt.Errorf("invalid image reference %q: bad repository path", ref)
	}
	if strings.ToLower(path) != path {
		return "", fmt.Errorf("invalid image reference %q: repository name must be lowercase", ref)
	}
	if domain == "docker.io" && !strings.Contains(path, "/") {
		path = "library/" + path
	}
	out := domain + "/" + path
	if tag == "" && !hasDigest {
		tag = "latest"
	}
	if tag != "" {
		out += ":" + tag
	}
	if hasDigest {
		out += "@" + digest
	}
	return out, nil
}
