// Package metricnames lists the Prometheus metric names Bellows exports, from
// the two places that define them: the Go sources (every
// prometheus.*Opts{Namespace, Subsystem, Name} literal, every
// prometheus.NewDesc / BuildFQName) and docs/interfaces.md (the contract
// tables). The chart's dashboard test checks every query against both.
package metricnames

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Type is a metric's type as far as the source tells ("" when unknown).
type Type string

const (
	Counter   Type = "counter"
	Gauge     Type = "gauge"
	Histogram Type = "histogram"
	Summary   Type = "summary"
	Unknown   Type = ""
)

// Metric is one exported metric.
type Metric struct {
	Name    string
	Type    Type
	Section string // docs: the table's heading ("Store", "Compactor", "Operator (autoscaler)"); Go: the file
	// Labels (docs only): each documented label and, when the docs list
	// them, its values (`op` = get, scan → op: [get scan]; `region` → region: nil).
	Labels map[string][]string
}

// Set maps metric names to metrics.
type Set map[string]Metric

// Series resolves a series name as a query would name it: a histogram's
// _bucket/_sum/_count and a summary's _sum/_count map to their base.
func (s Set) Series(series string) (Metric, bool) {
	if m, ok := s[series]; ok {
		return m, true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(series, suf)
		if !ok {
			continue
		}
		m, ok := s[base]
		if !ok {
			continue
		}
		switch {
		case m.Type == Histogram, m.Type == Summary && suf != "_bucket", m.Type == Unknown:
			return m, true
		}
	}
	return Metric{}, false
}

var optsTypes = map[string]Type{
	"CounterOpts": Counter, "GaugeOpts": Gauge, "HistogramOpts": Histogram, "SummaryOpts": Summary,
	"CounterVecOpts": Counter, "GaugeVecOpts": Gauge, "HistogramVecOpts": Histogram, "SummaryVecOpts": Summary,
}

