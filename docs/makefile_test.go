package docs

import (
	"os/exec"
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
