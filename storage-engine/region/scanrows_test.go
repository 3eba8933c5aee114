package region

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// A scan's rows share their memory (rowBytes) yet stay the caller's: a
// 20-key scan allocates a handful of times, not once per key and value, and
// appending to one row's key or value leaves the others as they were.
func TestScanRowsAreFewAllocationsAndIndependent(t *testing.T) {
	opts := testOptions(t, t.TempDir())
	opts.DisableAutoCompaction = true
	r := mustOpen(t, opts)
	defer r.Close()
	key := func(i int) []byte { return []byte(fmt.Sprintf("user%012d", i)) }
	val := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 100) }
	for i := 0; i < 200; i++ {
		if _, err := r.Put(key(i), val(i)); err != nil {
			t.Fatal(err)
		}
		if i == 100 {
			if err := r.Flush(bg); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer func(was bool) { checkLocks = was }(checkLocks)
	checkLocks = false
	const n = 20
	allocs := testing.AllocsPerRun(50, func() {
		rows, err := r.Scan(key(90), nil, n, kv.MaxTimestamp)
		if err != nil || len(rows) != n {
			t.Fatalf("scan: %d rows, %v", len(rows), err)
		}
	})
	// The rows' slice, their bytes (about 2.3 KiB: one chunk) and the
	// iterator's own; before rowBytes a key and a value were one each.
	t.Logf("%.0f allocations per scan", allocs)
	if allocs > 6 {
		t.Errorf("a %d-key scan made %.0f allocations, want at most 6", n, allocs)
	}

	rows, err := r.Scan(key(90), nil, n, kv.MaxTimestamp)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		rows[i].Key = append(rows[i].Key, "-grown"...)
		rows[i].Value = append(rows[i].Value, 'z')
	}
	for i, row := range rows {
		if want := append(key(90+i), "-grown"...); !bytes.Equal(row.Key, want) {
			t.Fatalf("row %d key %q, want %q", i, row.Key, want)
		}
		if want := append(val(90+i), 'z'); !bytes.Equal(row.Value, want) {
			t.Fatalf("row %d value %q, want %q", i, row.Value, want)
		}
	}
}
