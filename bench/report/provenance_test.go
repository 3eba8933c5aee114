package report

import (
	"strings"
	"testing"
)

func TestCommandLeavesOutThisMachinesPaths(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"phases", "--bellows", "/tmp/bellows-bin", "--keys", "60000", "--out", "/tmp/ph60h"}, "bellows-bench phases --keys 60000"},
		{[]string{"ycsb", "--elastic", "--bellows=/tmp/elastic-bin/bellows", "--out=bench/results", "--keep-dir=/tmp/el2m/work"}, "bellows-bench ycsb --elastic --out=bench/results"},
		{[]string{"engine", "--keys", "2000000", "--out", "bench/results/engine-2m.md"}, "bellows-bench engine --keys 2000000 --out bench/results/engine-2m.md"},
		{[]string{"memstore", "--reader-core", "--runs", "10"}, "bellows-bench memstore --reader-core --runs 10"},
	} {
		if got := Command(c.args); got != c.want {
			t.Errorf("Command(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}

func TestHeaderSaysWhenAndWhere(t *testing.T) {
	h := Header("bellows-bench txn", Provenance{Date: "2026-11-24", Commit: "e74691d"})
	if want := "**Command:** `bellows-bench txn`; measured on 2026-11-24 at e74691d."; !strings.HasPrefix(h, want) {
		t.Errorf("Header = %q, want %q", h, want)
	}
	if got := (Provenance{}).Measured(); got != "measured on an unrecorded date at an unrecorded commit" {
		t.Errorf("empty Provenance: %q", got)
	}
	if got := shortRevision("0123456789abcdef0123-dirty"); got != "0123456789ab-dirty" {
		t.Errorf("shortRevision: %q", got)
	}
}
