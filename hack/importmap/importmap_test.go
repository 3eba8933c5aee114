// Package importmap checks the package map of docs/architecture.md: which
// packages may import which. It reads the import graph from `go list`, so it
// sees exactly what the compiler links, test files excluded.
package importmap

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/bellows-kv/bellows/"

// graph is every package the module's packages link, with its direct imports.
func graph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	g := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		g[f[0]] = f[1:]
	}
	return g
}

// path is how from reaches a package for which bad is true, or nil.
func path(g map[string][]string, from string, bad func(string) bool) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, q := range g[p] {
			if _, seen := prev[q]; seen {
				continue
			}
			prev[q] = p
			if bad(q) {
				var chain []string
				for c := q; c != ""; c = prev[c] {
					chain = append([]string{strings.TrimPrefix(c, module)}, chain...)
				}
				return chain
			}
			queue = append(queue, q)
		}
	}
	return nil
}

func prefixed(prefixes ...string) func(string) bool {
	return func(p string) bool {
		for _, x := range prefixes {
			if p == x || strings.HasPrefix(p, x+"/") {
				return true
			}
		}
		return false
	}
}

func ours(p string) string { return strings.TrimPrefix(p, module) }

// kubernetes is a Kubernetes package: the API machinery, client-go,
// controller-runtime. sigs.k8s.io/yaml is a YAML library that happens to
// live there.
func kubernetes(p string) bool {
	return (strings.HasPrefix(p, "k8s.io/") || strings.HasPrefix(p, "sigs.k8s.io/")) && p != "sigs.k8s.io/yaml"
}

// The engine: one LSM tree and what it is made of. It knows nothing of
// serving requests, of workers, or of Kubernetes.
var enginePackages = []string{"kv", "iterator", "memstore", "wal", "sstable", "blockcache", "blob", "manifest", "compaction", "region"}

func TestPackageMap(t *testing.T) {
	g := graph(t)
	var pkgs []string
	for p := range g {
		if strings.HasPrefix(p, module) {
			pkgs = append(pkgs, p)
		}
	}
	slices.Sort(pkgs)
	type rule struct {
		why  string
		from func(string) bool
		bad  func(string) bool
	}
	se := func(sub ...string) []string {
		var out []string
		for _, s := range sub {
			out = append(out, module+"storage-engine/"+s)
		}
		return out
	}
	rules := []rule{
		{"storage-engine runs without Kubernetes (bellows local, tests, other orchestrators)",
			prefixed(module + "storage-engine"), kubernetes},
		{"storage-engine is below the operator, the roles and the benchmarks",
			prefixed(module + "storage-engine"), prefixed(module+"api", module+"controllers", module+"cmd", module+"bench", module+"internal/discovery")},
		{"an engine package does not import a server, the worker, the offload client or the wire protocol",
			func(p string) bool { return slices.Contains(se(enginePackages...), p) }, prefixed(append(se("server", "compactor", "offload", "health"), module+"proto")...)},
		{"the store side of offload does not link the worker",
			prefixed(module + "storage-engine/offload"), prefixed(module + "storage-engine/compactor")},
		{"the Go client is small for its users: the wire protocol and the shared header names, no engine, no Kubernetes",
			prefixed(module + "client"), func(p string) bool {
				return kubernetes(p) || prefixed(module+"storage-engine", module+"cmd", module+"api", module+"controllers")(p)
			}},
		{"the contract is a leaf both sides import",
			prefixed(module + "internal/contract"), func(p string) bool { return strings.HasPrefix(p, module) || kubernetes(p) }},
		{"the production binary links no benchmark, Pebble or plotting code",
			prefixed(module + "cmd/bellows"), prefixed(module+"bench", module+"cmd/bellows-bench", "github.com/cockroachdb/pebble", "github.com/cockroachdb/pebble/v2", "gonum.org/v1/plot")},
		{"the operator does not link the engine",
			prefixed(module+"controllers", module+"api", module+"autoscaler"), prefixed(module+"storage-engine", module+"cmd")},
		{"the capacity model is pure: no Kubernetes in it",
			prefixed(module + "autoscaler"), kubernetes},
		{"composition roots (cmd/) are imported by nothing but their own command",
			func(p string) bool { return !strings.HasPrefix(p, module+"cmd/") }, prefixed(module + "cmd")},
	}
	for _, p := range pkgs {
		for _, r := range rules {
			if !r.from(p) {
				continue
			}
			if chain := path(g, p, r.bad); chain != nil {
				t.Errorf("%s: %s\n\timport path: %s", ours(p), r.why, strings.Join(chain, " → "))
			}
		}
	}
}

// TestArchitectureDocListsEveryPackage keeps docs/architecture.md's package
// map complete: a new package must say where it sits.
func TestArchitectureDocListsEveryPackage(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	for p := range graph(t) {
		if !strings.HasPrefix(p, module) || strings.HasPrefix(p, module+"e2e") {
			continue
		}
		if !bytes.Contains(doc, []byte("`"+ours(p)+"`")) {
			t.Errorf("docs/architecture.md does not place package `%s`", ours(p))
		}
	}
}

func TestRulesCanFail(t *testing.T) {
	g := map[string][]string{"a": {"b"}, "b": {"k8s.io/api/core/v1"}}
	if got := path(g, "a", kubernetes); fmt.Sprint(got) != "[a b k8s.io/api/core/v1]" {
		t.Fatalf("path = %v", got)
	}
	if path(g, "a", prefixed("c")) != nil {
		t.Fatal("found a path to a package that is not linked")
	}
}
