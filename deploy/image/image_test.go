package image

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"debug/elf"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// fakeBinary writes the smallest ELF executable debug/elf reads for machine,
// followed by payload; with interp it carries a PT_INTERP, as a dynamically
// linked executable does.
func fakeBinary(t *testing.T, machine elf.Machine, interp bool, payload string) string {
	t.Helper()
	const ehsize, phentsize = 64, 56
	h := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT),
		Ehsize: ehsize, Phentsize: phentsize, Shentsize: 64,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	h.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	h.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	var progs []elf.Prog64
	tail := []byte(payload)
	if interp {
		ld := "/lib64/ld-linux-x86-64.so.2\x00"
		h.Phoff, h.Phnum = ehsize, 1
		progs = append(progs, elf.Prog64{Type: uint32(elf.PT_INTERP), Off: ehsize + phentsize, Filesz: uint64(len(ld)), Memsz: uint64(len(ld))})
		tail = append([]byte(ld), tail...)
	}
	var buf bytes.Buffer
	for _, v := range []any{h, progs, tail} {
		if err := binary.Write(&buf, binary.LittleEndian, v); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(t.TempDir(), "fleetlet")
	if err := os.WriteFile(p, buf.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func testOptions(t *testing.T) Options {
	return Options{
		Binary:   fakeBinary(t, elf.EM_X86_64, false, "fleetlet"),
		Created:  time.Unix(1700000000, 0),
		Revision: "0123456789abcdef0123456789abcdef01234567",
		Version:  "v0.1.0",
	}
}

func digest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestSameInputsSameDigest(t *testing.T) {
	opts := testOptions(t)
	tags := []string{"fleetlet.io/fleetlet:v0.1.0", "fleetlet.io/fleetlet:latest"}
	var digests []v1.Hash
	var archives [][]byte
	for i := range 2 {
		img, err := Build(opts)
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, digest(t, img))
		out := filepath.Join(t.TempDir(), "image.tar")
		// The tags in either order: the archive must not depend on it.
		if i == 1 {
			tags[0], tags[1] = tags[1], tags[0]
		}
		if err := WriteArchive(out, img, tags); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		archives = append(archives, b)
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds of the same inputs: digests %s and %s", digests[0], digests[1])
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Errorf("two archives of the same image differ")
	}

	// Each input counts: another time or another binary is another image.
	later := opts
	later.Created = opts.Created.Add(time.Second)
	other := opts
	other.Binary = fakeBinary(t, elf.EM_X86_64, false, "another fleetlet")
	for what, o := range map[string]Options{"time": later, "binary": other} {
		img, err := Build(o)
		if err != nil {
			t.Fatal(err)
		}
		if d := digest(t, img); d == digests[0] {
			t.Errorf("another %s gave the same digest %s", what, d)
		}
	}
}

func TestImageContents(t *testing.T) {
	opts := testOptions(t)
	img, err := Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "image.tar")
	tags := []string{"fleetlet.io/fleetlet:v0.1.0", "fleetlet.io/fleetlet:latest"}
	if err := WriteArchive(out, img, tags); err != nil {
		t.Fatal(err)
	}

	// Read it back as `docker load` would, under each tag.
	for _, tg := range tags {
		tag, err := name.NewTag(tg)
		if err != nil {
			t.Fatal(err)
		}
		loaded, err := tarball.ImageFromPath(out, &tag)
		if err != nil {
			t.Fatalf("reading %s from the archive: %v", tg, err)
		}
		if got, want := digest(t, loaded), digest(t, img); got != want {
			t.Errorf("%s read back with digest %s, built as %s", tg, got, want)
		}
		img = loaded
	}

	// And as containerd does, through the OCI layout, which keeps the
	// image's manifest and so its digest.
	index := readLayout(t, out)
	if len(index.Manifests) != len(tags) {
		t.Fatalf("index.json lists %d manifests, want one per tag (%d)", len(index.Manifests), len(tags))
	}
	for i, want := range []string{"fleetlet.io/fleetlet:latest", "fleetlet.io/fleetlet:v0.1.0"} {
		m := index.Manifests[i]
		if name := m.Annotations["io.containerd.image.name"]; name != want || m.Digest != digest(t, img) {
			t.Errorf("index.json's manifest %d: %s %s, want %s %s", i, name, m.Digest, want, digest(t, img))
		}
	}

	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	want := opts.Created.UTC()
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cfg.OS, cfg.Architecture)
	}
	if !cfg.Created.Time.Equal(want) {
		t.Errorf("created %v, want %v", cfg.Created.Time, want)
	}
	for _, h := range cfg.History {
		if !h.Created.Time.Equal(want) {
			t.Errorf("history %q created %v, want %v", h.CreatedBy, h.Created.Time, want)
		}
	}
	c := cfg.Config
	if strings.Join(c.Entrypoint, " ") != "/fleetlet" || strings.Join(c.Cmd, " ") != "fleet --shard" {
		t.Errorf("entrypoint %q cmd %q, want [/fleetlet] [fleet --shard]", c.Entrypoint, c.Cmd)
	}
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", c.User)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.source":   DefaultSource,
		"org.opencontainers.image.revision": opts.Revision,
		"org.opencontainers.image.version":  opts.Version,
	} {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	type file struct {
		mode int64
		data []byte
	}
	files := map[string]file{}
	var names []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != UID || h.Gid != GID {
			t.Errorf("%s owned by %d:%d, want %d:%d", h.Name, h.Uid, h.Gid, UID, GID)
		}
		if !h.ModTime.Equal(want) {
			t.Errorf("%s mtime %v, want %v", h.Name, h.ModTime, want)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		files[h.Name] = file{h.Mode, data}
	}
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			t.Errorf("layer entries not in name order: %q before %q", names[i-1], names[i])
		}
	}
	for name, mode := range map[string]int64{
		"fleetlet": 0o755, "etc/ssl/certs/ca-certificates.crt": 0o644, "tmp/": 0o1777,
		"etc/passwd": 0o644, "etc/group": 0o644,
	} {
		f, ok := files[name]
		if !ok {
			t.Errorf("the layer has no %s; it has %q", name, names)
			continue
		}
		if f.mode != mode {
			t.Errorf("%s mode %#o, want %#o", name, f.mode, mode)
		}
	}
	bin, err := os.ReadFile(opts.Binary)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(files["fleetlet"].data, bin) {
		t.Errorf("/fleetlet is not the binary given")
	}
	if !strings.Contains(string(files["etc/passwd"].data), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user: %q", files["etc/passwd"].data)
	}

	pool := x509.NewCertPool()
	rest, n := files["etc/ssl/certs/ca-certificates.crt"].data, 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatalf("CA bundle certificate %d: %v", n, err)
		}
		pool.AddCert(cert)
		n++
	}
	if len(bytes.TrimSpace(rest)) != 0 || n < 100 {
		t.Errorf("CA bundle: %d certificates and %d bytes of trailing data; want Mozilla's roots (over 100) and nothing else", n, len(rest))
	}
}

