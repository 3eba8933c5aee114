package backup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/blockcache"
	"github.com/bellows-kv/bellows/storage-engine/hlc"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// cluster is the regions of one bucket opened in this process: the Cluster
// a backup drives, with region.Checkpoint and CopyRegion as a store's
// Admin.Checkpoint runs them.
type cluster struct {
	LocalCluster
	t *testing.T
	// spans are the regions' ranges in the map: a store routes each key
	// to its region by them (regions made whole do not know theirs).
	spans []regionmap.Region
	// afterTimestamp, when set, runs after the backup's timestamp is
	// taken, before any region is checkpointed: writes there are above
	// the backup's TS but reach the files its checkpoint copies.
	afterTimestamp func()
	// failRegion, when set, makes that region's checkpoint fail after it
	// copied its files.
	failRegion string
}

func openCluster(t *testing.T, dir string, bounds ...string) *cluster {
	t.Helper()
	return openClusterWith(t, dir, nil, bounds...)
}

// openClusterWith is openCluster with opts applied to each region's options.
func openClusterWith(t *testing.T, dir string, opts func(*region.Options), bounds ...string) *cluster {
	t.Helper()
	ctx := context.Background()
	b := openBucket(t, "file://"+dir+"/bucket")
	var keys [][]byte
	for _, k := range bounds {
		keys = append(keys, []byte(k))
	}
	initial, err := regionmap.Initial(keys)
	if err != nil {
		t.Fatal(err)
	}
	m, err := regionmap.Bootstrap(ctx, b, initial)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{LocalCluster: LocalCluster{Bucket: b, Clock: hlc.New(nil, 0), Regions: map[string]*region.Region{}}, t: t, spans: m.Region}
	for _, r := range m.Region {
		c.Regions[r.Name] = openRegion(t, b, c.Clock, dir+"/wal/"+r.Name, r.Name, opts)
	}
	return c
}

func openBucket(t *testing.T, url string) *blob.Bucket {
	t.Helper()
	b, err := blob.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func openRegion(t *testing.T, b *blob.Bucket, clock *hlc.Clock, walDir, name string, opts func(*region.Options)) *region.Region {
	t.Helper()
	o := region.Options{
		Name: name, Bucket: b, WALDir: walDir, Clock: clock,
		BlockCache: blockcache.New(1 << 20),
		SST:        sstable.WriterOptions{BlockSize: 512, Compression: sstable.S2Compression},
	}
	if opts != nil {
		opts(&o)
	}
	r, err := region.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func (c *cluster) Timestamp(ctx context.Context) (uint64, error) {
	ts, err := c.LocalCluster.Timestamp(ctx)
	if c.afterTimestamp != nil {
		c.afterTimestamp()
	}
	return ts, err
}

func (c *cluster) Checkpoint(ctx context.Context, name string, ts uint64) (Region, error) {
	out, err := c.LocalCluster.Checkpoint(ctx, name, ts)
	if err == nil && name == c.failRegion {
		// Its store died after copying, before it answered.
		err = fmt.Errorf("store of %s killed", name)
	}
	return out, err
}

// put writes key=value in the region whose range holds key.
func (c *cluster) put(key, value string) {
	c.t.Helper()
	for _, sp := range c.spans {
		if sp.Contains([]byte(key)) {
			if _, err := c.Regions[sp.Name].Put([]byte(key), []byte(value)); err != nil {
				c.t.Fatal(err)
			}
			return
		}
	}
	c.t.Fatalf("no region holds %q", key)
}

func (c *cluster) state(ts uint64) map[string]string {
	c.t.Helper()
	return state(c.t, c.Regions, c.spans, ts)
}

// state is every key's value read at ts, across the regions, each read
// in its span.
func state(t *testing.T, regions map[string]*region.Region, spans []regionmap.Region, ts uint64) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, sp := range spans {
		kvs, err := regions[sp.Name].Scan(sp.Start, sp.End, 0, ts)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range kvs {
			out[string(p.Key)] = string(p.Value)
		}
	}
	return out
}

func diff(got, want map[string]string) string {
	var lines []string
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			lines = append(lines, fmt.Sprintf("%s: got %q (present %v), want %q", k, g, ok, v))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			lines = append(lines, fmt.Sprintf("%s: got %q, want absent", k, v))
		}
	}
	if len(lines) > 5 {
		lines = append(lines[:5], fmt.Sprintf("... %d differences", len(lines)))
	}
	return strings.Join(lines, "\n")
}

