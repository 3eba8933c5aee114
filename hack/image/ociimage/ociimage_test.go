package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestBuildWritesLoadableImage builds a tiny image through the same code path
// as `make image` (a dummy file stands in for the binary), writes the
// tarball, reads it back and checks the config and the layer.
func TestBuildWritesLoadableImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bellows")
	ca := filepath.Join(dir, "ca.pem")
	binary := []byte("#!not-really-a-binary\x00\x01\x02")
	certs := []byte("-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n")
	if err := os.WriteFile(bin, binary, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, certs, 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "image.tar")
	const ref = "bellows.test/bellows:v1.2.3"
	if err := BuildFile(bin, ca, ref, out, Spec{Version: "v1.2.3", Revision: "abc123", Arch: "arm64"}); err != nil {
		t.Fatal(err)
	}

	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatalf("read back %s as %s: %v", out, ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "arm64" {
		t.Errorf("platform = %s/%s, want linux/arm64", cf.OS, cf.Architecture)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user = %q, want 65532:65532", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/bellows"}) || len(c.Cmd) != 0 {
		t.Errorf("entrypoint, cmd = %q, %q; want [/bellows], []", c.Entrypoint, c.Cmd)
	}
	if c.WorkingDir != "/" {
		t.Errorf("working dir = %q", c.WorkingDir)
	}
	if !slices.Contains(c.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt") {
		t.Errorf("env = %q, missing SSL_CERT_FILE", c.Env)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  "v1.2.3",
		"org.opencontainers.image.revision": "abc123",
		"org.opencontainers.image.source":   "https://github.com/bellows-kv/bellows",
		"org.opencontainers.image.title":    "bellows",
	} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	if len(cf.RootFS.DiffIDs) != 1 {
		t.Fatalf("rootfs has %d diff ids", len(cf.RootFS.DiffIDs))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	contents := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], contents[h.Name] = h, data
	}
	h := files["bellows"]
	if h == nil {
		t.Fatalf("layer has no bellows at the root: %v", slices.Sorted(maps.Keys(files)))
	}
	if h.Typeflag != tar.TypeReg || h.Mode&0o7777 != 0o755 || h.Uid != 0 || h.Gid != 0 {
		t.Errorf("bellows: type %c mode %o uid %d gid %d; want a root-owned 0755 file", h.Typeflag, h.Mode, h.Uid, h.Gid)
	}
	if !bytes.Equal(contents["bellows"], binary) {
		t.Errorf("bellows content differs from the input binary")
	}
	if !bytes.Equal(contents["etc/ssl/certs/ca-certificates.crt"], certs) {
		t.Errorf("CA bundle missing or different; files: %v", slices.Sorted(maps.Keys(files)))
	}
	for _, d := range []string{"etc/", "etc/ssl/", "etc/ssl/certs/"} {
		if files[d] == nil || files[d].Typeflag != tar.TypeDir {
			t.Errorf("no directory entry %s", d)
		}
	}
	if len(files) != 5 {
		t.Errorf("layer holds %v, want the binary, the CA bundle and its 3 directories", slices.Sorted(maps.Keys(files)))
	}
}

// TestBuildIsReproducible: equal inputs give the same digest (fixed
// timestamps, no host metadata), so rebuilding an unchanged tree is a no-op.
func TestBuildIsReproducible(t *testing.T) {
	s := Spec{Binary: []byte("x"), Version: "v1", Revision: "r"}
	a, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("digests differ: %s vs %s", da, db)
	}
	s.Binary = []byte("y")
	c, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	if dc, _ := c.Digest(); dc == da {
		t.Errorf("a different binary gave the same digest %s", dc)
	}
	if _, err := Build(Spec{}); err == nil {
		t.Errorf("Build with no binary succeeded")
	}
	if err := WriteTarball(filepath.Join(t.TempDir(), "x.tar"), "Not A Ref!", a); err == nil {
		t.Errorf("WriteTarball accepted an invalid ref")
	}
}

// TestDockerfileMatches: the Dockerfile's final stage configures the image
// exactly as Build does (user, entrypoint, working dir, env, labels, binary
// path) and builds a static, trimmed, version-stamped binary.
func TestDockerfileMatches(t *testing.T) {
	raw, err := os.ReadFile("../../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(raw), "\\\n", " ")
	var stages [][]string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "FROM ") {
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], line)
		}
	}
	if len(stages) != 2 {
		t.Fatalf("%d stages, want builder + final", len(stages))
	}
	build := strings.Join(stages[0], "\n")
	for _, want := range []string{"FROM --platform=$BUILDPLATFORM golang:1.26 ", "CGO_ENABLED=0", "-trimpath", "-X github.com/bellows-kv/bellows/internal/version.Version=${VERSION}", "./cmd/bellows"} {
		if !strings.Contains(build, want) {
			t.Errorf("builder stage lacks %q", want)
		}
	}
	kv := regexp.MustCompile(`([A-Za-z0-9_.\-]+)="([^"]*)"`)
	labels, env := map[string]string{}, []string{}
	var user, workdir, entrypoint, copyLine string
	for _, line := range stages[1] {
		instr, rest, _ := strings.Cut(line, " ")
		switch instr {
		case "FROM":
			if rest != "gcr.io/distroless/static:nonroot" {
				t.Errorf("final base = %q", rest)
			}
		case "LABEL":
			for _, m := range kv.FindAllStringSubmatch(rest, -1) {
				labels[m[1]] = m[2]
			}
		case "ENV":
			for _, m := range kv.FindAllStringSubmatch(rest, -1) {
				env = append(env, m[1]+"="+m[2])
			}
		case "USER":
			user = rest
		case "WORKDIR":
			workdir = rest
		case "ENTRYPOINT":
			entrypoint = rest
		case "COPY":
			copyLine = rest
		}
	}
	if want := Labels("${VERSION}", "${REVISION}"); !maps.Equal(labels, want) {
		t.Errorf("Dockerfile labels %v\nBuild labels      %v", labels, want)
	}
	if !slices.Equal(env, Env) {
		t.Errorf("Dockerfile env %q, Build env %q", env, Env)
	}
	if user != User || workdir != WorkingDir {
		t.Errorf("Dockerfile USER %q WORKDIR %q; Build %q %q", user, workdir, User, WorkingDir)
	}
	var ep []string
	if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil || !slices.Equal(ep, []string{BinaryPath}) {
		t.Errorf("Dockerfile ENTRYPOINT %s, want [%q] (%v)", entrypoint, BinaryPath, err)
	}
	if !strings.HasSuffix(copyLine, " "+BinaryPath) || !strings.Contains(copyLine, "--chmod=0755") {
		t.Errorf("Dockerfile COPY %q does not install the binary 0755 at %s", copyLine, BinaryPath)
	}
}
