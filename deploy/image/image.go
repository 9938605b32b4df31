// Package image builds fleetlet's container image without Docker or a
// registry: one layer on an empty base holding the static binary, a CA
// bundle, a nonroot user and an empty /tmp, with every timestamp fixed so that
// the same inputs give the same digest. WriteArchive writes it as `docker
// save` does, an OCI layout with a docker-save manifest.json, which `docker
// load`, `ctr images import` and `kind load image-archive` accept.
package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The image's fixed contents.
const (
	BinaryPath = "/fleetlet"
	CABundle   = "/etc/ssl/certs/ca-certificates.crt"
	// UID and GID of the user the image runs as: distroless's "nonroot".
	UID = 65532
	GID = 65532
	// DefaultSource is the org.opencontainers.image.source label's default.
	DefaultSource = "https://github.com/fleetlet/fleetlet"
	// BuildHint says how to produce the binary Options.Binary names.
	BuildHint = `run "make image", which builds it with CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags '-s -w -buildid=' -o bin/image/fleetlet ./cmd/fleetlet`
)

// Options are the inputs of one image. The same Options and the same binary
// give the same digest.
type Options struct {
	// Binary is the path of a static Linux fleetlet executable; the image's
	// architecture is the executable's.
	Binary string
	// Created is every timestamp in the image: the config's, the history's
	// and each file's. The zero value means the Unix epoch.
	Created time.Time
	// Revision (the git commit), Version and Source fill the
	// org.opencontainers.image.* labels; an empty Source is DefaultSource.
	Revision string
	Version  string
	Source   string
}

// Build returns the image for opts. Its errors are one line that names the
// input at fault and what to do.
func Build(opts Options) (v1.Image, error) {
	created := opts.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	created = created.UTC().Truncate(time.Second)
	bin, arch, err := readBinary(opts.Binary)
	if err != nil {
		return nil, err
	}
	roots, err := caBundle()
	if err != nil {
		return nil, err
	}
	layerTar, err := rootfs(bin, roots, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("compressing the image layer: %w", err)
	}
	source := opts.Source
	if source == "" {
		source = DefaultSource
	}
	labels := map[string]string{"org.opencontainers.image.source": source}
	if opts.Revision != "" {
		labels["org.opencontainers.image.revision"] = opts.Revision
	}
	if opts.Version != "" {
		labels["org.opencontainers.image.version"] = opts.Version
	}
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Created:      v1.Time{Time: created},
		Config: v1.Config{
			Entrypoint: []string{BinaryPath},
			Cmd:        []string{"fleet", "--shard"},
			User:       fmt.Sprintf("%d:%d", UID, GID),
			WorkingDir: "/",
			Labels:     labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "fleetlet deploy/image",
			Comment:   "the static fleetlet binary, a CA bundle, a nonroot user and /tmp",
		},
	})
}

// readBinary reads a static Linux executable and returns it with its
// architecture in Go's (and OCI's) spelling.
func readBinary(path string) ([]byte, string, error) {
	if path == "" {
		return nil, "", errors.New("no fleetlet binary given: pass --binary PATH; " + BuildHint)
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", fmt.Errorf("fleetlet binary %s not found: %s", path, BuildHint)
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading the fleetlet binary: %w", err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, "", fmt.Errorf("%s is not a Linux executable (%v): %s", path, err, BuildHint)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return nil, "", fmt.Errorf("%s is an ELF %s, not an executable: %s", path, f.Type, BuildHint)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, "", fmt.Errorf("%s is dynamically linked and cannot run in an image from scratch: %s", path, BuildHint)
		}
	}
	archs := map[elf.Machine]string{
		elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64", elf.EM_PPC64: "ppc64le",
		elf.EM_S390: "s390x", elf.EM_RISCV: "riscv64",
	}
	arch, ok := archs[f.Machine]
	if !ok || f.Class != elf.ELFCLASS64 {
		return nil, "", fmt.Errorf("%s is built for %s (%s), which the image does not support: build it with GOARCH=amd64 or arm64", path, f.Machine, f.Class)
	}
	return data, arch, nil
}

// caBundle is Mozilla's root store, as golang.org/x/crypto/x509roots/fallback
// carries it, in PEM: the image trusts the roots of the module version pinned
// in go.mod, not those of the machine that built it. Roots that NSS trusts only
// for certificates issued before a date are left out, since a PEM file cannot
// carry that constraint.
func caBundle() ([]byte, error) {
	var buf bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return nil, err
		}
	}
	if buf.Len() == 0 {
		return nil, errors.New("the x509roots/fallback bundle holds no unconstrained roots: update golang.org/x/crypto/x509roots/fallback in deploy/image/go.mod")
	}
	return buf.Bytes(), nil
}

// rootfs is the layer's uncompressed tar: entries in name order, each owned
// by UID:GID with the given time, nothing taken from the build machine but
// the binary's bytes.
func rootfs(bin, roots []byte, created time.Time) ([]byte, error) {
	passwd := fmt.Sprintf("nonroot:x:%d:%d:nonroot:/tmp:/sbin/nologin\n", UID, GID)
	group := fmt.Sprintf("nonroot:x:%d:\n", GID)
	entries := []struct {
		name string
		mode int64
		data []byte // nil for a directory
	}{
		{"etc/", 0o755, nil},
		{"etc/group", 0o644, []byte(group)},
		{"etc/passwd", 0o644, []byte(passwd)},
		{"etc/ssl/", 0o755, nil},
		{"etc/ssl/certs/", 0o755, nil},
		{"etc/ssl/certs/ca-certificates.crt", 0o644, roots},
		{"fleetlet", 0o755, bin},
		{"tmp/", 0o1777, nil},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     UID,
			Gid:     GID,
			Uname:   "nonroot",
			Gname:   "nonroot",
			ModTime: created,
		}
		if e.data == nil {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("writing %s into the layer: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("writing %s into the layer: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
