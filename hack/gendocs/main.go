// Command gendocs writes the documentation that is generated from code:
// docs/defaults.md from internal/contract. hack/generate.sh runs it.
package main

import (
	"flag"
	"log"
	"os"

	"github.com/bellows-kv/bellows/internal/contract"
)

func main() {
	out := flag.String("defaults", "docs/defaults.md", "where to write the defaults table")
	flag.Parse()
	if err := os.WriteFile(*out, []byte(contract.DefaultsMarkdown()), 0o644); err != nil {
		log.Fatal(err)
	}
}
