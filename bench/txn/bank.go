package txn

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/bank"
	"github.com/bellows-kv/bellows/internal/childproc"
	"github.com/bellows-kv/bellows/internal/sicheck"
)

// The bank section: the bank workload (internal/bank) against two real
// store processes (`bellows store`) that split 4 regions between them and
// forward to each other, with a real file:// bucket. After every
// BankTransfersPerCrash committed transfers one store is SIGKILLed and
// restarted, the two in turn, BankCrashes times; one transfer in ten is
// abandoned by its client mid-commit. Goal, stated before the run: 0
// invariant violations (every snapshot sum and the final scan equal the
// opening total) and 0 snapshot-isolation violations in the recorded
// history.
const (
	BankRegions           = 4
	BankAccountsPerRegion = 8
	BankStartBalance      = 100
	BankTransferers       = 8
	BankSummers           = 2
	BankAbandonEvery      = 10
	// BankLockTTL is the stores' --txn-lock-ttl: locks a killed
	// coordinator leaves behind roll back after it.
	BankLockTTL = time.Second
)

// BankResult is the bank section of txn.json.
type BankResult struct {
	Transfers           int64   `json:"transfers"`
	Crashes             int     `json:"crashes"`
	InvariantViolations int     `json:"invariant_violations"`
	SIViolations        int     `json:"si_violations"`
	Sums                int64   `json:"sums"`
	Aborted             int     `json:"aborted"`
	OutcomeUnknown      int     `json:"outcome_unknown"`
	Seconds             float64 `json:"seconds"`
	TransfersPerS       float64 `json:"transfers_per_s"`
	// Violations are the first few of either kind, for the report.
	Violations []string `json:"violations,omitempty"`
}

// bankKey is account i's key: region i % 4's first byte (`--regions=4`
// splits the key space evenly by the first byte), then the account.
func bankKey(i int) []byte {
	return append([]byte{byte(64*(i%BankRegions) + 1)}, fmt.Sprintf("acct-%03d", i)...)
}

// storePair is two `bellows store` processes splitting BankRegions regions
// (region i is store i % 2's), forwarding to each other, with one file://
// bucket; restart SIGKILLs one and starts it again on the same address and
// WAL.
type storePair struct {
	ctx      context.Context
	bellows  string
	dir      string
	addrs    [2]string
	children [2]*childproc.Child
}

// startStorePair starts both stores in dir.
func startStorePair(ctx context.Context, bellows, dir string) (*storePair, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s := &storePair{ctx: ctx, bellows: bellows, dir: dir}
	for i := range s.addrs {
		a, err := childproc.ReserveAddr()
		if err != nil {
			return nil, err
		}
		s.addrs[i] = a
	}
	for i := range s.addrs {
		if err := s.start(i); err != nil {
			s.stop()
			return nil, err
		}
	}
	return s, nil
}

func (s *storePair) start(i int) error {
	c, err := childproc.Start(s.ctx, s.bellows, fmt.Sprintf("store-%d", i), s.dir, "store",
		"--create-bucket", "--bucket=file://"+filepath.Join(s.dir, "bucket"), "--wal-dir="+filepath.Join(s.dir, fmt.Sprintf("wal-%d", i)),
		fmt.Sprintf("--regions=%d", BankRegions), fmt.Sprintf("--region-owner=%d/2", i), "--offload=Disabled",
		"--listen="+s.addrs[i], "--peers="+strings.Join(s.addrs[:], ","), "--metrics-listen=127.0.0.1:0",
		// Fixed placement: the bank's stores are killed by slot.
		"--txn-lock-ttl="+BankLockTTL.String(), "--balance-interval=0")
	s.children[i] = c
	return err
}

func (s *storePair) stop() {
	for _, c := range s.children {
		if c != nil {
			c.Stop()
		}
	}
}

// client is a client of both stores.
func (s *storePair) client() (*client.Client, error) {
	dial, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	return client.New(dial, s.addrs[:], client.Options{})
}

// bankRun runs the bank section in dir with the bellows binary.
func bankRun(ctx context.Context, bellows, dir string, crashes, perCrash int, progress func(string)) (BankResult, error) {
	res := BankResult{Crashes: crashes}
	s, err := startStorePair(ctx, bellows, dir)
	if err != nil {
		return res, err
	}
	defer s.stop()
	c, err := s.client()
	if err != nil {
		return res, err
	}
	defer c.Close()
	b, err := bank.Open(ctx, c, bank.Config{Regions: BankRegions, AccountsPerRegion: BankAccountsPerRegion, Key: bankKey,
		StartBalance: BankStartBalance, Transferers: BankTransferers, Summers: BankSummers, AbandonEvery: BankAbandonEvery})
	if err != nil {
		return res, err
	}
	began := time.Now()
	b.Start(ctx)
	stopped := false
	defer func() {
		if !stopped {
			b.Stop()
		}
	}()
	for n := range crashes + 1 {
		if err := b.AwaitTransfers(ctx, b.Transfers()+int64(perCrash), 2*time.Minute); err != nil {
			return res, fmt.Errorf("bank, after %d crashes: %w", n, err)
		}
		if n == crashes {
			break
		}
		i := n % 2
		progress(fmt.Sprintf("bank: %d transfers; SIGKILL store-%d", b.Transfers(), i))
		s.children[i].Kill()
		if err := s.start(i); err != nil {
			return res, err
		}
	}
	b.Stop()
	stopped = true
	res.Seconds = time.Since(began).Seconds()
	if err := b.Final(ctx); err != nil {
		return res, err
	}
	r := b.Result()
	res.Transfers, res.Sums = r.Transfers, r.Sums
	res.TransfersPerS = float64(r.Transfers) / res.Seconds
	res.InvariantViolations = len(r.Violations)
	si := sicheck.Check(r.History, 0)
	res.SIViolations = len(si)
	for _, x := range r.History {
		switch x.Outcome {
		case sicheck.Aborted:
			res.Aborted++
		case sicheck.Unknown:
			res.OutcomeUnknown++
		}
	}
	res.Violations = append(res.Violations, r.Violations...)
	for _, e := range si {
		res.Violations = append(res.Violations, "snapshot isolation: "+e.Error())
	}
	if len(res.Violations) > 10 {
		res.Violations = res.Violations[:10]
	}
	return res, nil
}
