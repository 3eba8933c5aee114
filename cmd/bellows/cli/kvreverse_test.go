package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/bellows-kv/bellows/client"
)

// scan --reverse lists [START, END) descending across regions, --limit
// the highest keys, --before KEY [START] the keys below KEY.
func TestKVScanReverse(t *testing.T) {
	addr := startStore(t)
	// '0' and 'k' are in different regions.
	for _, k := range []string{"0a", "0b", "0c", "k1", "k2"} {
		kv(t, addr, "put", k, "v"+k)
	}
	for args, want := range map[string]string{
		"scan --reverse":                      "k2\tvk2\nk1\tvk1\n0c\tv0c\n0b\tv0b\n0a\tv0a\n",
		"scan --reverse 0b k2":                "k1\tvk1\n0c\tv0c\n0b\tv0b\n",
		"scan --reverse --limit 3":            "k2\tvk2\nk1\tvk1\n0c\tv0c\n",
		"scan --reverse --prefix 0":           "0c\tv0c\n0b\tv0b\n0a\tv0a\n",
		"scan --reverse --before k1 0b":       "0c\tv0c\n0b\tv0b\n",
		"scan --reverse --before k1":          "0c\tv0c\n0b\tv0b\n0a\tv0a\n",
		"scan --before 0c":                    "0a\tv0a\n0b\tv0b\n",
		"scan --reverse --after 0b --limit 2": "k2\tvk2\nk1\tvk1\n",
	} {
		if got := kv(t, addr, strings.Fields(args)...); got != want {
			t.Errorf("%s =\n%s\nwant\n%s", args, got, want)
		}
	}
}

// Reverse only changes the order: START after END is refused, and the
// message says which command lists the range descending.
func TestKVScanReverseOfAnInvertedRangeFails(t *testing.T) {
	addr := startStore(t)
	err := kvFails(t, addr, "scan", "--reverse", "z", "a")
	if !errors.Is(err, client.ErrInvalidRange) || !strings.Contains(err.Error(), `START "z" is after END "a"`) ||
		!strings.Contains(err.Error(), "give the lower key first: bellows kv scan --reverse 'a' 'z'") {
		t.Fatalf("scan --reverse z a: %v", err)
	}
}

func TestKVScanBeforeIsRefusedWithAfterPrefixOrTwoArguments(t *testing.T) {
	addr := startStore(t)
	for args, want := range map[string]string{
		"scan --after a --before b":  "give --after KEY [END] or --before KEY [START], not both",
		"scan --prefix a --before b": "--prefix P takes no START or END and no --after or --before",
		"scan --before b a c":        "with --before KEY, give at most START",
	} {
		if err := kvFails(t, addr, strings.Fields(args)...); !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
	if err := kvFails(t, addr, "scan", "--before", ""); !strings.Contains(err.Error(), "--before KEY: KEY is empty") {
		t.Errorf("scan --before '': %v", err)
	}
}

// A reverse scan stopped by Ctrl-C (or its timeout) says the last key it
// printed is where to continue below, and the command it prints lists the
// rest, down to the scan's START.
func TestKVStoppedReverseScanSaysWhereToResume(t *testing.T) {
	addr := startStore(t)
	for _, k := range []string{"0a", "0b", "0c", "k1", "k2"} {
		kv(t, addr, "put", k, "v"+k)
	}
	want := kv(t, addr, "scan", "--reverse", "0", "z")
	ctx, cancel := context.WithCancel(context.Background())
	out := &cancelAfterFirstLine{cancel: cancel}
	_, stderr, err := kvRun{ctx: ctx, stdout: out}.run(t, addr, "scan", "--reverse", "0", "z")
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("the stopped scan: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), stderr)
	}
	m := regexp.MustCompile(`resume with: bellows kv scan --reverse --before '([^']*)' '0'\n`).FindStringSubmatch(stderr)
	if m == nil || !strings.Contains(stderr, "resume key (the END to continue below): ") {
		t.Fatalf("stderr of the stopped scan lacks the resume key and command:\n%s", stderr)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if last := strings.Split(lines[len(lines)-1], "\t")[0]; m[1] != last {
		t.Fatalf("resume before %q, but the last key printed was %q", m[1], last)
	}
	rest := kv(t, addr, "scan", "--reverse", "--before", m[1], "0")
	if out.String()+rest != want {
		t.Fatalf("stopped scan + resumed scan =\n%s%s\nwant\n%s", out.String(), rest, want)
	}
}

func TestReverseResumeOfABinaryKeyIsInHex(t *testing.T) {
	p, err := newPrinter(io.Discard, "text", codec{})
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	it := &fakePairs{keys: [][]byte{[]byte("z"), {0x00, 'b', 0x07}}, err: context.DeadlineExceeded}
	if err := printScan(&stderr, p, it, scanRange{start: []byte("\x00"), reverse: true}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("printScan: %v", err)
	}
	for _, want := range []string{`scan stopped after 2 keys; resume key (the END to continue below): "\x00b\a"`,
		"resume with: bellows kv scan --hex --reverse --before 006207 00\n"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	// No START: none in the command.
	stderr.Reset()
	it = &fakePairs{keys: [][]byte{[]byte("k")}, err: context.DeadlineExceeded}
	_ = printScan(&stderr, p, it, scanRange{end: []byte("z"), reverse: true})
	if !strings.Contains(stderr.String(), "resume with: bellows kv scan --reverse --before 'k'\n") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
}
