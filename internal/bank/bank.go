// Package bank is the bank workload for transactions across regions: what
// the process test (test/process TestBankAcrossRegionsWithCrashes) and the
// benchmark (bellows-bench txn, section bank) both run against real stores.
//
// Accounts live in every region; transferers move a random amount between
// two accounts of different regions in one transaction (so every transfer
// is a cross-region, two-phase commit); summers read every balance in one
// snapshot transaction, by one Get per account or, every other sum, by one
// Txn.Scan over all of them (TxnScan). The invariant: every sum, and a plain scan after
// the workload, is the opening total. The driver (test or benchmark) kills
// and restarts stores meanwhile; the workload itself abandons one transfer
// in AbandonEvery mid-commit with a deadline of a few milliseconds, as a
// client that goes away.
//
// Every transaction is recorded for the snapshot-isolation checker
// (internal/sicheck): each written value is unique ("balance:txn-id"),
// every outcome is kept (an indeterminate commit as Unknown, a read cut
// short as read-only), and each transaction carries the instants of this
// process's monotonic clock, from the bank's opening, at which it was
// begun (before BeginTxn is sent) and finished (after its last answer), for
// the checker's real-time checks.
package bank

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/sicheck"
)

// Config shapes a bank.
type Config struct {
	// Regions is how many regions the key space has; AccountsPerRegion
	// accounts live in each. Account i is in region i % Regions.
	Regions, AccountsPerRegion int
	// Key is account i's key, which must fall in region i % Regions.
	Key func(i int) []byte
	// StartBalance is every account's opening balance.
	StartBalance int
	// Transferers and Summers are the concurrent workers.
	Transferers, Summers int
	// AbandonEvery: one transfer in this many gets a deadline of 1–3 ms,
	// which ends it mid-commit (0: none).
	AbandonEvery int
	// Timeout bounds one transfer or sum that is not abandoned.
	Timeout time.Duration
}

// Accounts is the number of accounts.
func (c Config) Accounts() int { return c.Regions * c.AccountsPerRegion }

// Total is what every sum must be.
func (c Config) Total() int { return c.Accounts() * c.StartBalance }

// Result is what a run did and found.
type Result struct {
	Transfers, Sums int64
	// Restarts counts the transfers' and sums' restarts after an
	// uncertain read (stores' clocks apart: docs/clock.md).
	Restarts int64
	// Violations are the invariant's failures: a sum that is not the
	// total, or a balance that does not parse.
	Violations []string
	// History is every recorded transaction, for sicheck.Check.
	History []sicheck.Txn
}

// Bank is a running workload.
type Bank struct {
	cfg Config
	c   *client.Client

	// origin is the zero of the history's client instants.
	origin time.Time

	transfers, sums, seq, restarts atomic.Int64
	// committed wakes AwaitTransfers after a committed transfer.
	committed chan struct{}

	mu         sync.Mutex
	history    []sicheck.Txn
	violations []string

	stop chan struct{}
	wg   sync.WaitGroup
}

// Open seeds every account with StartBalance in one transaction across all
// regions.
func Open(ctx context.Context, c *client.Client, cfg Config) (*Bank, error) {
	if cfg.Regions < 2 || cfg.AccountsPerRegion < 1 || cfg.Key == nil || cfg.StartBalance < 1 {
		return nil, fmt.Errorf("bank: want ≥ 2 regions, ≥ 1 account per region, a key function and a positive balance, have %+v", cfg)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 20 * time.Second
	}
	b := &Bank{cfg: cfg, c: c, committed: make(chan struct{}, 1), stop: make(chan struct{}), origin: time.Now()}
	invoke := b.now()
	seed, err := c.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("bank: beginning the seed transaction: %w", err)
	}
	rec := sicheck.Txn{ID: "seed", StartTS: seed.StartTS(), Writes: map[string]string{}, Invoke: invoke}
	for i := range cfg.Accounts() {
		v := fmt.Sprintf("%d:seed", cfg.StartBalance)
		seed.Put(cfg.Key(i), []byte(v))
		rec.Writes[string(cfg.Key(i))] = v
	}
	res, err := seed.Commit(ctx)
	if err != nil {
		return nil, fmt.Errorf("bank: seeding the accounts: %w", err)
	}
	rec.CommitTS, rec.Outcome, rec.Complete = res.CommitTS, sicheck.Committed, b.now()
	b.record(rec)
	return b, nil
}

