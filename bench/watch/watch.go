// Package watch measures what watches cost and how fast they deliver
// (bellows-bench watch; docs/watch.md): the delay from a change's commit to
// its delivery by client.Watch at a paced write rate, and the write
// throughput of a store serving watchers against one serving none.
//
// Regime: one `bellows store` process of four regions (offload Disabled,
// its WAL synced as shipped), the Go client in the bench process, on one
// machine. Writes are puts of 100 B values to uniform keys over the four
// regions, so every watch spans four streams and the client merges them.
package watch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bellows-kv/bellows/bench/report"
	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/childproc"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/changefeed"
)

// Goals, stated before the run.
const (
	// LagP99Goal bounds the 99th percentile of a change's delivery delay
	// (commit timestamp to Watcher.Next returning it) at Config.Rate
	// writes/s, with the stores' default progress interval.
	LagP99Goal = 100 * time.Millisecond
	// ThroughputGoal: writes/s with Config.Watchers watchers of the whole
	// key space at least this fraction of writes/s with none.
	ThroughputGoal = 0.9
	// FeedLagGoal bounds the longest delay of a change read by the bucket's
	// change feed (commit timestamp to the feed's update), at the stores'
	// default archive interval: the interval (the region ships its WAL and
	// frontier) plus the feed's poll interval, plus a second for the
	// ship's and the poll's own work.
	FeedLagGoal = contract.DefaultWALArchiveInterval + changefeed.DefaultPollInterval + time.Second
)

// Config is a run's settings.
type Config struct {
	Bellows  string        `json:"-"`
	Runs     int           `json:"runs"`
	Phase    time.Duration `json:"phase"`
	Rate     int           `json:"rate"`     // paced writes/s in the lag section
	Writers  int           `json:"writers"`  // closed-loop writers in the throughput section
	Watchers int           `json:"watchers"` // watchers in the throughput section
}

// Default is the committed report's configuration.
func Default() Config {
	return Config{Runs: 3, Phase: 10 * time.Second, Rate: 1000, Writers: 4, Watchers: 4}
}

// Report is what a run measured.
type Report struct {
	Command    string            `json:"command"`
	Provenance report.Provenance `json:"provenance"`
	Config     Config            `json:"config"`
	Lag        []LagRun          `json:"lag"`
	Throughput Throughput        `json:"throughput"`
}

// LagRun is one run of the lag section.
type LagRun struct {
	Events  int     `json:"events"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
	WritesS float64 `json:"writes_per_s"`
	// Feed is the bucket's change feed, beside the watcher.
	Feed FeedRun `json:"feed"`
}

// FeedRun is the change feed's part of a lag run: its delays, and how
// fast a new feed read the run's changes back from the archive.
type FeedRun struct {
	Events int     `json:"events"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	// CatchUpEventsS: a feed started after the run at its start reads
	// every change of the run in one poll, at this many changes/s.
	CatchUpEventsS float64 `json:"catch_up_events_per_s"`
}

// Throughput is the throughput section.
type Throughput struct {
	Without  []float64 `json:"without_writes_per_s"` // the mean of the phases before and after With's
	With     []float64 `json:"with_writes_per_s"`
	Ratios   []float64 `json:"ratios"`
	Ratio    float64   `json:"ratio"`
	Events   []int     `json:"events_delivered"`
	Watchers int       `json:"watchers"`
}

