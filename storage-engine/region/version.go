package region

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// table is an open SST. It is referenced by every version that lists it; when
// the last reference goes and the file is obsolete (no longer in the current
// manifest) it is closed and deleted from the bucket.
type table struct {
	meta     manifest.FileMeta
	key      string
	obj      blob.Object
	reader   *sstable.Reader
	refs     atomic.Int32
	obsolete atomic.Bool
	bucket   *blob.Bucket
	// beforeClose runs when the last reference goes, before the file is
	// closed (and deleted if obsolete).
	beforeClose func(*table)
	onDelete    func(*table)
	// remote is the copy of this file a compaction worker keeps in memory
	// (WarmupRemoteCache), set before the table is shared. It is released
	// when the table closes: the file left every version (compacted away)
	// or the region closed or was released, so nothing reads it any more.
	remote compaction.BlockSource
	// releases counts the region's releases of remote copies in flight:
	// shutdown waits for them (each at most a second), so a store that
	// stops gracefully frees its workers' memory before it exits.
	releases *sync.WaitGroup
}

func (t *table) ref() { t.refs.Add(1) }

func (t *table) unref() {
	if t.refs.Add(-1) != 0 {
		return
	}
	if t.beforeClose != nil {
		t.beforeClose(t)
	}
	if t.remote != nil {
		t.reader.SetRemote(nil)
		// Not on the caller's path (a read, a Close): a stopped worker
		// must not delay it by the release's timeout.
		if t.releases != nil {
			t.releases.Add(1)
		}
		go func(src compaction.BlockSource) {
			releaseBlocks(src)
			if t.releases != nil {
				t.releases.Done()
			}
		}(t.remote)
	}
	_ = t.obj.Close()
	if t.obsolete.Load() {
		// A reference's object is its home's, shared with the home's
		// other descendants (split.go): dropped from this region only.
		if t.meta.Home == "" {
			_ = t.bucket.Delete(context.Background(), t.key)
		}
		if t.onDelete != nil {
			t.onDelete(t)
		}
	}
}

// version is an immutable list of live tables, oldest first. Readers hold a
// reference for the duration of a read.
type version struct {
	tables []*table
	refs   atomic.Int32
}

func newVersion(tables []*table) *version {
	v := &version{tables: tables}
	for _, t := range tables {
		t.ref()
	}
	v.refs.Store(1)
	return v
}

func (v *version) ref() { v.refs.Add(1) }

func (v *version) unref() {
	if v.refs.Add(-1) == 0 {
		for _, t := range v.tables {
			t.unref()
		}
	}
}
