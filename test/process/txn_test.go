package process

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// Snapshot-isolation transactions through the Go client against two real
// stores that split 4 regions and forward to each other; the client is
// seeded with one store only, so half the regions are reached through it.
func TestTransactionsAgainstTwoStores(t *testing.T) {
	bucket := "file://" + t.TempDir()
	addrA, addrB := freeAddr(t), freeAddr(t)
	peers := addrA + "," + addrB
	a := startPeerStore(t, "store-a", bucket, t.TempDir(), addrA, "0/2", peers)
	b := startPeerStore(t, "store-b", bucket, t.TempDir(), addrB, "1/2", peers)
	c := newClient(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("no lost update", func(t *testing.T) {
		// 8 clients × 5 increments of one counter per region, each a
		// transaction retried on conflict: every counter ends at 10, and
		// the history is snapshot isolated (increments_test.go).
		keys := make([][]byte, 4)
		for i := range keys {
			keys[i] = regionKey(i, "n")
		}
		w := newIncrements(c, keys)
		w.seed(ctx, t)
		if err := w.run(ctx, 8, 5, false); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if w.committed[string(k)] != 10 {
				t.Fatalf("%d increments of %q acknowledged, want 10 (8 clients × 5 increments over 4 counters)", w.committed[string(k)], k)
			}
		}
		w.check(ctx, t)
	})

	t.Run("a plain write after the start aborts the commit, naming the key", func(t *testing.T) {
		key := regionKey(3, "contended")
		x, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Put(ctx, key, []byte("plain")); err != nil {
			t.Fatal(err)
		}
		x.Put(regionKey(3, "other"), []byte("txn"))
		x.Put(key, []byte("txn"))
		_, err = x.Commit(ctx)
		var ce *client.ConflictError
		if !errors.Is(err, client.ErrConflict) || !errors.As(err, &ce) || string(ce.Key) != string(key) {
			t.Fatalf("commit after a plain write of %q: %v; want a conflict naming it", key, err)
		}
		if _, found, _ := c.Get(ctx, regionKey(3, "other")); found {
			t.Fatal("the aborted transaction's other write is visible")
		}
	})

	t.Run("reads see the snapshot, not later writes, in every region", func(t *testing.T) {
		for i := range 4 {
			if _, err := c.Put(ctx, regionKey(i, "snap"), []byte("before")); err != nil {
				t.Fatal(err)
			}
		}
		x, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pastUncertainty(x)
		for i := range 4 {
			if _, err := c.Put(ctx, regionKey(i, "snap"), []byte("after")); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 4 {
			v, _, err := x.Get(ctx, regionKey(i, "snap"))
			if err != nil || string(v) != "before" {
				t.Fatalf("%s read in the transaction: %q, %v; want the snapshot's \"before\"", regionName(i), v, err)
			}
		}
		// A read-only transaction commits without asking and never aborts.
		if _, err := x.Commit(ctx); err != nil {
			t.Fatalf("read-only commit: %v", err)
		}
	})

	t.Run("a write just after the start is uncertain: the read restarts above it", func(t *testing.T) {
		// The write must land within the clock bound of the start: a loaded
		// machine can take longer than that between the two calls, and
		// then a fresh key is tried.
		var x *client.Txn
		var key []byte
		var put client.WriteResult
		for try := 0; ; try++ {
			var err error
			if x, err = c.Begin(ctx); err != nil {
				t.Fatal(err)
			}
			key = regionKey(1, fmt.Sprintf("uncertain%d", try))
			if put, err = c.Put(ctx, key, []byte("after")); err != nil {
				t.Fatal(err)
			}
			if put.CommitTS <= x.StartTS()+uint64(contract.DefaultMaxClockOffset) {
				break
			}
			if try == 4 {
				t.Fatalf("five writes landed more than the clock bound %v after the start", contract.DefaultMaxClockOffset)
			}
			t.Logf("the write landed %v after the start, beyond the bound: trying again", time.Duration(put.CommitTS-x.StartTS()))
		}
		// Within the clock bound of the start, the write may have been
		// acknowledged before the transaction began, on a store whose
		// clock is ahead (docs/clock.md): the read cannot answer from the
		// start, and says above what to begin again.
		_, _, err := x.Get(ctx, key)
		var ue *client.UncertainError
		if !errors.As(err, &ue) || ue.TS != put.CommitTS {
			t.Fatalf("read of a key written %v after the start: %v; want an *UncertainError at %d", time.Duration(put.CommitTS-x.StartTS()), err, put.CommitTS)
		}
		again, err := x.Restart(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if v, _, err := again.Get(ctx, key); err != nil || string(v) != "after" || again.StartTS() <= put.CommitTS {
			t.Fatalf("the restart (start %d) read %q, %v; want the write at %d", again.StartTS(), v, err, put.CommitTS)
		}
	})

	t.Run("a write after the transaction reached its store is not uncertain", func(t *testing.T) {
		// The transaction began at store-a (the client's seed): every
		// version store-a held then is below the start, so a later write
		// there is later for certain. At store-b, its first read observes
		// store-b's clock; a write there after that is later too.
		x, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		atA, atB := regionKey(0, "observed"), regionKey(1, "observed")
		if _, _, err := x.Get(ctx, regionKey(1, "first")); err != nil {
			t.Fatal(err)
		}
		for _, k := range [][]byte{atA, atB} {
			if _, err := c.Put(ctx, k, []byte("after")); err != nil {
				t.Fatal(err)
			}
			if v, found, err := x.Get(ctx, k); err != nil || found {
				t.Fatalf("read of %q written after the transaction reached its store: %q %v %v; want the snapshot (absent)", k, v, found, err)
			}
		}
	})

	t.Run("a transaction across every region commits atomically", func(t *testing.T) {
		x, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Mutation 0 is in store-b's region 1: store-a forwards the commit
		// to it, the coordinator, which prewrites through store-a again.
		for _, i := range []int{1, 0, 2, 3} {
			x.Put(regionKey(i, "atomic"), []byte("v"+strconv.Itoa(i)))
		}
		res, err := x.Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Region != regionName(1) || res.CommitTS <= x.StartTS() {
			t.Fatalf("commit answered %+v; want region %s (the primary's) and a timestamp after the start %d", res, regionName(1), x.StartTS())
		}
		for i := range 4 {
			// Exactly at the commit timestamp every write is there; just
			// before it none is.
			at, before := res.CommitTS, res.CommitTS-1
			for ts, want := range map[uint64]string{at: "v" + strconv.Itoa(i), before: ""} {
				resp, err := a.kv().Get(ctx, &kvpb.GetRequest{Key: regionKey(i, "atomic"), ReadTs: &ts})
				if err != nil || string(resp.Value) != want {
					t.Fatalf("%s at %d: %v, %v; want %q", regionName(i), ts, resp, err, want)
				}
			}
		}
	})

	t.Run("a transaction's scan reads its snapshot in every region, with its own writes", func(t *testing.T) {
		for i := range 4 {
			if _, err := c.Put(ctx, regionKey(i, "scan"), []byte("before")); err != nil {
				t.Fatal(err)
			}
		}
		x, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pastUncertainty(x)
		for i := range 4 {
			if _, err := c.Put(ctx, regionKey(i, "scan"), []byte("after")); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Put(ctx, regionKey(i, "scan-later"), []byte("after")); err != nil {
				t.Fatal(err)
			}
		}
		x.Put(regionKey(2, "scan"), []byte("mine"))
		x.Delete(regionKey(3, "scan"))
		x.Put(regionKey(3, "scan-own"), []byte("mine"))
		it := x.Scan(ctx, nil, nil, client.ScanOptions{})
		var got []string
		for it.Next() {
			if strings.Contains(string(it.Key()), "scan") {
				got = append(got, fmt.Sprintf("%s=%s", it.Key()[1:], it.Value()))
			}
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		it.Close()
		want := []string{"scan=before", "scan=before", "scan=mine", "scan-own=mine"}
		if !slices.Equal(got, want) {
			t.Fatalf("the transaction's scan: %q, want %q (the snapshot in every region, its own writes over it, no later write)", got, want)
		}
		if rows, err := x.ScanAll(ctx, nil, nil, client.ScanOptions{Limit: 2}); err != nil || len(rows) != 2 {
			t.Fatalf("a scan limited to 2: %d rows, %v", len(rows), err)
		}
	})

	t.Run("bellows kv txn commits across regions and refuses malformed operations", func(t *testing.T) {
		kv := func(args ...string) (string, error) {
			out, err := exec.Command(binary, append([]string{"kv", "--addr", a.grpc}, args...)...).CombinedOutput()
			return string(out), err
		}
		k0, k3 := string(regionKey(0, "cli-txn")), string(regionKey(3, "cli-txn"))
		out, err := kv("txn", "put", k0, "1", "put", k3, "1", "get", k0)
		// k0 begins with a control byte, so the text output quotes it.
		if err != nil || !strings.Contains(out, strconv.Quote(k0)+"\t1\n") || !strings.Contains(out, "COMMITTED "+regionName(0)+" ts=") {
			t.Fatalf("kv txn: %v\n%s", err, out)
		}
		for _, k := range []string{k0, k3} {
			if v, _, err := c.Get(ctx, []byte(k)); err != nil || string(v) != "1" {
				t.Fatalf("%q after kv txn: %q, %v", k, v, err)
			}
		}
		if out, err := kv("txn", "put", k0); err == nil || !strings.Contains(out, "put needs 2 more argument(s)") {
			t.Fatalf("kv txn with a put missing its value: %v\n%s", err, out)
		}
		if out, err := kv("txn", "bump", k0); err == nil || !strings.Contains(out, `"bump" is not an operation`) {
			t.Fatalf("kv txn with an unknown operation: %v\n%s", err, out)
		}
	})

	t.Run("a registered transaction commits and rolls back by id at its store only", func(t *testing.T) {
		put := func(k, v string) []*kvpb.Mutation {
			return []*kvpb.Mutation{{Op: kvpb.Mutation_OP_PUT, Key: regionKey(0, k), Value: []byte(v)}, {Op: kvpb.Mutation_OP_PUT, Key: regionKey(3, k), Value: []byte(v)}}
		}
		begun, err := a.kv().BeginTxn(ctx, &kvpb.BeginTxnRequest{})
		if err != nil || begun.TxnId == "" || begun.TimeoutMs == 0 {
			t.Fatalf("BeginTxn = %v, %v; want an id and a timeout", begun, err)
		}
		if _, err := b.kv().CommitTxn(ctx, &kvpb.CommitTxnRequest{TxnId: begun.TxnId, Mutations: put("reg", "x")}); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "the store that answered its BeginTxn") {
			t.Fatalf("a commit sent to another store: %v; want NotFound naming where to send it", err)
		}
		if _, err := a.kv().CommitTxn(ctx, &kvpb.CommitTxnRequest{TxnId: begun.TxnId, StartTs: begun.StartTs + 1, Mutations: put("reg", "x")}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("a commit naming another start_ts: %v; want InvalidArgument", err)
		}
		done, err := a.kv().CommitTxn(ctx, &kvpb.CommitTxnRequest{TxnId: begun.TxnId, Mutations: put("reg", "1")})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []int{0, 3} {
			if v, _, err := c.Get(ctx, regionKey(r, "reg")); err != nil || string(v) != "1" {
				t.Fatalf("region %d after the commit: %q, %v", r, v, err)
			}
		}
		if _, err := a.kv().RollbackTxn(ctx, &kvpb.RollbackTxnRequest{TxnId: begun.TxnId}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), fmt.Sprintf("committed at %d", done.CommitTs)) {
			t.Fatalf("rolling back a committed transaction: %v; want FailedPrecondition with its commit", err)
		}
		if _, err := a.kv().RollbackTxn(ctx, &kvpb.RollbackTxnRequest{}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("RollbackTxn without an id: %v; want InvalidArgument", err)
		}

		// Through the client: a rolled-back transaction's commit is
		// refused as lost, and writes nothing.
		x, err := c.Begin(ctx)
		if err != nil || x.ID() == "" {
			t.Fatalf("Begin: %v, id %q", err, x.ID())
		}
		x.Put(regionKey(1, "rolled"), []byte("no"))
		if err := x.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := x.Commit(ctx); !errors.Is(err, client.ErrTxnLost) || !strings.Contains(err.Error(), "rolled back") {
			t.Fatalf("commit after rollback: %v; want ErrTxnLost saying it was rolled back", err)
		}
		if _, found, err := c.Get(ctx, regionKey(1, "rolled")); err != nil || found {
			t.Fatalf("a rolled-back transaction's write reads back: found %v, %v", found, err)
		}
	})

	t.Run("bad requests say what is wrong and change nothing", func(t *testing.T) {
		for name, req := range map[string]*kvpb.CommitTxnRequest{
			"no start_ts":  {Mutations: []*kvpb.Mutation{{Op: kvpb.Mutation_OP_PUT, Key: regionKey(0, "y")}}},
			"no mutations": {StartTs: 1},
		} {
			if _, err := a.kv().CommitTxn(ctx, req); status.Code(err) != codes.InvalidArgument {
				t.Errorf("%s: %v; want InvalidArgument", name, err)
			}
		}
	})
}

// With retention.maxVersions 1, compactions drop old versions: a
// transaction's snapshot still reads its versions (BeginTxn pinned its
// start at this store), a plain read at an old, unpinned timestamp is
// refused as SNAPSHOT_TOO_OLD instead of answering "not found", and the
// refusal survives a restart.
func TestSnapshotTooOldWhenRetentionDropsVersions(t *testing.T) {
	bucket, walDir := "file://"+t.TempDir(), t.TempDir()
	extra := "retention: {maxVersions: 1}\n"
	s := startStoreWith(t, bucket, walDir, "Disabled", extra)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newClient(t, s)
	key := []byte("k")
	first, err := c.Put(ctx, key, []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	x, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pastUncertainty(x)
	for _, v := range []string{"v2", "v3"} {
		if _, err := c.Put(ctx, key, []byte(v)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.admin().Flush(ctx, &kvpb.FlushRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.admin().Compact(ctx, &kvpb.CompactRequest{Region: region0, Major: true}); err != nil {
		t.Fatal(err)
	}
	if v, _, err := x.Get(ctx, key); err != nil || string(v) != "v1" {
		t.Fatalf("the transaction's read at its pinned start: %q, %v; want v1", v, err)
	}
	refused := func(when string) {
		t.Helper()
		ts := first.CommitTS
		_, err := s.kv().Get(ctx, &kvpb.GetRequest{Key: key, ReadTs: &ts})
		st := status.Convert(err)
		reason := ""
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				reason = info.Reason
			}
		}
		if st.Code() != codes.FailedPrecondition || reason != contract.SnapshotTooOldReason {
			t.Fatalf("%s: a read at %d after the compaction: %v; want FAILED_PRECONDITION %s", when, ts, err, contract.SnapshotTooOldReason)
		}
	}
	refused("pinned by another transaction's start only")
	// Rolled back, the transaction pins nothing: after the next compaction
	// its reads are refused too, and the client says so (RunTxn would run
	// it again from a new start).
	if err := x.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, key, []byte("v4")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.admin().Flush(ctx, &kvpb.FlushRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.admin().Compact(ctx, &kvpb.CompactRequest{Region: region0, Major: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := x.Get(ctx, key); !errors.Is(err, client.ErrSnapshotTooOld) {
		t.Fatalf("an unpinned transaction's read after the compaction: %v; want client.ErrSnapshotTooOld", err)
	}
	s.kill()
	s = startStoreWith(t, bucket, walDir, "Disabled", extra)
	refused("after a restart")
}

// pastUncertainty waits until every clock is past x's uncertainty window
// (the stores run on this host's clock with the default bound), so writes
// made after it are later than x for certain: not a restart, the snapshot.
func pastUncertainty(x *client.Txn) {
	if d := time.Until(time.Unix(0, int64(x.StartTS())).Add(contract.DefaultMaxClockOffset)); d > 0 {
		time.Sleep(d + time.Millisecond) // the clock passing a timestamp, not a sleep for something else
	}
}
