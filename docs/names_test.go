package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/bellows-kv/bellows/hack/metricnames"
)

// prose is a page without its fenced blocks, and the local blocks' text.
type pageText struct {
	prose, local string
}

func readPage(t *testing.T, page string) pageText {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("guide", page))
	if err != nil {
		t.Fatal(err)
	}
	var p pageText
	var prose, local strings.Builder
	inFence, isLocal := false, false
	for _, l := range strings.Split(string(data), "\n") {
		if m := fence.FindStringSubmatch(l); m != nil {
			if !inFence {
				isLocal = m[1] == "sh" && strings.TrimSpace(m[2]) == "local"
			}
			inFence = !inFence
			continue
		}
		switch {
		case !inFence:
			prose.WriteString(l + "\n")
		case isLocal:
			local.WriteString(l + "\n")
		}
	}
	p.prose, p.local = prose.String(), local.String()
	return p
}

var (
	codeSpan  = regexp.MustCompile("`([^`\n]+)`")
	flagName  = regexp.MustCompile(`(?:^|[\s=(])--([a-z][a-z0-9-]*)`)
	helpFlag  = regexp.MustCompile(`(?m)^\s+(?:-[a-zA-Z], )?--([a-z][a-z0-9-]*)`)
	helpCmd   = regexp.MustCompile(`(?m)^  ([a-z][a-z0-9-]*)\s{2,}\S`)
	metric    = regexp.MustCompile(`bellows_[a-z0-9_]+`)
	labelSet  = regexp.MustCompile(`^\{([^}]*)\}`)
	labelPair = regexp.MustCompile(`^\s*([a-z_]+)\s*=\s*"([^"]*)"\s*$`)
	crdPath   = regexp.MustCompile(`^(?:(KVCluster|CompactionPool)\.)?((?:spec|status)(?:\.[A-Za-z]+)+)$`)
	mdLink    = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
)

