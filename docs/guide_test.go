// Package docs tests the user guide, docs/guide/*.md, and the README by the
// same rules, so that they cannot rot:
// every command in it is run, or checked against what the end-to-end suite
// runs, and every flag, metric, CRD field and link it names must exist.
//
// How the guide is written for this:
//
//   - Every shell block is fenced ```sh local or ```sh cluster (GitHub
//     highlights by the first word, so readers see plain shell). A sh, bash,
//     shell or console block without one of the two marks fails the test.
//   - A line is one command; a trailing \ continues it on the next line;
//     lines that are only a comment are ignored. No pipes, redirections,
//     variables or command substitution: the test does not run a shell.
//   - Local blocks (TestGuideLocalCommands) hold `make run [RUN_ARGS='…']`,
//     `bin/bellows local …` and `bin/bellows …` commands, and make targets
//     that CI's entry point (.ci/run) runs, such as `make test`, which are CI
//     itself and are only checked to be in it. The
//     test builds bellows into a temporary directory and runs each page's
//     commands in order, each page in a directory of its own:
//     `make run` and `bin/bellows local` (re)start a real `bellows local`
//     (one store and its compactors as processes) in the background, as a
//     reader runs it in another terminal; every other command runs to
//     completion. Where the test's run differs from a reader's, it checks
//     that the difference does not show: `make run` is run as `bin/bellows
//     local` (the Makefile's run target must be exactly that); the store
//     listens on a free port, and each `bellows kv` and `bellows backup
//     create` command gets --addr with it (`local --listen`, `kv --addr`
//     and `backup create --addr` must all default to
//     127.0.0.1:7400, which replaces the real address in the output
//     compared); a relative --data-dir DIR is placed in the page's
//     directory.
//   - In a local block a trailing comment is the expected output: the
//     command's output (stdout and stderr, runs of white space read as one
//     space) must contain it; `…` separates pieces that must appear in that
//     order with anything between them. `# exit N: text` expects exit status
//     N and text.
//   - Cluster blocks need a Kubernetes cluster, which only the end-to-end
//     suite has (`make e2e`, e2e/*.go, build tag e2e). So the guide shows the
//     commands that suite runs, and TestGuideClusterCommandsAreRunByE2E reads
//     e2e/*.go (parsing the Go, not running it) and checks that each cluster
//     command of the guide is one the suite runs: the same tool and
//     subcommand, and every argument of the guide's among the suite's
//     arguments for that command, with the differences listed in
//     clusterEquivalents and freeValueFlags. `make TARGET` commands must be
//     run by the suite's scripts (hack/e2e.sh, hack/cluster-*.sh). A cluster
//     command the suite does not run must be in notRunByE2E with the reason;
//     its arguments are still checked (paths exist, --set keys are chart
//     values). A trailing comment in a cluster block is a note.
//   - TestGuideNamesExist: every `--flag` in the prose's code spans and the
//     local blocks is a flag of some bellows command, every
//     bellows_* metric and label exists (the Go sources and
//     docs/interfaces.md), every `spec.…`/`status.…` field is in a CRD, and
//     every relative link and its #anchor resolve. TestGuidePagesAreListed:
//     every page of docs/guide is in pages, so none escapes the tests.
package docs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// guidePages are the guide in reading order.
var guidePages = []string{"getting-started.md", "concepts.md", "settings.md", "operations.md", "autoscaling.md"}

// readme is the repository's README, relative to docs/guide: its commands
// are held to the guide's rules, so the front door cannot rot either.
const readme = "../../README.md"

// pages are every page whose commands and names the tests check.
var pages = append(slices.Clone(guidePages), readme)

const defaultStoreAddr = "127.0.0.1:7400"

func TestGuidePagesAreListed(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("guide", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !slices.Contains(guidePages, filepath.Base(f)) {
			t.Errorf("docs/guide/%s is not in pages: its commands would never run", filepath.Base(f))
		}
	}
	for _, p := range guidePages {
		if !slices.Contains(files, filepath.Join("guide", p)) {
			t.Errorf("pages lists %s, which docs/guide does not have", p)
		}
	}
}

// block is one fenced shell block of a page.
type block struct {
	page  string
	line  int    // of the opening fence
	mark  string // local or cluster
	lines []string
	first int // line number of lines[0]
}

// command is one command of a block.
type command struct {
	page    string
	line    int
	mark    string
	words   []string
	comment string // the trailing comment, without #
	text    string // as written, for messages
}

func (c command) String() string { return fmt.Sprintf("%s:%d: %s", c.page, c.line, c.text) }

