package process

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/changefeed"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/walarchive"
)

// checkFeedAgainstScan reads the bucket's change feed (package changefeed)
// from the archive's start until its resolved mark passes after, then
// rebuilds the key space from the changes at or below that mark and
// compares it with a scan of the cluster at the mark: the feed, read from
// the WAL archive alone, must hold every committed change, once, and none
// that did not commit.
func checkFeedAgainstScan(t *testing.T, ctx context.Context, bucketURL string, c *client.Client, after uint64) {
	t.Helper()
	bucket, err := blob.Open(ctx, bucketURL)
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	f := changefeed.New(bucket, changefeed.Options{AfterTS: 1})
	var changes []region.Change
	seen := map[[2]any]bool{}
	deadline := time.Now().Add(time.Minute)
	for f.Resolved() <= after {
		if time.Now().After(deadline) {
			t.Fatalf("the change feed's mark is %d after a minute, not past %d", f.Resolved(), after)
		}
		u, err := f.Poll(ctx)
		if err != nil {
			t.Logf("change feed poll: %v", err)
		}
		for _, ch := range u.Changes {
			id := [2]any{string(ch.Key), ch.TS}
			if seen[id] {
				t.Errorf("the change feed delivered %q at %d twice", ch.Key, ch.TS)
			}
			seen[id] = true
		}
		changes = append(changes, u.Changes...)
		if f.Resolved() <= after {
			time.Sleep(50 * time.Millisecond) // the archive's next ship: a poll interval, not synchronisation
		}
	}
	mark := f.Resolved()
	slices.SortStableFunc(changes, func(a, b region.Change) int { return cmp.Compare(a.TS, b.TS) })
	fromFeed := map[string]string{}
	for _, ch := range changes {
		if ch.TS > mark {
			continue
		}
		if ch.Delete {
			delete(fromFeed, string(ch.Key))
		} else {
			fromFeed[string(ch.Key)] = string(ch.Value)
		}
	}
	kvs, err := c.ScanAll(ctx, nil, nil, client.ScanOptions{ReadTS: &mark})
	if err != nil {
		t.Fatalf("scan at the feed's mark %d: %v", mark, err)
	}
	fromScan := map[string]string{}
	for _, kv := range kvs {
		fromScan[string(kv.Key)] = string(kv.Value)
	}
	if !maps.Equal(fromFeed, fromScan) {
		n := 0
		for k, v := range fromScan {
			if fv, ok := fromFeed[k]; (!ok || fv != v) && n < 10 {
				t.Errorf("at the feed's mark %d: %q is %q in the cluster, %q (found %t) from the feed", mark, k, trim([]byte(v)), trim([]byte(fv)), ok)
				n++
			}
		}
		for k, v := range fromFeed {
			if _, ok := fromScan[k]; !ok && n < 10 {
				t.Errorf("at the feed's mark %d: %q is %q from the feed and absent from the cluster", mark, k, trim([]byte(v)))
				n++
			}
		}
		t.Fatalf("the change feed's state at %d (%d keys) differs from the cluster's (%d keys)", mark, len(fromFeed), len(fromScan))
	}
	t.Logf("the bucket's change feed: %d changes; at its mark %d its state is the cluster's (%d keys)", len(changes), mark, len(fromScan))
}

// whereInArchive logs, for changes a feed missed (key@ts), the archive
// stream and segment that hold each, and each stream's state.
func whereInArchive(t *testing.T, bucketURL string, ids []string) {
	ctx := context.Background()
	bucket, err := blob.Open(ctx, bucketURL)
	if err != nil {
		t.Log(err)
		return
	}
	defer bucket.Close()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	streams, err := walarchive.Streams(ctx, bucket)
	if err != nil {
		t.Log(err)
		return
	}
	for _, s := range streams {
		found := map[uint64]int{}
		var lo, hi uint64
		err := walarchive.ReadSegments(ctx, bucket, s, 0, func(seg uint64, rec []byte) error {
			return region.DecodeChanges(rec, func(c region.Change) {
				if want[fmt.Sprintf("%s@%d", c.Key, c.TS)] {
					found[seg]++
					if lo == 0 || c.TS < lo {
						lo = c.TS
					}
					hi = max(hi, c.TS)
				}
			})
		})
		if len(found) > 0 {
			t.Logf("  missed changes' timestamps %d..%d", lo, hi)
		}
		t.Logf("stream %s/%s: from %d, frontier %d, final %t, first segment %d, sealed below %d; the missed changes by segment %v (%v)",
			s.Region, s.WALID, s.FromTS, s.TS, s.Final, s.FirstSegment, s.SealedBelow, found, err)
	}
}
