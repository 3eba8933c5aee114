package region

import (
	"context"
	"fmt"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// A region written by a build that writes format 1 files opens on one that
// writes format 2: it reads the old files, and compacts them into new ones.
func TestARegionOfFormat1FilesOpensReadsAndCompactsIntoFormat2(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	opts := testOptions(t, dir)
	opts.SST.FormatVersion = sstable.FormatVersion1
	r := mustOpen(t, opts)
	const n = 2000
	for i := range n {
		if _, err := r.Put(fmt.Appendf(nil, "key-%05d", i), fmt.Appendf(nil, "value-%d", i)); err != nil {
			t.Fatal(err)
		}
		if i%500 == 499 {
			if err := r.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	opts.SST.FormatVersion = 0
	r = mustOpen(t, opts)
	defer r.Close()
	formats := func() map[uint32]int {
		r.mu.RLock()
		defer r.mu.RUnlock()
		m := map[uint32]int{}
		for _, tb := range r.current.tables {
			m[tb.reader.FormatVersion()]++
		}
		return m
	}
	if f := formats(); f[sstable.FormatVersion1] == 0 || f[sstable.FormatVersion] != 0 {
		t.Fatalf("files by format after reopening: %v; want only format 1", f)
	}
	check := func(when string) {
		t.Helper()
		for i := range n {
			v, ok, err := r.Get(fmt.Appendf(nil, "key-%05d", i), kv.MaxTimestamp)
			if err != nil || !ok || string(v) != fmt.Sprintf("value-%d", i) {
				t.Fatalf("%s: key %d reads %q %v %v", when, i, v, ok, err)
			}
		}
		kvs, err := r.Scan(nil, nil, 0, kv.MaxTimestamp)
		if err != nil || len(kvs) != n {
			t.Fatalf("%s: a scan reads %d of %d: %v", when, len(kvs), n, err)
		}
	}
	check("format 1 files")
	if _, err := r.Compact(ctx, true); err != nil {
		t.Fatal(err)
	}
	if f := formats(); f[sstable.FormatVersion1] != 0 || f[sstable.FormatVersion] == 0 {
		t.Fatalf("files by format after a major compaction: %v; want only format 2", f)
	}
	check("after the compaction")
}
