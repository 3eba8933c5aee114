package process

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/bank"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/sicheck"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// Stores whose clocks disagree (docs/clock.md). Every store runs on this
// host's clock, moved by the hidden --test-clock-offset, so the offsets
// are exactly what the test says; the histories' real-time order is this
// process's monotonic clock, which no store's offset bends.

// skewBound is the stores' --max-clock-offset in these tests.
const skewBound = 250 * time.Millisecond

// skewedBank runs the bank across two stores whose clocks are moved by
// offsets, SIGKILLing and restarting each once, and returns its result
// and the checker's report. maxOffset is the stores' bound (0: none).
func skewedBank(t *testing.T, offsets [2]time.Duration, maxOffset time.Duration) (bank.Result, sicheck.Report) {
	t.Helper()
	bucket := "file://" + t.TempDir()
	addrs := [2]string{freeAddr(t), freeAddr(t)}
	wals := [2]string{t.TempDir(), t.TempDir()}
	peers := addrs[0] + "," + addrs[1]
	startStore := func(i int) *proc {
		return startTxnStore(t, fmt.Sprintf("store-%c", 'a'+i), bucket, wals[i], addrs[i], fmt.Sprintf("%d/2", i), peers,
			"--max-clock-offset="+maxOffset.String(), "--test-clock-offset="+offsets[i].String())
	}
	stores := [2]*proc{startStore(0), startStore(1)}
	c := newClient(t, stores[0], stores[1])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := bank.Open(ctx, c, bank.Config{Regions: bankRegions, AccountsPerRegion: 4, Key: bankAccount,
		StartBalance: 100, Transferers: 4, Summers: 2})
	if err != nil {
		t.Fatal(err)
	}
	b.Start(ctx)
	await := func(why string) {
		t.Helper()
		if err := b.AwaitTransfers(ctx, b.Transfers()+100, time.Minute); err != nil {
			b.Stop()
			t.Fatalf("%s: %v", why, err)
		}
	}
	await("before the crashes")
	for i := range stores {
		stores[i].kill()
		stores[i] = startStore(i)
		await(fmt.Sprintf("after store %d's restart", i))
	}
	b.Stop()
	if err := b.Final(ctx); err != nil {
		t.Fatal(err)
	}
	res := b.Result()
	rep := sicheck.Analyze(res.History, 20)
	t.Logf("offsets %v, bound %v: %d transfers, %d sums, %d restarts after uncertain reads; history: %v", offsets, maxOffset, res.Transfers, res.Sums, res.Restarts, rep)
	return res, rep
}

// With both stores' clocks off by up to half the bound, in opposite
// directions (so they differ by 0.72 of it, inside the 80% a store
// tolerates), and both SIGKILLed and restarted, every snapshot adds up and
// the history is snapshot isolated against the stores' timestamps and the
// clients' real time.
func TestBankWithSkewedClocksWithinTheBound(t *testing.T) {
	res, rep := skewedBank(t, [2]time.Duration{+90 * time.Millisecond, -90 * time.Millisecond}, skewBound)
	for _, v := range res.Violations {
		t.Error(v)
	}
	for _, err := range rep.Violations {
		t.Error("snapshot isolation: ", err)
	}
	if rep.RealTimeReads == 0 {
		t.Fatalf("no read was judged against real time: %v", rep)
	}
}

// skewedPair starts two stores whose clocks are off by offsets, with the
// bound maxOffset (0: none); a owns regions 0 and 2, b regions 1 and 3.
func skewedPair(t *testing.T, offsets [2]time.Duration, maxOffset time.Duration) (a, b *proc) {
	t.Helper()
	bucket := "file://" + t.TempDir()
	addrs := [2]string{freeAddr(t), freeAddr(t)}
	peers := addrs[0] + "," + addrs[1]
	var p [2]*proc
	for i := range p {
		p[i] = startTxnStore(t, fmt.Sprintf("store-%c", 'a'+i), bucket, t.TempDir(), addrs[i], fmt.Sprintf("%d/2", i), peers,
			"--max-clock-offset="+maxOffset.String(), "--test-clock-offset="+offsets[i].String())
	}
	return p[0], p[1]
}

