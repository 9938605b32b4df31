package nodestatus

import (
	"cmp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ImageListPeriod is how often the kubelet's image GC manager refreshes the
// image list it caches for status.images (its Start lists every 30 s); a
// status update reads the cache and never asks the runtime itself.
const ImageListPeriod = 30 * time.Second

// DefaultMaxImages is the kubelet's default nodeStatusMaxImages.
const DefaultMaxImages = 50

// MaxNamesPerImage is the kubelet's MaxNamesPerImageInNodeStatus.
const MaxNamesPerImage = 5

// ContainerImages is status.images as the kubelet's Images setter writes it
// from the runtime's image list: largest first (equal sizes by descending
// ID, the kubelet's ByImageSize), at most maxImages of them (-1 for all),
// each named by its repo digests then its repo tags, at most
// MaxNamesPerImage names. It does not modify list.
func ContainerImages(list []*runtimeapi.Image, maxImages int32) []corev1.ContainerImage {
	sorted := slices.Clone(list)
	slices.SortFunc(sorted, func(a, b *runtimeapi.Image) int {
		if c := cmp.Compare(b.Size, a.Size); c != 0 {
			return c
		}
		return cmp.Compare(b.Id, a.Id)
	})
	if maxImages > -1 && int(maxImages) < len(sorted) {
		sorted = sorted[:maxImages]
	}
	var out []corev1.ContainerImage
	for _, img := range sorted {
		names := make([]string, 0, len(img.RepoDigests)+len(img.RepoTags))
		names = append(names, img.RepoDigests...)
		names = append(names, img.RepoTags...)
		if len(names) > MaxNamesPerImage {
			names = names[:MaxNamesPerImage]
		}
		out = append(out, corev1.ContainerImage{Names: names, SizeBytes: int64(img.Size)})
	}
	return out
}
