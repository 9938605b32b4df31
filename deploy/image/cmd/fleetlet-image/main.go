// Command fleetlet-image builds fleetlet's container image from a static
// binary and writes it as an image archive (image.WriteArchive) for `kind
// load image-archive`, `ctr images import` or `docker load`; `make image`
// runs it.
//
//	fleetlet-image --binary bin/image/fleetlet --out bin/fleetlet-image.tar \
//	    --tag fleetlet.io/fleetlet:v1 --tag fleetlet.io/fleetlet:latest --revision COMMIT
//
// Every timestamp in the image is SOURCE_DATE_EPOCH (seconds), or the Unix
// epoch when it is unset, so that one commit gives one digest.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fleetlet/fleetlet/deploy/image"
)

type tags []string

func (t *tags) String() string     { return strings.Join(*t, ",") }
func (t *tags) Set(v string) error { *t = append(*t, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fleetlet-image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("fleetlet-image", flag.ContinueOnError)
	var opts image.Options
	var out string
	var tt tags
	fs.StringVar(&opts.Binary, "binary", "bin/image/fleetlet", "the static Linux fleetlet binary")
	fs.StringVar(&out, "out", "bin/fleetlet-image.tar", "the image archive to write")
	fs.Var(&tt, "tag", "a REPO:TAG for the image; repeat for more")
	fs.StringVar(&opts.Revision, "revision", "", "the git commit, for the org.opencontainers.image.revision label")
	fs.StringVar(&opts.Version, "version", "", "the version, for the org.opencontainers.image.version label")
	fs.StringVar(&opts.Source, "source", image.DefaultSource, "the org.opencontainers.image.source label")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: every input is a flag (see -h)", fs.Args())
	}
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil || sec < 0 {
			return fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a count of seconds: set it to the commit time, git log -1 --format=%%ct", s)
		}
		opts.Created = time.Unix(sec, 0)
	}

	img, err := image.Build(opts)
	if err != nil {
		return err
	}
	if err := image.WriteArchive(out, img, tt); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	id, err := img.ConfigName()
	if err != nil {
		return err
	}
	fi, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s (%.1f MiB)\n", out, strings.Join(tt, ", "), float64(fi.Size())/(1<<20))
	fmt.Printf("digest %s\nimage id %s\n", digest, id)
	return nil
}
