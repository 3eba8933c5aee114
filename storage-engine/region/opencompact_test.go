package region

import (
	"fmt"
	"testing"
)

// A region opened on files its compaction policy would merge merges them:
// the compaction a flush scheduled dies with the close before a reopen, and
// until the next flush every scan would seek every file.
func TestOpenSchedulesTheCompactionThePolicySelects(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	opts.DisableAutoCompaction = true
	r := mustOpen(t, opts)
	for f := 0; f < 4; f++ {
		for i := 0; i < 100; i++ {
			if _, err := r.Put([]byte(fmt.Sprintf("k%03d", i)), []byte(fmt.Sprintf("v%d", f))); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.Flush(bg); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	opts.DisableAutoCompaction = false
	r = mustOpen(t, opts)
	defer r.Close()
	waitFor(t, "the files compacted after the open", func() bool { return r.FileCount() < 4 })
	for i := 0; i < 100; i++ {
		mustGet(t, r, fmt.Sprintf("k%03d", i), "v3")
	}
}
