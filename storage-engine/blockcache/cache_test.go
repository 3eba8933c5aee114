package blockcache

import "testing"

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

func TestNilAndZeroCacheCacheNothing(t *testing.T) {
	for _, c := range []*Cache{nil, New(0)} {
		c.Insert(Key{1, 1}, []byte("x"), nil)
		if _, ok := c.Get(Key{1, 1}); ok {
			t.Fatal("disabled cache returned a block")
		}
	}
}