var fence = regexp.MustCompile("^\\s*```+\\s*([A-Za-z0-9_-]*)\\s*(.*)$")

// readBlocks returns the shell blocks of page; unmarked shell blocks are errors.
func readBlocks(t *testing.T, page string) []block {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("guide", page))
	if err != nil {
		t.Fatal(err)
	}
	var out []block
	var cur *block
	inFence := false
	for i, l := range strings.Split(string(data), "\n") {
		m := fence.FindStringSubmatch(l)
		if m == nil {
			if cur != nil {
				cur.lines = append(cur.lines, l)
			}
			continue
		}
		if inFence {
			inFence = false
			if cur != nil {
				out = append(out, *cur)
				cur = nil
			}
			continue
		}
		inFence = true
		switch lang, mark := m[1], strings.TrimSpace(m[2]); lang {
		case "sh", "bash", "shell", "console":
			if lang != "sh" || (mark != "local" && mark != "cluster") {
				t.Errorf("%s:%d: a shell block must be fenced ```sh local or ```sh cluster, got %q", page, i+1, strings.TrimSpace(l))
				continue
			}
			cur = &block{page: page, line: i + 1, mark: mark, first: i + 2}
		}
	}
	if inFence {
		t.Errorf("%s: unterminated code fence", page)
	}
	return out
}

// commands splits a block into commands.
func (b block) commands(t *testing.T) []command {
	t.Helper()
	var out []command
	var joined strings.Builder
	start := 0
	for i, l := range b.lines {
		if joined.Len() == 0 {
			start = b.first + i
			if s := strings.TrimSpace(l); s == "" || strings.HasPrefix(s, "#") {
				continue
			}
		}
		if s, ok := strings.CutSuffix(strings.TrimRight(l, " \t"), `\`); ok {
			joined.WriteString(s + " ")
			continue
		}
		joined.WriteString(l)
		text := strings.TrimSpace(joined.String())
		joined.Reset()
		words, comment, err := splitWords(text)
		if err != nil {
			t.Errorf("%s:%d: %v: %s", b.page, start, err, text)
			continue
		}
		out = append(out, command{page: b.page, line: start, mark: b.mark, words: words, comment: comment, text: strings.Join(strings.Fields(text), " ")})
	}
	if joined.Len() > 0 {
		t.Errorf("%s:%d: the block ends in a continuation line", b.page, start)
	}
	return out
}

// splitWords splits a command line as a POSIX shell would split words with
// quotes (no expansion), and returns the trailing comment. What would make a
// shell do more than run one command is refused.
func splitWords(s string) (words []string, comment string, err error) {
	var cur strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
		case c == '#' && !inWord:
			return words, strings.TrimSpace(s[i+1:]), nil
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, "", errors.New("unterminated '")
			}
			cur.WriteString(s[i+1 : i+1+end])
			inWord = true
			i += end + 1
		case c == '"':
			inWord = true
			for i++; ; i++ {
				if i >= len(s) {
					return nil, "", errors.New(`unterminated "`)
				}
				if s[i] == '"' {
					break
				}
				if strings.IndexByte("$`", s[i]) >= 0 {
					return nil, "", fmt.Errorf("%q inside double quotes: the test runs no shell", s[i])
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
		case c == '\\':
			if i+1 < len(s) {
				i++
				cur.WriteByte(s[i])
				inWord = true
			}
		case strings.IndexByte("|&;<>()$`*?[]{}~", c) >= 0:
			return nil, "", fmt.Errorf("%q: the test runs no shell; write one plain command", c)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return words, "", nil
}

// expectation is what a local command's comment asks for.
type expectation struct {
	exit   int
	pieces []string
}

func parseExpectation(comment string) (expectation, error) {
	var e expectation
	if rest, ok := strings.CutPrefix(comment, "exit "); ok {
		n, text, found := strings.Cut(rest, ":")
		if !found {
			return e, fmt.Errorf("%q: write `exit N: output`", comment)
		}
		if _, err := fmt.Sscanf(n, "%d", &e.exit); err != nil || e.exit == 0 {
			return e, fmt.Errorf("%q: exit status %q is not a non-zero number", comment, n)
		}
		comment = text
	}
	for _, p := range strings.Split(comment, "…") {
		if p = collapse(p); p != "" {
			e.pieces = append(e.pieces, p)
		}
	}
	return e, nil
}

func collapse(s string) string { return strings.Join(strings.Fields(s), " ") }

// check reports whether out holds e's pieces in order.
func (e expectation) check(out string) error {
	rest := collapse(out)
	for _, p := range e.pieces {
		i := strings.Index(rest, p)
		if i < 0 {
			return fmt.Errorf("output lacks %q (in order after the previous pieces)", p)
		}
		rest = rest[i+len(p):]
	}
	return nil
}

// bellowsBinary builds cmd/bellows once per test binary, into binDir.
var (
	binDir        string
	bellowsBinary = sync.OnceValues(func() (string, error) {
		dir, err := os.MkdirTemp("", "bellows-guide-test")
		if err != nil {
			return "", err
		}
		binDir = dir
		bin := filepath.Join(dir, "bellows")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/bellows")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build ./cmd/bellows: %v\n%s", err, out)
		}
		return bin, nil
	})
)

