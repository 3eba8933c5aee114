package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMakeRunBuildsOnlyBellows: the guide says `make run` builds
// bin/bellows; building the benchmark driver too cost a cold start a minute.
// make -n prints the commands without running them.
func TestMakeRunBuildsOnlyBellows(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	cmd := exec.Command("make", "-n", "-B", "run")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n run: %v\n%s", err, out)
	}
	var builds []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, " build ") {
			builds = append(builds, l)
		}
	}
	if len(builds) != 1 || !strings.HasSuffix(strings.TrimSpace(builds[0]), "/bin/bellows ./cmd/bellows") {
		t.Fatalf("make run builds %q, want only ./cmd/bellows into bin/bellows\n%s", builds, out)
	}
}

// TestMakeHelpListsEveryTarget: `make help` is generated from the `##`
// comment above each rule, so a target without one would be missing from it.
// Every rule of the Makefile must have one and appear in the output.
func TestMakeHelpListsEveryTarget(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	data, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	rule := regexp.MustCompile(`^([a-zA-Z0-9_-]+):([^=]|$)`)
	var targets []string
	prev := ""
	for _, l := range strings.Split(string(data), "\n") {
		if m := rule.FindStringSubmatch(l); m != nil {
			targets = append(targets, m[1])
			if !strings.HasPrefix(prev, "## ") {
				t.Errorf("Makefile: target %s has no `## %s: …` comment above it, so `make help` leaves it out", m[1], m[1])
			}
		}
		prev = l
	}
	if len(targets) < 10 {
		t.Fatalf("found only %d targets in the Makefile: is the rule pattern still right?", len(targets))
	}
	cmd := exec.Command("make", "--no-print-directory", "help")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, out)
	}
	listed := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && !strings.HasPrefix(l, " ") {
			listed[f[0]] = true
		}
	}
	for _, tg := range targets {
		if !listed[tg] {
			t.Errorf("make help does not list %s:\n%s", tg, out)
		}
	}
}
