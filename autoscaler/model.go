// Package autoscaler sizes a CompactionPool with the capacity model of
// Ahmad & Kemme (VLDB 2015, §6.3), and reads the model's measured inputs from
// the stores' and compactors' Prometheus metrics.
//
// Invariants of the pure functions in this package:
//   - no division by zero: every divisor is checked first, and an input that
//     cannot be sized is an *InfeasibleError or *InputError naming the reason;
//   - floors and ceilings tolerate floating-point error (5.0000000001 floors to 5,
//     4.9999999999 floors to 5 as well) so exact inputs give exact answers;
//   - time enters only as arguments (no clock reads).
package autoscaler

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Inputs of the capacity model. Bytes are bytes, rates are per second.
type Inputs struct {
	// CompactionRate is c: bytes per second a worker reads and compacts.
	CompactionRate float64
	// TransferRate is w: bytes per second a worker streams back (throttled).
	TransferRate float64
	// NoTransfer: the stores fetch no output from the workers (warmup
	// modes None and Offload, contract.WarmupMode.TransfersOutput), so a
	// worker is done once it has written the output: D = b/c, and w is
	// neither needed nor checked.
	NoTransfer bool
	// CacheBytes is m: a worker's cache for compaction output.
	CacheBytes float64
	// CompactionSize is b: the average compaction's input size.
	CompactionSize float64
	// CompactionsPerRegion is T: compactions each region requests per Interval.
	CompactionsPerRegion float64
	// Interval is t.
	Interval time.Duration
	// Regions is R.
	Regions int64
	// Backlog is the number of compactions queued on the stores, beyond the
	// steady demand T (the operator passes the queued compactions only when
	// the queue grew since its previous evaluation).
	Backlog float64
	// DebtBytes is the compaction debt charged: the bytes the stores'
	// policies want compacted and are not getting
	// (bellows_compaction_debt_bytes). The caller charges it only while
	// compactions wait too long to start (controllers.Decide), so a
	// healthy pool's brief debts leave the steady answer exact.
	DebtBytes float64
	// MaxWait is the bound within which the debt is to be paid; required
	// when DebtBytes is positive.
	MaxWait time.Duration
}

// Result of the capacity model.
type Result struct {
	// D is D(b) = b/c + b/w (b/c with NoTransfer), seconds per compaction.
	D float64 `json:"D"`
	// L is l = ⌊m/b⌋, concurrent compactions per worker.
	L int64 `json:"l"`
	// H is h = (t/D)·l, compactions one worker completes per interval.
	H float64 `json:"h"`
	// RegionsPerWorker is ⌊h/T⌋; nil when T = 0 (no demand: unbounded).
	RegionsPerWorker *int64 `json:"regionsPerWorker"`
	// Workers is C = ⌈R/⌊h/T⌋⌉, the workers the steady demand needs.
	Workers int64 `json:"workers"`
	// BacklogWorkers is ⌈backlog/h⌉: extra workers that drain the queue within one interval.
	BacklogWorkers int64 `json:"backlogWorkers"`
	// DebtWorkers is ⌈(debt/b)·D/(l·MaxWait)⌉: extra workers that pay the
	// charged debt, debt/b compactions of D seconds each, l at a time per
	// worker, within MaxWait.
	DebtWorkers int64 `json:"debtWorkers"`
	// Total is Workers + max(BacklogWorkers, DebtWorkers): the queued
	// compactions are part of the debt, so the two terms are not added.
	Total int64 `json:"total"`
}

// Reasons of an InfeasibleError.
const (
	// ReasonCompactionLargerThanCache: b > m, so l = ⌊m/b⌋ = 0.
	ReasonCompactionLargerThanCache = "CompactionLargerThanCache"
	// ReasonWorkerTooSlow: ⌊h/T⌋ = 0, one worker cannot keep up with one region.
	ReasonWorkerTooSlow = "WorkerTooSlow"
)

// InfeasibleError says the model has no answer for these inputs.
type InfeasibleError struct {
	Reason  string
	Message string
}

func (e *InfeasibleError) Error() string { return "infeasible: " + e.Message }

// InputError names an input that is out of its domain (negative, zero where a
// divisor, not a number).
type InputError struct {
	Input   string
	Message string
}

