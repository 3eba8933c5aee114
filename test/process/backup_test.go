package process

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/bank"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/backup"
)

// bellows runs the bellows command line and returns its standard output.
func bellows(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bellows %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// keySpace reads the whole key space, at ts when ts > 0.
func keySpace(t *testing.T, c *client.Client, ts uint64) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var opts client.ScanOptions
	if ts > 0 {
		opts.ReadTS = &ts
	}
	kvs, err := c.ScanAll(ctx, nil, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(kvs))
	for _, p := range kvs {
		out[string(p.Key)] = string(p.Value)
	}
	return out
}

// runningBackup is `bellows backup create` started in the background.
type runningBackup struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
}

// startBackup starts `bellows backup create ID args... -o json` and returns
// once the backup has marked itself running in the file bucket at dir.
func startBackup(t *testing.T, dir, id string, args ...string) *runningBackup {
	t.Helper()
	b := &runningBackup{}
	b.cmd = exec.Command(binary, append(append([]string{"backup", "create", id}, args...), "-o", "json")...)
	b.cmd.Stdout, b.cmd.Stderr = &b.stdout, &b.stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the backup to mark itself running", func() bool {
		_, err := os.Stat(dir + "/backups/" + id + "/running")
		return err == nil
	})
	return b
}

// restoredKeySpace restores backup id of the file bucket at bucket into a
// new bucket under dir, starts a store on it, and returns what it serves.
func restoredKeySpace(t *testing.T, dir, bucket, id string) map[string]string {
	t.Helper()
	restored := "file://" + dir + "/restored-" + id
	bellows(t, "restore", "--from", bucket, "--backup", id, "--to", restored)
	rs := start(t, "restored-"+id, "store", "--bucket="+restored, "--wal-dir="+dir+"/rwal-"+id, "--offload=Disabled")
	defer rs.terminate()
	return keySpace(t, newClient(t, rs), 0)
}

// writer puts w%05d keys, one after another across the regions, until
// stopped; each write gets 30 s (a store's restart in between).
type writer struct {
	done    chan struct{}
	err     chan error
	written atomic.Int64
}