func TestArm64Binary(t *testing.T) {
	opts := testOptions(t)
	opts.Binary = fakeBinary(t, elf.EM_AARCH64, false, "fleetlet")
	img, err := Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Architecture != "arm64" {
		t.Errorf("architecture %q for an arm64 binary", cfg.Architecture)
	}
}

func TestBadInputs(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "script")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what, binary, want string
	}{
		{"missing binary", filepath.Join(dir, "bin", "image", "fleetlet"), "not found: run \"make image\""},
		{"no binary", "", "no fleetlet binary given"},
		{"not an executable", notELF, "is not a Linux executable"},
		{"dynamic", fakeBinary(t, elf.EM_X86_64, true, "x"), "dynamically linked"},
		{"unsupported architecture", fakeBinary(t, elf.EM_MIPS, false, "x"), "GOARCH=amd64"},
	} {
		opts := testOptions(t)
		opts.Binary = tc.binary
		_, err := Build(opts)
		if err == nil {
			t.Errorf("%s: no error", tc.what)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
			t.Errorf("%s: error %q, want one line with %q", tc.what, msg, tc.want)
		}
		if tc.binary != "" && !strings.Contains(err.Error(), tc.binary) {
			t.Errorf("%s: error %q does not name %s", tc.what, err, tc.binary)
		}
	}

	img, err := Build(testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "image.tar")
	for what, tags := range map[string][]string{
		"no tag":  nil,
		"bad tag": {"Fleetlet.io/UPPER CASE:x"},
	} {
		err := WriteArchive(out, img, tags)
		if err == nil || !strings.Contains(err.Error(), "fleetlet.io/fleetlet:latest") {
			t.Errorf("%s: error %v, want one that shows a good tag", what, err)
		}
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed write left %s behind (%v)", out, err)
	}
}

// readLayout extracts the archive and reads it as an OCI image layout,
// checking every blob against its digest.
func readLayout(t *testing.T, archive string) *v1.IndexManifest {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lp, err := layout.FromPath(dir)
	if err != nil {
		t.Fatalf("the archive is not an OCI layout: %v", err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(idx); err != nil {
		t.Fatalf("the archive's OCI layout: %v", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	return m
}
