package docs

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// The tree speaks of what the project is: its design, its goals and what
// was measured (a report says its command, date and commit). It does not
// speak of how the work was organised: numbered work steps ("stop 49's
// run"), who did it ("another engineer", "I did not trace why"), where one
// machine kept its files (/tmp/…). The rules below find such words in every
// tracked file's name and in every tracked text file; history lives in git.

// processRule is one kind of word the tree must not hold.
type processRule struct {
	name string
	re   *regexp.Regexp
	// in says which files the rule reads (nil: every text file).
	in func(file string) bool
	// allowed are the files where the words have a technical meaning.
	allowed func(file string) bool
}

// isProse is the prose the first-person rule reads: the top-level pages of
// README.md and docs/, and the benchmark reports.
func isProse(file string) bool {
	dir, base := path.Split(file)
	return path.Ext(base) == ".md" && (dir == "" || dir == "docs/" || dir == "bench/results/")
}

func isMarkdown(file string) bool { return path.Ext(file) == ".md" }

// technicalSession are the files where "session" is the compaction
// protocol's: one incarnation of a store process, announced to the workers
// so that they free what its earlier incarnations kept (the `session` field
// of CompactRequest and AnnounceRequest); a process session (setsid); and
// YCSB's own description of workload A.
func technicalSession(file string) bool {
	for _, p := range []string{
		"proto/bellows/compaction/",
		"storage-engine/compactor/",
		"storage-engine/offload/",
		"test/process/keptoutput_test.go",
		"docs/architecture.md",
		"docs/reference/grpc.md",
		"hack/cluster-up.sh",
		"bench/ycsb/workloads/",
	} {
		if strings.HasPrefix(file, p) {
			return true
		}
	}
	return false
}

var processRules = []processRule{
	{name: "a numbered work step", re: regexp.MustCompile(`(?i)\bstops? \d+|\bstop\d+`)},
	{name: "a work step", re: regexp.MustCompile(`(?i)\b(this|an earlier|a later|the previous|the next) stop\b`)},
	{name: "who did the work", re: regexp.MustCompile(`(?i)\b(another|other|earlier|previous) engineers?\b`)},
	{name: "a work session", re: regexp.MustCompile(`(?i)\bsessions?\b`), allowed: technicalSession},
	{name: "first person", re: regexp.MustCompile(`(^|[\s(])I('m|'ve|'d|'ll)?[\s,.;:)]|\b[Mm]y |\b[Ww]e('ve|'re)?\b|\b[Oo]ur\b`), in: isProse},
	{name: "one machine's /tmp path", re: regexp.MustCompile(`/tmp/`), in: isMarkdown},
}

// nameRule finds a work step in a file's name.
var nameRule = regexp.MustCompile(`(?i)stops?[-_ ]?\d+`)

// processWordHits are the lines of file's text that break a rule, as
// "file:line: rule: text".
func processWordHits(file, text string) []string {
	var hits []string
	for i, l := range strings.Split(text, "\n") {
		for _, r := range processRules {
			if (r.in != nil && !r.in(file)) || (r.allowed != nil && r.allowed(file)) {
				continue
			}
			if m := r.re.FindString(l); m != "" {
				hits = append(hits, fmt.Sprintf("%s:%d: %s (%q): %s", file, i+1, r.name, strings.TrimSpace(m), excerpt(l, m)))
			}
		}
	}
	return hits
}

// processNameHit says what is wrong with file's name, or "".
func processNameHit(file string) string {
	if m := nameRule.FindString(file); m != "" {
		return fmt.Sprintf("%s: a work step in the file's name (%q)", file, m)
	}
	return ""
}

// excerpt is up to 60 characters of l either side of m.
func excerpt(l, m string) string {
	i := strings.Index(l, m)
	lo, hi := max(0, i-60), min(len(l), i+len(m)+60)
	for lo > 0 && !utf8.RuneStart(l[lo]) {
		lo--
	}
	for hi < len(l) && !utf8.RuneStart(l[hi]) {
		hi++
	}
	return strings.TrimSpace(l[lo:hi])
}

// trackedFiles are the repository's files (git ls-files), relative to its
// root, which is "..".
func trackedFiles(t *testing.T) []string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	return files
}

// TestProcessWords: no tracked file's name or text speaks of how the work
// was done (see processRules). Binary files and go.sum are not read, nor
// this file, which holds the rules.
func TestProcessWords(t *testing.T) {
	files := trackedFiles(t)
	read := 0
	for _, f := range files {
		if h := processNameHit(f); h != "" {
			t.Error(h)
		}
		if f == "go.sum" || f == "docs/processwords_test.go" {
			continue
		}
		data, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(f)))
		if err != nil {
			continue // deleted in the work tree, or a directory (a submodule)
		}
		if bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(data) {
			continue // binary
		}
		read++
		for _, h := range processWordHits(f, string(data)) {
			t.Error(h)
		}
	}
	if read < 100 {
		t.Fatalf("read only %d text files of %d tracked: is the walk still right?", read, len(files))
	}
}

