package blockcache

import (
	"fmt"
	"testing"
)

func TestCacheIsByteBoundedAndEvictsLRU(t *testing.T) {
	c := New(numShards * 2048)
	blk := make([]byte, 900)
	for i := 0; i < 1000; i++ {
		c.Insert(Key{File: 1, Offset: uint64(i)}, blk, []byte("k"))
	}
	st := c.Stats()
	if st.UsedBytes > st.Capacity {
		t.Fatalf("used %d > capacity %d", st.UsedBytes, st.Capacity)
	}
	if st.Evictions == 0 {
		t.Fatal("expected evictions after inserting far more than capacity")
	}
	// The most recent insert is always resident.
	if _, ok := c.Get(Key{File: 1, Offset: 999}); !ok {
		t.Fatal("most recently inserted block was evicted")
	}
}

func TestEvictFileUpToDropsOnlyBlocksAtOrBelowThreshold(t *testing.T) {
	c := New(1 << 20)
	for i := 0; i < 10; i++ {
		c.Insert(Key{File: 7, Offset: uint64(i)}, []byte("x"), []byte(fmt.Sprintf("key%02d", i)))
		c.Insert(Key{File: 8, Offset: uint64(i)}, []byte("x"), []byte(fmt.Sprintf("key%02d", i)))
	}
	if n := c.EvictFileUpTo(7, []byte("key04")); n != 5 {
		t.Fatalf("evicted %d blocks, want 5 (key00..key04)", n)
	}
	for i := 0; i < 10; i++ {
		_, ok := c.Get(Key{File: 7, Offset: uint64(i)})
		if want := i > 4; ok != want {
			t.Errorf("file 7 block %d cached=%v, want %v", i, ok, want)
		}
		if _, ok := c.Get(Key{File: 8, Offset: uint64(i)}); !ok {
			t.Errorf("file 8 block %d was evicted by an eviction of file 7", i)
		}
	}
	if n := c.EvictFile(8); n != 10 {
		t.Fatalf("EvictFile evicted %d, want 10", n)
	}
}

func TestNilAndZeroCacheCacheNothing(t *testing.T) {
	for _, c := range []*Cache{nil, New(0)} {
		c.Insert(Key{1, 1}, []byte("x"), nil)
		if _, ok := c.Get(Key{1, 1}); ok {
			t.Fatal("disabled cache returned a block")
		}
	}
}
