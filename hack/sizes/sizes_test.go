// Package sizes checks the size bounds of docs/architecture.md ("What is
// large, and why"): no named type with more than maxMethods methods and no
// function longer than maxLines lines in the module's code (tests and
// generated files aside), unless that section's table names it, says why,
// and gives the size it may reach. The table is read as
//
//	| name | size | why |
//
// where name (not in backticks: hack/importmap reads every row that opens
// with one as the package map's) is a package path relative to the module, a dot and the type or
// function (storage-engine/region.Region, cmd/bellows/store.Run), a method as
// Type.Method; size is "N methods" or "N lines", the most the row allows.
package sizes

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const (
	module = "github.com/bellows-kv/bellows/"
	// maxMethods and maxLines are issue #50's bounds ("no type with more
	// than about 80 methods and no function over about 120 lines").
	maxMethods = 80
	maxLines   = 120
	// section is the heading of docs/architecture.md whose table lists
	// what may pass them.
	section = "## What is large, and why"
)

// root is the module's directory (the test runs in hack/sizes).
var root, _ = filepath.Abs(filepath.Join("..", ".."))

// item is one type or function and its size.
type item struct {
	name string // package path (module-relative) "." Type, Func or Type.Method
	size int
	unit string // "methods" or "lines"
	pos  string // file:line
}

// sourceFiles are the non-test Go files of every package of the module, by
// package path (module-relative), from `go list` (what the build sees; no
// testdata, no other modules under bin/).
func sourceFiles(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Dir}} {{join .GoFiles \" \"}} {{join .CgoFiles \" \"}} {{join .IgnoredGoFiles \" \"}}", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	files := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		pkg, dir := strings.TrimPrefix(f[0], module), f[1]
		for _, name := range f[2:] {
			if !strings.HasSuffix(name, "_test.go") {
				files[pkg] = append(files[pkg], filepath.Join(dir, name))
			}
		}
	}
	return files
}

// measure is every named type's method count and every function's length
// in lines (its declaration, doc comment aside, through its closing brace),
// generated files left out.
func measure(t *testing.T) []item {
	t.Helper()
	var items []item
	fset := token.NewFileSet()
	for pkg, files := range sourceFiles(t) {
		methods := map[string]int{}
		where := map[string]string{}
		for _, path := range files {
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			if ast.IsGenerated(f) {
				continue
			}
			rel, _ := filepath.Rel(root, path)
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				name := fn.Name.Name
				if recv := receiver(fn); recv != "" {
					methods[recv]++
					if _, ok := where[recv]; !ok {
						where[recv] = fmt.Sprintf("%s:%d", rel, fset.Position(fn.Pos()).Line)
					}
					name = recv + "." + name
				}
				begin, end := fset.Position(fn.Type.Pos()), fset.Position(fn.End())
				items = append(items, item{name: pkg + "." + name, size: end.Line - begin.Line + 1, unit: "lines",
					pos: fmt.Sprintf("%s:%d", rel, begin.Line)})
			}
		}
		for typ, n := range methods {
			items = append(items, item{name: pkg + "." + typ, size: n, unit: "methods", pos: where[typ]})
		}
	}
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.name+" "+a.unit, b.name+" "+b.unit) })
	return items
}

// receiver is the name of a method's receiver type (pointer and type
// parameters dropped); "" for a function.
func receiver(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return ""
	}
	x := fn.Recv.List[0].Type
	for {
		switch e := x.(type) {
		case *ast.StarExpr:
			x = e.X
		case *ast.ParenExpr:
			x = e.X
		case *ast.IndexExpr:
			x = e.X
		case *ast.IndexListExpr:
			x = e.X
		case *ast.Ident:
			return e.Name
		default:
			return ""
		}
	}
}

// over reports whether it passes its bound.
func (it item) over() bool {
	if it.unit == "methods" {
		return it.size > maxMethods
	}
	return it.size > maxLines
}

// row is one line of the section's table.
type row struct {
	size int
	unit string
	why  string
	line int
}

var rowRE = regexp.MustCompile("^\\|\\s*([^|`\\s]+)\\s*\\|\\s*(\\d+) (methods|lines)\\s*\\|\\s*(.*?)\\s*\\|\\s*$")

// allowed reads the section's table: its rows by name and unit.
func allowed(t *testing.T) map[string]row {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]row{}
	in, found := false, false
	for i, line := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == section
			found = found || in
			continue
		case !in || !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|--") || strings.HasPrefix(line, "| name"):
			continue
		}
		m := rowRE.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("docs/architecture.md:%d: want a row | package.Name | N methods or N lines | why |, got %q", i+1, line)
			continue
		}
		size, _ := strconv.Atoi(m[2])
		if m[4] == "" {
			t.Errorf("docs/architecture.md:%d: %s says nothing of why", i+1, m[1])
		}
		key := m[1] + " " + m[3]
		if _, dup := rows[key]; dup {
			t.Errorf("docs/architecture.md:%d: %s is listed twice", i+1, m[1])
		}
		rows[key] = row{size: size, unit: m[3], why: m[4], line: i + 1}
	}
	if !found {
		t.Fatalf("docs/architecture.md has no section %q", section)
	}
	return rows
}

// TestSizeBounds: every type over maxMethods methods and every function
// over maxLines lines has its row, within the size the row gives; every
// row names something that is over its bound.
func TestSizeBounds(t *testing.T) {
	rows := allowed(t)
	used := map[string]bool{}
	for _, it := range measure(t) {
		key := it.name + " " + it.unit
		r, listed := rows[key]
		if listed {
			used[key] = true
		}
		switch {
		case !it.over():
			if listed {
				t.Errorf("docs/architecture.md:%d: %s is %d %s now, within the bound (%d methods, %d lines): remove its row",
					r.line, it.name, it.size, it.unit, maxMethods, maxLines)
			}
		case !listed:
			t.Errorf("%s: %s has %d %s, over the bound of %d methods per type and %d lines per function: split it, or give it a row | %s | %d %s | why | in docs/architecture.md, %q",
				it.pos, it.name, it.size, it.unit, maxMethods, maxLines, it.name, it.size, it.unit, section)
		case it.size > r.size:
			t.Errorf("%s: %s has %d %s, more than the %d its row allows (docs/architecture.md:%d): split it, or raise the row's size if its why still holds",
				it.pos, it.name, it.size, it.unit, r.size, r.line)
		}
	}
	for key, r := range rows {
		if !used[key] {
			t.Errorf("docs/architecture.md:%d: %s names no %s of the module", r.line, key, map[string]string{"methods": "type", "lines": "function"}[r.unit])
		}
	}
}

// TestMeasure pins what the checker counts on a planted file: methods of
// both receivers of a type together, generic receivers, a function's lines
// from its signature to its closing brace.
func TestMeasure(t *testing.T) {
	src := `package p

type T struct{}
type G[K any] struct{}

func (T) A()  {}
func (*T) B() {}
func (g *G[K]) C() {}

// F's comment is not counted.
func F() {
	_ = 1
}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok {
			lines := fset.Position(fn.End()).Line - fset.Position(fn.Type.Pos()).Line + 1
			got = append(got, fmt.Sprintf("%s/%s/%d", receiver(fn), fn.Name.Name, lines))
		}
	}
	want := []string{"T/A/1", "T/B/1", "G/C/1", "/F/3"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
