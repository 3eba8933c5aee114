package process

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/sicheck"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/regionmap"
)

// A randomized model test of elastic regions (issue #26): on three store
// processes and a `bellows compactor` worker, a seeded chaos schedule
// interleaves splits, merges and moves of regions with store crashes
// (SIGKILL, then a restart on the same WAL and address), flushes and
// offloaded compactions (Admin.Flush, Admin.Compact), while seeded clients
// run:
//
//   - puts, deletes and multi-key batches (a slot's keys may fall in
//     two regions after a split: its batch then commits across them), reads (Get, Scan, and a
//     BatchGet, atomic within one region) and reads at past timestamps
//     (GetAt, Scan at ReadTS) on modelled keys. The history is checked
//     for linearizability by porcupine, per slot of four keys (batches and
//     BatchGets stay within a slot, so slots are independent objects); a
//     failed write is an operation of unknown outcome. A Scan is a
//     snapshot per region only, so each key it returns is a read of its
//     own. Reads at a timestamp are checked against every version of the
//     key (checkElasticVersions), and after the chaos every key is read
//     again at sampled versions' timestamps.
//   - snapshot-isolation transactions on other keys of the same slots:
//     read-modify-writes of two or three keys (often in different
//     regions: two-phase commits), one in ten abandoned by a deadline of a
//     few milliseconds (mid-commit, some), and snapshot scans (TxnScan),
//     checked by sicheck.
//
// Splits and merges are not in the Admin API, so the schedule drives them
// by load, as TestHistoryIsLinearizableThroughSplitsMergesMovesAndAKill
// does: the clients use only a seeded hot range of slots, a region serving
// over --split-qps splits at its sampled median, a cold pair merges after
// --merge-after, and the balancer (--balance-interval) moves regions to
// even the stores out (which regions move is the balancer's choice, not
// the seed's). Each step waits for its effect in the stores' metrics (a
// killed store's counters are read just before the kill): every seed sees
// at least one split, merge, move, kill, flush and offloaded compaction.
// Transactions write no deletes (sicheck models puts only), and
// DeleteRange is not exercised.
//
// A store is killed at any moment, a region move under way included
// (killed between a move's commit and its release, a store never opened
// the region again: a bug of the stores this test found, fixed by
// Store.heldHere; elCluster.kill).
//
// Seeds: BELLOWS_SEED=n runs seed n; BELLOWS_SEEDS=n runs seeds 1 to n;
// else seeds 1, 2 and 3.
func TestRandomElasticChaosIsLinearizableAndSnapshotIsolated(t *testing.T) {
	seeds := elasticSeeds(t)
	var total elasticCounts
	began := time.Now()
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { total.add(runElasticModel(t, seed)) })
	}
	if !t.Failed() {
		t.Logf("%d seeds in %v, no violation: %s", len(seeds), time.Since(began).Round(time.Second), total)
	}
}

func elasticSeeds(t *testing.T) []uint64 {
	parse := func(name string) (uint64, bool) {
		s := os.Getenv(name)
		if s == "" {
			return 0, false
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			t.Fatalf("%s=%q: want a positive number", name, s)
		}
		return n, true
	}
	if n, ok := parse("BELLOWS_SEED"); ok {
		return []uint64{n}
	}
	if n, ok := parse("BELLOWS_SEEDS"); ok {
		var seeds []uint64
		for s := uint64(1); s <= n; s++ {
			seeds = append(seeds, s)
		}
		return seeds
	}
	return []uint64{1, 2, 3}
}

// The key space: elSlots slots, each with elKeys modelled keys (one
// porcupine partition) and elAccts transaction accounts, side by side so
// that regions, and their splits, merges and moves, hold both.
const (
	elSlots      = 8
	elKeys       = 4
	elAccts      = 2
	elLinClients = 4
	elTxnClients = 2
	// elOpTimeout bounds one operation: long enough for the client to
	// retry through a store's restart, so few outcomes stay unknown.
	elOpTimeout = 30 * time.Second
)

func elKey(slot, i int) string  { return fmt.Sprintf("e%02d-l%d", slot, i) }
func elAcct(slot, j int) string { return fmt.Sprintf("e%02d-t%d", slot, j) }

// elSlotStart is where slot's keys begin; slot elSlots is past them all.
func elSlotStart(slot int) string { return fmt.Sprintf("e%02d-", slot) }

// elKind is 'l' for a modelled key, 't' for an account, else 0.
func elKind(key string) byte {
	if len(key) != 6 || key[0] != 'e' || key[3] != '-' {
		return 0
	}
	return key[4]
}

type elasticCounts struct {
	splits, merges, moves, kills, flushes, remoteCompactions         int
	linOps, tsReads, unknownWrites, txns, txnsCommitted, txnsUnknown int
	batchesAcross                                                    int
}

func (c *elasticCounts) add(o elasticCounts) {
	c.splits += o.splits
	c.merges += o.merges
	c.moves += o.moves
	c.kills += o.kills
	c.flushes += o.flushes
	c.remoteCompactions += o.remoteCompactions
	c.batchesAcross += o.batchesAcross
	c.linOps += o.linOps
	c.tsReads += o.tsReads
	c.unknownWrites += o.unknownWrites
	c.txns += o.txns
	c.txnsCommitted += o.txnsCommitted
	c.txnsUnknown += o.txnsUnknown
}

