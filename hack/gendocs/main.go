// Command gendocs writes the documentation that is generated from code:
// docs/defaults.md from internal/contract, docs/reference/crds.md from the
// CRDs controller-gen wrote (config/crd/bases) and docs/reference/grpc.md
// from the .proto files (proto/). hack/generate.sh runs it, after
// controller-gen and hack/crdschema, so the CRD reference describes the
// CRDs as they are installed; hack/verify-generated.sh fails when a
// committed file differs from what this writes.
package main

import (
	"flag"
	"log"
	"os"
	"path/filepath"

	"github.com/bellows-kv/bellows/internal/contract"
)

func main() {
	defaults := flag.String("defaults", "docs/defaults.md", "where to write the defaults table (empty: skip)")
	crds := flag.String("crds", "docs/reference/crds.md", "where to write the CRD reference (empty: skip)")
	crdDir := flag.String("crd-dir", "config/crd/bases", "the CRD YAMLs the CRD reference describes")
	grpc := flag.String("grpc", "docs/reference/grpc.md", "where to write the gRPC API reference (empty: skip)")
	protoDir := flag.String("proto-dir", "proto", "the import root of the .proto files the gRPC reference describes")
	flag.Parse()
	if *defaults != "" {
		write(*defaults, contract.DefaultsMarkdown())
	}
	if *crds != "" {
		files, err := crdFiles(*crdDir)
		if err != nil {
			log.Fatal(err)
		}
		md, err := CRDsMarkdown(files)
		if err != nil {
			log.Fatal(err)
		}
		write(*crds, md)
	}
	if *grpc != "" {
		md, err := GRPCMarkdown(*protoDir)
		if err != nil {
			log.Fatal(err)
		}
		write(*grpc, md)
	}
}

func write(path, content string) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		log.Fatal(err)
	}
}
