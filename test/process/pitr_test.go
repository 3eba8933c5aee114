package process

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/client"
)

// archiveEvery is the stores' --wal-archive-interval in these tests.
const archiveEvery = "--wal-archive-interval=100ms"

// archivedPair is two stores over one file bucket in dir, archiving their
// WAL every 100 ms, and a client of both.
type archivedPair struct {
	bucket, addrB, peers string
	b                    *proc
	c                    *client.Client
}

func startArchivedPair(t *testing.T, dir string) archivedPair {
	t.Helper()
	p := archivedPair{bucket: "file://" + dir + "/bucket"}
	addrA := freeAddr(t)
	p.addrB = freeAddr(t)
	p.peers = addrA + "," + p.addrB
	a := startTxnStore(t, "store-a", p.bucket, dir+"/wal-a", addrA, "0/2", p.peers, archiveEvery)
	p.b = startTxnStore(t, "store-b", p.bucket, dir+"/wal-b", p.addrB, "1/2", p.peers, archiveEvery)
	p.c = newClient(t, a, p.b)
	return p
}

// window is what bellows backup window says of bucket.
type window struct {
	From, To uint64
	Window   string
	Broken   []struct{ Region, WALID string }
}

func archiveWindow(t *testing.T, bucket string) window {
	t.Helper()
	var w window
	if err := json.Unmarshal(bellows(t, "backup", "window", "--bucket", bucket, "-o", "json"), &w); err != nil {
		t.Fatal(err)
	}
	return w
}

// restoreToTime restores bucket's state at ts into a new bucket under dir,
// starts two stores on it and returns what they serve.
func restoreToTime(t *testing.T, dir, bucket string, ts uint64, name string) map[string]string {
	t.Helper()
	restored := "file://" + dir + "/" + name
	t.Logf("%s", bellows(t, "restore", "--from", bucket, "--time", fmt.Sprint(ts), "--to", restored))
	ra, rb := freeAddr(t), freeAddr(t)
	rpeers := ra + "," + rb
	r1 := startTxnStore(t, name+"-a", restored, dir+"/"+name+"-wal-a", ra, "0/2", rpeers)
	r2 := startTxnStore(t, name+"-b", restored, dir+"/"+name+"-wal-b", rb, "1/2", rpeers)
	defer r1.terminate()
	defer r2.terminate()
	return keySpace(t, newClient(t, r1, r2), 0)
}

// The bank moves money between regions; a backup is taken under it; at a
// time T between two transfers the test reads the whole key space at T;
// then a store is SIGKILLed and its WAL volume deleted, and it comes back
// on an empty one, taking its regions over. A restore to T, from the backup
// and the WAL archive, serves exactly what the read at T returned (so every
// write acknowledged at or below T is there and none after, and the total
// is exact: each transfer is in it whole or not at all). A restore past the
// end of the lost volume's archive is refused, naming the region and the
// break.
func TestARestoreToATimeUnderTheBankSurvivesALostVolume(t *testing.T) {
	dir := t.TempDir()
	p := startArchivedPair(t, dir)
	bucket, addrB, peers, b, c := p.bucket, p.addrB, p.peers, p.b, p.c
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, bk := startBank(ctx, t, c)
	stopped := false
	defer func() {
		if !stopped {
			bk.Stop()
		}
	}()
	if err := bk.AwaitTransfers(ctx, 50, time.Minute); err != nil {
		t.Fatal(err)
	}
	bellows(t, "backup", "create", "base", "--addr", peers, "-o", "json")
	if err := bk.AwaitTransfers(ctx, bk.Transfers()+100, time.Minute); err != nil {
		t.Fatal(err)
	}
	target := uint64(time.Now().UnixNano()) // between two transfers: they keep running
	before := bk.Transfers()
	if err := bk.AwaitTransfers(ctx, before+50, time.Minute); err != nil {
		t.Fatal(err)
	}
	want := keySpace(t, c, target)
	if got := balanceSum(t, want); got != cfg.Total() {
		t.Fatalf("the original read at T sums to %d, not %d", got, cfg.Total())
	}
	waitFor(t, "the archive to reach T", func() bool { return archiveWindow(t, bucket).To >= target })
	bk.Stop()
	stopped = true
	if err := bk.Final(ctx); err != nil {
		t.Fatal(err)
	}
	for _, v := range bk.Result().Violations {
		t.Error(v)
	}

	// store-b's volume is lost: its unarchived WAL tail with it.
	b.kill()
	if err := os.RemoveAll(dir + "/wal-b"); err != nil {
		t.Fatal(err)
	}
	startTxnStore(t, "store-b", bucket, dir+"/wal-b", addrB, "1/2", peers, archiveEvery, "--force-takeover")
	if _, err := c.Put(ctx, bankAccount(1), []byte("5")); err != nil {
		t.Fatal(err)
	}
	after := uint64(time.Now().UnixNano())
	waitFor(t, "the new volume's archive to pass the write after the loss", func() bool {
		w := archiveWindow(t, bucket)
		return len(w.Broken) > 0 && w.To >= after
	})
	w := archiveWindow(t, bucket)
	t.Logf("window after the loss: %s; broken streams %v", w.Window, w.Broken)

	got := restoreToTime(t, dir, bucket, target, "at-t")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("restored to T, the cluster (%d keys) differs from the original read at T (%d keys):\ngot  %v\nwant %v", len(got), len(want), got, want)
	}
	if sum := balanceSum(t, got); sum != cfg.Total() {
		t.Fatalf("the restored bank sums to %d, not %d", sum, cfg.Total())
	}

	cmd := exec.Command(binary, "restore", "--from", bucket, "--time", fmt.Sprint(after), "--to", "file://"+dir+"/past-the-break")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "without its final record") || !strings.Contains(string(out), w.Broken[0].Region) {
		t.Fatalf("a restore past the lost volume's archive: %v\n%s\nwant it refused, naming the region whose archive broke", err, out)
	}
	t.Logf("%d transfers before T, restored %d accounts at T; refused past the break: %s", before, len(got), strings.TrimSpace(string(out)))
}