// Start runs the transferers and summers until Stop.
func (b *Bank) Start(ctx context.Context) {
	for w := range b.cfg.Transferers {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for b.running(ctx) {
				deadline := b.cfg.Timeout
				if b.cfg.AbandonEvery > 0 && rng.IntN(b.cfg.AbandonEvery) == 0 {
					deadline = time.Duration(1+rng.IntN(3)) * time.Millisecond
				}
				b.transfer(ctx, rng, deadline)
			}
		}()
	}
	for range b.cfg.Summers {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			for b.running(ctx) {
				b.Sum(ctx)
			}
		}()
	}
}

func (b *Bank) running(ctx context.Context) bool {
	select {
	case <-b.stop:
		return false
	case <-ctx.Done():
		return false
	default:
		return true
	}
}

// Stop ends the workers and waits for them.
func (b *Bank) Stop() {
	close(b.stop)
	b.wg.Wait()
}

// Transfers is how many transfers have committed.
func (b *Bank) Transfers() int64 { return b.transfers.Load() }

// AwaitTransfers waits until n transfers have committed, at most timeout.
func (b *Bank) AwaitTransfers(ctx context.Context, n int64, timeout time.Duration) error {
	expired := time.After(timeout)
	for b.transfers.Load() < n {
		select {
		case <-b.committed:
		case <-expired:
			return fmt.Errorf("only %d of %d transfers committed in %v", b.transfers.Load(), n, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// now is the client instant: the monotonic time since the bank opened
// (never 0, which the checker takes for "not recorded").
func (b *Bank) now() time.Duration { return max(time.Since(b.origin), 1) }

// record adds x to the history, unless it did nothing the checker could
// judge (it failed before its first read).
func (b *Bank) record(x sicheck.Txn) {
	if len(x.Reads) == 0 && len(x.Scans) == 0 && len(x.Writes) == 0 {
		return
	}
	b.mu.Lock()
	b.history = append(b.history, x)
	b.mu.Unlock()
}

func (b *Bank) violation(format string, args ...any) {
	b.mu.Lock()
	b.violations = append(b.violations, fmt.Sprintf(format, args...))
	b.mu.Unlock()
}

// outcome classifies a commit's error: refusals that wrote nothing are
// aborts; anything else may have committed.
func outcome(err error) sicheck.Outcome {
	switch {
	case err == nil:
		return sicheck.Committed
	case errors.Is(err, client.ErrConflict), errors.Is(err, client.ErrTxnLost):
		return sicheck.Aborted
	}
	return sicheck.Unknown
}

// Balance parses a balance value, "balance:writer".
func Balance(v []byte) (int, error) {
	n, _, ok := strings.Cut(string(v), ":")
	if !ok {
		return 0, fmt.Errorf("malformed balance %q", v)
	}
	return strconv.Atoi(n)
}

// Sum is the total of the balances in state (key to value), or an error
// naming the first value that is not a balance.
func Sum(state map[string]string) (int, error) {
	sum := 0
	for k, v := range state {
		n, err := Balance([]byte(v))
		if err != nil {
			return 0, fmt.Errorf("account %q: %w", k, err)
		}
		sum += n
	}
	return sum, nil
}

// transfer moves 1–10 from a random account to one in another region.
func (b *Bank) transfer(ctx context.Context, rng *rand.Rand, deadline time.Duration) {
	id := fmt.Sprintf("t%d", b.seq.Add(1))
	r := b.cfg.Regions
	from := rng.IntN(b.cfg.Accounts())
	to := (from%r+1+rng.IntN(r-1))%r + r*rng.IntN(b.cfg.AccountsPerRegion)
	tctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	b.restarting(tctx, id, func(id string, invoke time.Duration, x *client.Txn) error {
		return b.transferIn(tctx, id, invoke, x, from, to, rng)
	})
}

// maxRestarts bounds the restarts of one transfer or sum after uncertain
// reads (each starts above the version it found, in a narrower window).
const maxRestarts = 16

// restarting begins a transaction and runs attempt in it, and again in
// its restart while a read was uncertain (client.Txn.Restart: a store's
// clock ahead of the one that gave the start). Each attempt is its own
// transaction in the history, id suffixed by its number after the first,
// invoked when the first was: a restart keeps the first attempt's
// uncertainty limit, so what it promises to see is what committed before
// the first began (docs/clock.md), as CockroachDB's restarts do.
func (b *Bank) restarting(ctx context.Context, id string, attempt func(id string, invoke time.Duration, x *client.Txn) error) {
	invoke := b.now()
	x, err := b.c.Begin(ctx)
	for n := 1; err == nil; n++ {
		aid := id
		if n > 1 {
			aid = fmt.Sprintf("%s.%d", id, n)
		}
		err = attempt(aid, invoke, x)
		if !errors.Is(err, client.ErrReadUncertain) || n == maxRestarts {
			return
		}
		b.restarts.Add(1)
		x, err = x.Restart(ctx)
	}
}

// transferIn is one attempt of a transfer, in x.
func (b *Bank) transferIn(tctx context.Context, id string, invoke time.Duration, x *client.Txn, from, to int, rng *rand.Rand) error {
	rec := sicheck.Txn{ID: id, StartTS: x.StartTS(), Reads: map[string]string{}, Writes: map[string]string{}, Invoke: invoke}
	defer func() { b.record(rec) }()
	var bal [2]int
	for i, a := range []int{from, to} {
		v, _, err := x.Get(tctx, b.cfg.Key(a))
		rec.Complete = b.now()
		if err != nil {
			return err
		}
		rec.Reads[string(b.cfg.Key(a))] = string(v)
		if bal[i], err = Balance(v); err != nil {
			b.violation("%s read account %d: %v", id, a, err)
			return nil
		}
	}
	amount := 1 + rng.IntN(10)
	if bal[0] < amount {
		return nil
	}
	for i, a := range []int{from, to} {
		v := fmt.Sprintf("%d:%s", bal[i]+[]int{-amount, amount}[i], id)
		x.Put(b.cfg.Key(a), []byte(v))
		rec.Writes[string(b.cfg.Key(a))] = v
	}
	res, err := x.Commit(tctx)
	rec.Outcome, rec.CommitTS, rec.Complete = outcome(err), res.CommitTS, b.now()
	if err == nil {
		b.transfers.Add(1)
		select {
		case b.committed <- struct{}{}:
		default:
		}
	}
	return err
}

// Sum reads every balance in one snapshot transaction and records a
// violation if they do not add up to the total: one Get per account, or
// every other time one Txn.Scan over every account (TxnScan in every
// region). A sum that fails to read (a store down) is not counted, but
// what it read is recorded.
func (b *Bank) Sum(ctx context.Context) {
	n := b.seq.Add(1)
	id := fmt.Sprintf("r%d", n)
	rctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	b.restarting(rctx, id, func(id string, invoke time.Duration, x *client.Txn) error {
		return b.sum(rctx, id, invoke, x, n%2 == 0)
	})
}

// StaleSum is a sum that reads at old's start though it begins now: the
// start a store whose clock runs behind would give, a fault for testing
// the checker. It still adds up and agrees with its timestamps; only the
// clients' real-time order shows the stale snapshot.
func (b *Bank) StaleSum(ctx context.Context, old *client.Txn) {
	n := b.seq.Add(1)
	rctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	_ = b.sum(rctx, fmt.Sprintf("r%d-stale", n), b.now(), old, n%2 == 0)
}

// sum reads every balance in x, by scan or by Gets, and records it as
// begun (the client instant) at invoke.
func (b *Bank) sum(ctx context.Context, id string, invoke time.Duration, x *client.Txn, scan bool) error {
	rec := sicheck.Txn{ID: id, StartTS: x.StartTS(), Reads: map[string]string{}, Invoke: invoke}
	defer func() { b.record(rec) }()
	var balances map[int][]byte
	var err error
	if scan {
		balances, err = b.scanBalances(ctx, x, &rec)
	} else {
		balances, err = b.getBalances(ctx, x, &rec)
	}
	rec.Complete = b.now()
	if err != nil {
		return err
	}
	s := 0
	for i := range b.cfg.Accounts() {
		v, ok := balances[i]
		if !ok {
			b.violation("%s: account %d is absent at %d", id, i, x.StartTS())
			return nil
		}
		n, err := Balance(v)
		if err != nil {
			b.violation("%s read account %d: %v", id, i, err)
			return nil
		}
		s += n
	}
	b.sums.Add(1)
	if s != b.cfg.Total() {
		b.violation("%s: the balances at %d sum to %d, not %d", id, x.StartTS(), s, b.cfg.Total())
	}
	return nil
}

// getBalances reads every account by Get, recording each read.
func (b *Bank) getBalances(ctx context.Context, x *client.Txn, rec *sicheck.Txn) (map[int][]byte, error) {
	out := map[int][]byte{}
	for i := range b.cfg.Accounts() {
		v, found, err := x.Get(ctx, b.cfg.Key(i))
		if err != nil {
			return nil, err
		}
		rec.Reads[string(b.cfg.Key(i))] = string(v)
		if found {
			out[i] = v
		}
	}
	return out, nil
}

// scanBalances reads every account in one Txn.Scan from the first
// account's key to just past the last one's, and records the scan with
// the accounts' rows (the checker knows no other key).
func (b *Bank) scanBalances(ctx context.Context, x *client.Txn, rec *sicheck.Txn) (map[int][]byte, error) {
	index := map[string]int{}
	var lo, hi string
	for i := range b.cfg.Accounts() {
		k := string(b.cfg.Key(i))
		index[k] = i
		if i == 0 || k < lo {
			lo = k
		}
		if i == 0 || k > hi {
			hi = k
		}
	}
	end := hi + "\x00"
	it := x.Scan(ctx, []byte(lo), []byte(end), client.ScanOptions{})
	defer it.Close()
	scan := sicheck.Scan{Start: lo, End: end, Rows: map[string]string{}}
	out := map[int][]byte{}
	for it.Next() {
		if i, ok := index[string(it.Key())]; ok {
			scan.Rows[string(it.Key())] = string(it.Value())
			out[i] = it.Value()
		}
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	rec.Scans = append(rec.Scans, scan)
	return out, nil
}

// Final checks the invariant once the workers have stopped: in a snapshot
// sum and in a plain scan of every account (which resolves any lock left
// behind on its way). Its error is a failure to read, not a violation.
func (b *Bank) Final(ctx context.Context) error {
	before := b.sums.Load()
	b.Sum(ctx)
	if b.sums.Load() == before {
		return errors.New("bank: the final snapshot sum could not read every account")
	}
	accounts := map[string]bool{}
	for i := range b.cfg.Accounts() {
		accounts[string(b.cfg.Key(i))] = true
	}
	rows, err := b.c.ScanAll(ctx, nil, nil, client.ScanOptions{})
	if err != nil {
		return fmt.Errorf("bank: the final scan: %w", err)
	}
	s, seen := 0, 0
	for _, kv := range rows {
		if !accounts[string(kv.Key)] {
			continue
		}
		seen++
		n, err := Balance(kv.Value)
		if err != nil {
			b.violation("the final scan: %v", err)
			continue
		}
		s += n
	}
	if seen != len(accounts) || s != b.cfg.Total() {
		b.violation("a plain scan after the workload finds %d of %d accounts summing to %d, not %d", seen, len(accounts), s, b.cfg.Total())
	}
	return nil
}

// Result is what the run did and found so far.
func (b *Bank) Result() Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Result{Transfers: b.transfers.Load(), Sums: b.sums.Load(), Restarts: b.restarts.Load(),
		Violations: append([]string(nil), b.violations...), History: append([]sicheck.Txn(nil), b.history...)}
}
