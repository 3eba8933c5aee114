package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseTxnOps(t *testing.T) {
	ops, err := parseTxnOps([]string{"get", "a", "put", "a", "2", "delete", "b"})
	if err != nil || len(ops) != 3 || ops[1] != (txnOp{verb: "put", key: "a", value: "2"}) || ops[2].verb != "delete" {
		t.Fatalf("parsed %+v, %v", ops, err)
	}
	for args, want := range map[string]string{
		"":          "no operations",
		"put a":     "argument 1: put needs 2 more argument(s)",
		"get":       "argument 1: get needs 1 more argument(s)",
		"get a x b": `argument 3: "x" is not an operation`,
	} {
		if _, err := parseTxnOps(strings.Fields(args)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", args, err, want)
		}
	}
}

// kv batch writes across regions at one commit timestamp, and refuses
// reads and malformed operations before anything is sent.
func TestKVBatchAcrossRegions(t *testing.T) {
	addr := startStore(t) // 4 regions, cut by first byte
	kv(t, addr, "put", "--hex", "c0", "00")
	ts := putTS(t, kv(t, addr, "batch", "--hex", "put", "01", "aa", "put", "f0", "bb", "delete", "c0", "-o", "json"))
	for key, want := range map[string]string{"01": "aa", "f0": "bb"} {
		var got struct{ Version uint64 }
		if err := json.Unmarshal([]byte(kv(t, addr, "get", "--hex", key, "-o", "json")), &got); err != nil || got.Version != ts {
			t.Fatalf("get %s: version %d (%v), want the batch's commit %d", key, got.Version, err, ts)
		}
		if v := kv(t, addr, "get", "--hex", key); v != want+"\n" {
			t.Fatalf("get %s = %q, want %s", key, v, want)
		}
	}
	if err := kvFails(t, addr, "get", "--hex", "c0"); !strings.Contains(err.Error(), "not found") {
		t.Fatalf("get c0 after the batch's delete: %v", err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"batch", "get", "a"}, "get: a batch only writes"},
		{[]string{"batch", "put", "a"}, "put needs 2 more argument(s)"},
		{[]string{"batch", "--hex", "put", "zz", "v"}, `put KEY "zz" is not hexadecimal`},
	} {
		if err := kvFails(t, addr, c.args...); !strings.Contains(err.Error(), c.want) {
			t.Errorf("kv %s: %v, want %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}
