package memstore

import (
	"github.com/bellows-kv/bellows/storage-engine/iterator"
	"github.com/bellows-kv/bellows/storage-engine/kv"
)

type skiplistIter struct {
	s *Skiplist
	n *node
}

// NewIterator returns an iterator over every version. The iterator sees every node linked before
// each positioning call; concurrent inserts may or may not appear, which is
// fine because readers filter by timestamp.
func (s *Skiplist) NewIterator() iterator.Iterator { return &skiplistIter{s: s} }

func (it *skiplistIter) SeekGE(key kv.InternalKey) bool {
	it.n = it.s.seekGE(key)
	return it.n != nil
}

func (it *skiplistIter) SeekLT(key kv.InternalKey) bool {
	it.n = it.s.seekLT(key)
	return it.n != nil
}

func (it *skiplistIter) Last() bool {
	it.n = it.s.last()
	return it.n != nil
}

// Prev searches for the current node's predecessor: a node linked since
// the iterator arrived may be it, as with Next.
func (it *skiplistIter) Prev() bool {
	if it.n == nil {
		return false
	}
	it.n = it.s.seekLT(it.n.key)
	return it.n != nil
}

func (it *skiplistIter) First() bool {
	it.n = it.s.head.next(0).Load()
	return it.n != nil
}

func (it *skiplistIter) Next() bool {
	if it.n == nil {
		return false
	}
	it.n = it.n.next(0).Load()
	return it.n != nil
}

func (it *skiplistIter) Valid() bool         { return it.n != nil }
func (it *skiplistIter) Key() kv.InternalKey { return it.n.key }
func (it *skiplistIter) Value() []byte       { return it.n.value }
func (it *skiplistIter) Err() error          { return nil }
func (it *skiplistIter) Close() error        { it.n = nil; return nil }
