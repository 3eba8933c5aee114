package cli

import (
	"bytes"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestKVGetWritesTheValueExactly: a value read into a file or a pipe is its
// bytes and nothing more (4,096 bytes in, 4,096 out); on a terminal it ends
// with a newline and is quoted when it is not text, unless --raw.
func TestKVGetWritesTheValueExactly(t *testing.T) {
	addr := startStore(t)
	value := make([]byte, 4096)
	_, _ = rand.Read(value)
	file := filepath.Join(t.TempDir(), "value")
	if err := os.WriteFile(file, value, 0o600); err != nil {
		t.Fatal(err)
	}
	kv(t, addr, "put", "bin", "--value-file", file)
	kv(t, addr, "put", "text", "hello world")
	if got := kv(t, addr, "get", "bin"); got != string(value) {
		t.Fatalf("get of a %d-byte value wrote %d bytes, want them exactly", len(value), len(got))
	}
	if got := kv(t, addr, "get", "text"); got != "hello world" {
		t.Fatalf("get text = %q, want no newline added", got)
	}
	if got := kv(t, addr, "get", "--hex", "74657874"); got != "68656c6c6f20776f726c64\n" {
		t.Fatalf("get --hex = %q, want a line of hexadecimal", got)
	}

	defer func(f func(io.Writer) bool) { isTerminal = f }(isTerminal)
	isTerminal = func(io.Writer) bool { return true }
	if got := kv(t, addr, "get", "text"); got != "hello world\n" {
		t.Errorf("get text on a terminal = %q, want a line", got)
	}
	if got, want := kv(t, addr, "get", "bin"), strconv.Quote(string(value))+"\n"; got != want {
		t.Errorf("get of a binary value on a terminal = %.40q..., want it Go-quoted", got)
	}
	if got := kv(t, addr, "get", "--raw", "bin"); got != string(value) {
		t.Errorf("get --raw on a terminal wrote %d bytes, want the %d of the value exactly", len(got), len(value))
	}
}

// TestKVScanQuotesWhatIsNotPlainText: the text output of scan, and of get
// with several keys, is a line per key, binary and multi-line values quoted;
// --raw writes them as they are.
func TestKVScanQuotesWhatIsNotPlainText(t *testing.T) {
	addr := startStore(t)
	kv(t, addr, "put", "--hex", "6b31", "00ff1b5b324a") // k1: NUL, 0xff, ESC [2J
	kv(t, addr, "put", "k2", "two\nlines")
	kv(t, addr, "put", "k3", "plain text, spaces and \\ kept")
	kv(t, addr, "put", "k4", `"quoted"`)
	kv(t, addr, "put", "k5", "héllo\tworld")
	want := `k1	"\x00\xff\x1b[2J"` + "\n" +
		`k2	"two\nlines"` + "\n" +
		`k3	plain text, spaces and \ kept` + "\n" +
		`k4	"\"quoted\""` + "\n" +
		`k5	"héllo\tworld"` + "\n"
	if got := kv(t, addr, "scan"); got != want {
		t.Errorf("scan =\n%s\nwant\n%s", got, want)
	}
	for _, line := range strings.Split(strings.TrimSuffix(want, "\n"), "\n") {
		if _, err := strconv.Unquote(strings.SplitN(line, "\t", 2)[1]); strings.HasPrefix(strings.SplitN(line, "\t", 2)[1], `"`) && err != nil {
			t.Errorf("%q: a quoted field does not unquote: %v", line, err)
		}
	}
	if got, want := kv(t, addr, "get", "k1", "k3"), "k1\t\"\\x00\\xff\\x1b[2J\"\nk3\tplain text, spaces and \\ kept\n"; got != want {
		t.Errorf("get k1 k3 = %q, want %q", got, want)
	}
	raw := kv(t, addr, "scan", "--raw", "k1", "k2")
	if want := "k1\t\x00\xff\x1b[2J\n"; raw != want {
		t.Errorf("scan --raw = %q, want %q", raw, want)
	}
	if !bytes.Contains([]byte(kv(t, addr, "scan", "--hex")), []byte("6b31\t00ff1b5b324a\n")) {
		t.Errorf("scan --hex changed")
	}
	if err := kvFails(t, addr, "scan", "--raw", "--hex"); !strings.Contains(err.Error(), "not both") {
		t.Errorf("scan --raw --hex: %v", err)
	}
	if err := kvFails(t, addr, "scan", "--raw", "-o", "json"); !strings.Contains(err.Error(), "--raw is for the text output") {
		t.Errorf("scan --raw -o json: %v", err)
	}
}