// TestProcessWordsMatcher: the rules find what they are for, and leave the
// technical words alone.
func TestProcessWordsMatcher(t *testing.T) {
	for _, c := range []struct {
		file, text string
		hit        bool
	}{
		{"docs/x.md", "as measured in stop 12, the scan", true},
		{"bench/memstore/report.go", `"(docs/memstore.md, Stop 12's run)"`, true},
		{"storage-engine/x.go", "// stops 50 and 51 found it", true},
		{"docs/x.md", "see memstore-stop41.md", true},
		{"docs/x.md", "Measured in an earlier stop, before", true},
		{"cmd/bellows-bench/ycsb.go", "shared with another engineer's builds", true},
		{"docs/x.md", "before and after in one session", true},
		{"docs/x.md", "I have no cause for it", true},
		{"bench/results/x.md", "so I've kept it", true},
		{"README.md", "and we can move to that later", true},
		{"docs/x.md", "`bellows-bench memstore --out /tmp/ms46`", true},
		// Technical words.
		{"storage-engine/compactor/worker.go", "// a job from a new session releases", false},
		{"docs/x.md", "the writer stops the reader", false},
		{"docs/x.md", "a stop-the-world pause", false},
		{"storage-engine/region/x.go", "// the flush that stops writes", false},
		{"docs/x.md", "`--region-owner=I/3`, I/O bound", false},
		{"docs/guide/x.md", "we recommend", false},
		{"hack/x.sh", `dir=$(mktemp -d /tmp/bellows.XXXX)`, false},
		{"docs/x.md", "a dummy value", false},
	} {
		got := processWordHits(c.file, c.text)
		if (len(got) > 0) != c.hit {
			t.Errorf("%s: %q: hits %q, want a hit: %v", c.file, c.text, got, c.hit)
		}
	}
	for _, c := range []struct {
		file string
		hit  bool
	}{
		{"bench/results/memstore-stop12.md", true},
		{"bench/results/phases-control-60k-stop48.json", true},
		{"bench/results/phases-aa-60k.md", false},
		{"storage-engine/server/stop.go", false},
	} {
		if got := processNameHit(c.file); (got != "") != c.hit {
			t.Errorf("name %s: %q, want a hit: %v", c.file, got, c.hit)
		}
	}
}

// TestMarkdownLinksResolve: every relative link of a tracked markdown page
// names a file or directory of the tree, and its #anchor a heading (or an
// <a name>) of the page it names.
func TestMarkdownLinksResolve(t *testing.T) {
	files := trackedFiles(t)
	tracked := map[string]bool{}
	for _, f := range files {
		tracked[f] = true
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			tracked[d] = true
		}
	}
	anchors := map[string][]string{}
	anchorsOf := func(page string) []string {
		if a, ok := anchors[page]; ok {
			return a
		}
		data, _ := os.ReadFile(filepath.Join("..", filepath.FromSlash(page)))
		anchors[page] = markdownAnchors(string(data))
		return anchors[page]
	}
	for _, page := range files {
		if !isMarkdown(page) {
			continue
		}
		data, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(page)))
		if err != nil {
			continue
		}
		for _, l := range markdownLinks(string(data)) {
			target, anchor, _ := strings.Cut(l.target, "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file := page
			if target != "" {
				file = path.Clean(path.Join(path.Dir(page), target))
				if _, err := os.Stat(filepath.Join("..", filepath.FromSlash(file))); err != nil && !tracked[file] {
					t.Errorf("%s:%d: link to %s: no such file", page, l.line, l.target)
					continue
				}
			}
			if anchor != "" && isMarkdown(file) && !slices.Contains(anchorsOf(file), anchor) {
				t.Errorf("%s:%d: link to %s: %s has no heading #%s", page, l.line, l.target, file, anchor)
			}
		}
	}
}

type markdownLink struct {
	line   int
	target string
}

var inlineCode = regexp.MustCompile("`[^`\n]*`")

// markdownLinks are text's [text](target) links outside code.
func markdownLinks(text string) []markdownLink {
	var links []markdownLink
	inFence := false
	for i, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(l, ""), -1) {
			links = append(links, markdownLink{i + 1, m[1]})
		}
	}
	return links
}

var (
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	nameAnchor = regexp.MustCompile(`<a (?:name|id)="([^"]+)"`)
	slugDrop   = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// markdownAnchors are the anchors GitHub gives text's headings (lower
// case, punctuation dropped, spaces as hyphens, -1, -2… on repeats), and its
// <a name> tags.
func markdownAnchors(text string) []string {
	var out []string
	seen := map[string]int{}
	inFence := false
	for _, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			inFence = !inFence
			continue
		}
		for _, m := range nameAnchor.FindAllStringSubmatch(l, -1) {
			out = append(out, m[1])
		}
		m := heading.FindStringSubmatch(l)
		if inFence || m == nil {
			continue
		}
		s := inlineCodeTicks.Replace(m[1])
		s = strings.ReplaceAll(slugDrop.ReplaceAllString(strings.ToLower(s), ""), " ", "-")
		if n := seen[s]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", s, n))
		} else {
			out = append(out, s)
		}
		seen[s]++
	}
	return out
}

var inlineCodeTicks = strings.NewReplacer("`", "")