// FromGoSources parses every non-test .go file under root (skipping testdata,
// vendor and hidden directories and any directory in skip, relative to root)
// and returns the metric names they register.
//
// Recognised: prometheus.XxxOpts{Namespace: .., Subsystem: .., Name: ..}
// (joined with "_" like prometheus.BuildFQName), prometheus.NewDesc(fq, ..),
// prometheus.BuildFQName(ns, sub, name). Each part may be a string literal,
// a string constant of the same package, or a parameter of the enclosing
// function; a parameter is resolved through every call of that function (a
// named function, or a function literal assigned to a variable) in the same
// package whose argument is a literal or constant.
func FromGoSources(root string, skip ...string) (Set, error) {
	skipped := map[string]bool{}
	for _, s := range skip {
		skipped[filepath.Clean(s)] = true
	}
	pkgs := map[string][]*ast.File{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			base := d.Name()
			if rel != "." && (skipped[rel] || base == "testdata" || base == "vendor" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.Dir(p)
		pkgs[dir] = append(pkgs[dir], f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := Set{}
	for _, files := range pkgs {
		if err := scanPackage(fset, files, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// funcInfo is a function whose parameters may name a metric.
type funcInfo struct {
	params []string
}

// scope is what a package declares that a metric's name may come from: its
// string constants, its functions (FuncDecls and `name := func(...)`
// literals, by name) and every call in it.
type scope struct {
	consts map[string]string
	funcs  map[string]*funcInfo
	calls  []*ast.CallExpr
}

// collect reads a package's scope.
func collect(files []*ast.File) *scope {
	s := &scope{consts: map[string]string{}, funcs: map[string]*funcInfo{}}
	for _, f := range files {
		for _, decl := range f.Decls {
			if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, spec := range g.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) {
							if v, ok := stringLit(vs.Values[i]); ok {
								s.consts[n.Name] = v
							}
						}
					}
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if n.Recv == nil {
					s.funcs[n.Name.Name] = &funcInfo{params: paramNames(n.Type)}
				}
			case *ast.AssignStmt:
				for i, rhs := range n.Rhs {
					if fl, ok := rhs.(*ast.FuncLit); ok && i < len(n.Lhs) {
						if id, ok := n.Lhs[i].(*ast.Ident); ok {
							s.funcs[id.Name] = &funcInfo{params: paramNames(fl.Type)}
						}
					}
				}
			case *ast.CallExpr:
				s.calls = append(s.calls, n)
			}
			return true
		})
	}
	return s
}

// values resolves e to the strings it can take: a literal, a constant, an
// enclosing function's parameter (through the calls of that function), or a
// BuildFQName call.
func (s *scope) values(e ast.Expr, stack []ast.Node) []string {
	if v, ok := stringLit(e); ok {
		return []string{v}
	}
	switch e := e.(type) {
	case *ast.Ident:
		if v, ok := s.consts[e.Name]; ok {
			return []string{v}
		}
		fname, idx := enclosingParam(stack, e.Name)
		if idx < 0 {
			return nil
		}
		var vs []string
		for _, c := range s.calls {
			if id, ok := c.Fun.(*ast.Ident); ok && id.Name == fname && idx < len(c.Args) {
				vs = append(vs, s.values(c.Args[idx], nil)...)
			}
		}
		return vs
	case *ast.CallExpr:
		if isPromFunc(e.Fun, "BuildFQName") && len(e.Args) == 3 {
			return joinAll(s.values(e.Args[0], stack), s.values(e.Args[1], stack), s.values(e.Args[2], stack))
		}
	}
	return nil
}

// optsNames resolves an Opts literal's Namespace, Subsystem and Name. When
// they are parameters of an enclosing function, each call of that function
// binds them together (no cross product across calls).
func (s *scope) optsNames(fields map[string]ast.Expr, stack []ast.Node) []string {
	keys := []string{"Namespace", "Subsystem", "Name"}
	fname, params := "", []string(nil)
	for _, k := range keys {
		if id, ok := fields[k].(*ast.Ident); ok && s.consts[id.Name] == "" {
			if f, idx := enclosingParam(stack, id.Name); idx >= 0 {
				fname, params = f, s.funcs[f].params
				break
			}
		}
	}
	resolve := func(bind map[string]ast.Expr) []string {
		parts := make([][]string, len(keys))
		for i, k := range keys {
			e, ok := fields[k]
			switch {
			case !ok:
				parts[i] = []string{""}
			case bind != nil && isIdentIn(e, bind):
				parts[i] = s.values(bind[e.(*ast.Ident).Name], nil)
			default:
				parts[i] = s.values(e, stack)
			}
		}
		return joinAll(parts[0], parts[1], parts[2])
	}
	if fname == "" || s.funcs[fname] == nil {
		return resolve(nil)
	}
	var out []string
	for _, c := range s.calls {
		if id, ok := c.Fun.(*ast.Ident); !ok || id.Name != fname {
			continue
		}
		bind := map[string]ast.Expr{}
		for i, p := range params {
			if i < len(c.Args) {
				bind[p] = c.Args[i]
			}
		}
		out = append(out, resolve(bind)...)
	}
	return out
}

func scanPackage(fset *token.FileSet, files []*ast.File, out Set) error {
	s := collect(files)
	for _, f := range files {
		pos := func(n ast.Node) string { p := fset.Position(n.Pos()); return fmt.Sprintf("%s:%d", p.Filename, p.Line) }
		var stack []ast.Node
		ast.Inspect(f, func(n ast.Node) bool {
			if n == nil {
				stack = stack[:len(stack)-1]
				return true
			}
			stack = append(stack, n)
			switch n := n.(type) {
			case *ast.CompositeLit:
				sel, ok := n.Type.(*ast.SelectorExpr)
				if !ok || !isPromPkg(sel.X) {
					return true
				}
				typ, ok := optsTypes[sel.Sel.Name]
				if !ok {
					return true
				}
				fields := map[string]ast.Expr{}
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok {
							fields[k.Name] = kv.Value
						}
					}
				}
				for _, name := range s.optsNames(fields, stack) {
					out[name] = Metric{Name: name, Type: typ, Section: pos(n)}
				}
			case *ast.CallExpr:
				if isPromFunc(n.Fun, "NewDesc") && len(n.Args) > 0 {
					for _, name := range s.values(n.Args[0], stack) {
						if _, dup := out[name]; !dup {
							out[name] = Metric{Name: name, Type: Unknown, Section: pos(n)}
						}
					}
				}
			}
			return true
		})
	}
	return nil
}

// enclosingParam finds the innermost function in stack with a parameter
// called name; it returns the function's name (a FuncDecl's, or the variable
// a FuncLit is assigned to) and the parameter's index, or -1.
func enclosingParam(stack []ast.Node, name string) (string, int) {
	for i := len(stack) - 1; i >= 0; i-- {
		var ft *ast.FuncType
		fname := ""
		switch fn := stack[i].(type) {
		case *ast.FuncDecl:
			ft, fname = fn.Type, fn.Name.Name
		case *ast.FuncLit:
			ft = fn.Type
			if i > 0 {
				if as, ok := stack[i-1].(*ast.AssignStmt); ok {
					for j, rhs := range as.Rhs {
						if rhs == fn && j < len(as.Lhs) {
							if id, ok := as.Lhs[j].(*ast.Ident); ok {
								fname = id.Name
							}
						}
					}
				}
			}
		default:
			continue
		}
		for j, p := range paramNames(ft) {
			if p == name {
				if fname == "" {
					return "", -1
				}
				return fname, j
			}
		}
	}
	return "", -1
}

// labelDoc is a documented label, optionally with its values:
// "`op` = get, scan, begin-txn" or "`code` = OK, Aborted" or "`region`".
var labelDoc = regexp.MustCompile("`([a-z_][a-z0-9_]*)`(\\s*=\\s*([A-Za-z0-9_, -]+))?")