func startWriter(ctx context.Context, c *client.Client) *writer {
	w := &writer{done: make(chan struct{}), err: make(chan error, 1)}
	go func() {
		for i := 0; ; i++ {
			select {
			case <-w.done:
				w.err <- nil
				return
			default:
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := c.Put(wctx, regionKey(i%bankRegions, fmt.Sprintf("w%05d", i)), []byte(fmt.Sprint(i)))
			cancel()
			if err != nil {
				w.err <- err
				return
			}
			w.written.Add(1)
		}
	}()
	return w
}

// stop stops the writer and returns the error that stopped it first, if any.
func (w *writer) stop() error {
	close(w.done)
	return <-w.err
}

// startBank opens the bank (4 accounts per region, 4 transferers, one
// transfer in 10 abandoned mid-commit) over c and starts it.
func startBank(ctx context.Context, t *testing.T, c *client.Client) (bank.Config, *bank.Bank) {
	t.Helper()
	cfg := bank.Config{Regions: bankRegions, AccountsPerRegion: 4, Key: bankAccount, StartBalance: 100, Transferers: 4, Summers: 1, AbandonEvery: 10}
	bk, err := bank.Open(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	bk.Start(ctx)
	return cfg, bk
}

func balanceSum(t *testing.T, state map[string]string) int {
	t.Helper()
	sum, err := bank.Sum(state)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// A backup taken with bellows backup create while the bank moves money
// between regions (transactions abandoned mid-commit leave locks the
// backup must resolve) restores, with bellows restore, into a new cluster
// that serves exactly what a read of the original at the backup's
// timestamp returned: the total is exact, so every cross-region transfer
// is in it entirely or not at all.
func TestABackupUnderTheBankRestoresOneSnapshot(t *testing.T) {
	dir := t.TempDir()
	bucket := "file://" + dir + "/bucket"
	addrA, addrB := freeAddr(t), freeAddr(t)
	peers := addrA + "," + addrB
	a := startTxnStore(t, "store-a", bucket, dir+"/wal-a", addrA, "0/2", peers)
	b := startTxnStore(t, "store-b", bucket, dir+"/wal-b", addrB, "1/2", peers)
	c := newClient(t, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, bk := startBank(ctx, t, c)
	if err := bk.AwaitTransfers(ctx, 100, time.Minute); err != nil {
		bk.Stop()
		t.Fatal(err)
	}
	var rec backup.Backup
	if err := json.Unmarshal(bellows(t, "backup", "create", "under-load", "--bucket", bucket, "--addr", peers, "-o", "json"), &rec); err != nil {
		bk.Stop()
		t.Fatal(err)
	}
	during := bk.Transfers()
	if err := bk.AwaitTransfers(ctx, during+50, time.Minute); err != nil {
		bk.Stop()
		t.Fatal(err)
	}
	bk.Stop()
	if err := bk.Final(ctx); err != nil {
		t.Fatal(err)
	}
	for _, v := range bk.Result().Violations {
		t.Error(v)
	}
	want := keySpace(t, c, rec.TS)
	if got := balanceSum(t, want); got != cfg.Total() {
		t.Fatalf("the original at the backup's ts %d sums to %d, not %d", rec.TS, got, cfg.Total())
	}
	if now := keySpace(t, c, 0); len(now) == len(want) && fmt.Sprint(now) == fmt.Sprint(want) {
		t.Fatal("no transfer committed after the backup: the test cannot tell its timestamp from the end")
	}

	// The stores count what they did for it.
	checkpoints := a.metric(t, `bellows_backup_checkpoints_total{result="success"}`) + b.metric(t, `bellows_backup_checkpoints_total{result="success"}`)
	copied := a.metric(t, "bellows_backup_copied_bytes_total") + b.metric(t, "bellows_backup_copied_bytes_total")
	if int(checkpoints) != len(rec.Regions) || int64(copied) != rec.CopiedBytes {
		t.Errorf("the stores count %v checkpoints and %v bytes copied; the backup has %d regions and copied %d bytes", checkpoints, copied, len(rec.Regions), rec.CopiedBytes)
	}

	listed := string(bellows(t, "backup", "list", "--bucket", bucket))
	if !strings.Contains(listed, "under-load") {
		t.Fatalf("backup list does not show the backup:\n%s", listed)
	}
	restored := "file://" + dir + "/restored"
	out := bellows(t, "restore", "--from", bucket, "--backup", "under-load", "--to", restored)
	t.Logf("%s", out)
	ra, rb := freeAddr(t), freeAddr(t)
	rpeers := ra + "," + rb
	r1 := startTxnStore(t, "restored-a", restored, dir+"/rwal-a", ra, "0/2", rpeers)
	r2 := startTxnStore(t, "restored-b", restored, dir+"/rwal-b", rb, "1/2", rpeers)
	rc := newClient(t, r1, r2)
	got := keySpace(t, rc, 0)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the restored cluster (%d keys) differs from the original read at the backup's ts %d (%d keys):\ngot  %v\nwant %v", len(got), rec.TS, len(want), got, want)
	}
	// The restored cluster is a cluster: it takes writes and keeps them.
	if _, err := rc.Put(ctx, bankAccount(0), []byte("1000")); err != nil {
		t.Fatal(err)
	}
	if v, _, err := rc.Get(ctx, bankAccount(0)); err != nil || string(v) != "1000" {
		t.Fatalf("a write to the restored cluster reads back %q, %v", v, err)
	}
	t.Logf("backup at ts %d (%d transfers committed when it returned, %d after): %d regions, %d files, %d bytes; the restored cluster serves the %d accounts as of it",
		rec.TS, during, bk.Transfers()-during, len(rec.Regions), rec.Files(), rec.Bytes(), len(got))
}

// A store SIGKILLed while bellows backup create runs (once the backup has
// marked itself running) and restarted: the backup either completes, its
// checkpoint retried at the restarted owner, and restores exactly what a
// read at its timestamp returns; or it fails, is not recorded, and a retry
// does. Writers keep writing throughout; every write acknowledged at or
// below the restored backup's timestamp is in the restored cluster.
func TestAStoreKilledDuringABackupLeavesItCompleteOrUnrecorded(t *testing.T) {
	dir := t.TempDir()
	bucket := "file://" + dir + "/bucket"
	addrA, addrB := freeAddr(t), freeAddr(t)
	peers := addrA + "," + addrB
	a := startTxnStore(t, "store-a", bucket, dir+"/wal-a", addrA, "0/2", peers)
	b := startTxnStore(t, "store-b", bucket, dir+"/wal-b", addrB, "1/2", peers)
	c := newClient(t, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	value := strings.Repeat("v", 2000)
	for i := range 2000 {
		if _, err := c.Put(ctx, regionKey(i%bankRegions, fmt.Sprintf("k%05d", i)), []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	w := startWriter(ctx, c)

	running := startBackup(t, dir+"/bucket", "killed", "--bucket", bucket, "--addr", peers)
	b.kill()
	startTxnStore(t, "store-b", bucket, dir+"/wal-b", addrB, "1/2", peers)
	err := running.cmd.Wait()
	id := "killed"
	stdout := &running.stdout
	if err != nil {
		t.Logf("the backup failed when its store was killed: %v\n%s", err, running.stderr.String())
		if listed := string(bellows(t, "backup", "list", "--bucket", bucket)); strings.Contains(listed, "killed ") {
			t.Fatalf("a failed backup is listed:\n%s", listed)
		}
		id = "retried"
		stdout.Reset()
		stdout.Write(bellows(t, "backup", "create", id, "--bucket", bucket, "--addr", peers, "-o", "json"))
	}
	var rec backup.Backup
	if err := json.Unmarshal(stdout.Bytes(), &rec); err != nil {
		t.Fatalf("backup %s's output: %v\n%s", id, err, stdout.String())
	}
	if err := w.stop(); err != nil {
		t.Fatalf("a write failed across the store's restart: %v", err)
	}
	want := keySpace(t, c, rec.TS)
	got := restoredKeySpace(t, dir, bucket, id)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("backup %s restored %d keys; the original held %d at its ts %d", id, len(got), len(want), rec.TS)
	}
	t.Logf("backup %s at ts %d: %d files, %d bytes; restored %d keys (store-b was SIGKILLed while it ran)", id, rec.TS, rec.Files(), rec.Bytes(), len(got))
}

// Backups taken while a store splits its regions under writes (each split
// retires a region and gives its daughters the parent's files by
// reference) restore exactly: a backup that saw the map change starts over
// at a new timestamp, and the restored regions, whose files are copies of
// references, serve only their own ranges.
func TestBackupsDuringSplitsRestoreExactly(t *testing.T) {
	dir := t.TempDir()
	bucket, addr := "file://"+dir+"/bucket", freeAddr(t)
	args := append(storeArgs(t, bucket, dir+"/wal", "Disabled", ""), "--split-bytes=1MiB", "--listen="+addr, "--create-bucket")
	s := start(t, "store", args...)
	c := newClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				wrote <- nil
				return
			default:
			}
			k := fmt.Sprintf("user%07d", (i*7919)%1_000_000)
			if _, err := c.Put(ctx, []byte(k), []byte(fmt.Sprintf("%d-%01000d", i, i))); err != nil {
				wrote <- err
				return
			}
		}
	}()
	regions := func() int {
		if err := c.Refresh(ctx); err != nil {
			return 0
		}
		return len(c.Regions())
	}
	type taken struct {
		id   string
		rec  backup.Backup
		want map[string]string
	}
	var backups []taken
	for i, atLeast := range []int{2, 4, 6} {
		waitFor(t, fmt.Sprintf("%d regions", atLeast), func() bool { return regions() >= atLeast })
		id := fmt.Sprintf("during-split-%d", i)
		var rec backup.Backup
		if err := json.Unmarshal(bellows(t, "backup", "create", id, "--addr", addr, "-o", "json"), &rec); err != nil {
			t.Fatal(err)
		}
		backups = append(backups, taken{id: id, rec: rec})
	}
	close(stop)
	if err := <-wrote; err != nil {
		t.Fatalf("a write failed: %v", err)
	}
	for i := range backups {
		backups[i].want = keySpace(t, c, backups[i].rec.TS)
	}
	for _, b := range backups {
		got := restoredKeySpace(t, dir, bucket, b.id)
		if fmt.Sprint(got) != fmt.Sprint(b.want) {
			t.Fatalf("backup %s (%d regions, map epoch %d) restored %d keys; the original held %d at its ts", b.id, len(b.rec.Regions), b.rec.MapEpoch, len(got), len(b.want))
		}
		t.Logf("backup %s: %d regions (map epoch %d), %d files: restored %d keys exactly", b.id, len(b.rec.Regions), b.rec.MapEpoch, b.rec.Files(), len(got))
	}
}

// A backup taken while an offloaded major compaction of the region runs on
// a (throttled) worker copies the files the region had at its checkpoint;
// the compaction then replaces and deletes them in the live region, and
// the backup still restores exactly what a read at its timestamp returned.
func TestABackupDuringAnOffloadedCompactionRestoresExactly(t *testing.T) {
	dir := t.TempDir()
	bucket := "file://" + dir + "/bucket"
	c := slowCompactor(t, "compactor")
	s := startStore(t, bucket, dir+"/wal", "Required", c)
	load(t, s, 3, 100)
	done := compactAsync(s)
	waitFor(t, "the compaction in flight on the worker", func() bool { return c.status(t).InflightJobs == 1 })
	var rec backup.Backup
	if err := json.Unmarshal(bellows(t, "backup", "create", "mid-compaction", "--addr", s.grpc, "-o", "json"), &rec); err != nil {
		t.Fatal(err)
	}
	if n := c.status(t).InflightJobs; n != 1 {
		t.Fatalf("the compaction was not running when the backup was recorded (%d jobs in flight): the test shows nothing", n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, s)
	if _, err := cl.Put(context.Background(), []byte("after-the-backup"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	want := keySpace(t, cl, rec.TS)
	got := restoredKeySpace(t, dir, bucket, "mid-compaction")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("restored %d keys; the original held %d at the backup's ts %d", len(got), len(want), rec.TS)
	}
	t.Logf("backup at ts %d during an offloaded compaction: %d files; restored %d keys exactly", rec.TS, rec.Files(), len(got))
}

// A backup asked of a store while the region it is to serve is still at
// its previous owner (a region move under way) waits for the move: the old
// owner is SIGTERMed and releases the region, the new one claims it, and
// the checkpoint, retried meanwhile, runs there. The backup restores
// exactly what a read at its timestamp returned, writes made at the old
// owner included.
func TestABackupDuringARegionMoveWaitsForItAndRestoresExactly(t *testing.T) {
	dir := t.TempDir()
	bucket := "file://" + dir + "/bucket"
	old := startNamedStore(t, "store-old", bucket, dir+"/wal-old")
	load(t, old, 2, 100)
	// Unflushed writes at the old owner: the release must flush them.
	for i := range 50 {
		if _, err := old.kv().Put(context.Background(), &kvpb.PutRequest{Key: []byte(fmt.Sprintf("late-%03d", i)), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	cur := startNamedStore(t, "store-new", bucket, dir+"/wal-new")
	if n := cur.metric(t, "bellows_regions_waiting"); n != 1 {
		t.Fatalf("new store: %v regions waiting, want 1", n)
	}
	running := startBackup(t, dir+"/bucket", "mid-move", "--addr", cur.grpc)
	old.terminate() // releases the region; the new store claims it
	if err := running.cmd.Wait(); err != nil {
		t.Fatalf("backup during the move: %v\n%s", err, running.stderr.String())
	}
	var rec backup.Backup
	if err := json.Unmarshal(running.stdout.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	want := keySpace(t, newClient(t, cur), rec.TS)
	if len(want) != 250 {
		t.Fatalf("the new owner holds %d keys at the backup's ts, want the 250 written at the old one", len(want))
	}
	got := restoredKeySpace(t, dir, bucket, "mid-move")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("restored %d keys; the original held %d at the backup's ts %d", len(got), len(want), rec.TS)
	}
}
