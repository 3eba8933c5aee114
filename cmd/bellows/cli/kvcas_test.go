package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// putTS is the commit_ts of `kv put … -o json`.
func putTS(t *testing.T, out string) uint64 {
	t.Helper()
	var doc struct {
		CommitTS uint64 `json:"commit_ts"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.CommitTS == 0 {
		t.Fatalf("put -o json printed %q (%v), want a commit_ts", out, err)
	}
	return doc.CommitTS
}

// Compare-and-set from the command line, through the client and a real
// store: each condition writes when it holds, and when it does not writes
// nothing, names what the key holds and fails.
func TestKVPutAndDeleteIfACondition(t *testing.T) {
	addr := startStore(t)
	first := putTS(t, kv(t, addr, "put", "lock", "owner-a", "--if-absent", "-o", "json"))
	err := kvFails(t, addr, "put", "lock", "owner-b", "--if-absent")
	if want := fmt.Sprintf(`"lock": the condition did not hold, nothing was written: the key holds owner-a (version %d)`, first); err.Error() != want {
		t.Fatalf("a second put --if-absent: %q, want %q", err, want)
	}
	if got := kv(t, addr, "get", "lock"); got != "owner-a" {
		t.Fatalf("after a failed put-if-absent lock = %q", got)
	}
	// The failed answer in JSON says what is there, for a script's retry.
	out, _, err := kvRun{}.run(t, addr, "put", "lock", "x", "--if-value", "owner-z", "-o", "json")
	if err == nil {
		t.Fatal("put --if-value with the wrong value succeeded")
	}
	if want := fmt.Sprintf(`{"found":true,"region":"region-001","succeeded":false,"value":"b3duZXItYQ==","version":%d}`+"\n", first); out != want {
		t.Fatalf("failed put -o json = %q, want %q", out, want)
	}
	second := putTS(t, kv(t, addr, "put", "lock", "owner-b", "--if-value", "owner-a", "-o", "json"))
	if err := kvFails(t, addr, "put", "lock", "owner-c", "--if-version", fmt.Sprint(first)); !strings.Contains(err.Error(), fmt.Sprintf("version %d", second)) {
		t.Fatalf("put --if-version of the old version: %v", err)
	}
	// A read's version is the one to expect.
	var got struct{ Version uint64 }
	if err := json.Unmarshal([]byte(kv(t, addr, "get", "lock", "-o", "json")), &got); err != nil || got.Version != second {
		t.Fatalf("get -o json: version %d (%v), want %d", got.Version, err, second)
	}
	kv(t, addr, "put", "lock", "owner-c", "--if-version", fmt.Sprint(got.Version))
	if err := kvFails(t, addr, "delete", "lock", "--if-value", "owner-b"); !strings.Contains(err.Error(), "holds owner-c") {
		t.Fatalf("delete --if-value of the old value: %v", err)
	}
	kv(t, addr, "delete", "lock", "--if-value", "owner-c")
	if err := kvFails(t, addr, "delete", "lock", "--if-value", "owner-c"); !strings.Contains(err.Error(), "the key is absent") {
		t.Fatalf("a second delete --if-value: %v", err)
	}
	kv(t, addr, "put", "lock", "owner-d", "--if-absent")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"put", "k", "v", "--if-absent", "--if-value", "x"}, "at most one of --if-value, --if-absent and --if-version"},
		{[]string{"put", "k", "v", "--if-version", "0"}, "--if-version must be a commit timestamp above 0"},
		{[]string{"put", "k", "v", "--if-absent=false"}, "--if-absent=false is no condition"},
		{[]string{"delete", "--prefix", "k", "--if-value", "x"}, "delete one KEY, not a --prefix or --range"},
		{[]string{"delete", "k", "--if-absent"}, "unknown flag: --if-absent"},
	} {
		if err := kvFails(t, addr, c.args...); !strings.Contains(err.Error(), c.want) {
			t.Errorf("kv %s: %v, want %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}
