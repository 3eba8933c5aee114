// Package ociimage assembles the bellows container image without a Docker
// engine: an empty base plus one layer holding the static binary (and,
// optionally, a CA bundle), configured exactly like the Dockerfile's final
// stage (user 65532:65532, entrypoint /bellows, OCI labels, working dir, env).
// `make image` writes it as a docker-archive tarball that `ctr images import`,
// `docker load` and `kind load image-archive` accept.
package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The image's fixed configuration; the Dockerfile's final stage says the same
// (TestDockerfileMatches keeps them in step).
const (
	BinaryPath  = "/bellows"
	CACertsPath = "/etc/ssl/certs/ca-certificates.crt"
	User        = "65532:65532"
	WorkingDir  = "/"
	Source      = "https://github.com/bellows-kv/bellows"
)

// Env is the image's environment (what gcr.io/distroless/static sets).
var Env = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"SSL_CERT_FILE=" + CACertsPath,
}

// Labels are the OCI annotations of an image of version and revision.
func Labels(version, revision string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "bellows",
		"org.opencontainers.image.description": "Bellows: a log-structured key-value store for Kubernetes (store, compactor, operator)",
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.url":         Source,
		"org.opencontainers.image.vendor":      "bellows-kv",
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.revision":    revision,
	}
}

// Spec describes one image.
type Spec struct {
	Binary   []byte // the static bellows binary
	CACerts  []byte // optional PEM bundle placed at CACertsPath
	Version  string
	Revision string
	OS, Arch string // default linux / runtime.GOARCH
}

// epoch is every timestamp in the image, so equal inputs give equal digests.
var epoch = time.Unix(0, 0).UTC()

// Build returns the image described by s.
func Build(s Spec) (v1.Image, error) {
	if len(s.Binary) == 0 {
		return nil, fmt.Errorf("ociimage: empty binary")
	}
	if s.OS == "" {
		s.OS = "linux"
	}
	if s.Arch == "" {
		s.Arch = runtime.GOARCH
	}
	layerTar, err := layerTar(s)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("ociimage: layer: %w", err)
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: epoch},
			CreatedBy: "bellows hack/image: COPY bellows " + BinaryPath,
			Comment:   "static bellows binary",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("ociimage: append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = s.OS, s.Arch
	cf.Created = v1.Time{Time: epoch}
	cf.Config.User = User
	cf.Config.Entrypoint = []string{BinaryPath}
	cf.Config.Cmd = nil
	cf.Config.WorkingDir = WorkingDir
	cf.Config.Env = append([]string(nil), Env...)
	cf.Config.Labels = Labels(s.Version, s.Revision)
	return mutate.ConfigFile(img, cf)
}

// layerTar is the single layer: the binary at BinaryPath (root-owned, 0755,
// so user 65532 can run but not replace it) and optionally the CA bundle.
func layerTar(s Spec) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	add := func(p string, mode int64, data []byte) error {
		p = strings.TrimPrefix(p, "/")
		// Parent directories first, each once.
		var parents []string
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := add(BinaryPath, 0o755, s.Binary); err != nil {
		return nil, err
	}
	if len(s.CACerts) > 0 {
		if err := add(CACertsPath, 0o644, s.CACerts); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteTarball writes img tagged ref as a docker-archive tarball at path.
func WriteTarball(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("ociimage: image ref %q: %w", ref, err)
	}
	return tarball.WriteToFile(path, tag, img)
}

// BuildFile reads the binary (and CA bundle, when caPath is not empty) from
// disk, builds the image and writes it tagged ref to out.
func BuildFile(binaryPath, caPath, ref, out string, s Spec) error {
	var err error
	if s.Binary, err = os.ReadFile(binaryPath); err != nil {
		return err
	}
	if caPath != "" {
		if s.CACerts, err = os.ReadFile(caPath); err != nil {
			return err
		}
	}
	img, err := Build(s)
	if err != nil {
		return err
	}
	return WriteTarball(out, ref, img)
}
