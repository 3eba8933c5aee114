package cli

import (
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