// Run runs both sections against a store in work.
func Run(ctx context.Context, cfg Config, work string, progress func(string)) (Report, error) {
	rep := Report{Config: cfg}
	addr, err := childproc.ReserveAddr()
	if err != nil {
		return rep, err
	}
	store, err := childproc.Start(ctx, cfg.Bellows, "store", work, "store",
		"--create-bucket", "--bucket=file://"+filepath.Join(work, "bucket"), "--wal-dir="+filepath.Join(work, "wal"),
		"--regions=4", "--offload=Disabled", "--listen="+addr, "--metrics-listen=127.0.0.1:0")
	if err != nil {
		return rep, err
	}
	defer store.Stop()
	dial, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := client.New(dial, []string{addr}, client.Options{})
	cancel()
	if err != nil {
		return rep, err
	}
	defer c.Close()
	bucket, err := blob.Open(ctx, "file://"+filepath.Join(work, "bucket"))
	if err != nil {
		return rep, err
	}
	defer bucket.Close()
	for run := range cfg.Runs {
		progress(fmt.Sprintf("lag run %d/%d", run+1, cfg.Runs))
		r, err := lagRun(ctx, c, bucket, cfg, uint64(run))
		if err != nil {
			return rep, err
		}
		rep.Lag = append(rep.Lag, r)
		// Without, with, without: the store slows as its data grows, and
		// the mean of the two phases around the one with watchers cancels
		// that trend (an A-then-B pair would charge it to whichever ran
		// second).
		var without []float64
		for i, watchers := range []int{0, cfg.Watchers, 0} {
			progress(fmt.Sprintf("throughput run %d/%d, %d watchers", run+1, cfg.Runs, watchers))
			rate, events, err := throughputRun(ctx, c, cfg, watchers, uint64(3*run+i))
			if err != nil {
				return rep, err
			}
			if watchers == 0 {
				without = append(without, rate)
			} else {
				rep.Throughput.With = append(rep.Throughput.With, rate)
				rep.Throughput.Events = append(rep.Throughput.Events, events)
			}
		}
		rep.Throughput.Without = append(rep.Throughput.Without, (without[0]+without[1])/2)
		rep.Throughput.Ratios = append(rep.Throughput.Ratios, rep.Throughput.With[run]/rep.Throughput.Without[run])
	}
	rep.Throughput.Ratio = report.Median(rep.Throughput.Ratios)
	rep.Throughput.Watchers = cfg.Watchers
	return rep, nil
}

func key(rng *rand.Rand) []byte {
	// The first byte spreads the keys over --regions=4 (cut by first
	// byte): a byte, not a rune, whose UTF-8 form would start every key
	// from 0x80 up with 0xc2 or 0xc3 and leave the third region empty.
	return fmt.Appendf([]byte{byte(rng.IntN(256))}, "%015x", rng.Uint64())
}

var value = []byte(strings.Repeat("v", 100))

