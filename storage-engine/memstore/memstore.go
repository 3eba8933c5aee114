// Package memstore holds a region's recent writes in memory until they are
// flushed to an SST.
//
// Invariants:
//   - Add is safe for concurrent use with other Adds and with readers; readers
//     never block writers.
//   - Internal keys are unique (every version has its own commit timestamp),
//     so the list never holds two equal keys.
//   - Nothing is ever removed from a memstore; it is dropped whole after flush.
package memstore

import (
	"github.com/bellows-kv/bellows/storage-engine/iterator"
	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// Memstore is what the region writes to and reads from. Today's only
// implementation is one concurrent skiplist (Skiplist). This interface is
// where the compacting memstore of the Accordion paper (VLDB 2018: an
// active segment plus a pipeline of flat segments) will plug in; it is not
// built yet.
type Memstore interface {
	// Add inserts one version. key and value are copied.
	Add(key kv.InternalKey, value []byte)
	// Get returns the newest version of userKey with timestamp ≤ readTS.
	Get(userKey []byte, readTS uint64) (value []byte, kind kv.Kind, ok bool)
	// NewIterator returns an iterator over every version in the memstore.
	NewIterator() iterator.Iterator
	// ApproximateBytes is the memory the memstore accounts for, including
	// per-entry overhead; it drives flush decisions.
	ApproximateBytes() int64
	// Len is the number of versions held.
	Len() int64
}
