package blockcache

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestEvictionDataDriven runs testdata/evict:
//
//	new capacity=BYTES
//	insert file=F
//	OFFSET LASTKEY [SIZE]   (one block a line; SIZE bytes of block, default 1)
//	evict-up-to file=F key=K  → how many blocks were dropped
//	evict-file file=F         → how many blocks were dropped
//	evict file=F offset=O     → whether the block was cached
//	cached [file=F]           → the cached blocks, by file and offset
//	stats                     → evictions, used bytes
//
// Run with -rewrite to regenerate the expected output.
func TestEvictionDataDriven(t *testing.T) {
	var c *Cache
	datadriven.RunTest(t, "testdata/evict", func(t *testing.T, d *datadriven.TestData) string {
		var file uint64
		if d.Cmd != "new" && d.Cmd != "cached" && d.Cmd != "stats" {
			d.ScanArgs(t, "file", &file)
		}
		switch d.Cmd {
		case "new":
			var capacity int64
			d.ScanArgs(t, "capacity", &capacity)
			c = New(capacity)
			return ""
		case "insert":
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				f := strings.Fields(line)
				if len(f) < 2 || len(f) > 3 {
					d.Fatalf(t, "block %q: want OFFSET LASTKEY [SIZE]", line)
				}
				off, err := strconv.ParseUint(f[0], 10, 64)
				if err != nil {
					d.Fatalf(t, "block %q: %v", line, err)
				}
				size := 1
				if len(f) == 3 {
					if size, err = strconv.Atoi(f[2]); err != nil {
						d.Fatalf(t, "block %q: %v", line, err)
					}
				}
				c.Insert(Key{File: file, Offset: off}, make([]byte, size), []byte(f[1]))
			}
			return ""
		case "evict-up-to":
			var key string
			d.ScanArgs(t, "key", &key)
			return fmt.Sprintf("evicted %d", c.EvictFileUpTo(file, []byte(key)))
		case "evict-file":
			return fmt.Sprintf("evicted %d", c.EvictFile(file))
		case "evict":
			var off uint64
			d.ScanArgs(t, "offset", &off)
			return fmt.Sprintf("evicted %t", c.Evict(Key{File: file, Offset: off}))
		case "cached":
			only := d.MaybeScanArgs(t, "file", &file)
			return cached(c, func(f uint64) bool { return !only || f == file })
		case "stats":
			st := c.Stats()
			return fmt.Sprintf("evictions=%d used=%d capacity=%d", st.Evictions, st.UsedBytes, st.Capacity)
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

// cached lists the cached blocks of the files keep accepts, one line per
// file: "file F: OFFSET:LASTKEY ...", or "none".
func cached(c *Cache, keep func(uint64) bool) string {
	byFile := map[uint64][]*entry{}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for f, es := range s.byFile {
			if keep(f) {
				for _, e := range es {
					byFile[f] = append(byFile[f], e)
				}
			}
		}
		s.mu.Unlock()
	}
	if len(byFile) == 0 {
		return "none"
	}
	var lines []string
	for _, f := range slices.Sorted(maps.Keys(byFile)) {
		es := byFile[f]
		slices.SortFunc(es, func(a, b *entry) int { return cmp.Compare(a.key.Offset, b.key.Offset) })
		parts := []string{fmt.Sprintf("file %d:", f)}
		for _, e := range es {
			parts = append(parts, fmt.Sprintf("%d:%s", e.key.Offset, e.lastUser))
		}
		lines = append(lines, strings.Join(parts, " "))
	}
	return strings.Join(lines, "\n")
}