// A store SIGKILLed while it archives under writes and restarted on the
// same volume resumes its archive where the bucket says it stopped: a
// restore to a time after the restart, which reads the archive from before
// the kill through after it, finds no hole and serves exactly what a read
// of the original at that time returned.
func TestAStoreKilledWhileArchivingLeavesNoHole(t *testing.T) {
	dir := t.TempDir()
	p := startArchivedPair(t, dir)
	bucket, addrB, peers, b, c := p.bucket, p.addrB, p.peers, p.b, p.c
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := range 100 {
		if _, err := c.Put(ctx, regionKey(i%bankRegions, fmt.Sprintf("k%04d", i)), []byte("base")); err != nil {
			t.Fatal(err)
		}
	}
	bellows(t, "backup", "create", "base", "--addr", peers, "-o", "json")
	w := startWriter(ctx, c)
	// Killed with parts shipped and more pending.
	waitFor(t, "store-b to ship parts of 200 writes", func() bool {
		return w.written.Load() >= 200 && b.metric(t, "bellows_wal_archive_shipped_bytes_total") > 0
	})
	b.kill()
	b = startTxnStore(t, "store-b", bucket, dir+"/wal-b", addrB, "1/2", peers, archiveEvery)
	resumed := w.written.Load()
	waitFor(t, "store-b to ship 200 writes after its restart", func() bool {
		return w.written.Load() >= resumed+200 && b.metric(t, "bellows_wal_archive_shipped_bytes_total") > 0
	})
	target := uint64(time.Now().UnixNano())
	waitFor(t, "the archive to reach T", func() bool { return archiveWindow(t, bucket).To >= target })
	if err := w.stop(); err != nil {
		t.Fatalf("a write failed across the store's restart: %v", err)
	}
	want := keySpace(t, c, target)
	if len(want) < 500 {
		t.Fatalf("the original holds %d keys at T; the test wrote 400 after the backup", len(want))
	}
	if w := archiveWindow(t, bucket); len(w.Broken) != 0 {
		t.Fatalf("a restart on the same volume broke the archive: %v", w.Broken)
	}
	got := restoreToTime(t, dir, bucket, target, "at-t")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("restored to T after a SIGKILL mid-archive, the cluster (%d keys) differs from the original read at T (%d keys)", len(got), len(want))
	}
	t.Logf("restored %d keys at T, across store-b's SIGKILL while archiving", len(got))
}
