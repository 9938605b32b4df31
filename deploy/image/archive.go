package image

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// WriteArchive writes img under every tag to path, atomically, as `docker
// save` has written images since Docker 25: an OCI image layout (oci-layout,
// index.json, blobs/sha256/…, the image's own manifest among them) that also
// holds the docker-save manifest.json pointing at the same blobs. `ctr images
// import` and `kind load image-archive` read the layout, and so keep the
// image's digest; `docker load` (any version) and go-containerregistry's
// tarball package read manifest.json.
//
// The archive is reproducible: entries in name order, the tags in name order
// (go-containerregistry's tarball.Write takes them from a map, and writes no
// OCI layout), every entry's time the Unix epoch.
func WriteArchive(path string, img v1.Image, tags []string) error {
	if len(tags) == 0 {
		return errors.New("no image tag given: pass --tag REPO:TAG, such as fleetlet.io/fleetlet:latest")
	}
	var refs []name.Tag
	for _, t := range tags {
		tag, err := name.NewTag(t, name.StrictValidation)
		if err != nil {
			return fmt.Errorf("image tag %q: %v: give REPO:TAG, such as fleetlet.io/fleetlet:latest", t, err)
		}
		refs = append(refs, tag)
	}
	slices.SortFunc(refs, func(a, b name.Tag) int { return strings.Compare(a.String(), b.String()) })
	refs = slices.CompactFunc(refs, func(a, b name.Tag) bool { return a.String() == b.String() })

	files, err := archiveFiles(img, refs)
	if err != nil {
		return err
	}

	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating the directory of the image archive: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("creating the image archive: %w", err)
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	defer f.Close()

	tw := tar.NewWriter(f)
	for _, e := range files {
		h := &tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, ModTime: time.Unix(0, 0)}
		if e.open == nil {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		} else {
			h.Size = e.size
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("writing %s into %s: %w", e.name, path, err)
		}
		if e.open == nil {
			continue
		}
		rc, err := e.open()
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("writing %s into %s: %w", e.name, path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(f.Name(), path)
}

// archiveFile is one entry of the archive; a nil open makes a directory.
type archiveFile struct {
	name string
	size int64
	open func() (io.ReadCloser, error)
}

// archiveFiles lists the archive's entries in name order.
func archiveFiles(img v1.Image, refs []name.Tag) ([]archiveFile, error) {
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	bytesFile := func(name string, b []byte) archiveFile {
		return archiveFile{name, int64(len(b)), func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }}
	}

	manifest, err := img.RawManifest()
	if err != nil {
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	mediaType, err := img.MediaType()
	if err != nil {
		return nil, err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}

	blobs := map[string]archiveFile{
		blob(digest):  bytesFile(blob(digest), manifest),
		blob(cfgName): bytesFile(blob(cfgName), cfg),
	}
	save := tarball.Descriptor{Config: blob(cfgName)}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		size, err := l.Size()
		if err != nil {
			return nil, err
		}
		blobs[blob(d)] = archiveFile{blob(d), size, l.Compressed}
		save.Layers = append(save.Layers, blob(d))
	}

	index := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for _, ref := range refs {
		save.RepoTags = append(save.RepoTags, ref.String())
		index.Manifests = append(index.Manifests, v1.Descriptor{
			MediaType: mediaType,
			Digest:    digest,
			Size:      int64(len(manifest)),
			Annotations: map[string]string{
				// containerd's name for the image, and the OCI layout's.
				"io.containerd.image.name":          ref.String(),
				"org.opencontainers.image.ref.name": ref.TagStr(),
			},
		})
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return nil, err
	}
	saveJSON, err := json.Marshal(tarball.Manifest{save})
	if err != nil {
		return nil, err
	}

	files := []archiveFile{{name: "blobs/"}, {name: "blobs/sha256/"}}
	for _, n := range slices.Sorted(maps.Keys(blobs)) {
		files = append(files, blobs[n])
	}
	return append(files,
		bytesFile("index.json", indexJSON),
		bytesFile("manifest.json", saveJSON),
		bytesFile("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)),
	), nil
}
