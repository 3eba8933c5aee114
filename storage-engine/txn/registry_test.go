package txn

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// A registered transaction's life: it pins its start in the store's
// regions while open; a commit ends it (a retry with the commit's request
// ID gets the same answer, another commit is refused); a rollback or the
// timeout ends it without one (TXN_ENDED), and releases the pins.
func TestTxnRegistryLifecycle(t *testing.T) {
	regions := openRegions(t, 4, compaction.Retention{MaxVersions: 1})
	g := newRegistry(nil, time.Minute, 10*time.Minute)
	now := time.Now()
	pinned := func() int {
		n := 0
		for _, e := range regions {
			n += len(e.Snapshots())
		}
		return n
	}

	committed, err := g.begin(100, now, regions)
	if err != nil {
		t.Fatal(err)
	}
	if pinned() != len(regions) {
		t.Fatalf("an open transaction pins %d snapshots, want one per region (%d)", pinned(), len(regions))
	}
	if _, _, err := g.startCommit(committed, 99, "r1", now); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a commit naming another start_ts: %v, want InvalidArgument", err)
	}
	ts, done, err := g.startCommit(committed, 0, "r1", now)
	if err != nil || done != nil || ts != 100 {
		t.Fatalf("startCommit = %d, %v, %v", ts, done, err)
	}
	if err := g.rollback(committed, now); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("rolling back a transaction being committed: %v, want FailedPrecondition", err)
	}
	g.finishCommit(committed, &kvpb.CommitTxnResponse{CommitTs: 123}, nil, now)
	if pinned() != 0 {
		t.Fatalf("a committed transaction still pins %d snapshots", pinned())
	}
	if _, done, err := g.startCommit(committed, 0, "r1", now); err != nil || done.GetCommitTs() != 123 {
		t.Fatalf("a retry of the commit got %v, %v; want the first answer, commit_ts 123", done, err)
	}
	if _, _, err := g.startCommit(committed, 0, "r2", now); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a second commit: %v, want FailedPrecondition", err)
	}
	if err := g.rollback(committed, now); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("rolling back a committed transaction: %v, want FailedPrecondition", err)
	}

	rolledBack, _ := g.begin(200, now, regions)
	if err := g.rollback(rolledBack, now); err != nil {
		t.Fatal(err)
	}
	if err := g.rollback(rolledBack, now); err != nil {
		t.Fatalf("rolling back twice: %v", err)
	}
	if _, _, err := g.startCommit(rolledBack, 0, "r3", now); !hasReasonOf(err, contract.TxnEndedReason) {
		t.Fatalf("committing a rolled-back transaction: %v, want FailedPrecondition TXN_ENDED", err)
	}

	conflicted, _ := g.begin(300, now, regions)
	_, _, _ = g.startCommit(conflicted, 0, "r4", now)
	g.finishCommit(conflicted, nil, status.Error(codes.Aborted, "write conflict"), now)
	if _, _, err := g.startCommit(conflicted, 0, "r5", now); !hasReasonOf(err, contract.TxnEndedReason) {
		t.Fatalf("committing an aborted transaction again: %v, want TXN_ENDED", err)
	}

	retried, _ := g.begin(400, now, regions)
	_, _, _ = g.startCommit(retried, 0, "r6", now)
	g.finishCommit(retried, nil, status.Error(codes.Unavailable, "store restarting"), now)
	if _, _, err := g.startCommit(retried, 0, "r6", now); err != nil {
		t.Fatalf("a commit that failed without an outcome stays open for its retry: %v", err)
	}
	g.finishCommit(retried, &kvpb.CommitTxnResponse{CommitTs: 401}, nil, now)

	// A store whose regions keep every version pins nothing.
	keepers := openRegions(t, 4, compaction.Retention{})
	unpinned, _ := g.begin(450, now, keepers)
	for _, e := range keepers {
		if got := e.Snapshots(); len(got) != 0 {
			t.Fatalf("a region that keeps every version was pinned at %v", got)
		}
	}
	_ = g.rollback(unpinned, now)

	stale, _ := g.begin(500, now, regions)
	if pinned() != len(regions) {
		t.Fatalf("pins = %d, want only the open transaction's %d", pinned(), len(regions))
	}
	g.Sweep(now.Add(time.Minute + time.Second))
	if pinned() != 0 {
		t.Fatalf("a timed-out transaction still pins %d snapshots", pinned())
	}
	if _, _, err := g.startCommit(stale, 0, "r7", now.Add(2*time.Minute)); !hasReasonOf(err, contract.TxnEndedReason) || !contains(err, "timed out") {
		t.Fatalf("committing a timed-out transaction: %v, want TXN_ENDED saying it timed out", err)
	}
	if _, _, err := g.startCommit("tnosuch", 0, "", now); status.Code(err) != codes.NotFound {
		t.Fatalf("an unknown id: %v, want NotFound", err)
	}
	g.Sweep(now.Add(time.Hour))
	if _, _, err := g.startCommit(committed, 0, "r1", now.Add(time.Hour)); status.Code(err) != codes.NotFound {
		t.Fatalf("an id ended past the retry window: %v, want NotFound", err)
	}
}

// openRegions opens n regions, each the whole key space in its own bucket,
// that keep versions by retention.
func openRegions(t *testing.T, n int, retention compaction.Retention) []*region.Region {
	t.Helper()
	var out []*region.Region
	for i := range n {
		dir := filepath.Join(t.TempDir(), fmt.Sprint(i))
		b, err := blob.Open(context.Background(), "file://"+filepath.Join(dir, "bucket"))
		if err != nil {
			t.Fatal(err)
		}
		r, err := region.Open(context.Background(), region.Options{Name: fmt.Sprintf("r%d", i), Bucket: b, WALDir: filepath.Join(dir, "wal"),
			DisableAutoCompaction: true, MemstoreBytes: 1 << 20, WALMode: wal.ModeAsync, Retention: retention})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		out = append(out, r)
	}
	return out
}

func hasReasonOf(err error, reason string) bool {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(interface{ GetReason() string }); ok && info.GetReason() == reason {
			return status.Code(err) == codes.FailedPrecondition
		}
	}
	return false
}

func contains(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}