// TestGuideNamesExist: every flag, metric (and label), CRD field and link
// the guide names exists.
func TestGuideNamesExist(t *testing.T) {
	flags := bellowsFlags(t)
	docMetrics, err := metricnames.FromInterfacesDoc("interfaces.md")
	if err != nil {
		t.Fatal(err)
	}
	codeMetrics, err := metricnames.FromGoSources("..", "bin", "dist", "tmp", "charts", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	crds := loadCRDs(t)
	checked := map[string]int{}
	for _, page := range pages {
		p := readPage(t, page)
		// Flags: in the prose's code spans and the local commands.
		var flagText []string
		for _, m := range codeSpan.FindAllStringSubmatch(p.prose, -1) {
			flagText = append(flagText, m[1])
		}
		flagText = append(flagText, p.local)
		for _, txt := range flagText {
			for _, m := range flagName.FindAllStringSubmatch(txt, -1) {
				checked["flags"]++
				if !flags[m[1]] {
					t.Errorf("%s: --%s is a flag of no bellows command", page, m[1])
				}
			}
		}
		// Metrics and their labels, anywhere on the page.
		all := p.prose + p.local
		for _, loc := range metric.FindAllStringIndex(all, -1) {
			name := all[loc[0]:loc[1]]
			rest := all[loc[1]:]
			if strings.HasSuffix(name, "_") || strings.HasPrefix(rest, "*") {
				continue // a family, e.g. bellows_autoscaler_*
			}
			checked["metrics"]++
			doc, inDoc := docMetrics.Series(name)
			_, inCode := codeMetrics.Series(name)
			if !inDoc || !inCode {
				t.Errorf("%s: metric %s: in docs/interfaces.md %v, registered in the Go sources %v", page, name, inDoc, inCode)
				continue
			}
			if m := labelSet.FindStringSubmatch(rest); m != nil {
				for _, pair := range strings.Split(m[1], ",") {
					lm := labelPair.FindStringSubmatch(pair)
					if lm == nil {
						t.Errorf("%s: %s{%s}: cannot read the label %q", page, name, m[1], pair)
						continue
					}
					values, ok := doc.Labels[lm[1]]
					if !ok {
						t.Errorf("%s: %s has no label %s (docs/interfaces.md)", page, name, lm[1])
					} else if len(values) > 0 && !slices.Contains(values, lm[2]) {
						t.Errorf("%s: %s{%s=%q}: the label's values are %v (docs/interfaces.md)", page, name, lm[1], lm[2], values)
					}
				}
			}
		}
		// CRD fields, in the prose's code spans.
		for _, m := range codeSpan.FindAllStringSubmatch(p.prose, -1) {
			cm := crdPath.FindStringSubmatch(m[1])
			if cm == nil {
				continue
			}
			checked["CRD fields"]++
			kinds := []string{"KVCluster", "CompactionPool"}
			if cm[1] != "" {
				kinds = []string{cm[1]}
			}
			if !slices.ContainsFunc(kinds, func(k string) bool { return hasField(crds[k], cm[2]) }) {
				t.Errorf("%s: %s is a field of no %v", page, m[1], kinds)
			}
		}
		// Links.
		for _, m := range mdLink.FindAllStringSubmatch(p.prose, -1) {
			target := m[1]
			if strings.Contains(target, "://") {
				continue
			}
			checked["links"]++
			file, frag, _ := strings.Cut(target, "#")
			path := filepath.Join("guide", page)
			if file != "" {
				// Relative to the page's own directory (the README's is the root).
				path = filepath.Join(filepath.Dir(filepath.Join("guide", page)), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %s: %v", page, target, err)
				continue
			}
			if frag != "" && !slices.Contains(anchors(t, path), frag) {
				t.Errorf("%s: link %s: %s has no heading with the anchor #%s (it has %v)", page, target, path, frag, anchors(t, path))
			}
		}
	}
	for _, what := range []string{"flags", "metrics", "CRD fields", "links"} {
		if checked[what] == 0 {
			t.Errorf("checked no %s: is the test still reading the guide?", what)
		}
	}
	t.Logf("checked %v", checked)
}

// bellowsFlags are the flags of every bellows command, from their --help.
func bellowsFlags(t *testing.T) map[string]bool {
	t.Helper()
	bin := buildBellows(t)
	dir := t.TempDir()
	flags := map[string]bool{}
	queue := [][]string{nil}
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		out, code := runCommand(t, dir, bin, append(append([]string(nil), path...), "--help"))
		if code != 0 {
			t.Fatalf("bellows %s --help: exit %d\n%s", strings.Join(path, " "), code, out)
		}
		for _, m := range helpFlag.FindAllStringSubmatch(out, -1) {
			flags[m[1]] = true
		}
		if _, cmds, ok := strings.Cut(out, "Available Commands:\n"); ok {
			cmds, _, _ = strings.Cut(cmds, "\n\n")
			for _, m := range helpCmd.FindAllStringSubmatch(cmds, -1) {
				if m[1] != "help" && m[1] != "completion" {
					queue = append(queue, append(append([]string(nil), path...), m[1]))
				}
			}
		}
	}
	if !flags["addr"] || !flags["regions"] {
		t.Fatalf("did not read the flags of bellows' commands: %v", flags)
	}
	return flags
}

// loadCRDs reads config/crd/bases by kind.
func loadCRDs(t *testing.T) map[string]*apiextensionsv1.JSONSchemaProps {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs: %v", err)
	}
	out := map[string]*apiextensionsv1.JSONSchemaProps{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatal(err)
		}
		out[crd.Spec.Names.Kind] = crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	}
	return out
}

// hasField reports whether the schema has the dotted path.
func hasField(s *apiextensionsv1.JSONSchemaProps, path string) bool {
	for _, part := range strings.Split(path, ".") {
		if s == nil {
			return false
		}
		for s.Type == "array" && s.Items != nil && s.Items.Schema != nil {
			s = s.Items.Schema
		}
		p, ok := s.Properties[part]
		if !ok {
			return false
		}
		s = &p
	}
	return s != nil
}

// anchors are the ids GitHub gives the headings of a Markdown file.
func anchors(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	seen := map[string]int{}
	inFence := false
	for _, l := range strings.Split(string(data), "\n") {
		if fence.MatchString(l) {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(l, "#"))
		text = mdLink.ReplaceAllStringFunc(text, func(s string) string { return s[1:strings.Index(s, "]")] })
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		id := b.String()
		if n := seen[id]; n > 0 {
			seen[id]++
			id = id + "-" + string(rune('0'+n))
		} else {
			seen[id] = 1
		}
		out = append(out, id)
	}
	return out
}
