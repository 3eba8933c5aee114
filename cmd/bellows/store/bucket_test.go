package store

import (
	"context"
	"strings"
	"testing"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/blob"
)

// A store refuses a bucket a restore is still writing (or crashed in),
// whatever else it holds, and says what to do.
func TestABucketBeingRestoredIsRefused(t *testing.T) {
	ctx := context.Background()
	url := "file://" + t.TempDir()
	b, err := blob.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := ensureBucketMarker(ctx, b, url, true); err != nil {
		t.Fatalf("a new cluster's bucket: %v", err)
	}
	if err := b.WriteAll(ctx, contract.RestoreMarker, []byte("{}"), true); err != nil {
		t.Fatal(err)
	}
	err = ensureBucketMarker(ctx, b, url, true)
	if err == nil || !strings.Contains(err.Error(), "restore") || !strings.Contains(err.Error(), contract.RestoreMarker) {
		t.Fatalf("a bucket holding %s: %v, want a refusal naming the restore", contract.RestoreMarker, err)
	}
}
