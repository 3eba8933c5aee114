package manifest

import (
	"context"
	"errors"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/blob"
)

func TestStaleOwnerIsFenced(t *testing.T) {
	ctx := context.Background()
	b, err := blob.Open(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m0, err := Load(ctx, b)
	if err != nil || m0.Number != 0 {
		t.Fatalf("empty bucket: %+v, %v", m0, err)
	}
	// Owner A opens (claims) the region.
	a := m0.Clone()
	a.Owner = "a"
	if err := Commit(ctx, b, m0, &a); err != nil {
		t.Fatal(err)
	}
	// Owner B opens later, loads A's manifest and claims it.
	seenByB, _ := Load(ctx, b)
	bm := seenByB.Clone()
	bm.Owner = "b"
	if err := Commit(ctx, b, seenByB, &bm); err != nil {
		t.Fatal(err)
	}
	// A, still holding its stale view, tries to commit a flush.
	a2 := a.Clone()
	a2.Files = append(a2.Files, FileMeta{Num: 1})
	if err := Commit(ctx, b, a, &a2); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale commit: err = %v, want ErrFenced", err)
	}
	got, _ := Load(ctx, b)
	if got.Owner != "b" || len(got.Files) != 0 {
		t.Fatalf("newest manifest %+v was overwritten by the stale owner", got)
	}
	if err := RemoveOlder(ctx, b, got, 1); err != nil {
		t.Fatal(err)
	}
	if objs, _ := b.List(ctx, prefix); len(objs) != 2 {
		t.Fatalf("kept %d manifests, want 2", len(objs))
	}
}
