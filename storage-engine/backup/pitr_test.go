package backup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/walarchive"
)

func archivedEvery(d time.Duration) func(*region.Options) {
	return func(o *region.Options) { o.WALArchiveInterval = d }
}

// del deletes key in the region whose range holds it.
func (c *cluster) del(key string) {
	c.t.Helper()
	for _, sp := range c.spans {
		if sp.Contains([]byte(key)) {
			if _, err := c.Regions[sp.Name].Delete([]byte(key)); err != nil {
				c.t.Fatal(err)
			}
			return
		}
	}
}

// waitArchived waits until every region's archive frontier is at least ts.
func (c *cluster) waitArchived(ts uint64) {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for name, r := range c.Regions {
		for {
			st := r.ArchiveStatus()
			if st.Frontier >= ts {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("region %s's archive frontier is %d, not past %d, after 20s (last error %v)", name, st.Frontier, ts, st.Err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// round writes every key's value v, and deletes one key in seven.
func (c *cluster) round(v string, n int) {
	for i := range n {
		k := fmt.Sprintf("%c%03d", 'a'+i%26, i)
		if i%7 == 3 {
			c.del(k)
			continue
		}
		c.put(k, v)
	}
}

// A restore to a time between rounds of writes, from a backup taken before
// them and the archive of the WAL since, serves exactly what a read of the
// original at that time returns: each round's writes and deletes appear
// whole at the times after it and not at all before, in both regions, and
// a flush (whose segments the WAL then removes once archived) loses none.
func TestARestoreToATimeIsTheStateAtThatTime(t *testing.T) {
	ctx := context.Background()
	c := openClusterWith(t, t.TempDir(), archivedEvery(5*time.Millisecond), "m")
	c.round("v1", 150)
	base, err := Create(ctx, c.Bucket, c, "base")
	if err != nil {
		t.Fatal(err)
	}
	times := []uint64{base.TS}
	for i, v := range []string{"v2", "v3", "v4"} {
		c.round(v, 150-i*30)
		if i == 1 {
			for _, r := range c.Regions {
				if err := r.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		times = append(times, c.Clock.Now())
	}
	c.put("a000", "after every mark")
	c.waitArchived(times[len(times)-1])
	for i, ts := range times {
		want := c.state(ts)
		dir := t.TempDir()
		dst := openBucket(t, "file://"+dir+"/bucket")
		b, err := RestoreToTime(ctx, c.Bucket, ts, dst)
		if err != nil {
			t.Fatalf("restore to mark %d: %v", i, err)
		}
		if b.ID != "base" {
			t.Fatalf("restore to mark %d started from backup %s, want base", i, b.ID)
		}
		got := serveRestored(t, dst, dir, len(b.Regions))
		if d := diff(got, want); d != "" {
			t.Fatalf("restored to mark %d (ts %d), the cluster differs from a read of the original at that time:\n%s", i, ts, d)
		}
		if i > 0 && got["b001"] != []string{"", "v2", "v3", "v4"}[i] {
			t.Fatalf("mark %d: b001=%q; the rounds are not told apart", i, got["b001"])
		}
	}
}

// A restore refuses a time before the oldest backup and one past the
// archive's frontier, naming the window it can reach, and a non-empty
// target.
func TestARestoreOutsideTheWindowIsRefusedNamingIt(t *testing.T) {
	ctx := context.Background()
	c := openClusterWith(t, t.TempDir(), archivedEvery(5*time.Millisecond), "m")
	c.round("v1", 50)
	base, err := Create(ctx, c.Bucket, c, "base")
	if err != nil {
		t.Fatal(err)
	}
	c.round("v2", 50)
	now := c.Clock.Now()
	c.waitArchived(now)
	w, err := ArchiveWindow(ctx, c.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if w.From != base.TS || w.To < now {
		t.Fatalf("window %d to %d; want from the backup's %d to at least %d", w.From, w.To, base.TS, now)
	}
	for _, tc := range []struct {
		name string
		ts   uint64
		says string
	}{
		{"before the oldest backup", base.TS - 1, "before the oldest backup"},
		{"past the frontier", now + uint64(time.Hour), "past the archive"},
	} {
		_, err := RestoreToTime(ctx, c.Bucket, tc.ts, openBucket(t, "file://"+t.TempDir()))
		if !errors.Is(err, ErrOutsideWindow) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), FormatTS(base.TS)) {
			t.Errorf("%s: %v; want ErrOutsideWindow saying %q and naming the window's start", tc.name, err, tc.says)
		}
	}
	full := openBucket(t, "file://"+t.TempDir())
	if err := full.WriteAll(ctx, "something", []byte("x"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreToTime(ctx, c.Bucket, now, full); !errors.Is(err, ErrTargetNotEmpty) {
		t.Errorf("restore into a bucket that holds an object: %v, want ErrTargetNotEmpty", err)
	}
}

// An archive with a part missing is refused, naming the region, the WAL and
// the bytes missing, rather than restored without them.
func TestARestoreThroughAnArchiveWithAHoleIsRefused(t *testing.T) {
	ctx := context.Background()
	c := openClusterWith(t, t.TempDir(), archivedEvery(time.Millisecond), "m")
	base, err := Create(ctx, c.Bucket, c, "base")
	if err != nil {
		t.Fatal(err)
	}
	// Several parts: each round is shipped before the next is written.
	for i := range 4 {
		c.round(fmt.Sprint("v", i), 40)
		c.waitArchived(c.Clock.Now())
	}
	now := c.Clock.Now()
	c.waitArchived(now)
	objs, err := c.Bucket.List(ctx, walarchive.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, o := range objs {
		if strings.HasSuffix(o.Key, ".part") && strings.Contains(o.Key, "region-001") {
			parts = append(parts, o.Key)
		}
	}
	if len(parts) < 3 {
		t.Fatalf("the archive of region-001 has %d parts (%v); the test needs one in the middle", len(parts), parts)
	}
	if err := c.Bucket.Delete(ctx, parts[1]); err != nil {
		t.Fatal(err)
	}
	_, err = RestoreToTime(ctx, c.Bucket, now, openBucket(t, "file://"+t.TempDir()))
	if !errors.Is(err, walarchive.ErrGap) || !strings.Contains(err.Error(), "region-001") || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("restore through a hole: %v; want ErrGap naming region-001 and what is missing", err)
	}
	if _, err := RestoreToTime(ctx, c.Bucket, base.TS, openBucket(t, "file://"+t.TempDir())); err != nil {
		t.Fatalf("a restore to the backup's own time needs no archive: %v", err)
	}
}

// Deleting the oldest backup deletes the archive's segments that only a
// restore from before the next backup could need, and nothing a restore
// from a remaining backup needs: a restore to a time after the remaining
// backup is still exact, one to a time before it is refused.
func TestRetentionDeletesTheArchiveNoBackupNeedsAndNothingElse(t *testing.T) {
	ctx := context.Background()
	c := openClusterWith(t, t.TempDir(), archivedEvery(5*time.Millisecond), "m")
	flush := func() {
		for _, r := range c.Regions {
			if err := r.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.round("v1", 100)
	flush()
	if _, err := Create(ctx, c.Bucket, c, "first"); err != nil {
		t.Fatal(err)
	}
	c.round("v2", 100)
	flush()
	between := c.Clock.Now()
	second, err := Create(ctx, c.Bucket, c, "second")
	if err != nil {
		t.Fatal(err)
	}
	c.round("v3", 100)
	flush()
	c.round("v4", 50)
	last := c.Clock.Now()
	c.waitArchived(last)
	parts := func() int {
		objs, err := c.Bucket.List(ctx, walarchive.Prefix)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, o := range objs {
			if strings.HasSuffix(o.Key, ".part") {
				n++
			}
		}
		return n
	}
	before := parts()
	if _, err := Delete(ctx, c.Bucket, "first"); err != nil {
		t.Fatal(err)
	}
	after := parts()
	if after >= before || after == 0 {
		t.Fatalf("deleting the oldest backup left %d of the archive's %d parts; want some deleted and some kept", after, before)
	}
	dir := t.TempDir()
	dst := openBucket(t, "file://"+dir+"/bucket")
	if _, err := RestoreToTime(ctx, c.Bucket, last, dst); err != nil {
		t.Fatal(err)
	}
	if d := diff(serveRestored(t, dst, dir, len(second.Regions)), c.state(last)); d != "" {
		t.Fatalf("after retention, a restore from the remaining backup differs from the original:\n%s", d)
	}
	if _, err := RestoreToTime(ctx, c.Bucket, between, openBucket(t, "file://"+t.TempDir())); !errors.Is(err, ErrOutsideWindow) {
		t.Fatalf("a restore to before the oldest remaining backup: %v, want ErrOutsideWindow", err)
	}
	t.Logf("retention deleted %d of %d archive parts", before-after, before)
}
