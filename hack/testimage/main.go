// Command testimage writes a single-binary image (empty base, one layer with
// a static binary, entrypoint and user set) as a docker-archive tarball for
// `ctr images import`. hack/cluster-images.sh builds the local cluster's
// pause image and the end-to-end tests' S3 server with it; the bellows image
// itself comes from `make image` (hack/image).
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	var (
		binary = flag.String("binary", "", "the static binary")
		path   = flag.String("path", "/app", "where the binary goes in the image (the entrypoint)")
		user   = flag.String("user", "65532:65532", "the image's user")
		ref    = flag.String("ref", "", "image reference (registry/repository:tag)")
		out    = flag.String("out", "", "output tarball")
	)
	flag.Parse()
	if err := run(*binary, *path, *user, *ref, *out); err != nil {
		fmt.Fprintln(os.Stderr, "testimage:", err)
		os.Exit(1)
	}
}

func run(binary, path, user, ref, out string) error {
	if binary == "" || ref == "" || out == "" || !strings.HasPrefix(path, "/") {
		return fmt.Errorf("-binary, -ref, -out and an absolute -path are required")
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	epoch := time.Unix(0, 0).UTC()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(path, "/"), Mode: 0o755, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: epoch}
	cf.Config.User = user
	cf.Config.Entrypoint = []string{path}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image ref %q: %w", ref, err)
	}
	return tarball.WriteToFile(out, tag, img)
}