// commitAt commits key=value in a transaction begun at store s, which
// coordinates it, and returns its commit timestamp.
func commitAt(ctx context.Context, t *testing.T, s *proc, key []byte, value string) uint64 {
	t.Helper()
	begin, err := s.kv().BeginTxn(ctx, &kvpb.BeginTxnRequest{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.kv().CommitTxn(ctx, &kvpb.CommitTxnRequest{TxnId: begin.TxnId,
		Mutations: []*kvpb.Mutation{{Op: kvpb.Mutation_OP_PUT, Key: key, Value: []byte(value)}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.CommitTs
}

// commitThenBegin is a commit at the fast store and a transaction begun at
// the slow one after it was acknowledged, with the times now gave around
// them.
type commitThenBegin struct {
	key                                       []byte
	commitTS                                  uint64
	begin                                     *kvpb.BeginTxnResponse
	commitInvoke, commitComplete, beginInvoke time.Duration
}

// commitThenBeginBelow commits key=v1 at a, in a's region, then begins a
// transaction at b, and tries again with a fresh key until the start comes
// out below the commit. The clocks are 180 ms apart, and a loaded machine
// (CI runs other packages' tests beside this one) can take longer than that
// between the two calls; five tries that never do mean the clocks are not
// apart. now, if not nil, times the calls for a history.
func commitThenBeginBelow(ctx context.Context, t *testing.T, a, b *proc, now func() time.Duration) commitThenBegin {
	t.Helper()
	if now == nil {
		now = func() time.Duration { return 0 }
	}
	const tries = 5
	for try := range tries {
		c := commitThenBegin{key: regionKey(0, fmt.Sprintf("k%d", try))}
		c.commitInvoke = now()
		c.commitTS = commitAt(ctx, t, a, c.key, "v1")
		c.commitComplete = now()
		c.beginInvoke = now()
		begin, err := b.kv().BeginTxn(ctx, &kvpb.BeginTxnRequest{})
		if err != nil {
			t.Fatal(err)
		}
		c.begin = begin
		if begin.StartTs < c.commitTS {
			return c
		}
		t.Logf("try %d: the slow store began at %d, %v above the commit at %d: more than the clocks' offset passed between the calls",
			try+1, begin.StartTs, time.Duration(begin.StartTs-c.commitTS), c.commitTS)
	}
	t.Fatalf("%d times the slow store began above the fast store's commit: the clocks are not apart", tries)
	return commitThenBegin{}
}

// Without the bound (--max-clock-offset=0: no uncertainty and no offset
// checks, what every store did before the HLC), a transaction that begins
// at the slow store after a commit at the fast one was acknowledged reads
// a snapshot without it; the history agrees with every timestamp, and only
// the real-time check flags it. This is the checker failing on the code
// before the fix; the next test is the same sequence with it.
func TestSkewedClocksWithoutTheBoundAreFlaggedByRealTime(t *testing.T) {
	a, b := skewedPair(t, [2]time.Duration{+90 * time.Millisecond, -90 * time.Millisecond}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	origin := time.Now()
	now := func() time.Duration { return max(time.Since(origin), 1) }
	c := commitThenBeginBelow(ctx, t, a, b, now)
	key, begin := c.key, c.begin
	w := sicheck.Txn{ID: "w", Writes: map[string]string{string(key): "v1"}, Invoke: c.commitInvoke, CommitTS: c.commitTS, Outcome: sicheck.Committed, Complete: c.commitComplete}
	r := sicheck.Txn{ID: "r", Reads: map[string]string{}, Invoke: c.beginInvoke}
	if begin.UncertaintyLimit != 0 {
		t.Fatalf("no bound, yet an uncertainty limit %d", begin.UncertaintyLimit)
	}
	r.StartTS = begin.StartTs
	got, err := a.kv().TxnGet(ctx, &kvpb.TxnGetRequest{StartTs: begin.StartTs, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	r.Complete = now()
	if got.Found {
		r.Reads[string(key)] = string(got.Value)
	}
	t.Logf("committed at %d on the fast store; the slow store began the reader at %d (%v before)", w.CommitTS, r.StartTS, time.Duration(w.CommitTS-r.StartTS))
	if got.Found {
		t.Fatalf("the reader started %v below the commit and still read it: the clocks are not apart", time.Duration(w.CommitTS-r.StartTS))
	}
	// The read is absent: sicheck reads a key a transaction did not
	// find as its initial (never written) version.
	r.Scans = []sicheck.Scan{{Start: string(key), End: string(append(key, 0)), Rows: map[string]string{}}}
	history := []sicheck.Txn{w, r}
	untimed := []sicheck.Txn{w, r}
	for i := range untimed {
		untimed[i].Invoke, untimed[i].Complete = 0, 0
	}
	if errs := sicheck.Check(untimed, 0); len(errs) > 0 {
		t.Fatalf("the history agrees with the stores' timestamps, which the checker takes as given: %v", errs)
	}
	if errs := sicheck.Check(history, 0); len(errs) == 0 {
		t.Fatal("a reader that began after the commit was acknowledged and did not see it passed the real-time check")
	} else {
		t.Logf("flagged: %v", errs[0])
	}
}

// With the bound, the same reader's read finds the commit within its
// uncertainty window and is refused (READ_UNCERTAIN, naming the commit's
// timestamp); begun again above it, within the same limit, it reads it.
func TestAReadAfterACommitOnAFastStoreRestartsAndSeesIt(t *testing.T) {
	a, b := skewedPair(t, [2]time.Duration{+90 * time.Millisecond, -90 * time.Millisecond}, skewBound)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := commitThenBeginBelow(ctx, t, a, b, nil)
	key, commitTS, begin := c.key, c.commitTS, c.begin
	if want := begin.StartTs + uint64(skewBound); begin.UncertaintyLimit != want {
		t.Fatalf("uncertainty limit %d, want start + %v = %d", begin.UncertaintyLimit, skewBound, want)
	}
	_, err := a.kv().TxnGet(ctx, &kvpb.TxnGetRequest{StartTs: begin.StartTs, Key: key, UncertaintyLimit: begin.UncertaintyLimit})
	info := errorInfo(err)
	if status.Code(err) != codes.Aborted || info == nil || info.Reason != contract.ReadUncertainReason || info.Metadata["ts"] != strconv.FormatUint(commitTS, 10) {
		t.Fatalf("read below a commit within the window: %v (%v), want ABORTED %s with ts %d", err, info, contract.ReadUncertainReason, commitTS)
	}
	// A scan meets it the same way.
	stream, err := a.kv().TxnScan(ctx, &kvpb.TxnScanRequest{StartTs: begin.StartTs, Start: key, UncertaintyLimit: begin.UncertaintyLimit})
	if err == nil {
		_, err = stream.Recv()
	}
	if info := errorInfo(err); info == nil || info.Reason != contract.ReadUncertainReason {
		t.Fatalf("scan below a commit within the window: %v, want %s", err, contract.ReadUncertainReason)
	}
	again, err := b.kv().BeginTxn(ctx, &kvpb.BeginTxnRequest{MinStartTs: commitTS, UncertaintyLimit: begin.UncertaintyLimit})
	if err != nil {
		t.Fatal(err)
	}
	if again.StartTs <= commitTS || again.UncertaintyLimit != begin.UncertaintyLimit {
		t.Fatalf("restart began at %d with limit %d; want above %d, limit kept at %d", again.StartTs, again.UncertaintyLimit, commitTS, begin.UncertaintyLimit)
	}
	got, err := a.kv().TxnGet(ctx, &kvpb.TxnGetRequest{StartTs: again.StartTs, Key: key, UncertaintyLimit: again.UncertaintyLimit})
	if err != nil || !got.Found || string(got.Value) != "v1" {
		t.Fatalf("the restarted read: %v, %v; want v1", got, err)
	}
	// A start far beyond the bound is not a clock within it: refused.
	_, err = b.kv().BeginTxn(ctx, &kvpb.BeginTxnRequest{MinStartTs: uint64(time.Now().Add(time.Hour).UnixNano())})
	if info := errorInfo(err); status.Code(err) != codes.Unavailable || info == nil || info.Reason != contract.ClockOffsetReason ||
		!strings.Contains(err.Error(), "beyond the maximum clock offset 250ms") {
		t.Fatalf("a min_start_ts an hour ahead: %v, want UNAVAILABLE %s naming the bound", err, contract.ClockOffsetReason)
	}
}

// A cross-region commit coordinated by the slow store takes its commit
// timestamp from the fast store's prepare, ahead of the coordinator's own
// clock. A transaction the coordinator begins after acknowledging it starts
// above it and reads it; before, the coordinator's clock stayed behind its
// own region's version, the start came out below the commit, and the read,
// narrowed to the coordinator's own reading (docs/clock.md, observed
// clocks), missed a commit acknowledged before it began: what
// TestBankWithSkewedClocksWithinTheBound caught now and then.
func TestACommitCoordinatedOnTheSlowStoreIsSeenByATransactionItBegins(t *testing.T) {
	_, b := skewedPair(t, [2]time.Duration{+90 * time.Millisecond, -90 * time.Millisecond}, skewBound)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primary, secondary := regionKey(1, "p"), regionKey(0, "s") // b's region, a's
	w, err := b.kv().BeginTxn(ctx, &kvpb.BeginTxnRequest{})
	if err != nil {
		t.Fatal(err)
	}
	committed, err := b.kv().CommitTxn(ctx, &kvpb.CommitTxnRequest{TxnId: w.TxnId, Mutations: []*kvpb.Mutation{
		{Op: kvpb.Mutation_OP_PUT, Key: primary, Value: []byte("v1")},
		{Op: kvpb.Mutation_OP_PUT, Key: secondary, Value: []byte("v1")}}})
	if err != nil {
		t.Fatal(err)
	}
	if committed.CommitTs <= w.StartTs+uint64(100*time.Millisecond) {
		t.Fatalf("committed at %d, %v after its start at the slow store: the fast store's prepare did not decide it, the clocks are not apart",
			committed.CommitTs, time.Duration(committed.CommitTs-w.StartTs))
	}
	r, err := b.kv().BeginTxn(ctx, &kvpb.BeginTxnRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r.StartTs <= committed.CommitTs {
		t.Fatalf("the coordinator began a transaction at %d, %v below the commit it had acknowledged at %d",
			r.StartTs, time.Duration(committed.CommitTs-r.StartTs), committed.CommitTs)
	}
	for _, key := range [][]byte{primary, secondary} {
		got, err := b.kv().TxnGet(ctx, &kvpb.TxnGetRequest{StartTs: r.StartTs, Key: key, UncertaintyLimit: r.UncertaintyLimit,
			Observed: []*kvpb.ObservedClock{r.Observed}})
		if err != nil || !got.Found || string(got.Value) != "v1" {
			t.Fatalf("read of %q after the commit was acknowledged: %v, %v; want v1", key, got, err)
		}
	}
}

// A store whose clock is beyond the bound from its peers' refuses every KV
// request with CLOCK_OFFSET and a message naming the offsets, and says so
// in bellows_clock_offset_exceeded; its peers, within the bound of each
// other, keep serving. With three stores, the one off is off from both
// others and stops; each other is off from one of two and serves.
func TestAStoreBeyondTheClockOffsetRefuses(t *testing.T) {
	bucket := "file://" + t.TempDir()
	addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	peers := strings.Join(addrs, ",")
	offsets := []time.Duration{0, 10 * time.Millisecond, -400 * time.Millisecond}
	stores := make([]*proc, 3)
	for i := range stores {
		stores[i] = startTxnStore(t, fmt.Sprintf("store-%c", 'a'+i), bucket, t.TempDir(), addrs[i], fmt.Sprintf("%d/3", i), peers,
			"--max-clock-offset="+skewBound.String(), "--test-clock-offset="+offsets[i].String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	off := stores[2]
	waitFor(t, "the store 400ms behind to refuse", func() bool {
		return off.metric(t, "bellows_clock_offset_exceeded") == 1
	})
	_, err := off.kv().Put(ctx, &kvpb.PutRequest{Key: regionKey(2, "k"), Value: []byte("v")})
	info := errorInfo(err)
	if status.Code(err) != codes.Unavailable || info == nil || info.Reason != contract.ClockOffsetReason {
		t.Fatalf("a put at the store whose clock is off: %v, want UNAVAILABLE %s", err, contract.ClockOffsetReason)
	}
	for _, want := range []string{"this store's clock is beyond 200ms (80% of the maximum clock offset 250ms) from a majority of its peers", addrs[0] + " +", addrs[1] + " +", "check NTP/chrony"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if _, err := off.kv().BeginTxn(ctx, &kvpb.BeginTxnRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("BeginTxn at the store whose clock is off: %v, want UNAVAILABLE: it must hand out no timestamp", err)
	}
	// Its peers serve, each other's clocks within the bound.
	for i, s := range stores[:2] {
		if got := s.metric(t, "bellows_clock_offset_exceeded"); got != 0 {
			t.Errorf("store %d, 400ms from one peer and 10ms from the other: bellows_clock_offset_exceeded = %v", i, got)
		}
		if _, err := s.kv().Put(ctx, &kvpb.PutRequest{Key: regionKey(i, "k"), Value: []byte("v")}); err != nil {
			t.Errorf("a put at store %d, whose clock is within the bound of a majority: %v", i, err)
		}
	}
}

// errorInfo is err's ErrorInfo detail, or nil.
func errorInfo(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// The no-lost-update workload with the same skewed clocks, both stores
// SIGKILLed and restarted under it: every counter counts each
// acknowledged increment (and at most the ones whose outcome was lost),
// and the history is snapshot isolated, in real time too.
func TestNoLostUpdateWithSkewedClocksThroughCrashes(t *testing.T) {
	stores, startStore := skewedCrashPair(t)
	c := newClient(t, stores[0], stores[1])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	keys := make([][]byte, 4)
	for i := range keys {
		keys[i] = regionKey(i, "n")
	}
	w := newIncrements(c, keys)
	w.seed(ctx, t)
	done := make(chan error, 1)
	go func() { done <- w.run(ctx, 8, 40, true) }()
	acked := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		n := 0
		for _, k := range keys {
			n += w.committed[string(k)]
		}
		return n
	}
	for i := range stores {
		before := acked()
		waitFor(t, "increments before the next crash", func() bool { return acked() >= before+20 })
		stores[i].kill()
		stores[i] = startStore(i)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	w.check(ctx, t)
	unknown := 0
	for _, n := range w.unknown {
		unknown += n
	}
	t.Logf("%d increments acknowledged, %d with their outcome lost, 2 stores SIGKILLed", acked(), unknown)
}

// skewedCrashPair starts two stores (owning regions 0 and 2, and 1 and 3)
// whose clocks are +90ms and −90ms off, within skewBound; startStore(i)
// starts store i again, on its WAL directory, after a crash.
func skewedCrashPair(t *testing.T) (stores [2]*proc, startStore func(i int) *proc) {
	t.Helper()
	bucket := "file://" + t.TempDir()
	addrs := [2]string{freeAddr(t), freeAddr(t)}
	wals := [2]string{t.TempDir(), t.TempDir()}
	offsets := [2]time.Duration{+90 * time.Millisecond, -90 * time.Millisecond}
	peers := addrs[0] + "," + addrs[1]
	startStore = func(i int) *proc {
		return startTxnStore(t, fmt.Sprintf("store-%c", 'a'+i), bucket, wals[i], addrs[i], fmt.Sprintf("%d/2", i), peers,
			"--max-clock-offset="+skewBound.String(), "--test-clock-offset="+offsets[i].String())
	}
	return [2]*proc{startStore(0), startStore(1)}, startStore
}

// The bank across three stores, one of which restarts on a clock 400ms
// behind, beyond the bound: that store refuses (CLOCK_OFFSET) instead of
// serving stale snapshots, transfers between the other stores' regions go
// on, and once its clock is right again (restarted without the offset) it
// serves, the total holds, and the whole history is snapshot isolated.
func TestBankWithAStoreBeyondTheBoundRefusesInsteadOfAnomalies(t *testing.T) {
	bucket := "file://" + t.TempDir()
	addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	wals := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	peers := strings.Join(addrs, ",")
	startStore := func(i int, offset time.Duration) *proc {
		return startTxnStore(t, fmt.Sprintf("store-%c", 'a'+i), bucket, wals[i], addrs[i], fmt.Sprintf("%d/3", i), peers,
			"--max-clock-offset="+skewBound.String(), "--test-clock-offset="+offset.String())
	}
	stores := []*proc{startStore(0, 0), startStore(1, 0), startStore(2, 0)}
	c := newClient(t, stores...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Region i is store i%3's: region 2 is store-c's alone.
	b, err := bank.Open(ctx, c, bank.Config{Regions: bankRegions, AccountsPerRegion: 4, Key: bankAccount,
		StartBalance: 100, Transferers: 4, Summers: 1, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b.Start(ctx)
	await := func(why string, n int64) {
		t.Helper()
		if err := b.AwaitTransfers(ctx, b.Transfers()+n, time.Minute); err != nil {
			b.Stop()
			t.Fatalf("%s: %v", why, err)
		}
	}
	await("before store-c's clock goes wrong", 50)
	stores[2].kill()
	stores[2] = startStore(2, -400*time.Millisecond)
	waitFor(t, "store-c, 400ms behind its peers, to refuse", func() bool {
		return stores[2].metric(t, "bellows_clock_offset_exceeded") == 1
	})
	_, err = stores[2].kv().Put(ctx, &kvpb.PutRequest{Key: regionKey(2, "k"), Value: []byte("v")})
	if info := errorInfo(err); status.Code(err) != codes.Unavailable || info == nil || info.Reason != contract.ClockOffsetReason {
		t.Fatalf("a put at store-c: %v, want UNAVAILABLE %s", err, contract.ClockOffsetReason)
	}
	await("transfers between the other stores' regions while store-c refuses", 30)
	stores[2].kill()
	stores[2] = startStore(2, 0)
	await("after store-c's clock is right again", 30)
	b.Stop()
	if err := b.Final(ctx); err != nil {
		t.Fatal(err)
	}
	res := b.Result()
	for _, v := range res.Violations {
		t.Error(v)
	}
	rep := sicheck.Analyze(res.History, 20)
	for _, err := range rep.Violations {
		t.Error("snapshot isolation: ", err)
	}
	t.Logf("%d transfers, %d sums through a store 400ms off (refusing) and back; history: %v", res.Transfers, res.Sums, rep)
}