func buildBellows(t *testing.T) string {
	t.Helper()
	bin, err := bellowsBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestMain removes the binary after the tests that built it.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// TestGuideLocalCommands runs every command of the local blocks against real
// bellows processes (see the package comment).
func TestGuideLocalCommands(t *testing.T) {
	bin := buildBellows(t)
	checkLocalAssumptions(t, bin)
	ran := 0
	for _, page := range pages {
		t.Run(strings.TrimSuffix(filepath.Base(page), ".md"), func(t *testing.T) {
			dir := t.TempDir()
			var srv *localServer
			defer func() {
				if srv != nil {
					srv.stop(t)
				}
			}()
			for _, b := range readBlocks(t, page) {
				if b.mark != "local" {
					continue
				}
				for _, c := range b.commands(t) {
					ran++
					want, err := parseExpectation(c.comment)
					if err != nil {
						t.Errorf("%s: %v", c, err)
						continue
					}
					if len(c.words) >= 2 && c.words[0] == "make" && c.words[1] != "run" {
						// Another make target (`make test`) is CI itself, of
						// which this test is a part: check that CI runs it.
						if err := ciMakeCommands(t).runs(c.words[1:]); err != nil {
							t.Errorf("%s: %v", c, err)
						}
						continue
					}
					if args, ok := serverArgs(t, c); ok {
						if srv != nil {
							srv.stop(t)
						}
						srv = startLocal(t, bin, dir, c, args)
						if err := want.check(srv.normalize(srv.startup)); err != nil || want.exit != 0 {
							t.Fatalf("%s: %v (exit %d wanted of a server)\noutput:\n%s", c, err, want.exit, srv.startup)
						}
						continue
					}
					if len(c.words) < 2 || c.words[0] != "bin/bellows" {
						t.Fatalf("%s: a local block may hold only `make run`, `bin/bellows local` and `bin/bellows …` commands", c)
					}
					args := c.words[1:]
					addr := ""
					if args[0] == "kv" || (len(args) > 1 && args[0] == "backup" && args[1] == "create") {
						for _, a := range args {
							if a == "--addr" || strings.HasPrefix(a, "--addr=") {
								t.Fatalf("%s: the guide's kv and backup create commands use the default --addr (the test sets it)", c)
							}
						}
						if srv == nil {
							t.Fatalf("%s: a kv or backup create command before `make run` or `bin/bellows local` on this page", c)
						}
						addr = srv.addr
						args = append(append([]string(nil), args...), "--addr", addr)
					}
					out, code := runCommand(t, dir, bin, args)
					if addr != "" {
						out = srv.normalize(out)
					}
					if code != want.exit {
						t.Fatalf("%s: exit status %d, want %d\noutput:\n%s", c, code, want.exit, out)
					}
					if err := want.check(out); err != nil {
						t.Fatalf("%s: %v\noutput:\n%s", c, err, out)
					}
				}
			}
		})
	}
	if ran == 0 {
		t.Fatal("the guide has no local command")
	}
}

// checkLocalAssumptions: what makes the test's run the reader's run.
func checkLocalAssumptions(t *testing.T, bin string) {
	t.Helper()
	mk, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^BIN\s*:=\s*\$\(CURDIR\)/bin\s*$`).Match(mk) ||
		!regexp.MustCompile(`(?m)^run: bellows\n\t\$\(BIN\)/bellows local \$\(RUN_ARGS\)\n`).Match(mk) {
		t.Fatal("the Makefile's run target is no longer `$(BIN)/bellows local $(RUN_ARGS)` with BIN = bin: update how this test maps `make run`")
	}
	for _, c := range []struct{ sub, flag string }{{"local", "listen"}, {"kv", "addr"}, {"backup create", "addr"}} {
		out, code := runCommand(t, t.TempDir(), bin, append(strings.Fields(c.sub), "--help"))
		re := regexp.MustCompile(`--` + c.flag + ` string .*\(default "` + regexp.QuoteMeta(defaultStoreAddr) + `"\)`)
		if code != 0 || !re.MatchString(out) {
			t.Fatalf("bellows %s --%s no longer defaults to %s, which the guide's commands rely on:\n%s", c.sub, c.flag, defaultStoreAddr, out)
		}
	}
}

// serverArgs returns the `bellows local` arguments of a command that starts
// the local server.
func serverArgs(t *testing.T, c command) ([]string, bool) {
	t.Helper()
	var args []string
	switch {
	case len(c.words) >= 2 && c.words[0] == "make" && c.words[1] == "run":
		for _, w := range c.words[2:] {
			v, ok := strings.CutPrefix(w, "RUN_ARGS=")
			if !ok {
				t.Fatalf("%s: `make run` takes only RUN_ARGS here", c)
			}
			words, comment, err := splitWords(v)
			if err != nil || comment != "" {
				t.Fatalf("%s: RUN_ARGS: %v", c, err)
			}
			args = append(args, words...)
		}
	case len(c.words) >= 2 && c.words[0] == "bin/bellows" && c.words[1] == "local":
		args = c.words[2:]
	default:
		return nil, false
	}
	for _, a := range args {
		if a == "--listen" || strings.HasPrefix(a, "--listen=") {
			t.Fatalf("%s: the test sets --listen itself", c)
		}
		if strings.HasPrefix(a, "--data-dir=") {
			t.Fatalf("%s: write --data-dir DIR (the test places DIR in its temporary directory)", c)
		}
	}
	return args, true
}

// placeDataDir returns args with --data-dir DIR (relative, as in the guide)
// under dir. Without one, bellows local runs in dir, so its default,
// bellows-data, is dir's and gets a cluster without --create-bucket, as a
// reader's first `make run` does.
func placeDataDir(t *testing.T, c command, dir string, args []string) []string {
	t.Helper()
	out := append([]string(nil), args...)
	for i, a := range out {
		if a != "--data-dir" {
			continue
		}
		if i+1 >= len(out) || filepath.IsAbs(out[i+1]) || !filepath.IsLocal(out[i+1]) {
			t.Fatalf("%s: --data-dir takes a relative directory here", c)
		}
		out[i+1] = filepath.Join(dir, out[i+1])
		return out
	}
	return out
}

// localServer is a running `bellows local`.
type localServer struct {
	cmd     *exec.Cmd
	addr    string
	startup string // what it printed up to its ready line
	exited  chan struct{}
	stderr  bytes.Buffer
}

var storeLine = regexp.MustCompile(`^store\s+grpc=(\S+)\s`)

func startLocal(t *testing.T, bin, dir string, c command, args []string) *localServer {
	t.Helper()
	args = append([]string{"local"}, placeDataDir(t, c, dir, args)...)
	args = append(args, "--listen", "127.0.0.1:0")
	s := &localServer{cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	s.cmd.Dir = dir
	s.cmd.Stderr = &s.stderr
	s.cmd.SysProcAttr = dieWithParent()
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, out)
	}()
	var seen strings.Builder
	timeout := time.After(90 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				<-s.exited
				t.Fatalf("%s: bellows local exited before it was ready:\n%s%s", c, seen.String(), s.stderr.String())
			}
			seen.WriteString(l + "\n")
			if m := storeLine.FindStringSubmatch(l); m != nil {
				s.addr = m[1]
			}
			if strings.HasPrefix(l, "ready;") {
				if s.addr == "" {
					t.Fatalf("%s: bellows local printed no store address:\n%s", c, seen.String())
				}
				s.startup = seen.String()
				// Keep draining stdout so the process never blocks on it.
				go func() {
					for range lines {
					}
				}()
				return s
			}
		case <-timeout:
			_ = s.cmd.Process.Kill()
			t.Fatalf("%s: bellows local not ready in 90s:\n%s%s", c, seen.String(), s.stderr.String())
		}
	}
}

// normalize writes the address the guide assumes for the store's real one.
func (s *localServer) normalize(out string) string {
	return strings.ReplaceAll(out, s.addr, defaultStoreAddr)
}

// stop does what Ctrl-C does: SIGINT, and bellows local stops its children.
func (s *localServer) stop(t *testing.T) {
	t.Helper()
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
		t.Errorf("bellows local did not stop within 60s of SIGINT:\n%s", s.stderr.String())
	}
}

// runCommand runs bin args in dir; out is stdout and stderr together.
func runCommand(t *testing.T, dir, bin string, args []string) (out string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	b, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		return string(b), exit.ExitCode()
	default:
		t.Fatalf("bellows %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return string(b), 0
}