// restoreAndRead restores backup id of src into a new bucket under dir,
// opens its regions as new owners would and returns what they serve.
func restoreAndRead(t *testing.T, src *blob.Bucket, id, dir string) (Backup, map[string]string) {
	t.Helper()
	dst := openBucket(t, "file://"+dir+"/bucket")
	b, err := Restore(context.Background(), src, id, dst)
	if err != nil {
		t.Fatal(err)
	}
	return b, serveRestored(t, dst, dir, len(b.Regions))
}

// serveRestored opens the regions a restore wrote into dst as new owners
// would (WALs under dir) and returns what they serve.
func serveRestored(t *testing.T, dst *blob.Bucket, dir string, regions int) map[string]string {
	t.Helper()
	ctx := context.Background()
	if ok, _ := dst.Exists(ctx, contract.RestoreMarker); ok {
		t.Fatal("the restore marker stayed after a restore that succeeded")
	}
	m, err := regionmap.Load(ctx, dst)
	if err != nil || m.Epoch != 1 || len(m.Region) != regions {
		t.Fatalf("restored region map: epoch %d, %d regions, err %v; want epoch 1, %d regions", m.Epoch, len(m.Region), err, regions)
	}
	open := map[string]*region.Region{}
	for _, r := range m.Region {
		open[r.Name] = openRegion(t, dst, hlc.New(nil, 0), dir+"/wal/"+r.Name, r.Name, nil)
	}
	return state(t, open, m.Region, kv.MaxTimestamp)
}

