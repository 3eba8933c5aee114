package region

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// The last write of a key in a batch is the one applied, and the writes
// that survive keep the batch's order, whether or not Grow reserved room.
func TestBatchAppliesTheLastWriteOfEachKeyInOrder(t *testing.T) {
	for _, grow := range []bool{false, true} {
		t.Run(fmt.Sprintf("grow=%t", grow), func(t *testing.T) {
			b := new(Batch)
			if grow {
				b.Grow(6, 64)
			}
			b.Put([]byte("k"), []byte("1")).Put([]byte("j"), []byte("2")).Put([]byte("k"), []byte("3")).
				Delete([]byte("j")).Put([]byte("a"), []byte("4")).Put([]byte("k"), []byte("5"))
			b.dedupe()
			var got []string
			for _, o := range b.ops {
				got = append(got, fmt.Sprintf("%s=%s/%v", o.key, o.value, o.kind))
			}
			want := []string{
				fmt.Sprintf("j=/%v", kv.KindDelete), fmt.Sprintf("a=4/%v", kv.KindSet), fmt.Sprintf("k=5/%v", kv.KindSet),
			}
			if !slices.Equal(got, want) {
				t.Fatalf("after dedupe: %v, want %v", got, want)
			}

			r := mustOpen(t, testOptions(t, t.TempDir()))
			defer r.Close()
			b = new(Batch).Put([]byte("k"), []byte("1")).Put([]byte("j"), []byte("2")).Put([]byte("k"), []byte("3")).Delete([]byte("j"))
			if _, err := r.Apply(b); err != nil {
				t.Fatal(err)
			}
			mustGet(t, r, "k", "3")
			if _, ok, err := r.Get([]byte("j"), kv.MaxTimestamp); ok || err != nil {
				t.Fatalf("j after its put and delete in one batch: found %v, %v", ok, err)
			}
		})
	}
}

// Put copies: the caller may reuse its buffers at once, and appending to
// one write's key or value cannot reach another's bytes in the shared room
// Grow reserved. Once room is reserved, adding the writes allocates
// nothing.
func TestBatchCopiesIntoTheRoomGrowReserved(t *testing.T) {
	key, val := []byte("key-a"), []byte("value-a")
	b := new(Batch).Grow(2, 2*(len(key)+len(val)))
	b.Put(key, val)
	copy(key, "key-b")
	copy(val, "value-b")
	b.Put(key, val)
	copy(key, "XXXXX")
	_ = append(b.ops[0].key, '!')
	_ = append(b.ops[0].value, '!')
	for i, want := range []string{"key-a=value-a", "key-b=value-b"} {
		if got := string(b.ops[i].key) + "=" + string(b.ops[i].value); got != want {
			t.Fatalf("op %d: %q, want %q", i, got, want)
		}
	}

	puts := 86
	allocs := testing.AllocsPerRun(100, func() {
		b := new(Batch).Grow(puts, puts*(len(key)+len(val)))
		for range puts {
			b.Put(key, val)
		}
		b.dedupe()
	})
	// The Batch, its ops and its room; dedupe's index fits on the stack.
	if allocs > 3 {
		t.Fatalf("a grown batch of %d puts, deduplicated: %v allocations, want at most 3", puts, allocs)
	}
	if !bytes.Equal(b.ops[1].key, []byte("key-b")) {
		t.Fatal("the batch's bytes changed")
	}
}

// BenchmarkApplyBatch applies batches of 86 puts of a 16 B key and a 100 B
// value (the memstore benchmark's 10 KB batches) to a region with an
// asynchronous WAL: B/op is the garbage a write leaves, which sets the
// pace of the GC that stalls readers beside the writers.
func BenchmarkApplyBatch(b *testing.B) {
	for _, grow := range []bool{false, true} {
		b.Run(fmt.Sprintf("grow=%t", grow), func(b *testing.B) {
			opts := testOptions(b, b.TempDir())
			opts.MemstoreBytes = 256 << 20
			r := mustOpen(b, opts)
			defer r.Close()
			const puts, keySize, valueSize = 86, 16, 100
			key, val := make([]byte, keySize), bytes.Repeat([]byte{'v'}, valueSize)
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				batch := new(Batch)
				if grow {
					batch.Grow(puts, puts*(keySize+valueSize))
				}
				for range puts {
					n++
					copy(key, fmt.Appendf(key[:0], "key%013d", n*7919%1_000_000))
					batch.Put(key, val)
				}
				if _, err := r.Apply(batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
