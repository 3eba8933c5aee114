package cli

import (
	"encoding/json"
	"fmt"
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

// get with several keys is one BatchGet: the found keys in the order given,
// the absent ones named, exit status 1.
func TestKVGetSeveralKeys(t *testing.T) {
	addr := startStore(t)
	// The store splits by first byte: 0 and k are in different regions.
	for _, k := range []string{"0a", "kb", "kc"} {
		kv(t, addr, "put", k, "v"+k)
	}
	if got, want := kv(t, addr, "get", "kc", "0a", "kb"), "kc\tvkc\n0a\tv0a\nkb\tvkb\n"; got != want {
		t.Fatalf("get kc 0a kb =\n%s\nwant\n%s", got, want)
	}
	out, _, err := kvRun{}.run(t, addr, "get", "0a", "nope", "kb", "gone")
	if err == nil || !strings.Contains(err.Error(), `"nope", "gone": not found`) {
		t.Fatalf("get with absent keys: %v", err)
	}
	if want := "0a\tv0a\nkb\tvkb\n"; out != want {
		t.Fatalf("get with absent keys printed\n%s\nwant\n%s", out, want)
	}
	if got := kv(t, addr, "get", "0a", "kb", "-o", "json"); strings.Count(got, "\n") != 2 || !strings.Contains(got, `"key":"MGE="`) {
		t.Fatalf("get -o json of two keys: %q", got)
	}
	// --read-ts reads the versions visible at it.
	var put struct {
		CommitTS uint64 `json:"commit_ts"`
	}
	if err := json.Unmarshal([]byte(kv(t, addr, "put", "kb", "newer", "-o", "json")), &put); err != nil {
		t.Fatal(err)
	}
	if got := kv(t, addr, "get", "kb", "kc"); got != "kb\tnewer\nkc\tvkc\n" {
		t.Fatalf("after the overwrite: %q", got)
	}
	if got := kv(t, addr, "get", "kb", "kc", "--read-ts", fmt.Sprint(put.CommitTS-1)); got != "kb\tvkb\nkc\tvkc\n" {
		t.Fatalf("get --read-ts %d: %q", put.CommitTS-1, got)
	}
}

// delete --prefix and --range delete exactly their keys, across regions,
// saying how many and in which commits.
func TestKVDeleteRangeAndPrefix(t *testing.T) {
	addr := startStore(t)
	for _, k := range []string{"0a", "0b", "a/1", "a/2", "a0", "kb", "kc", "zz"} {
		kv(t, addr, "put", k, "v")
	}
	out := kv(t, addr, "delete", "--prefix", "a/")
	if !strings.HasPrefix(out, "OK deleted 2 keys, region-") {
		t.Fatalf("delete --prefix a/: %q", out)
	}
	if got := kv(t, addr, "scan", "--prefix", "a"); got != "a0\tv\n" {
		t.Fatalf("after delete --prefix a/: %q", got)
	}
	// [0b, kc): 0b, a0 and kb, in two regions: two commits.
	out = kv(t, addr, "delete", "--range", "0b", "kc")
	if !strings.HasPrefix(out, "OK deleted 3 keys in 2 commits (not atomic together): region-") {
		t.Fatalf("delete --range 0b kc: %q", out)
	}
	if got := kv(t, addr, "scan"); got != "0a\tv\nkc\tv\nzz\tv\n" {
		t.Fatalf("after delete --range 0b kc:\n%s", got)
	}
	// No END: to the last key.
	if out := kv(t, addr, "del", "--range", "k"); !strings.HasPrefix(out, "OK deleted 2 keys") {
		t.Fatalf("del --range k: %q", out)
	}
	if out := kv(t, addr, "delete", "--range", "k"); out != "OK deleted 0 keys\n" {
		t.Fatalf("delete of an empty range: %q", out)
	}
	if got := kv(t, addr, "scan"); got != "0a\tv\n" {
		t.Fatalf("after del --range k: %q", got)
	}
	for args, want := range map[string]string{
		"delete --range z a":          "START \"z\" is after END \"a\"",
		"delete --range":              "--range needs START",
		"delete --prefix a b":         "--prefix P takes no KEY",
		"delete --prefix a --range b": "not both",
		"delete":                      "give KEY, or --prefix P",
	} {
		if err := kvFails(t, addr, strings.Fields(args)...); !strings.Contains(err.Error(), want) {
			t.Errorf("kv %s: %v, want %q", args, err, want)
		}
	}
}

// kv txn's scan lists the snapshot with the transaction's own writes over
// it, across regions.
func TestKVTxnScan(t *testing.T) {
	addr := startStore(t)
	for _, k := range []string{"0a", "0b", "ka"} {
		kv(t, addr, "put", k, "v")
	}
	got := kv(t, addr, "txn", "put", "0c", "mine", "delete", "0b", "scan", "0", "z", "put", "kb", "later")
	if want := "0a\tv\n0c\tmine\nka\tv\nCOMMITTED "; !strings.HasPrefix(got, want) {
		t.Fatalf("kv txn ... scan 0 z =\n%s\nwant it to begin\n%s", got, want)
	}
	if got := kv(t, addr, "txn", "scan", "k", ""); !strings.HasPrefix(got, "ka\tv\nkb\tlater\nREAD-ONLY ts=") {
		t.Fatalf("kv txn scan k '' = %q", got)
	}
	if err := kvFails(t, addr, "txn", "scan", "z", "a"); !strings.Contains(err.Error(), "after END") {
		t.Fatalf("kv txn scan z a: %v", err)
	}
}