func (c elasticCounts) String() string {
	return fmt.Sprintf("%d load splits, %d merges, %d moves, %d kills, %d flushes, %d offloaded compactions; "+
		"%d linearizability operations (%d writes of unknown outcome; %d batches across regions), %d reads at a timestamp; %d transactions (%d committed, %d of unknown outcome)",
		c.splits, c.merges, c.moves, c.kills, c.flushes, c.remoteCompactions,
		c.linOps, c.unknownWrites, c.batchesAcross, c.tsReads, c.txns, c.txnsCommitted, c.txnsUnknown)
}

// elCluster is the three stores and the worker of one seed.
type elCluster struct {
	t      *testing.T
	dir    string
	bucket string
	addrs  []string
	worker *proc
	mu     sync.Mutex // guards stores: clients pick stores while the schedule restarts them
	stores []*proc
	// gone sums the counters of killed incarnations (test goroutine only).
	gone map[string]float64
	// b is the cluster's bucket, where the region map is read.
	b *blob.Bucket
}

// The counters of the chaos. (Flushes are counted by the test:
// bellows_flush_bytes_total sums the regions open now, so it drops when
// one moves away or merges.)
const (
	elSplitsMetric = `bellows_region_splits_total{reason="load"}`
	elMergesMetric = "bellows_region_merges_total"
	elMovesMetric  = "bellows_region_moves_total"
	elRemoteMetric = `bellows_compactions_total{location="remote",result="success"}`
	elAcrossMetric = "bellows_kv_batches_across_regions_total"
)

var elCounters = []string{elSplitsMetric, elMergesMetric, elMovesMetric, elRemoteMetric, elAcrossMetric}

func newElCluster(t *testing.T) *elCluster {
	dir := t.TempDir()
	c := &elCluster{t: t, dir: dir, bucket: "file://" + dir + "/bucket", gone: map[string]float64{},
		addrs: []string{freeAddr(t), freeAddr(t), freeAddr(t)}}
	var err error
	if c.b, err = blob.Open(context.Background(), c.bucket); err != nil {
		t.Fatal(err)
	}
	c.worker = start(t, "compactor", "compactor", "--name=w1", "--cache-bytes=64MiB")
	for i := range c.addrs {
		c.stores = append(c.stores, start(t, fmt.Sprintf("store-%d", i), c.args(i)...))
	}
	return c
}

func (c *elCluster) args(i int) []string {
	return elasticStoreArgs(c.t, c.bucket, fmt.Sprintf("%s/wal-%d", c.dir, i), c.addrs, i, c.worker)
}

func (c *elCluster) store(i int) *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stores[i]
}

// sum is a counter over every incarnation of every store.
func (c *elCluster) sum(series string) float64 {
	n := c.gone[series]
	for i := range c.addrs {
		n += c.store(i).metric(c.t, series)
	}
	return n
}

// kill SIGKILLs store i and starts it again on its WAL and address.
//
// It kills at whatever moment the schedule reaches, a region move under
// way included. A store killed after the balancer committed a move of one
// of its regions and before it released the region (it learns of moves
// within the map's 1 s poll) restarts with the region assigned elsewhere
// but still holding its WAL: it must open it and hand it over
// (server.Store.heldHere). This test found that it did not, and the new
// owner waited for the release forever. BELLOWS_KILL_SETTLED=1 waits for
// no move to be under way before each kill, as the test did before the
// fix.
func (c *elCluster) kill(t *testing.T, i int) {
	t.Helper()
	if os.Getenv("BELLOWS_KILL_SETTLED") != "" {
		elAwait(t, "no region move under way", func() bool {
			_, ok := c.settled()
			return ok
		})
	} else if m, ok := c.settled(); !ok && m.Epoch > 0 {
		t.Logf("store-%d killed while a region move was under way (map epoch %d): its restart must hand over what it still holds", i, m.Epoch)
	}
	p := c.store(i)
	for _, s := range elCounters {
		c.gone[s] += p.metric(t, s)
	}
	p.kill()
	np := start(t, fmt.Sprintf("store-%d", i), c.args(i)...)
	c.mu.Lock()
	c.stores[i] = np
	c.mu.Unlock()
}

// settled reads the newest region map and says whether every region in
// it is open at the store the map names and listed by no other store: no
// move is under way.
func (c *elCluster) settled() (regionmap.Map, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := regionmap.Load(ctx, c.b)
	if err != nil || m.Epoch == 0 {
		return m, false
	}
	open := map[string][]int{} // region → the stores listing it open
	for i := range c.addrs {
		rs, err := c.store(i).kv().Regions(ctx, &kvpb.RegionsRequest{})
		if err != nil {
			return m, false
		}
		for _, r := range rs.Regions {
			if r.Waiting != "" {
				return m, false
			}
			open[r.Name] = append(open[r.Name], i)
		}
	}
	for _, r := range m.Region {
		if !slices.Equal(open[r.Name], []int{r.OwnerOf(len(c.addrs))}) {
			return m, false
		}
	}
	return m, true
}

