package region

import (
	"context"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

// An Open that fails after claiming a released region gives the region
// back (its manifest says released again), so its next owner is not left
// waiting for a store that does not serve it; an Open of a region this WAL
// owned unreleased keeps the claim, since the WAL may hold acknowledged
// writes that no file has.
func TestAFailedOpenGivesBackAReleasedRegion(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t, t.TempDir())
	r := mustOpen(t, opts)
	if _, err := r.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	bucket := opts.Bucket.Prefixed(BucketPrefix(opts.Name))
	released, err := manifest.Load(ctx, bucket)
	if err != nil || !released.Released || len(released.Files) == 0 {
		t.Fatalf("after the release: manifest %+v, %v; want released with a file", released, err)
	}
	// A file of the region is gone: the next owner's Open fails after
	// its claim.
	if err := bucket.Delete(ctx, released.Files[0].Key); err != nil {
		t.Fatal(err)
	}
	next := opts
	next.WALDir += "-next-owner"
	if _, err := Open(ctx, next); err == nil {
		t.Fatal("an Open with a file missing succeeded")
	}
	m, err := manifest.Load(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if m.Number <= released.Number || !m.Released {
		t.Fatalf("after the failed open: manifest %d released=%v (was %d): the failed claim was not given back", m.Number, m.Released, released.Number)
	}

	// A region this WAL holds unreleased (a crash) stays claimed.
	opts2 := testOptions(t, t.TempDir())
	r2 := mustOpen(t, opts2)
	if _, err := r2.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := r2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Put([]byte("unflushed"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := r2.Close(); err != nil {
		t.Fatal(err)
	}
	bucket2 := opts2.Bucket.Prefixed(BucketPrefix(opts2.Name))
	owned, err := manifest.Load(ctx, bucket2)
	if err != nil || owned.Released || len(owned.Files) == 0 {
		t.Fatalf("after a close without release: manifest %+v, %v; want owned with a file", owned, err)
	}
	if err := bucket2.Delete(ctx, owned.Files[0].Key); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, opts2); err == nil {
		t.Fatal("an Open with a file missing succeeded")
	}
	if m, err := manifest.Load(ctx, bucket2); err != nil || m.Released {
		t.Fatalf("after a failed reopen of its own unreleased region: manifest %d released=%v, %v; want still claimed", m.Number, m.Released, err)
	}
}
