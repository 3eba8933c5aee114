package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// clusterEquivalents are arguments of the guide that the end-to-end suite
// writes differently, and why.
var clusterEquivalents = map[string]string{
	// The suite applies the samples through e2e/overlay, which is
	// config/samples with the local cluster's values (its kustomization
	// lists ../../config/samples as a resource; checked below).
	"config/samples": "e2e/overlay",
}

// freeValueFlags take a value the reader chooses: the guide's value need
// not be the suite's.
var freeValueFlags = map[string]bool{"--namespace": true}

// flagAliases are short flags the guide may write for the suite's long ones.
var flagAliases = map[string]string{"-n": "--namespace", "-o": "--output"}

// notRunByE2E are the guide's cluster commands the end-to-end suite does not
// run yet, each with why it is in the guide anyway. Their arguments are
// still checked. Shrink this list by adding the command to e2e/.
var notRunByE2E = map[string]string{}

// suiteCommand is one kubectl or helm invocation in e2e/*.go; each argument
// is a pattern, since some are computed (a constant resolves to its value,
// anything else matches any text).
type suiteCommand struct {
	tool string
	args []*regexp.Regexp
	lits []string // each argument's value when it is known exactly, else ""
	pos  string
}

func (s suiteCommand) String() string {
	var a []string
	for _, r := range s.args {
		a = append(a, strings.TrimSuffix(strings.TrimPrefix(r.String(), "^"), "$"))
	}
	return fmt.Sprintf("%s %s (%s)", s.tool, strings.Join(a, " "), s.pos)
}

