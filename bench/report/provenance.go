package report

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/bellows-kv/bellows/internal/version"
)

// Provenance is when a report's numbers were measured and what code
// measured them. Every report keeps it in its JSON and opens its markdown
// with it (Header), so a reader can tell which commit a figure belongs to.
type Provenance struct {
	// Date is the day the run started, UTC, YYYY-MM-DD.
	Date string `json:"date,omitempty"`
	// Commit is the revision bellows-bench was built from (its first 12
	// digits; "-dirty": built with uncommitted changes).
	Commit string `json:"commit,omitempty"`
}

// Now is the provenance of a run starting now, from this binary.
func Now() Provenance {
	return Provenance{Date: time.Now().UTC().Format(time.DateOnly), Commit: shortRevision(version.BuildRevision())}
}

func shortRevision(rev string) string {
	hash, dirty := strings.CutSuffix(rev, "-dirty")
	if len(hash) > 12 {
		hash = hash[:12]
	}
	if dirty {
		hash += "-dirty"
	}
	return hash
}

// Measured is "measured on DATE at COMMIT", with what is known of the two.
func (p Provenance) Measured() string {
	date, commit := p.Date, p.Commit
	if date == "" {
		date = "an unrecorded date"
	}
	if commit == "" || commit == "unknown" {
		commit = "an unrecorded commit"
	}
	return fmt.Sprintf("measured on %s at %s", date, commit)
}

// Header is the line a report opens with under its title: the command that
// regenerates it and when and at which commit it was measured. Its goal
// follows it.
func Header(command string, p Provenance) string {
	return fmt.Sprintf("**Command:** `%s`; %s.\n\n", command, p.Measured())
}

// Command is the bellows-bench command line that regenerates a report, from
// the arguments it ran with (os.Args[1:]): a flag whose value is an absolute
// path (one machine's binary, output or work directory) is left out, so the
// command runs from the repository's root on any machine and writes where
// the report's default is (bench/results).
func Command(args []string) string {
	out := []string{"bellows-bench"}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			if _, v, ok := strings.Cut(a, "="); ok && filepath.IsAbs(v) {
				continue
			}
			if !strings.Contains(a, "=") && i+1 < len(args) && filepath.IsAbs(args[i+1]) {
				i++
				continue
			}
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}