// region is a region some store serves, picked by rng.
func (c *elCluster) region(ctx context.Context, rng *rand.Rand) (*proc, string, error) {
	p := c.store(rng.IntN(len(c.addrs)))
	rs, err := p.kv().Regions(ctx, &kvpb.RegionsRequest{})
	if err != nil {
		return nil, "", err
	}
	if len(rs.Regions) == 0 {
		return nil, "", fmt.Errorf("%s serves no region", p.name)
	}
	return p, rs.Regions[rng.IntN(len(rs.Regions))].Name, nil
}

// elAwait polls cond (every 50 ms: each poll reads three stores' metrics)
// until it holds, for at most 2 minutes (a merge has taken 68 s: the
// regions must read cold over a load window, and be brought together).
func elAwait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, what, 2*time.Minute, 50*time.Millisecond, cond)
}

// elInput is an operation on the elKeys keys of one slot: a write (put,
// delete, batch: vals[i] for keys[i], "" deletes) or a read of keys.
type elInput struct {
	slot  int
	op    string
	write bool
	keys  []int
	vals  []string
}

// elOutput is what a read found, vals[i] for keys[i] ("" absent).
type elOutput struct{ vals []string }

// elState is one slot's keys' values ("" absent): an array, so a state is
// a value that Step can change without touching its argument.
type elState [elKeys]string

var elModel = porcupine.Model{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		by := make([][]porcupine.Operation, elSlots)
		for _, op := range ops {
			s := op.Input.(elInput).slot
			by[s] = append(by[s], op)
		}
		return slices.DeleteFunc(by, func(p []porcupine.Operation) bool { return len(p) == 0 })
	},
	Init: func() any { return elState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in := state.(elState), input.(elInput)
		if in.write {
			for i, k := range in.keys {
				st[k] = in.vals[i]
			}
			return true, st
		}
		for i, k := range in.keys {
			if output.(elOutput).vals[i] != st[k] {
				return false, state
			}
		}
		return true, state
	},
	Equal: func(a, b any) bool { return a.(elState) == b.(elState) },
	DescribeOperation: func(input, output any) string {
		in := input.(elInput)
		var b strings.Builder
		fmt.Fprintf(&b, "%s slot %d", in.op, in.slot)
		for i, k := range in.keys {
			if in.write {
				fmt.Fprintf(&b, " l%d=%q", k, in.vals[i])
			} else {
				fmt.Fprintf(&b, " l%d→%q", k, output.(elOutput).vals[i])
			}
		}
		return b.String()
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%q", state.(elState)) },
}

// elWrite is one key's write, for the model of versions: val "" deletes;
// ts 0 when the outcome is unknown (ret is then MaxInt64).
type elWrite struct {
	key, val  string
	ts        uint64
	call, ret int64
}

// elRead is a read of key at timestamp ts that answered val ("" absent).
type elRead struct {
	what      string
	key, val  string
	ts        uint64
	call, ret int64
}

// elWorkload is the seeded clients and what they recorded.
type elWorkload struct {
	seed   uint64
	c      *client.Client
	cl     *elCluster
	origin time.Time

	hotRange atomic.Int64 // the clients' slots [lo, hi): lo<<8 | hi
	stop     atomic.Bool
	wg       sync.WaitGroup
	done     atomic.Int64 // modelled operations finished

	mu     sync.Mutex
	ops    []porcupine.Operation
	writes []elWrite
	reads  []elRead
	txns   []sicheck.Txn
	// recent are the commit timestamps last acknowledged in each slot,
	// for reads at a timestamp.
	recent [elSlots][]uint64
	// kinds counts the operations by kind and outcome, so the test can
	// tell a history that exercised everything from one that did not.
	kinds map[string]int
}

func newElWorkload(seed uint64, c *client.Client, cl *elCluster) *elWorkload {
	w := &elWorkload{seed: seed, c: c, cl: cl, origin: time.Now(), kinds: map[string]int{}}
	w.setHot(0, elSlots)
	return w
}

func (w *elWorkload) now() int64 { return int64(time.Since(w.origin)) }

// instant is now as a sicheck instant (never 0, which means unrecorded).
func (w *elWorkload) instant() time.Duration { return max(time.Since(w.origin), 1) }

func (w *elWorkload) setHot(lo, hi int) { w.hotRange.Store(int64(lo)<<8 | int64(hi)) }

func (w *elWorkload) hot() (int, int) {
	v := w.hotRange.Load()
	return int(v >> 8), int(v & 0xff)
}

func (w *elWorkload) count(kind string) {
	w.mu.Lock()
	w.kinds[kind]++
	w.mu.Unlock()
}

func (w *elWorkload) start() {
	for i := range elLinClients {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			rng := rand.New(rand.NewPCG(w.seed, uint64(100+i)))
			// Paced, as the other history tests: the stores keep CPU for
			// the chaos, and the history stays checkable.
			lim := rate.NewLimiter(50, 1)
			for n := 0; !w.stop.Load(); n++ {
				_ = lim.Wait(context.Background())
				w.linOp(i, n, rng)
				w.done.Add(1)
			}
		}()
	}
	for i := range elTxnClients {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			rng := rand.New(rand.NewPCG(w.seed, uint64(200+i)))
			lim := rate.NewLimiter(8, 1)
			for n := 0; !w.stop.Load(); n++ {
				_ = lim.Wait(context.Background())
				w.txnOp(i, n, rng)
			}
		}()
	}
}

