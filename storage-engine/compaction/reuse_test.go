package compaction

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/iterator"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// scribbling returns each value from one buffer it overwrites on every
// move, as a streaming SST iterator may once it reads the next block.
type scribbling struct {
	iterator.Iterator
	buf []byte
}

func (s *scribbling) First() bool { s.scribble(); return s.Iterator.First() }
func (s *scribbling) Next() bool  { s.scribble(); return s.Iterator.Next() }
func (s *scribbling) scribble() {
	for i := range s.buf {
		s.buf[i] = 'X'
	}
}
func (s *scribbling) Value() []byte {
	s.buf = append(s.buf[:0], s.Iterator.Value()...)
	return s.buf
}

// Merge copies what it keeps of a key's versions before its input moves
// on: with every version kept, the output holds every value as written,
// though the input reused one buffer for all of them.
func TestMergeCopiesValuesBeforeItsInputMovesOn(t *testing.T) {
	var src bytes.Buffer
	w := sstable.NewWriter(&src, sstable.WriterOptions{BlockSize: 64})
	type ver struct {
		key kv.InternalKey
		val string
	}
	var want []ver
	for k := range 20 {
		for ts := uint64(5); ts >= 1; ts-- { // newest first, as keys order
			v := ver{kv.InternalKey{UserKey: []byte(fmt.Sprintf("k%02d", k)), TS: ts, Kind: kv.KindSet}, fmt.Sprintf("value-%02d-%d", k, ts)}
			want = append(want, v)
			if err := w.Add(v.key, []byte(v.val)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, _, err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	r, err := sstable.Open(bytes.NewReader(src.Bytes()), int64(src.Len()), "in.sst", nil)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ow := sstable.NewWriter(&out, sstable.WriterOptions{})
	if _, err := Merge(context.Background(), &scribbling{Iterator: r.NewIter()}, MergeOptions{}, ow); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ow.Finish(); err != nil {
		t.Fatal(err)
	}
	or, err := sstable.Open(bytes.NewReader(out.Bytes()), int64(out.Len()), "out.sst", nil)
	if err != nil {
		t.Fatal(err)
	}
	it := or.NewIter()
	i := 0
	for ok := it.First(); ok; ok = it.Next() {
		if i >= len(want) || kv.Compare(it.Key(), want[i].key) != 0 || string(it.Value()) != want[i].val {
			t.Fatalf("output version %d: %v=%q, want %v=%q", i, it.Key(), it.Value(), want[min(i, len(want)-1)].key, want[min(i, len(want)-1)].val)
		}
		i++
	}
	if it.Err() != nil || i != len(want) {
		t.Fatalf("output has %d versions (err %v), want %d", i, it.Err(), len(want))
	}
}