// suiteCommands reads the kubectl and helm commands of the end-to-end suite:
// calls whose arguments start with the string literal "kubectl" or "helm"
// (e.run(t, "kubectl", …), e.try("helm", …)).
func suiteCommands(t *testing.T) []suiteCommand {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("..", "e2e", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no e2e/*.go: %v", err)
	}
	consts := map[string]string{}
	var parsed []*ast.File
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, af)
		for _, d := range af.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[n.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
	}
	// A loop variable over a literal list of strings takes those values
	// (for _, crd := range []string{"a", "b"}).
	alts := map[string][]string{}
	for _, af := range parsed {
		ast.Inspect(af, func(n ast.Node) bool {
			r, ok := n.(*ast.RangeStmt)
			if !ok {
				return true
			}
			v, ok1 := r.Value.(*ast.Ident)
			lit, ok2 := r.X.(*ast.CompositeLit)
			if !ok1 || !ok2 {
				return true
			}
			var vals []string
			for _, e := range lit.Elts {
				s, ok := literal(e, consts)
				if !ok {
					return true
				}
				vals = append(vals, s)
			}
			alts[v.Name] = append(alts[v.Name], vals...)
			return true
		})
	}
	var out []suiteCommand
	for _, af := range parsed {
		ast.Inspect(af, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			for i, a := range call.Args {
				lit, ok := a.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				tool, _ := strconv.Unquote(lit.Value)
				if tool != "kubectl" && tool != "helm" {
					break
				}
				c := suiteCommand{tool: tool, pos: fset.Position(call.Pos()).String()}
				for _, arg := range call.Args[i+1:] {
					// An argument nothing is known of matches nothing:
					// it would otherwise match any argument of the guide.
					p := pattern(arg, consts, alts)
					if p == ".*" {
						p = `\x00unknown\x00`
					}
					lit := ""
					if l, ok := literal(arg, consts); ok {
						lit = l
					}
					if long, ok := flagAliases[lit]; ok {
						lit, p = long, regexp.QuoteMeta(long)
					}
					c.args = append(c.args, regexp.MustCompile("^"+p+"$"))
					c.lits = append(c.lits, lit)
				}
				out = append(out, c)
				break
			}
			return true
		})
	}
	if len(out) == 0 {
		t.Fatal("found no kubectl or helm command in e2e/*.go")
	}
	return out
}

// literal is expr's value when it is a string literal or constant.
func literal(expr ast.Expr, consts map[string]string) (string, bool) {
	switch e := expr.(type) {
	case *ast.BasicLit:
		s, err := strconv.Unquote(e.Value)
		return s, err == nil && e.Kind == token.STRING
	case *ast.Ident:
		v, ok := consts[e.Name]
		return v, ok
	}
	return "", false
}

var sprintfVerb = regexp.MustCompile(`%[-+# 0-9.]*[a-zA-Z]`)

// pattern is a regular expression for the values expr can have: exact for
// literals and constants, the alternatives of a loop variable over a literal
// list, .* for what is computed.
func pattern(expr ast.Expr, consts map[string]string, alts map[string][]string) string {
	switch e := expr.(type) {
	case *ast.BasicLit:
		if s, err := strconv.Unquote(e.Value); err == nil && e.Kind == token.STRING {
			return regexp.QuoteMeta(s)
		}
	case *ast.Ident:
		if v, ok := consts[e.Name]; ok {
			return regexp.QuoteMeta(v)
		}
		if vs, ok := alts[e.Name]; ok {
			q := make([]string, len(vs))
			for i, v := range vs {
				q[i] = regexp.QuoteMeta(v)
			}
			return "(?:" + strings.Join(q, "|") + ")"
		}
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			return pattern(e.X, consts, alts) + pattern(e.Y, consts, alts)
		}
	case *ast.CallExpr:
		if sel, ok := e.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Sprintf" && len(e.Args) > 0 {
			if lit, ok := e.Args[0].(*ast.BasicLit); ok {
				f, _ := strconv.Unquote(lit.Value)
				parts := sprintfVerb.Split(f, -1)
				for i := range parts {
					parts[i] = regexp.QuoteMeta(parts[i])
				}
				return strings.Join(parts, ".*")
			}
		}
	}
	return ".*"
}

// TestGuideClusterCommandsAreRunByE2E: each cluster command of the guide is
// one the end-to-end suite runs (see the package comment).
func TestGuideClusterCommandsAreRunByE2E(t *testing.T) {
	suite := suiteCommands(t)
	scripts := scriptMakeCommands(t)
	checkOverlayIsTheSamples(t)
	values := chartValues(t)
	used := map[string]bool{}
	n := 0
	for _, page := range pages {
		for _, b := range readBlocks(t, page) {
			if b.mark != "cluster" {
				continue
			}
			for _, c := range b.commands(t) {
				n++
				checkClusterArgs(t, c, values)
				key := strings.Join(c.words, " ")
				if why, ok := notRunByE2E[key]; ok {
					used[key] = true
					t.Logf("%s: not run by the end-to-end suite (%s); arguments checked only", c, why)
					continue
				}
				switch c.words[0] {
				case "kubectl", "helm":
					if !slices.ContainsFunc(suite, func(s suiteCommand) bool { return runs(s, c.words) }) {
						t.Errorf("%s: the end-to-end suite runs no such %s command. Write the guide's command as e2e/*.go runs it, or add it to the suite. The suite's %s commands:\n%s",
							c, c.words[0], c.words[0], listTool(suite, c.words[0]))
					}
				case "make":
					if err := scripts.runs(c.words[1:]); err != nil {
						t.Errorf("%s: %v", c, err)
					}
				default:
					t.Errorf("%s: a cluster block may hold kubectl, helm and make commands", c)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("the guide has no cluster command")
	}
	for key := range notRunByE2E {
		if !used[key] {
			t.Errorf("notRunByE2E lists %q, which the guide no longer has: remove it", key)
		}
	}
}

func listTool(suite []suiteCommand, tool string) string {
	var b strings.Builder
	for _, s := range suite {
		if s.tool == tool {
			fmt.Fprintf(&b, "\t%s\n", s)
		}
	}
	return b.String()
}

// runs reports whether suite command s runs the guide's command words: the
// same tool and subcommand, and each further argument of the guide's one of
// s's (comma-separated lists: a subset of one of s's).
func runs(s suiteCommand, words []string) bool {
	if s.tool != words[0] || len(words) < 2 || len(s.args) == 0 || !s.args[0].MatchString(words[1]) {
		return false
	}
	has := func(w string) bool {
		for _, a := range s.args[1:] {
			if a.MatchString(w) {
				return true
			}
		}
		if strings.Contains(w, ",") && !strings.HasPrefix(w, "-") && !strings.Contains(w, "=") {
			for _, lit := range s.lits[1:] {
				if !strings.Contains(lit, ",") {
					continue
				}
				set := strings.Split(lit, ",")
				if !slices.ContainsFunc(strings.Split(w, ","), func(x string) bool { return !slices.Contains(set, x) }) {
					return true
				}
			}
		}
		return false
	}
	for i := 2; i < len(words); i++ {
		w := words[i]
		if long, ok := flagAliases[w]; ok {
			w = long
		}
		if eq, ok := clusterEquivalents[w]; ok {
			w = eq
		}
		if freeValueFlags[w] {
			if !has(w) {
				return false
			}
			i++ // the value is the reader's
			continue
		}
		if !has(w) {
			return false
		}
	}
	return true
}

// checkOverlayIsTheSamples: e2e/overlay applies config/samples (what
// clusterEquivalents relies on).
func checkOverlayIsTheSamples(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "e2e", "overlay", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(k.Resources, "../../config/samples") {
		t.Fatalf("e2e/overlay no longer builds on config/samples (resources %v): the guide's `-k config/samples` is not what the suite applies", k.Resources)
	}
}

// chartValues is charts/bellows/values.yaml.
func chartValues(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "charts", "bellows", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// checkClusterArgs: the files a command names exist, and the values it sets
// are the chart's.
func checkClusterArgs(t *testing.T, c command, values map[string]any) {
	t.Helper()
	for i := 1; i < len(c.words); i++ {
		w := c.words[i]
		switch {
		case (w == "-k" || w == "-f") && i+1 < len(c.words):
			if _, err := os.Stat(filepath.Join("..", c.words[i+1])); err != nil {
				t.Errorf("%s: %s %s: %v", c, w, c.words[i+1], err)
			}
		case c.words[0] == "helm" && w == "--set" && i+1 < len(c.words):
			key, _, _ := strings.Cut(c.words[i+1], "=")
			var cur any = values
			for _, part := range strings.Split(key, ".") {
				m, ok := cur.(map[string]any)
				if !ok {
					cur = nil
					break
				}
				cur, ok = m[part]
				if !ok {
					cur = nil
					break
				}
			}
			if cur == nil {
				t.Errorf("%s: --set %s: charts/bellows/values.yaml has no %s", c, c.words[i+1], key)
			}
		case c.words[0] == "helm" && strings.HasPrefix(w, "charts/"):
			if _, err := os.Stat(filepath.Join("..", w, "Chart.yaml")); err != nil {
				t.Errorf("%s: %s is not a chart: %v", c, w, err)
			}
		}
	}
}

// makeCommands are the make invocations of the suite's scripts: per line,
// its targets and the variables it sets.
type makeCommands []struct {
	targets, vars []string
	pos           string
}

func scriptMakeCommands(t *testing.T) makeCommands {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("..", "hack", "cluster-*.sh"))
	files = append(files, filepath.Join("..", "hack", "e2e.sh"), filepath.Join("..", ".ci", "run"))
	return readMakeCommands(t, files)
}

// ciMakeCommands are the make invocations of CI's entry point alone.
func ciMakeCommands(t *testing.T) makeCommands {
	t.Helper()
	return readMakeCommands(t, []string{filepath.Join("..", ".ci", "run")})
}

func readMakeCommands(t *testing.T, files []string) makeCommands {
	t.Helper()
	var out makeCommands
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(string(data), "\n") {
			fields := strings.Fields(l)
			if len(fields) == 0 || fields[0] != "make" {
				continue
			}
			var m struct {
				targets, vars []string
				pos           string
			}
			m.pos = fmt.Sprintf("%s:%d", filepath.Base(f), i+1)
			for _, w := range fields[1:] {
				switch {
				case strings.HasPrefix(w, "-"), strings.HasPrefix(w, ">"), strings.HasPrefix(w, "2>"):
				case strings.Contains(w, "="):
					name, _, _ := strings.Cut(w, "=")
					m.vars = append(m.vars, name)
				default:
					m.targets = append(m.targets, w)
				}
			}
			out = append(out, m)
		}
	}
	return out
}

func (ms makeCommands) runs(args []string) error {
	var targets, vars []string
	for _, a := range args {
		if name, _, ok := strings.Cut(a, "="); ok {
			vars = append(vars, name)
		} else {
			targets = append(targets, a)
		}
	}
	for _, m := range ms {
		if !slices.ContainsFunc(targets, func(x string) bool { return !slices.Contains(m.targets, x) }) &&
			!slices.ContainsFunc(vars, func(x string) bool { return !slices.Contains(m.vars, x) }) {
			return nil
		}
	}
	return fmt.Errorf("no script of CI or the end-to-end suite (.ci/run, hack/e2e.sh, hack/cluster-*.sh) runs make with targets %v and variables %v", targets, vars)
}
