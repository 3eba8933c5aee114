package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// kv watch prints the changes after --after-ts across regions, in commit
// order, puts and deletes, as text and as JSON, stops after --count and
// says where to resume; a resumed watch prints only what came later.
func TestKVWatch(t *testing.T) {
	addr := startStore(t) // 4 regions, cut by first byte
	first := putTS(t, kv(t, addr, "put", "-o", "json", "--hex", "01", "aa"))
	kv(t, addr, "put", "--hex", "f0", "bb")
	kv(t, addr, "delete", "--hex", "01")
	got := kv(t, addr, "watch", "--hex", "--after-ts", fmt.Sprint(first-1), "--count", "3")
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[0], "\tput\t01\taa") || !strings.HasSuffix(lines[1], "\tput\tf0\tbb") || !strings.HasSuffix(lines[2], "\tdelete\t01") {
		t.Fatalf("watch = %q", got)
	}
	var doc struct {
		CommitTS uint64 `json:"commit_ts"`
		Type     string `json:"type"`
		Key      string `json:"key"`
	}
	out := kv(t, addr, "watch", "-o", "json", "--hex", "--after-ts", fmt.Sprint(first), "--count", "1")
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.Type != "put" || doc.Key != "f0" || doc.CommitTS <= first {
		t.Fatalf("watch -o json after the first put = %q (%v)", out, err)
	}
	if err := kvFails(t, addr, "watch", "--count", "-1"); err == nil {
		t.Fatal("--count -1 was accepted")
	}
}
