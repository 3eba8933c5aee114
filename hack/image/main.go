// Command image writes the bellows container image as a docker-archive
// tarball (loadable with `ctr images import`, `docker load`, `kind load
// image-archive`) without a Docker engine. `make image` runs it.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/bellows-kv/bellows/hack/image/ociimage"
)

func main() {
	var (
		binary   = flag.String("binary", "", "the static bellows binary (CGO_ENABLED=0)")
		caCerts  = flag.String("ca-certs", "", "optional PEM bundle installed at "+ociimage.CACertsPath)
		ref      = flag.String("ref", "bellows.test/bellows:dev", "image reference (repository:tag)")
		out      = flag.String("out", "dist/bellows-image.tar", "output tarball")
		version  = flag.String("version", "dev", "org.opencontainers.image.version")
		revision = flag.String("revision", "unknown", "org.opencontainers.image.revision")
		arch     = flag.String("arch", "", "image architecture (default: this machine's)")
	)
	flag.Parse()
	if *binary == "" {
		fmt.Fprintln(os.Stderr, "image: -binary is required")
		os.Exit(2)
	}
	err := ociimage.BuildFile(*binary, *caCerts, *ref, *out, ociimage.Spec{Version: *version, Revision: *revision, Arch: *arch})
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s (%s)\n", *out, *ref)
}
