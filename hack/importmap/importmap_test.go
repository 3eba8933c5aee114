// Package importmap checks the package map of docs/architecture.md: which
// packages may import which. It reads the import graph from `go list`, so it
// sees exactly what the compiler links, test files excluded. The page's table
// is read as allow-lists (each package's direct imports of ours), and the
// rules below it, which also forbid what a package links indirectly, as
// deny-lists.
package importmap

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// row is one row of the page's package map: the packages it places and the
// packages of ours they may import, as patterns relative to the module ("x"
// is x, "x/..." is x and every package under it).
type row struct {
	places, allows []string
	// named are the allowances the row spells out (not "the engine").
	named []string
}

var backticked = regexp.MustCompile("`([^`]+)`")

// engineWords is how the table names the engine's packages in its last
// column, which the page defines above it.
var engineWords = regexp.MustCompile(`\bthe engine\b`)

// table reads the package map's rows from the page: a row starts with a
// backticked package; its last column's backticked names, and "the engine",
// are what the packages of its first column may import.
func table(doc []byte) ([]row, error) {
	var rows []row
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 3 {
			return nil, fmt.Errorf("a package map row has %d columns, not 3: %s", len(cells), line)
		}
		var r row
		for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
			r.places = append(r.places, m[1])
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[2], -1) {
			r.named = append(r.named, m[1])
		}
		r.allows = slices.Clone(r.named)
		if engineWords.MatchString(backticked.ReplaceAllString(cells[2], "")) {
			for _, e := range enginePackages {
				r.allows = append(r.allows, "storage-engine/"+e)
			}
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no package map rows")
	}
	return rows, nil
}

// matches reports whether package p (relative to the module) is pattern.
func matches(pattern, p string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

// rowOf is the row that places p: the one naming it, else the one whose
// pattern covering it is longest; nil when none does.
func rowOf(rows []row, p string) *row {
	var best *row
	bestLen := -1
	for i := range rows {
		for _, pat := range rows[i].places {
			switch {
			case pat == p:
				return &rows[i]
			case matches(pat, p) && len(pat) > bestLen:
				best, bestLen = &rows[i], len(pat)
			}
		}
	}
	return best
}

// disallowed lists every direct import of ours in g that the importing
// package's row does not allow, every package of ours without a row, and
// every allowance that names no package (a typo would allow nothing and
// hide nothing, but would mislead the reader).
func disallowed(rows []row, g map[string][]string) []string {
	var pkgs []string
	for p := range g {
		if strings.HasPrefix(p, module) {
			pkgs = append(pkgs, ours(p))
		}
	}
	slices.Sort(pkgs)
	var out []string
	for _, p := range pkgs {
		r := rowOf(rows, p)
		if r == nil {
			out = append(out, fmt.Sprintf("%s: no row of the package map places it", p))
			continue
		}
		for _, q := range g[module+p] {
			if !strings.HasPrefix(q, module) {
				continue
			}
			q = ours(q)
			if !slices.ContainsFunc(r.allows, func(pat string) bool { return matches(pat, q) }) {
				allowed := strings.Join(r.allows, ", ")
				if allowed == "" {
					allowed = "nothing of ours"
				}
				out = append(out, fmt.Sprintf("%s imports %s, which its row of the package map does not allow (it allows %s)", p, q, allowed))
			}
		}
	}
	for _, r := range rows {
		for _, pat := range r.named {
			if !slices.ContainsFunc(pkgs, func(p string) bool { return matches(pat, p) }) {
				out = append(out, fmt.Sprintf("the row of %s allows %s, which is no package", strings.Join(r.places, ", "), pat))
			}
		}
	}
	return out
}

// TestPackageMapAllowLists checks every package's direct imports against
// its row of docs/architecture.md's table.
func TestPackageMapAllowLists(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := table(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range disallowed(rows, graph(t)) {
		t.Error(msg)
	}
}

// The allow-lists reject an edge their table does not list, a package no
// row places and an allowance of no package, and accept the rest.
func TestAllowListsCanFail(t *testing.T) {
	doc := []byte(strings.Join([]string{
		"| package | what it is | may import (of ours) |",
		"|---|---|---|",
		"| `a` | the top | `b`, `c/...` (why), other modules |",
		"| `b` | the middle | the engine |",
		"| `c`, `c/sub` | the bottom | nothing of ours |",
		"| `d` | a typo | `nosuch` |",
	}, "\n"))
	rows, err := table(doc)
	if err != nil {
		t.Fatal(err)
	}
	g := map[string][]string{
		module + "a":                 {module + "b", module + "c/sub", "fmt"},
		module + "b":                 {module + "storage-engine/kv", module + "a"},
		module + "c":                 {},
		module + "c/sub":             {module + "c"},
		module + "d":                 {},
		module + "e":                 {},
		module + "storage-engine/kv": {},
	}
	got := disallowed(rows, g)
	want := []string{
		"b imports a, which its row of the package map does not allow",
		"c/sub imports c, which its row of the package map does not allow",
		"e: no row of the package map places it",
		"storage-engine/kv: no row of the package map places it",
		"the row of d allows nosuch, which is no package",
	}
	if len(got) != len(want) {
		t.Fatalf("disallowed = %q, want %d messages starting %q", got, len(want), want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("message %d = %q, want it to start %q", i, got[i], want[i])
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