// halt stops the clients and waits for them (again: no-op).
func (w *elWorkload) halt() {
	w.stop.Store(true)
	w.wg.Wait()
}

// awaitOps waits until the clients have finished n more operations, so
// the history covers what the last chaos step left.
func (w *elWorkload) awaitOps(t *testing.T, n int) {
	t.Helper()
	target := w.done.Load() + int64(n)
	elAwait(t, fmt.Sprintf("%d more client operations", n), func() bool { return w.done.Load() >= target })
}

// linOp is one operation of modelled client c, its n-th.
func (w *elWorkload) linOp(c, n int, rng *rand.Rand) {
	lo, hi := w.hot()
	slot := lo + rng.IntN(hi-lo)
	ctx, cancel := context.WithTimeout(context.Background(), elOpTimeout)
	defer cancel()
	val := func(j int) string { return fmt.Sprintf("c%d.%d.%d", c, n, j) }
	switch p := rng.IntN(100); {
	case p < 24:
		k := rng.IntN(elKeys)
		w.write(c, slot, "put", []int{k}, []string{val(0)}, func() (client.WriteResult, error) {
			return w.c.Put(ctx, []byte(elKey(slot, k)), []byte(val(0)))
		})
	case p < 32:
		k := rng.IntN(elKeys)
		w.write(c, slot, "delete", []int{k}, []string{""}, func() (client.WriteResult, error) {
			return w.c.Delete(ctx, []byte(elKey(slot, k)))
		})
	case p < 44:
		w.batch(ctx, c, slot, rng, val)
	case p < 60:
		k := rng.IntN(elKeys)
		call := w.now()
		v, found, err := w.c.Get(ctx, []byte(elKey(slot, k)))
		if err != nil {
			w.count("get failed")
			return // a failed read constrains nothing
		}
		w.read(c, slot, "get", call, []int{k}, []string{found1(v, found)})
	case p < 70:
		w.batchGet(ctx, c, slot, rng)
	case p < 84:
		k := rng.IntN(elKeys)
		ts := w.pickTS(slot, rng)
		call := w.now()
		v, found, err := w.c.GetAt(ctx, []byte(elKey(slot, k)), ts)
		if err != nil {
			w.count("get-at failed")
			return
		}
		w.mu.Lock()
		w.reads = append(w.reads, elRead{what: "get-at", key: elKey(slot, k), val: found1(v, found), ts: ts, call: call, ret: w.now()})
		w.kinds["get-at"]++
		w.mu.Unlock()
	case p < 92:
		// A Scan is one snapshot per region, not across regions (client
		// package doc), and where the regions end at that instant is
		// unknown here: each key it covers is a read of its own, at some
		// instant of the scan.
		call := w.now()
		rows, err := w.scan(ctx, lo, hi, nil)
		if err != nil {
			w.count("scan failed")
			return
		}
		ret := w.now()
		w.mu.Lock()
		defer w.mu.Unlock()
		for s := lo; s < hi; s++ {
			for k := range elKeys {
				w.ops = append(w.ops, porcupine.Operation{ClientId: c, Input: elInput{slot: s, op: "scan", keys: []int{k}},
					Output: elOutput{vals: []string{rows[elKey(s, k)]}}, Call: call, Return: ret})
			}
		}
		w.kinds["scan"]++
	default:
		ts := w.pickTS(lo+rng.IntN(hi-lo), rng)
		call := w.now()
		rows, err := w.scan(ctx, lo, hi, &ts)
		if err != nil {
			w.count("scan-at failed")
			return
		}
		w.recordScanAt("scan-at", lo, hi, ts, rows, call, w.now())
	}
}

func found1(v []byte, found bool) string {
	if !found {
		return ""
	}
	return string(v)
}

// write runs a write of slot's keys and records it: in the history (of
// unknown outcome when it failed) and, per key, for the model of versions.
func (w *elWorkload) write(c, slot int, op string, keys []int, vals []string, do func() (client.WriteResult, error)) {
	call := w.now()
	res, err := do()
	ret := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	ts := res.CommitTS
	if err != nil {
		// Unknown outcome: it may take effect at any later time.
		ret, ts = math.MaxInt64, 0
		w.kinds[op+" unknown"]++
	} else {
		w.kinds[op]++
		r := append(w.recent[slot], ts)
		w.recent[slot] = r[max(0, len(r)-32):]
	}
	w.ops = append(w.ops, porcupine.Operation{ClientId: c, Input: elInput{slot: slot, op: op, write: true, keys: keys, vals: vals},
		Output: elOutput{}, Call: call, Return: ret})
	for i, k := range keys {
		w.writes = append(w.writes, elWrite{key: elKey(slot, k), val: vals[i], ts: ts, call: call, ret: ret})
	}
}

// read records a read of slot's keys that returned.
func (w *elWorkload) read(c, slot int, op string, call int64, keys []int, vals []string) {
	ret := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ops = append(w.ops, porcupine.Operation{ClientId: c, Input: elInput{slot: slot, op: op, keys: keys},
		Output: elOutput{vals: vals}, Call: call, Return: ret})
	w.kinds[op]++
}