func labelsOf(text string) map[string][]string {
	out := map[string][]string{}
	for _, m := range labelDoc.FindAllStringSubmatch(text, -1) {
		if strings.HasPrefix(m[1], "bellows_") || strings.HasPrefix(m[1], "_") {
			continue
		}
		var vals []string
		for _, v := range strings.Split(m[3], ",") {
			if v = strings.TrimSpace(v); v != "" {
				vals = append(vals, v)
			}
		}
		out[m[1]] = vals
	}
	return out
}

func isIdentIn(e ast.Expr, bind map[string]ast.Expr) bool {
	id, ok := e.(*ast.Ident)
	if !ok {
		return false
	}
	_, ok = bind[id.Name]
	return ok
}

func paramNames(ft *ast.FuncType) []string {
	var out []string
	for _, f := range ft.Params.List {
		if len(f.Names) == 0 {
			out = append(out, "_")
		}
		for _, n := range f.Names {
			out = append(out, n.Name)
		}
	}
	return out
}

// joinAll is prometheus.BuildFQName over every combination.
func joinAll(ns, sub, names []string) []string {
	var out []string
	for _, a := range ns {
		for _, b := range sub {
			for _, c := range names {
				if c == "" {
					continue
				}
				var parts []string
				for _, p := range []string{a, b, c} {
					if p != "" {
						parts = append(parts, p)
					}
				}
				out = append(out, strings.Join(parts, "_"))
			}
		}
	}
	return out
}

func stringLit(e ast.Expr) (string, bool) {
	if bl, ok := e.(*ast.BasicLit); ok && bl.Kind == token.STRING {
		s, err := strconv.Unquote(bl.Value)
		return s, err == nil
	}
	return "", false
}

// isPromPkg reports whether x is the identifier of the prometheus package
// (imported as "prometheus"; promauto's constructors take the same Opts).
func isPromPkg(x ast.Expr) bool {
	id, ok := x.(*ast.Ident)
	return ok && id.Name == "prometheus"
}

func isPromFunc(fun ast.Expr, name string) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == name && isPromPkg(sel.X)
}

var ticked = regexp.MustCompile("`([a-z_:][a-z0-9_:]*)`")

// External begins the heading of the table of docs/interfaces.md that lists
// the metrics of other components the chart's alerts and dashboards read
// (`up`, the kubelet's, controller-runtime's): there, and only there, a
// name need not start with bellows_.
const External = "Exported by others"

// FromInterfacesDoc reads the metric tables of docs/interfaces.md (the
// "## Metrics" section): every `bellows_…` name in a table row's first
// column (any name in the External table), with "/ `_suffix`" shorthands expanded against the row's previous
// name (`bellows_block_cache_hits_total` / `_misses_total` means
// bellows_block_cache_misses_total). Section is the paragraph heading the
// table follows ("Store:", "Compactor:", "Operator (autoscaler), …:").
func FromInterfacesDoc(path string) (Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := Set{}
	inMetrics := false
	section := ""
	var sectionLabels map[string][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "## ") {
			inMetrics = strings.HasPrefix(line, "## Metrics")
			continue
		}
		if !inMetrics {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if line != "" && strings.HasSuffix(line, ":") {
				section = strings.TrimSuffix(line, ":")
				sectionLabels = nil
				if i := strings.Index(section, ","); i >= 0 {
					// "Operator (autoscaler), label `pool` (namespace/name)": a label of every row.
					sectionLabels = labelsOf(section[i+1:])
					section = section[:i]
				}
			}
			continue
		}
		cols := strings.Split(strings.Trim(line, "|"), "|")
		if len(cols) < 2 {
			continue
		}
		typ := Unknown
		for _, t := range []Type{Histogram, Summary, Counter, Gauge} {
			if strings.Contains(cols[1], string(t)) {
				typ = t
				break
			}
		}
		prev := ""
		for _, m := range ticked.FindAllStringSubmatch(cols[0], -1) {
			name := m[1]
			if strings.HasPrefix(name, "_") {
				if prev == "" {
					return nil, fmt.Errorf("%s: shorthand %s without a full name before it: %s", path, name, line)
				}
				segs := strings.Split(prev, "_")
				n := strings.Count(name, "_")
				if n >= len(segs) {
					return nil, fmt.Errorf("%s: shorthand %s longer than %s", path, name, prev)
				}
				name = strings.Join(segs[:len(segs)-n], "_") + name
			} else if !strings.HasPrefix(name, "bellows_") && !strings.HasPrefix(section, External) {
				continue
			}
			prev = name
			lbls := labelsOf(strings.Join(cols[1:], "|"))
			for k, v := range sectionLabels {
				lbls[k] = v
			}
			out[name] = Metric{Name: name, Type: typ, Section: section, Labels: lbls}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no metric tables under \"## Metrics\"", path)
	}
	return out, nil
}