// A backup taken while writes continue holds exactly what a read at its
// timestamp returns, in every region: versions committed after the
// timestamp but flushed into the same files are cut out, and a restored
// cluster serves that state and nothing else.
func TestABackupRestoresExactlyTheStateAtItsTimestamp(t *testing.T) {
	dir := t.TempDir()
	c := openCluster(t, dir, "m")
	for i := range 200 {
		c.put(fmt.Sprintf("%c%03d", 'a'+i%26, i), "v1")
	}
	for _, r := range c.Regions {
		if err := r.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100 {
		c.put(fmt.Sprintf("%c%03d", 'a'+i%26, i), "v2")
	}
	c.afterTimestamp = func() {
		// Above the backup's TS, in the memstores its checkpoints flush.
		c.put("a000", "after")
		c.put("zzz", "after")
		c.put("b001", "after")
	}
	b, err := Create(context.Background(), c.Bucket, c, "first")
	if err != nil {
		t.Fatal(err)
	}
	want := c.state(b.TS)
	if want["a000"] != "v2" || want["zzz"] != "" {
		t.Fatalf("the writes after the timestamp are not above it: a000=%q zzz=%q", want["a000"], want["zzz"])
	}
	cut := 0
	for _, r := range b.Regions {
		for _, f := range r.Files {
			if f.MaxTS > b.TS {
				t.Errorf("region %s: file %s has versions up to %d, above the backup's %d", r.Name, f.Key, f.MaxTS, b.TS)
			}
			if strings.Contains(f.Key, ".at-") {
				cut++
			}
		}
	}
	if cut == 0 {
		t.Error("no file was cut at the backup's timestamp: the test did not write into a checkpointed memstore")
	}
	_, got := restoreAndRead(t, c.Bucket, "first", t.TempDir())
	if d := diff(got, want); d != "" {
		t.Fatalf("the restored cluster differs from a read at ts %d:\n%s", b.TS, d)
	}
	t.Logf("backup at %d: %d regions, %d files (%d cut at the timestamp), %d bytes; %d keys restored", b.TS, len(b.Regions), b.Files(), cut, b.Bytes(), len(got))
}

// A second backup copies only the files the first did not (incremental by
// immutability); deleting the first removes only what the second does not
// name, and the second still restores; deleting the last empties
// backups/sst/.
func TestBackupsShareFilesAndDeleteKeepsWhatOthersName(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := openCluster(t, dir, "m")
	for i := range 300 {
		c.put(fmt.Sprintf("%c%03d", 'a'+i%26, i), "v1")
	}
	first, err := Create(ctx, c.Bucket, c, "first")
	if err != nil {
		t.Fatal(err)
	}
	if first.CopiedBytes != first.Bytes() || first.CopiedBytes == 0 {
		t.Fatalf("the first backup copied %d of %d bytes; want all, and some", first.CopiedBytes, first.Bytes())
	}
	c.put("n-new", "v2")
	second, err := Create(ctx, c.Bucket, c, "second")
	if err != nil {
		t.Fatal(err)
	}
	if second.CopiedBytes >= second.Bytes() {
		t.Fatalf("the second backup copied %d of its %d bytes: it shares nothing with the first", second.CopiedBytes, second.Bytes())
	}
	want := c.state(second.TS)
	if _, err := Create(ctx, c.Bucket, c, "second"); !errors.Is(err, ErrExists) {
		t.Fatalf("a second backup named second: %v, want ErrExists", err)
	}
	n, err := Delete(ctx, c.Bucket, "first")
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("deleting first removed %d files; every one of its files is the second's too", n)
	}
	if _, got := restoreAndRead(t, c.Bucket, "second", t.TempDir()); diff(got, want) != "" {
		t.Fatalf("after deleting first, second restores differently:\n%s", diff(got, want))
	}
	n, err = Delete(ctx, c.Bucket, "second")
	if err != nil {
		t.Fatal(err)
	}
	left, err := c.Bucket.List(ctx, filesPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || len(left) != 0 {
		t.Fatalf("deleting the last backup removed %d files and left %d", n, len(left))
	}
	if all, _ := List(ctx, c.Bucket); len(all) != 0 {
		t.Fatalf("backups left after deleting both: %v", all)
	}
}

// A backup whose region fails is not recorded: it does not exist, a Delete
// while it runs removes none of its files, and abandoning it collects them.
func TestAFailedBackupIsNotRecordedAndItsFilesAreCollected(t *testing.T) {
	ctx := context.Background()
	c := openCluster(t, t.TempDir(), "f", "m", "t")
	for i := range 100 {
		c.put(fmt.Sprintf("%c%03d", 'a'+i%26, i), "v1")
	}
	c.failRegion = "region-002"
	if _, err := Create(ctx, c.Bucket, c, "broken"); err == nil || !strings.Contains(err.Error(), "region-002") {
		t.Fatalf("a backup whose region-002 failed: %v, want an error naming region-002", err)
	}
	if _, err := Load(ctx, c.Bucket, "broken"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the failed backup is recorded: %v", err)
	}
	copied, _ := c.Bucket.List(ctx, filesPrefix)
	if len(copied) == 0 {
		t.Fatal("the other regions copied nothing: the test cannot see their files collected")
	}
	// A crash leaves the in-progress marker (Create removes it on an error
	// it sees; a killed process cannot): while it is there, nothing goes.
	if err := c.Bucket.WriteAll(ctx, runningKey("broken"), nil, false); err != nil {
		t.Fatal(err)
	}
	c.failRegion = ""
	if _, err := Create(ctx, c.Bucket, c, "good"); err != nil {
		t.Fatal(err)
	}
	if n, err := Delete(ctx, c.Bucket, "good"); err != nil || n != 0 {
		t.Fatalf("a delete while a backup may run removed %d files (err %v); want none", n, err)
	}
	running, _ := Running(ctx, c.Bucket)
	if len(running) != 1 || running[0] != "broken" {
		t.Fatalf("running backups: %v, want [broken]", running)
	}
	if _, err := Abandon(ctx, c.Bucket, "broken"); err != nil {
		t.Fatal(err)
	}
	if left, _ := c.Bucket.List(ctx, filesPrefix); len(left) != 0 {
		t.Fatalf("abandoning the crashed backup left %d unnamed files", len(left))
	}
}

// A restore refuses, before writing anything, a target that is not empty,
// a backup that does not exist and one with a missing or truncated file,
// each with a message that names the problem.
func TestRestoreRefusesWhatCannotBeRight(t *testing.T) {
	ctx := context.Background()
	c := openCluster(t, t.TempDir(), "m")
	for i := range 100 {
		c.put(fmt.Sprintf("%c%03d", 'a'+i%26, i), "v1")
	}
	b, err := Create(ctx, c.Bucket, c, "base")
	if err != nil {
		t.Fatal(err)
	}
	used := openBucket(t, "file://"+t.TempDir())
	if err := used.WriteAll(ctx, "something", []byte("x"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(ctx, c.Bucket, "base", used); !errors.Is(err, ErrTargetNotEmpty) || !strings.Contains(err.Error(), "something") {
		t.Errorf("restore into a bucket holding an object: %v", err)
	}
	empty := func() *blob.Bucket { return openBucket(t, "file://"+t.TempDir()) }
	if _, err := Restore(ctx, c.Bucket, "nope", empty()); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "nope") {
		t.Errorf("restore of a missing backup: %v", err)
	}
	if _, err := Restore(ctx, c.Bucket, "Bad/ID", empty()); err == nil || !strings.Contains(err.Error(), "Bad/ID") {
		t.Errorf("restore of a malformed ID: %v", err)
	}
	victim := b.Regions[0].Files[0].Key
	data, err := c.Bucket.ReadAll(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Bucket.WriteAll(ctx, victim, data[:len(data)/2], false); err != nil {
		t.Fatal(err)
	}
	target := empty()
	if _, err := Restore(ctx, c.Bucket, "base", target); !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), victim) {
		t.Errorf("restore with a truncated file: %v", err)
	}
	if err := c.Bucket.Delete(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(ctx, c.Bucket, "base", target); !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), victim+" is missing") {
		t.Errorf("restore with a missing file: %v", err)
	}
	if objs, _ := target.List(ctx, ""); len(objs) != 0 {
		t.Errorf("refused restores wrote %d objects into the target", len(objs))
	}
}

