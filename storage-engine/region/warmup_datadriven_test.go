package region

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// TestWarmupRoutingDataDriven runs testdata/warmup_routing: how an
// incremental warmup routes reads by its threshold T and evicts the old
// files' blocks as T advances. Every file has one key per data block, so a
// block is named by its key.
//
//	compaction
//	NAME: KEY...        the compaction's inputs, one a line, blocks cached
//	----                (the steady state before the switch); the output
//	                    is their union; T is unset
//	threshold [KEY]     sets T without evicting (none: unset)
//	get KEY...          which side a get of each key reads: new or old
//	scan KEY...         which side a scan starting at each key reads
//	advance KEY         moves T as the warmup does and prints, per input,
//	                    the blocks it evicted and those still cached
//
// Run with -rewrite to regenerate the expected output.
func TestWarmupRoutingDataDriven(t *testing.T) {
	var (
		r      *Region
		rs     *readState
		cache  *blockcache.Cache
		inputs []*table
	)
	args := func(d *datadriven.TestData) []string {
		var out []string
		for _, a := range d.CmdArgs {
			if len(a.Vals) != 0 {
				d.Fatalf(t, "%s: want bare keys, got %s", d.Cmd, a)
			}
			out = append(out, a.Key)
		}
		return out
	}
	datadriven.RunTest(t, "testdata/warmup_routing", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "compaction":
			cache = blockcache.New(1 << 20)
			inputs = nil
			var all []string
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				name, keys, ok := strings.Cut(line, ":")
				if !ok {
					d.Fatalf(t, "input %q: want NAME: KEY...", line)
				}
				in := oneKeyPerBlockTable(t, strings.TrimSpace(name), strings.Fields(keys), cache)
				for i := range in.reader.NumBlocks() {
					if _, err := in.reader.LoadBlockFromFile(i); err != nil {
						t.Fatal(err)
					}
				}
				inputs = append(inputs, in)
				all = append(all, strings.Fields(keys)...)
			}
			slices.Sort(all)
			out := oneKeyPerBlockTable(t, "out", slices.Compact(all), cache)
			// The state installCompaction leaves for an incremental warmup.
			r = &Region{current: &version{tables: []*table{out}}}
			r.warm = &warming{old: &version{tables: inputs}, inputs: inputs, evicted: make([]int, len(inputs))}
			rs = &readState{v: r.current, old: r.warm.old, warm: r.warm}
			return ""
		case "threshold":
			switch a := args(d); len(a) {
			case 0:
				r.warm.threshold.Store(nil)
			case 1:
				k := []byte(a[0])
				r.warm.threshold.Store(&k)
			default:
				d.Fatalf(t, "threshold: want at most one key")
			}
			return ""
		case "get", "scan":
			var sb strings.Builder
			for _, k := range args(d) {
				// Both start from the key: a get reads it, a scan
				// reads from it on, from the same side.
				side := "old"
				if tables := rs.tablesFor([]byte(k)); &tables[0] == &rs.v.tables[0] {
					side = "new"
				}
				fmt.Fprintf(&sb, "%s %s: %s\n", d.Cmd, k, side)
			}
			return sb.String()
		case "advance":
			a := args(d)
			if len(a) != 1 {
				d.Fatalf(t, "advance: want one key")
			}
			before := make([][]bool, len(inputs))
			for i, in := range inputs {
				for b := range in.reader.NumBlocks() {
					before[i] = append(before[i], in.reader.BlockCached(b))
				}
			}
			r.advanceThreshold([]byte(a[0]))
			var sb strings.Builder
			for i, in := range inputs {
				var evicted, cached []string
				for b := range in.reader.NumBlocks() {
					k := string(blockLast(t, in.reader, b))
					switch now := in.reader.BlockCached(b); {
					case now:
						cached = append(cached, k)
					case before[i][b]:
						evicted = append(evicted, k)
					}
				}
				fmt.Fprintf(&sb, "%s: evicted [%s] cached [%s]\n", in.key, strings.Join(evicted, " "), strings.Join(cached, " "))
			}
			return sb.String()
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}

// oneKeyPerBlockTable is an in-memory SST holding keys (ascending), one per
// data block, read through cache.
func oneKeyPerBlockTable(t *testing.T, name string, keys []string, cache *blockcache.Cache) *table {
	t.Helper()
	var buf bytes.Buffer
	w := sstable.NewWriter(&buf, sstable.WriterOptions{BlockSize: 1})
	for i, k := range keys {
		if err := w.Add(kv.InternalKey{UserKey: []byte(k), TS: uint64(i + 1), Kind: kv.KindSet}, []byte("v")); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	props, size, err := w.Finish()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	rd, err := sstable.Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()), name, cache)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if rd.NumBlocks() != len(keys) {
		t.Fatalf("%s: %d blocks for %d keys", name, rd.NumBlocks(), len(keys))
	}
	return &table{key: name, reader: rd, meta: NewFileMeta(0, name, props, size)}
}