// batch writes 2 to 4 keys of slot atomically, some deleted. A batch must
// fall in one region: it keeps the keys the client's table puts in the
// first key's region (a stale table makes the client or the store refuse
// it, or, the route gone stale between attempts, leaves its outcome
// unknown).
func (w *elWorkload) batch(ctx context.Context, c, slot int, rng *rand.Rand, val func(int) string) {
	keys := w.oneRegion(slot, rng.Perm(elKeys)[:2+rng.IntN(elKeys-1)])
	vals := make([]string, len(keys))
	muts := make([]client.Mutation, len(keys))
	for i, k := range keys {
		muts[i].Key = []byte(elKey(slot, k))
		if rng.IntN(4) == 0 {
			muts[i].Delete = true
		} else {
			vals[i] = val(i)
			muts[i].Value = []byte(vals[i])
		}
	}
	w.write(c, slot, "batch", keys, vals, func() (client.WriteResult, error) {
		res, err := w.c.Batch(ctx, muts)
		if status.Code(err) == codes.InvalidArgument {
			// The store found the keys in two regions: the client's table
			// is stale, and a stale route is all it refreshes on.
			_ = w.c.Refresh(ctx)
		}
		return res, err
	})
}

// oneRegion keeps the keys of slot that the client's table puts in the
// first key's region.
func (w *elWorkload) oneRegion(slot int, keys []int) []int {
	first := []byte(elKey(slot, keys[0]))
	for _, r := range w.c.Regions() {
		if r.Contains(first) {
			return slices.DeleteFunc(keys, func(k int) bool { return !r.Contains([]byte(elKey(slot, k))) })
		}
	}
	return keys
}

// batchGet reads 2 to 4 keys of slot in one BatchGet (those of one region
// by the client's table), straight to a store, which forwards it to the
// owner: the owner refuses one whose keys span regions, so an answer is
// one view of one region. (The Go client's BatchGet regroups such keys by
// region, which is not one view.)
func (w *elWorkload) batchGet(ctx context.Context, c, slot int, rng *rand.Rand) {
	keys := w.oneRegion(slot, rng.Perm(elKeys)[:2+rng.IntN(elKeys-1)])
	req := &kvpb.BatchGetRequest{}
	for _, k := range keys {
		req.Keys = append(req.Keys, []byte(elKey(slot, k)))
	}
	p := w.cl.store(rng.IntN(len(w.cl.addrs)))
	call := w.now()
	resp, err := p.kv().BatchGet(ctx, req)
	if status.Code(err) == codes.OutOfRange {
		w.count("batch-get across regions")
		return
	}
	if err != nil {
		w.count("batch-get failed")
		return
	}
	vals := make([]string, len(resp.Results))
	for i, r := range resp.Results {
		vals[i] = found1(r.Value, r.Found)
	}
	w.read(c, slot, "batch-get", call, keys[:len(vals)], vals)
}

// scan reads the modelled keys of slots [lo, hi), at ts when set.
func (w *elWorkload) scan(ctx context.Context, lo, hi int, ts *uint64) (map[string]string, error) {
	kvs, err := w.c.ScanAll(ctx, []byte(elSlotStart(lo)), []byte(elSlotStart(hi)), client.ScanOptions{ReadTS: ts})
	if err != nil {
		return nil, err
	}
	rows := map[string]string{}
	for _, kv := range kvs {
		if elKind(string(kv.Key)) == 'l' {
			rows[string(kv.Key)] = string(kv.Value)
		}
	}
	return rows, nil
}

// recordScanAt records a scan at ts of slots [lo, hi) as a read of each
// modelled key at ts.
func (w *elWorkload) recordScanAt(what string, lo, hi int, ts uint64, rows map[string]string, call, ret int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s := lo; s < hi; s++ {
		for k := range elKeys {
			w.reads = append(w.reads, elRead{what: what, key: elKey(s, k), val: rows[elKey(s, k)], ts: ts, call: call, ret: ret})
		}
	}
	w.kinds[what]++
}

// pickTS is a timestamp to read at: one recently acknowledged in slot (or
// any slot), or one just below or above it, where a version begins or
// ends.
func (w *elWorkload) pickTS(slot int, rng *rand.Rand) uint64 {
	w.mu.Lock()
	r := w.recent[slot]
	for s := 0; len(r) == 0 && s < elSlots; s++ {
		r = w.recent[s]
	}
	var ts uint64 = 1
	if len(r) > 0 {
		ts = r[rng.IntN(len(r))]
	}
	w.mu.Unlock()
	switch rng.IntN(5) {
	case 0:
		return ts - 1
	case 1:
		return ts + 1
	}
	return ts
}

