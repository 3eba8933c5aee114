package process

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/bank"
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

func balanceSum(t *testing.T, state map[string]string) int {
	t.Helper()
	sum := 0
	for k, v := range state {
		n, err := bank.Balance([]byte(v))
		if err != nil {
			t.Fatalf("account %q holds %q, not a balance", k, v)
		}
		sum += n
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
	cfg := bank.Config{Regions: bankRegions, AccountsPerRegion: 4, Key: bankAccount, StartBalance: 100, Transferers: 4, Summers: 1, AbandonEvery: 10}
	bk, err := bank.Open(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	bk.Start(ctx)
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