// Retention keeps the newest N backups and those younger than the maximum
// age, deletes the rest, and every kept backup still restores exactly.
func TestPruneKeepsTheNewestAndTheYoungAndTheyStillRestore(t *testing.T) {
	ctx := context.Background()
	c := openCluster(t, t.TempDir(), "m")
	var ids []string
	wants := map[string]map[string]string{}
	for i := range 4 {
		for j := range 50 {
			c.put(fmt.Sprintf("%c%03d", 'a'+j%26, j), fmt.Sprint(i))
		}
		// Each backup's files are compacted away before the next, so
		// retention has files of its own to delete.
		for _, r := range c.Regions {
			if _, err := r.Compact(ctx, true); err != nil {
				t.Fatal(err)
			}
		}
		id := fmt.Sprintf("b%d", i)
		b, err := Create(ctx, c.Bucket, c, id)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		wants[id] = c.state(b.TS)
	}
	if _, _, err := Prune(ctx, c.Bucket, Policy{}, time.Now()); err == nil || !strings.Contains(err.Error(), "keeps nothing") {
		t.Fatalf("a policy that keeps nothing: %v", err)
	}
	// Asked exactly age after b2 finished: b2 is just within the age, b1
	// and b0 are beyond it and not among the newest one.
	all, _ := List(ctx, c.Bucket)
	age := time.Hour
	now := all[2].Finished.Add(age)
	deleted, files, err := Prune(ctx, c.Bucket, Policy{KeepLast: 1, MaxAge: age}, now)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(deleted) != "[b0 b1]" || files == 0 {
		t.Fatalf("prune with keep-last 1 and max age (b2 just within it) deleted %v and %d files; want [b0 b1] and their files", deleted, files)
	}
	for _, id := range ids[2:] {
		if _, got := restoreAndRead(t, c.Bucket, id, t.TempDir()); diff(got, wants[id]) != "" {
			t.Fatalf("kept backup %s restores differently after the prune:\n%s", id, diff(got, wants[id]))
		}
	}
}

// mapChanger commits a new region map epoch during the first n
// checkpoints, as a split committing under a running backup does.
type mapChanger struct {
	*cluster
	n int
}

func (m *mapChanger) Checkpoint(ctx context.Context, name string, ts uint64) (Region, error) {
	if m.n > 0 {
		m.n--
		cur, err := regionmap.Load(ctx, m.Bucket)
		if err != nil {
			return Region{}, err
		}
		next := cur
		next.Retired = append(append([]string(nil), cur.Retired...), fmt.Sprintf("gone-%d", m.n))
		if err := regionmap.Commit(ctx, m.Bucket, cur, &next); err != nil {
			return Region{}, err
		}
	}
	return m.cluster.Checkpoint(ctx, name, ts)
}

// A backup during which the region map changes (a split or merge) starts
// over at a new timestamp, so its regions tile one map; one whose map
// keeps changing gives up with ErrMapChanged, recording nothing.
func TestABackupStartsOverWhenTheMapChanges(t *testing.T) {
	ctx := context.Background()
	c := openCluster(t, t.TempDir())
	c.put("k", "v")
	b, err := Create(ctx, c.Bucket, &mapChanger{cluster: c, n: 1}, "retried")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := regionmap.Load(ctx, c.Bucket)
	if b.MapEpoch != m.Epoch || b.MapEpoch != 2 {
		t.Fatalf("the backup copied map epoch %d; the map is at %d (want both 2)", b.MapEpoch, m.Epoch)
	}
	if _, err := Create(ctx, c.Bucket, &mapChanger{cluster: c, n: mapAttempts}, "never"); !errors.Is(err, ErrMapChanged) {
		t.Fatalf("a backup under a map that always changes: %v, want ErrMapChanged", err)
	}
	if _, err := Load(ctx, c.Bucket, "never"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the backup that gave up is recorded: %v", err)
	}
}