// txnOp is one transaction of transactional client c, its n-th: a
// read-modify-write of 2 or 3 accounts or, one in five, a snapshot scan of
// the hot slots' accounts. One in ten gets a deadline of 1 to 3 ms, which
// ends it anywhere, mid-commit included, as a client that goes away.
func (w *elWorkload) txnOp(c, n int, rng *rand.Rand) {
	deadline := elOpTimeout
	if rng.IntN(10) == 0 {
		deadline = time.Duration(1+rng.IntN(3)) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	lo, hi := w.hot()
	id := fmt.Sprintf("x%d.%d", c, n)
	if rng.IntN(5) == 0 {
		w.restarting(ctx, id, func(id string, invoke time.Duration, x *client.Txn) error {
			return w.txnScan(ctx, id, invoke, x, lo, hi)
		})
		return
	}
	var keys []string
	for len(keys) < 2+rng.IntN(2) {
		// Mostly the hot slots; sometimes anywhere, so that more
		// commits span regions.
		s := lo + rng.IntN(hi-lo)
		if rng.IntN(10) < 3 {
			s = rng.IntN(elSlots)
		}
		if k := elAcct(s, rng.IntN(elAccts)); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	writes := rng.IntN(1<<len(keys)-1) + 1 // a non-empty subset of keys, by bit
	w.restarting(ctx, id, func(id string, invoke time.Duration, x *client.Txn) error {
		return w.txnRW(ctx, id, invoke, x, keys, writes)
	})
}

// restarting runs attempt in a transaction and again in its restart while
// a read was uncertain, each attempt its own transaction in the history,
// invoked when the first was (as the bank does: internal/bank).
func (w *elWorkload) restarting(ctx context.Context, id string, attempt func(id string, invoke time.Duration, x *client.Txn) error) {
	invoke := w.instant()
	x, err := w.c.Begin(ctx)
	for n := 1; err == nil; n++ {
		aid := id
		if n > 1 {
			aid = fmt.Sprintf("%s.%d", id, n)
		}
		err = attempt(aid, invoke, x)
		if !errors.Is(err, client.ErrReadUncertain) || n == 16 {
			return
		}
		x, err = x.Restart(ctx)
	}
}

// elRollback ends a transaction whose read failed at its store, so its
// snapshot is not kept until it times out: best effort, past an abandoned
// transaction's deadline. (A restart after an uncertain read rolls back
// itself; a commit that failed is left alone, whatever it did.)
func elRollback(x *client.Txn, err error) {
	if errors.Is(err, client.ErrReadUncertain) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = x.Rollback(ctx)
}

func (w *elWorkload) recordTxn(rec sicheck.Txn) {
	if len(rec.Reads) == 0 && len(rec.Scans) == 0 && len(rec.Writes) == 0 {
		return
	}
	w.mu.Lock()
	w.txns = append(w.txns, rec)
	w.mu.Unlock()
}

func (w *elWorkload) txnRW(ctx context.Context, id string, invoke time.Duration, x *client.Txn, keys []string, writes int) error {
	rec := sicheck.Txn{ID: id, StartTS: x.StartTS(), Reads: map[string]string{}, Writes: map[string]string{}, Invoke: invoke}
	defer func() { w.recordTxn(rec) }()
	for _, k := range keys {
		v, _, err := x.Get(ctx, []byte(k))
		rec.Complete = w.instant()
		if err != nil {
			elRollback(x, err)
			return err
		}
		rec.Reads[k] = string(v)
	}
	for i, k := range keys {
		if writes&(1<<i) != 0 {
			v := fmt.Sprintf("%s/%d", id, i)
			x.Put([]byte(k), []byte(v))
			rec.Writes[k] = v
		}
	}
	res, err := x.Commit(ctx)
	rec.CommitTS, rec.Complete = res.CommitTS, w.instant()
	switch {
	case err == nil:
		rec.Outcome = sicheck.Committed
	case errors.Is(err, client.ErrConflict), errors.Is(err, client.ErrTxnLost):
		rec.Outcome = sicheck.Aborted
	default:
		rec.Outcome = sicheck.Unknown
	}
	return err
}

// txnScan reads the accounts of slots [lo, hi) at the transaction's
// snapshot (TxnScan: one snapshot across regions). The range holds the
// modelled keys too, which no transaction writes: they are left out.
func (w *elWorkload) txnScan(ctx context.Context, id string, invoke time.Duration, x *client.Txn, lo, hi int) error {
	rec := sicheck.Txn{ID: id, StartTS: x.StartTS(), Invoke: invoke}
	defer func() { w.recordTxn(rec) }()
	start, end := elSlotStart(lo), elSlotStart(hi)
	kvs, err := x.ScanAll(ctx, []byte(start), []byte(end), client.ScanOptions{})
	rec.Complete = w.instant()
	if err != nil {
		elRollback(x, err)
		return err
	}
	rows := map[string]string{}
	for _, kv := range kvs {
		if elKind(string(kv.Key)) == 't' {
			rows[string(kv.Key)] = string(kv.Value)
		}
	}
	rec.Scans = []sicheck.Scan{{Start: start, End: end, Rows: rows}}
	_, err = x.Commit(ctx) // nothing written: ends it at its store
	return err
}

func runElasticModel(t *testing.T, seed uint64) elasticCounts {
	began := time.Now()
	rng := rand.New(rand.NewPCG(seed, 0xe1a5))
	cl := newElCluster(t)
	c := newClient(t, cl.stores...)
	w := newElWorkload(seed, c, cl)
	w.start()
	defer w.halt() // on a failed step too: the clients use this cluster

	var counts elasticCounts
	splits := func() float64 { return cl.sum(elSplitsMetric) }
	// heatAndSplit makes slots [lo, hi) the only hot ones and waits for
	// a split.
	heatAndSplit := func(lo, hi int) {
		before := splits()
		w.setHot(lo, hi)
		elAwait(t, fmt.Sprintf("a split by load of slots [%d, %d)", lo, hi), func() bool { return splits() > before })
	}
	randomRange := func() (int, int) {
		lo := rng.IntN(elSlots)
		return lo, min(lo+1+rng.IntN(2), elSlots)
	}
	// Every kind of chaos once, in a seeded order after the first split
	// (a merge needs regions to merge), and a few more of a seeded kind.
	steps := []string{"merge", "kill", "flush", "compact"}
	for range 1 + rng.IntN(3) {
		steps = append(steps, []string{"heat", "kill", "flush", "compact", "heat", "merge"}[rng.IntN(6)])
	}
	rng.Shuffle(len(steps), func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
	steps = append([]string{"split"}, steps...)
	t.Logf("seed %d: schedule %v", seed, steps)
	var took []string // each step's time, for the log
	for _, step := range steps {
		stepBegan := time.Now()
		switch step {
		case "split":
			heatAndSplit(randomRange())
			// The balancer spreads the daughters (bytes, at any gap).
			elAwait(t, "a region move", func() bool { return cl.sum(elMovesMetric) >= 1 })
		case "heat":
			w.setHot(randomRange())
		case "merge":
			// Only slot e stays hot: the regions that do not hold it go
			// cold, are brought onto one store and merge. That needs two
			// of them, which heating the other slots makes.
			e := []int{0, elSlots - 1}[rng.IntN(2)]
			for elColdRegions(t, c, e) < 2 {
				lo := 1 + rng.IntN(elSlots-2)
				if e == 0 {
					heatAndSplit(lo, min(lo+2, elSlots))
				} else {
					heatAndSplit(max(lo-1, 0), lo+1)
				}
			}
			before := cl.sum(elMergesMetric)
			w.setHot(e, e+1)
			elAwait(t, "a merge of cold regions", func() bool { return cl.sum(elMergesMetric) > before })
		case "kill":
			cl.kill(t, rng.IntN(len(cl.addrs)))
			counts.kills++
		case "flush":
			elAwait(t, "a flush", func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				p, name, err := cl.region(ctx, rng)
				if err == nil {
					_, err = p.admin().Flush(ctx, &kvpb.FlushRequest{Region: name})
				}
				if err != nil {
					return false // the region moved, split or merged meanwhile: another, next poll
				}
				counts.flushes++
				return true
			})
		case "compact":
			major := rng.IntN(2) == 0
			elAwait(t, "a compaction offloaded to the worker", func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				p, name, err := cl.region(ctx, rng)
				if err != nil {
					return false
				}
				// Flushed first, so the region has files to compact.
				if _, err := p.admin().Flush(ctx, &kvpb.FlushRequest{Region: name}); err != nil {
					return false
				}
				counts.flushes++
				resp, err := p.admin().Compact(ctx, &kvpb.CompactRequest{Region: name, Major: major})
				if err != nil || !resp.Compacted {
					major = true // a minor one may select nothing
					return false
				}
				return resp.Location == "remote"
			})
		}
		w.awaitOps(t, 80+rng.IntN(120))
		took = append(took, fmt.Sprintf("%s %v", step, time.Since(stepBegan).Round(100*time.Millisecond)))
	}
	w.halt()

	// After the chaos: the current state, and reads at sampled versions'
	// timestamps, across every slot.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call := w.now()
	rows, err := w.scan(ctx, 0, elSlots, nil)
	if err != nil {
		t.Fatalf("final scan: %v", err)
	}
	ret := w.now()
	for s := range elSlots {
		for k := range elKeys {
			w.ops = append(w.ops, porcupine.Operation{ClientId: elLinClients, Input: elInput{slot: s, op: "final scan", keys: []int{k}},
				Output: elOutput{vals: []string{rows[elKey(s, k)]}}, Call: call, Return: ret})
		}
	}
	var acked []uint64
	for _, wr := range w.writes {
		if wr.ts != 0 {
			acked = append(acked, wr.ts)
		}
	}
	slices.Sort(acked)
	acked = slices.Compact(acked)
	rng.Shuffle(len(acked), func(i, j int) { acked[i], acked[j] = acked[j], acked[i] })
	for _, ts := range acked[:min(len(acked), 100)] {
		for _, at := range []uint64{ts, ts - 1} {
			call := w.now()
			rows, err := w.scan(ctx, 0, elSlots, &at)
			if err != nil {
				t.Fatalf("final scan at %d: %v", at, err)
			}
			w.recordScanAt("final scan-at", 0, elSlots, at, rows, call, w.now())
		}
	}

	counts.splits = int(splits())
	counts.merges = int(cl.sum(elMergesMetric))
	counts.moves = int(cl.sum(elMovesMetric))
	counts.remoteCompactions = int(cl.sum(elRemoteMetric))
	counts.batchesAcross = int(cl.sum(elAcrossMetric))
	for what, n := range map[string]int{"load split": counts.splits, "merge": counts.merges, "move": counts.moves,
		"kill": counts.kills, "flush": counts.flushes, "offloaded compaction": counts.remoteCompactions,
		"batch across regions": counts.batchesAcross} {
		if n < 1 {
			t.Errorf("no %s happened", what)
		}
	}
	for _, kind := range []string{"put", "delete", "batch", "get", "batch-get", "get-at", "scan", "scan-at"} {
		if w.kinds[kind] == 0 {
			t.Errorf("no %s succeeded: %v", kind, w.kinds)
		}
	}

	counts.linOps, counts.tsReads = len(w.ops), len(w.reads)
	for _, wr := range w.writes {
		if wr.ts == 0 {
			counts.unknownWrites++
		}
	}
	elCheckLinearizable(t, seed, w.ops)
	if v := checkElasticVersions(w.writes, w.reads); len(v) > 0 {
		t.Errorf("seed %d: %d reads at a timestamp disagree with the acknowledged versions; the first:\n%s", seed, len(v), strings.Join(v[:min(len(v), 10)], "\n"))
	}
	rep := sicheck.Analyze(w.txns, 20)
	for _, v := range rep.Violations {
		t.Errorf("seed %d: snapshot isolation: %v", seed, v)
	}
	if rep.Committed < 10 {
		t.Errorf("seed %d: only %d transactions committed", seed, rep.Committed)
	}
	counts.txns, counts.txnsCommitted, counts.txnsUnknown = len(w.txns), rep.Committed, rep.Indeterminate
	t.Logf("seed %d: %v (steps: %s): %s; operations %v; transactions: %v", seed, time.Since(began).Round(100*time.Millisecond), strings.Join(took, ", "), counts, w.kinds, rep)
	return counts
}

// elColdRegions is how many regions hold no key of slot e, as the client
// learns them now.
func elColdRegions(t *testing.T, c *client.Client, e int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Refresh(ctx); err != nil {
		t.Fatalf("refreshing the regions: %v", err)
	}
	lo, hi := elSlotStart(e), elSlotStart(e+1)
	n := 0
	for _, r := range c.Regions() {
		if string(r.Start) >= hi || len(r.End) > 0 && string(r.End) <= lo {
			n++
		}
	}
	return n
}

// elCheckLinearizable checks the history per slot; a failure leaves
// porcupine's visualization in the temporary directory.
func elCheckLinearizable(t *testing.T, seed uint64, ops []porcupine.Operation) {
	t.Helper()
	started := time.Now()
	res, info := porcupine.CheckOperationsVerbose(elModel, ops, 2*time.Minute)
	if res == porcupine.Ok {
		t.Logf("seed %d: %d operations are linearizable per slot (checked in %v)", seed, len(ops), time.Since(started).Round(time.Millisecond))
		return
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("bellows-elastic-model-seed-%d.html", seed))
	if err := porcupine.VisualizePath(elModel, info, path); err != nil {
		path = "(not written: " + err.Error() + ")"
	}
	t.Errorf("seed %d: the history of %d operations is not linearizable per slot (%v after %v); visualization %s",
		seed, len(ops), res, time.Since(started).Round(time.Millisecond), path)
}

// checkElasticVersions checks every read at a timestamp against the
// writes of its key. Let newest be the version with the highest commit
// timestamp at or below the read's among those acknowledged before the
// read began: the read must see it, unless a version above it and at or
// below the read's timestamp may have committed meanwhile: one
// acknowledged at such a timestamp, or one of unknown outcome, either
// begun before the read ended. A value is written once, so it names its
// write; a delete's "" names every delete. A read above every version
// its region has made visible answers at that point, so the rule needs
// nothing of where the timestamp came from. Two acknowledged versions of
// one key at one timestamp are a violation too (the model could not
// order them, and a region never gives two writes of a key one).
func checkElasticVersions(writes []elWrite, reads []elRead) []string {
	byKey := map[string][]elWrite{}
	for _, w := range writes {
		byKey[w.key] = append(byKey[w.key], w)
	}
	var out []string
	for k, ws := range byKey {
		sort.SliceStable(ws, func(i, j int) bool { return ws[i].ts < ws[j].ts })
		for i := 1; i < len(ws); i++ {
			if ws[i].ts != 0 && ws[i].ts == ws[i-1].ts {
				out = append(out, fmt.Sprintf("%q: %q and %q acknowledged at one timestamp %d", k, ws[i-1].val, ws[i].val, ws[i].ts))
			}
		}
	}
	for _, r := range reads {
		ws := byKey[r.key]
		var newest *elWrite
		for i := range ws {
			if w := &ws[i]; w.ts != 0 && w.ts <= r.ts && w.ret < r.call && (newest == nil || w.ts > newest.ts) {
				newest = w
			}
		}
		want, floor := "", uint64(0)
		if newest != nil {
			want, floor = newest.val, newest.ts
		}
		if r.val == want {
			continue
		}
		ok := false
		for _, w := range ws {
			if w.val == r.val && w.call < r.ret && (w.ts == 0 || w.ts > floor && w.ts <= r.ts) {
				ok = true
				break
			}
		}
		if ok {
			continue
		}
		src := "no write"
		for _, w := range ws {
			if w.val == r.val && r.val != "" {
				src = fmt.Sprintf("the write at %d (unknown: 0), called at %v", w.ts, time.Duration(w.call))
			}
		}
		out = append(out, fmt.Sprintf("%s %q at %d (called at %v, returned at %v) = %q, from %s; want %q (acknowledged at %d) or a version that may have committed above it",
			r.what, r.key, r.ts, time.Duration(r.call), time.Duration(r.ret), r.val, src, want, floor))
	}
	return out
}
