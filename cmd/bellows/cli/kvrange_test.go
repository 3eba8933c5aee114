package cli

import (
	"strings"
	"testing"
)

// scan --prefix lists exactly the keys that begin with the prefix, across
// regions, and an all-0xff prefix has no upper bound.
func TestKVScanPrefix(t *testing.T) {
	addr := startStore(t)
	for _, k := range []string{"a", "a/1", "a/2", "a0", "b", "user/x", "user0"} {
		kv(t, addr, "put", k, "v"+k)
	}
	if got, want := kv(t, addr, "scan", "--prefix", "a/"), "a/1\tva/1\na/2\tva/2\n"; got != want {
		t.Fatalf("scan --prefix a/ =\n%s\nwant\n%s", got, want)
	}
	if got, want := kv(t, addr, "scan", "--prefix", "a"), "a\tva\na/1\tva/1\na/2\tva/2\na0\tva0\n"; got != want {
		t.Fatalf("scan --prefix a =\n%s\nwant\n%s", got, want)
	}
	if got := kv(t, addr, "scan", "--prefix", "nothing"); got != "" {
		t.Fatalf("scan --prefix nothing = %q, want nothing", got)
	}
	if got, want := kv(t, addr, "scan", "--prefix", "a/", "--limit", "1"), "a/1\tva/1\n"; got != want {
		t.Fatalf("scan --prefix a/ --limit 1 = %q, want %q", got, want)
	}
	// Binary keys in the last region (the store splits by first byte):
	// the prefix ff is all 0xff, so it reaches past the last key.
	for _, k := range []string{"fe00", "ff", "ff01", "ffff", "ffffff00"} {
		kv(t, addr, "--hex", "put", k, "00")
	}
	if got, want := kv(t, addr, "--hex", "scan", "--prefix", "ff"), "ff\t00\nff01\t00\nffff\t00\nffffff00\t00\n"; got != want {
		t.Fatalf("scan --hex --prefix ff =\n%s\nwant\n%s", got, want)
	}
	if got, want := kv(t, addr, "--hex", "scan", "--prefix", "ffff"), "ffff\t00\nffffff00\t00\n"; got != want {
		t.Fatalf("scan --hex --prefix ffff =\n%s\nwant\n%s", got, want)
	}
	// A key 7f.. below a region boundary at 80 (the prefix's end is the
	// next region's start).
	kv(t, addr, "--hex", "put", "7fff01", "01")
	kv(t, addr, "--hex", "put", "80", "02")
	if got, want := kv(t, addr, "--hex", "scan", "--prefix", "7fff"), "7fff01\t01\n"; got != want {
		t.Fatalf("scan --hex --prefix 7fff = %q, want %q", got, want)
	}
	for _, args := range [][]string{{"scan", "--prefix", "a", "b"}, {"scan", "--prefix", "a", "--after", "a"}} {
		if err := kvFails(t, addr, args...); !strings.Contains(err.Error(), "--prefix P takes no START") {
			t.Fatalf("kv %v: %v", args, err)
		}
	}
}