func (e *InputError) Error() string { return e.Input + ": " + e.Message }

// IsInfeasible reports whether err is an *InfeasibleError and returns it.
func IsInfeasible(err error) (*InfeasibleError, bool) {
	var ie *InfeasibleError
	ok := errors.As(err, &ie)
	return ie, ok
}

const eps = 1e-9

func floor(x float64) float64 { return math.Floor(x + eps) }
func ceil(x float64) float64  { return math.Ceil(x - eps) }

func bad(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }

func (in Inputs) validate(demand bool) error {
	type check struct {
		name     string
		v        float64
		positive bool
	}
	for _, c := range []check{
		{"compaction rate c", in.CompactionRate, true},
		{"transfer rate w", in.TransferRate, !in.NoTransfer},
		{"cache bytes m", in.CacheBytes, true},
		{"compaction size b", in.CompactionSize, false},
		{"compactions per region T", in.CompactionsPerRegion, false},
		{"backlog", in.Backlog, false},
		{"compaction debt", in.DebtBytes, false},
		{"regions R", float64(in.Regions), false},
	} {
		switch {
		case bad(c.v):
			return &InputError{c.name, "must be a finite number"}
		case c.positive && demand && c.v <= 0:
			return &InputError{c.name, fmt.Sprintf("must be positive, got %g", c.v)}
		case c.v < 0:
			return &InputError{c.name, fmt.Sprintf("must not be negative, got %g", c.v)}
		}
	}
	if in.Interval <= 0 {
		return &InputError{"interval t", fmt.Sprintf("must be positive, got %s", in.Interval)}
	}
	if in.DebtBytes > 0 && in.MaxWait <= 0 {
		return &InputError{"max wait", fmt.Sprintf("must be positive when a compaction debt is charged, got %s", in.MaxWait)}
	}
	return nil
}

// Compute evaluates the capacity model.
//
// Zero demand (T = 0 or R = 0, and no backlog or debt) needs zero workers and no
// measurement (c, w, m and b may be zero); the Result is all zeros. Otherwise b must be positive, b ≤ m and
// ⌊h/T⌋ ≥ 1, or Compute returns an *InfeasibleError with the reason.
func Compute(in Inputs) (Result, error) {
	demand := (in.CompactionsPerRegion > 0 && in.Regions > 0) || in.Backlog > 0 || in.DebtBytes > 0
	if err := in.validate(demand); err != nil {
		return Result{}, err
	}
	if !demand {
		return Result{}, nil
	}
	if in.CompactionSize == 0 {
		return Result{}, &InputError{"compaction size b", "must be positive when compactions are requested"}
	}
	var r Result
	b, t := in.CompactionSize, in.Interval.Seconds()
	r.D = b / in.CompactionRate
	if !in.NoTransfer {
		r.D += b / in.TransferRate
	}
	r.L = int64(floor(in.CacheBytes / b))
	if r.L == 0 {
		return r, &InfeasibleError{ReasonCompactionLargerThanCache, fmt.Sprintf(
			"a compaction of b=%s does not fit in a worker's cache of m=%s (l = ⌊m/b⌋ = 0)",
			FormatBytes(b), FormatBytes(in.CacheBytes))}
	}
	r.H = t / r.D * float64(r.L)
	if in.CompactionsPerRegion > 0 {
		rpw := int64(floor(r.H / in.CompactionsPerRegion))
		r.RegionsPerWorker = &rpw
		if rpw == 0 {
			return r, &InfeasibleError{ReasonWorkerTooSlow, fmt.Sprintf(
				"one worker completes h=%.3g compactions per %s but one region requests T=%.3g (⌊h/T⌋ = 0): raise c, w or m, or make compactions smaller",
				r.H, in.Interval, in.CompactionsPerRegion)}
		}
		r.Workers = int64(ceil(float64(in.Regions) / float64(rpw)))
	}
	if in.Backlog > 0 {
		r.BacklogWorkers = int64(ceil(in.Backlog / r.H))
	}
	if in.DebtBytes > 0 {
		r.DebtWorkers = int64(ceil(in.DebtBytes / b * r.D / (float64(r.L) * in.MaxWait.Seconds())))
	}
	r.Total = r.Workers + max(r.BacklogWorkers, r.DebtWorkers)
	return r, nil
}