// lagRun paces cfg.Rate puts/s for cfg.Phase under one watcher of every
// key and measures each change's delay from its commit timestamp (the
// store's hybrid clock, its wall time on this machine) to its delivery.
func lagRun(ctx context.Context, c *client.Client, bucket *blob.Bucket, cfg Config, seed uint64) (LagRun, error) {
	start := uint64(time.Now().UnixNano())
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w := c.Watch(wctx, nil, nil, client.WatchOptions{AfterTS: start})
	defer w.Close()
	fctx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	feed := startFeed(fctx, bucket, start)
	var lags []time.Duration
	watched := make(chan error, 1)
	var writesDone atomic.Uint64 // the newest acknowledged commit once the writers stopped
	go func() {
		for w.Next() {
			now := time.Now()
			for _, e := range w.Update().Events {
				lags = append(lags, now.Sub(time.Unix(0, int64(e.CommitTS))))
			}
			if last := writesDone.Load(); last != 0 && w.Update().Resolved >= last {
				watched <- nil
				return
			}
		}
		watched <- w.Err()
	}()
	const pacers = 8
	interval := time.Duration(float64(time.Second) * pacers / float64(cfg.Rate))
	var newest atomic.Uint64
	var wrote atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, pacers)
	deadline := time.Now().Add(cfg.Phase)
	for p := range pacers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(p)))
			next := time.Now().Add(time.Duration(p) * interval / pacers)
			for next.Before(deadline) {
				time.Sleep(time.Until(next)) // pacing, not synchronization
				next = next.Add(interval)
				r, err := c.Put(ctx, key(rng), value)
				if err != nil {
					errs <- err
					return
				}
				wrote.Add(1)
				for {
					n := newest.Load()
					if r.CommitTS <= n || newest.CompareAndSwap(n, r.CommitTS) {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return LagRun{}, err
	}
	writesDone.Store(newest.Load())
	select {
	case err := <-watched:
		if err != nil {
			return LagRun{}, err
		}
	case <-time.After(30 * time.Second):
		return LagRun{}, fmt.Errorf("the watcher had not delivered the last write 30 s after it")
	}
	if len(lags) == 0 {
		return LagRun{}, fmt.Errorf("no change was delivered")
	}
	p50, p99, most := percentiles(lags)
	r := LagRun{Events: len(lags), P50Ms: p50, P99Ms: p99, MaxMs: most, WritesS: float64(wrote.Load()) / cfg.Phase.Seconds()}
	// The feed reads the last changes once their regions ship again (an
	// archive interval), and has them all when it has as many as were
	// acknowledged.
	feedLags, err := feed.await(int(wrote.Load()), FeedLagGoal+30*time.Second)
	stopFeed()
	if err != nil {
		return r, err
	}
	r.Feed.Events = len(feedLags)
	r.Feed.P50Ms, r.Feed.P99Ms, r.Feed.MaxMs = percentiles(feedLags)
	// A new feed from the run's start reads the run back in one poll.
	began := time.Now()
	u, err := changefeed.New(bucket, changefeed.Options{AfterTS: start}).Poll(ctx)
	if err != nil {
		return r, err
	}
	r.Feed.CatchUpEventsS = float64(len(u.Changes)) / time.Since(began).Seconds()
	return r, nil
}

// percentiles are lags' p50, p99 and largest in milliseconds (lags is
// sorted).
func percentiles(lags []time.Duration) (p50, p99, most float64) {
	slices.Sort(lags)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	pct := func(q float64) time.Duration { return lags[min(len(lags)-1, int(q*float64(len(lags))))] }
	return ms(pct(0.5)), ms(pct(0.99)), ms(lags[len(lags)-1])
}

// feedFollower runs the bucket's change feed from after and records each
// change's delay from its commit to the poll that delivered it.
type feedFollower struct {
	mu   sync.Mutex
	lags []time.Duration
	err  error // the last poll's
	done chan struct{}
}

func startFeed(ctx context.Context, bucket *blob.Bucket, after uint64) *feedFollower {
	f := &feedFollower{done: make(chan struct{})}
	feed := changefeed.New(bucket, changefeed.Options{AfterTS: after})
	go func() {
		defer close(f.done)
		t := time.NewTicker(changefeed.DefaultPollInterval)
		defer t.Stop()
		for {
			u, err := feed.Poll(ctx)
			now := time.Now()
			f.mu.Lock()
			f.err = err // the last poll's: a failing poll is retried, as Feed.Run does
			for _, c := range u.Changes {
				f.lags = append(f.lags, now.Sub(time.Unix(0, int64(c.TS))))
			}
			f.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return f
}

// await returns the delays once n changes came, or fails after within.
func (f *feedFollower) await(n int, within time.Duration) ([]time.Duration, error) {
	deadline := time.Now().Add(within)
	for {
		f.mu.Lock()
		got, err := len(f.lags), f.err
		f.mu.Unlock()
		switch {
		case got >= n:
			f.mu.Lock()
			defer f.mu.Unlock()
			return slices.Clone(f.lags), nil
		case time.Now().After(deadline):
			return nil, fmt.Errorf("the change feed delivered %d of %d changes within %s (its last poll: %v)", got, n, within, err)
		}
		time.Sleep(100 * time.Millisecond) // polling a count the feed's goroutine raises
	}
}

// throughputRun runs cfg.Writers closed-loop writers for cfg.Phase with
// watchers watchers of every key, and returns the writes/s and the
// changes the watchers delivered.
func throughputRun(ctx context.Context, c *client.Client, cfg Config, watchers int, seed uint64) (float64, int, error) {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var delivered atomic.Int64
	var following sync.WaitGroup
	for range watchers {
		following.Add(1)
		w := c.Watch(wctx, nil, nil, client.WatchOptions{AfterTS: uint64(time.Now().UnixNano())})
		go func() {
			defer following.Done()
			defer w.Close()
			for w.Next() {
				delivered.Add(int64(len(w.Update().Events)))
			}
		}()
	}
	var wrote atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Writers)
	deadline := time.Now().Add(cfg.Phase)
	for i := range cfg.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 100+uint64(i)))
			for time.Now().Before(deadline) {
				if _, err := c.Put(ctx, key(rng), value); err != nil {
					errs <- err
					return
				}
				wrote.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	stop()
	following.Wait()
	return float64(wrote.Load()) / cfg.Phase.Seconds(), int(delivered.Load()), nil
}

// Write writes watch.json and watch.md into dir.
func Write(dir string, rep Report) error { return report.Write(dir, "watch", rep, Markdown(rep)) }

// Markdown is the report.
func Markdown(rep Report) string {
	var b strings.Builder
	b.WriteString("# Watches: delivery delay and what watchers cost writers\n\n")
	b.WriteString(report.Header(rep.Command, rep.Provenance))
	cfg := rep.Config
	worst := 0.0
	var p99s []float64
	for _, r := range rep.Lag {
		worst = max(worst, r.P99Ms)
		p99s = append(p99s, r.P99Ms)
	}
	lagMet := worst <= float64(LagP99Goal.Milliseconds())
	tpMet := rep.Throughput.Ratio >= ThroughputGoal
	feedWorst := 0.0
	var feedP99s, catchUps []float64
	for _, r := range rep.Lag {
		feedWorst = max(feedWorst, r.Feed.MaxMs)
		feedP99s = append(feedP99s, r.Feed.P99Ms)
		catchUps = append(catchUps, r.Feed.CatchUpEventsS)
	}
	feedMet := feedWorst <= float64(FeedLagGoal.Milliseconds())
	fmt.Fprintf(&b, "**Goals, stated before the run:** a change's delivery delay p99 ≤ %d ms at %d puts/s, judged by the worst run; "+
		"write throughput with %d watchers ≥ %.1f× without, judged by the median of %d runs; "+
		"the bucket's change feed delivers every change within %s of its commit (the archive interval %s, the feed's poll %s and a second), judged by the longest.\n\n",
		LagP99Goal.Milliseconds(), cfg.Rate, cfg.Watchers, ThroughputGoal, cfg.Runs,
		FeedLagGoal, contract.DefaultWALArchiveInterval, changefeed.DefaultPollInterval)
	fmt.Fprintf(&b, "**Verdict:** delay p99 %s (worst run %.1f ms, median %.1f ms); throughput %s (%.2f×, pairs %s); "+
		"change feed %s (longest %.0f ms, p99 median %.0f ms; a new feed reads the archive back at %.0f changes/s, median).\n\n",
		verdict(lagMet), worst, report.Median(p99s), verdict(tpMet), rep.Throughput.Ratio, ratios(rep.Throughput.Ratios),
		verdict(feedMet), feedWorst, report.Median(feedP99s), report.Median(catchUps))
	b.WriteString("**Regime:** one `bellows store` process of four regions (offload Disabled), the Go client in the bench process, " +
		"puts of 100 B values to uniform keys over the four regions: every watch is four streams the client merges. " +
		"The delay is measured from a change's commit timestamp (the store's hybrid clock, which is its wall clock on this machine) " +
		"to the return of `Watcher.Next` that delivers it; a watcher delivers a change once every region has resolved past it, " +
		"so the stores' progress interval (default 50 ms) bounds most of it. The change feed reads the same store's bucket (a file:// " +
		"directory on the same disk) with its default poll; the store runs its defaults (durability Bucket, archive interval " +
		contract.DefaultWALArchiveInterval.String() + "), so a change reaches the feed once its region records its next frontier.\n\n")
	b.WriteString("## Delivery delay\n\n")
	fmt.Fprintf(&b, "%d puts/s paced by 8 writers for %s, one watcher of every key.\n\n", cfg.Rate, cfg.Phase)
	b.WriteString("| run | puts/s | changes delivered | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|---|\n")
	for i, r := range rep.Lag {
		fmt.Fprintf(&b, "| %d | %.0f | %d | %.1f | %.1f | %.1f |\n", i+1, r.WritesS, r.Events, r.P50Ms, r.P99Ms, r.MaxMs)
	}
	b.WriteString("\n## The change feed from the bucket\n\n")
	b.WriteString("In each delay run, `changefeed.Feed` follows the bucket from the run's start beside the watcher; after the run, a new feed " +
		"from the same start reads the run's changes back in one poll (catch-up).\n\n")
	b.WriteString("| run | changes delivered | p50 ms | p99 ms | max ms | catch-up changes/s |\n|---|---|---|---|---|---|\n")
	for i, r := range rep.Lag {
		fmt.Fprintf(&b, "| %d | %d | %.0f | %.0f | %.0f | %.0f |\n", i+1, r.Feed.Events, r.Feed.P50Ms, r.Feed.P99Ms, r.Feed.MaxMs, r.Feed.CatchUpEventsS)
	}
	b.WriteString("\n## Write throughput with watchers\n\n")
	fmt.Fprintf(&b, "%d closed-loop writers for %s each phase; each run measures without watchers, with %d watchers of every key, "+
		"and without again, and divides by the mean of the two phases without (the store slows as its data grows; the mean "+
		"around the phase with watchers cancels that trend).\n\n", cfg.Writers, cfg.Phase, cfg.Watchers)
	b.WriteString("| run | puts/s without (mean of 2) | puts/s with | ratio | changes delivered (all watchers) |\n|---|---|---|---|---|\n")
	for i := range rep.Throughput.Ratios {
		fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.2f | %d |\n", i+1, rep.Throughput.Without[i], rep.Throughput.With[i], rep.Throughput.Ratios[i], rep.Throughput.Events[i])
	}
	b.WriteString("\n")
	return b.String()
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}

func ratios(v []float64) string {
	s := make([]string, len(v))
	for i, r := range v {
		s[i] = fmt.Sprintf("%.2f", r)
	}
	return strings.Join(s, ", ")
}

// Dir is a temporary directory for a run.
func Dir() (string, error) { return os.MkdirTemp("", "bellows-bench-watch-") }
