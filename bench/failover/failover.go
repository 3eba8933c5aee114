// Package failover measures a store's loss (bellows-bench failover, issue
// #51): three `bellows store` processes over a file bucket that costs what
// an object store costs (blob.CostModel, reads and writes), a Go client
// writing to every region at a steady rate and recording every
// acknowledged write, then one store SIGKILLed and its WAL directory
// deleted (its node and volume lost). Per region the store held: the time
// from the kill to the first write acknowledged in that region after it;
// the write latency before the kill; and, once the writes stop, every
// acknowledged write read back through the client, the lost ones counted
// (the RPO). Both durability modes, interleaved: Bucket (the default: each
// group commit in the bucket before the ack) and Local (the local WAL's
// fsync; the archive ships every --wal-archive-interval, which is that
// mode's stated RPO).
package failover

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/childproc"
	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/blob"
)

// Goals of issue #51, stated before the run.
const (
	// GoalFailoverMedian: the median, over every region of the killed
	// store in every run, of the time from the kill to the first write
	// acknowledged in that region.
	GoalFailoverMedian = 5 * time.Second
	// GoalFailoverWorst: the longest such time in any run.
	GoalFailoverWorst = 10 * time.Second
	// GoalLostBucket: acknowledged writes lost in the default mode, in
	// every run.
	GoalLostBucket = 0
)

// Modes are the durability modes the benchmark compares, the default first.
var Modes = []string{contract.DurabilityBucket, contract.DurabilityLocal}

// Config is what Run runs.
type Config struct {
	// Bellows is the bellows binary the stores run.
	Bellows string
	// Runs per mode, interleaved (Bucket, Local, Bucket, ...).
	Runs int
	// Modes to run, of Modes.
	Modes []string
	// Stores and Regions: the cluster (--region-owner=i/Stores,
	// --regions=Regions, cut by first byte).
	Stores, Regions int
	// WritersPerRegion goroutines write to each region, Rate writes per
	// second between all of them, ValueBytes each.
	WritersPerRegion, Rate, ValueBytes int
	// Warmup is written before the latency window; Steady is the window
	// (write latency before the kill); After is written after the kill.
	Warmup, Steady, After time.Duration
	// Model is the bucket's cost model.
	Model blob.CostModel
	// BalanceInterval is the stores' --balance-interval (the balancer
	// also runs the failover check).
	BalanceInterval time.Duration
	// ArchiveInterval is the stores' --wal-archive-interval: the Local
	// mode's stated RPO, and the Bucket mode's frontier interval.
	ArchiveInterval time.Duration
	// WriteTimeout bounds one client write, retries included.
	WriteTimeout time.Duration
	// KeepDir, if set, is where the runs happen, kept afterwards (the
	// stores' logs); else a temporary directory, removed run by run.
	KeepDir string
}

// Default is the regime of bench/results/failover.md.
func Default() Config {
	return Config{
		Runs: 5, Modes: Modes, Stores: 3, Regions: 12,
		WritersPerRegion: 2, Rate: 600, ValueBytes: 128,
		Warmup: 5 * time.Second, Steady: 10 * time.Second, After: 20 * time.Second,
		Model:           blob.CostModel{Latency: 5 * time.Millisecond, Bandwidth: 100e6, WriteLatency: 10 * time.Millisecond},
		BalanceInterval: 500 * time.Millisecond, ArchiveInterval: 5 * time.Second,
		WriteTimeout: 30 * time.Second,
	}
}

// Validate says what is wrong with c.
func (c Config) Validate() error {
	switch {
	case c.Bellows == "":
		return errors.New("no bellows binary")
	case c.Runs < 1:
		return errors.New("--runs: want at least 1")
	case c.Stores < 2:
		return errors.New("--stores: want at least 2 (a failover needs a survivor)")
	case c.Regions < c.Stores || c.Regions > 128:
		return fmt.Errorf("--regions: want %d to 128", c.Stores)
	case c.WritersPerRegion < 1 || c.Rate < 1 || c.ValueBytes < 32:
		return errors.New("--writers-per-region and --rate at least 1, --value-bytes at least 32")
	case c.Warmup < 0 || c.Steady <= 0 || c.After <= 0:
		return errors.New("--steady and --after must be positive")
	}
	for _, m := range c.Modes {
		if !slices.Contains(Modes, m) {
			return fmt.Errorf("mode %q: want one of %v", m, Modes)
		}
	}
	if len(c.Modes) == 0 {
		return errors.New("no mode to run")
	}
	return nil
}

// Run runs cfg.Runs rounds, each mode once per round in cfg.Modes' order;
// round i kills store i mod Stores in every mode, so the modes lose the
// same stores.
func Run(ctx context.Context, cfg Config, work string, progress func(string)) ([]RunResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var runs []RunResult
	for round := range cfg.Runs {
		for _, mode := range cfg.Modes {
			dir := filepath.Join(work, fmt.Sprintf("%s-%d", strings.ToLower(mode), round))
			r, err := runOnce(ctx, cfg, dir, round, mode, round%cfg.Stores)
			if err != nil {
				return runs, fmt.Errorf("%s run %d: %w", mode, round, err)
			}
			progress(r.summary())
			runs = append(runs, r)
			if cfg.KeepDir == "" {
				_ = os.RemoveAll(dir)
			}
		}
	}
	return runs, nil
}

// RunResult is one run: one cluster, one store lost.
type RunResult struct {
	Round int    `json:"round"`
	Mode  string `json:"mode"`
	// Victim is the ordinal of the store killed; Held the regions it
	// served open just before.
	Victim int      `json:"victim"`
	Held   []string `json:"held"`
	// Regions are the failover figures of each held region.
	Regions []RegionFailover `json:"regions"`
	// FencedMs, MapMs: from the kill to the survivors' balancer fencing
	// the victim's liveness lease, and to its region map epoch moving the
	// victim's regions (from the stores' logs; -1: not seen).
	FencedMs float64 `json:"fenced_ms"`
	MapMs    float64 `json:"map_ms"`
	// Steady is the write latency of the writes started in the window
	// before the kill; After, of those started from one second after the
	// last held region's first write to the end (nil: a region never came
	// back).
	Steady Latency  `json:"steady"`
	After  *Latency `json:"after,omitempty"`
	// Acked writes, Failed writes (an error after WriteTimeout or the
	// end: their outcome unknown), Lost acknowledged writes that did not
	// read back.
	Acked  int `json:"acked"`
	Failed int `json:"failed"`
	Lost   int `json:"lost"`
	// LostOldestMs and LostNewestMs: how long before the kill the oldest
	// and the newest lost write were acknowledged (0 when none is lost).
	LostOldestMs float64 `json:"lost_oldest_before_kill_ms,omitempty"`
	LostNewestMs float64 `json:"lost_newest_before_kill_ms,omitempty"`
	// LostByRegion counts the lost writes per region.
	LostByRegion map[string]int `json:"lost_by_region,omitempty"`
	// Timeline is the write latency by start time around the kill.
	Timeline []Bin `json:"timeline"`
}

// RegionFailover is one held region's failover.
type RegionFailover struct {
	Region string `json:"region"`
	// FirstWriteMs is from the kill to the first write acknowledged in
	// the region after the killed process exited; -1: none before the
	// writes stopped.
	FirstWriteMs float64 `json:"first_write_ms"`
	// OpenMs is from the kill to the new owner logging the region open
	// ("took over region from a dead store"); -1: not seen. The rest of
	// FirstWriteMs is the client's: its retry backoff and table refresh.
	OpenMs float64 `json:"open_ms"`
	// Replayed are the WAL records the new owner replayed.
	Replayed int64 `json:"replayed"`
	// NewOwner is the store that logged the takeover (store-i).
	NewOwner string `json:"new_owner,omitempty"`
}

// Latency is a set of writes' latency, ms.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// Bin is the writes started in [StartS, StartS+BinWidth) seconds from the
// kill (Count, P50, Max), and the writes acknowledged in it: in the regions
// the killed store held (AckedHeld) and in the others (AckedOther).
type Bin struct {
	StartS     float64 `json:"start_s"`
	Count      int     `json:"count"`
	P50        float64 `json:"p50_ms"`
	Max        float64 `json:"max_ms"`
	AckedHeld  int     `json:"acked_held"`
	AckedOther int     `json:"acked_other"`
}

// BinWidth is the timeline's resolution.
const BinWidth = 250 * time.Millisecond

func (r RunResult) summary() string {
	var fw []string
	for _, g := range r.Regions {
		fw = append(fw, fmt.Sprintf("%s %.2fs (open %.2fs, %d replayed)", g.Region, g.FirstWriteMs/1000, g.OpenMs/1000, g.Replayed))
	}
	return fmt.Sprintf("%s round %d: store-%d killed; fenced after %.2fs, map after %.2fs; first writes: %s; steady p50 %.1f ms p99 %.1f ms (%d writes); %d acked, %d failed, %d lost",
		r.Mode, r.Round, r.Victim, r.FencedMs/1000, r.MapMs/1000, strings.Join(fw, ", "), r.Steady.P50, r.Steady.P99, r.Steady.Count, r.Acked, r.Failed, r.Lost)
}

// cluster is the stores of one run.
type cluster struct {
	dir      string
	addrs    []string
	children []*childproc.Child
	conns    []*grpc.ClientConn
}

func (c *cluster) walDir(i int) string { return filepath.Join(c.dir, fmt.Sprintf("wal-%d", i)) }

func startCluster(ctx context.Context, cfg Config, dir, mode string) (*cluster, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	bucket, err := blob.WithCostModel("file://"+filepath.Join(dir, "bucket"), cfg.Model)
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir}
	for range cfg.Stores {
		a, err := childproc.ReserveAddr()
		if err != nil {
			return nil, err
		}
		c.addrs = append(c.addrs, a)
	}
	for i := range cfg.Stores {
		args := []string{"store", "--create-bucket", "--bucket=" + bucket, "--wal-dir=" + c.walDir(i),
			"--offload=Disabled", fmt.Sprintf("--region-owner=%d/%d", i, cfg.Stores), "--listen=" + c.addrs[i],
			"--peers=" + strings.Join(c.addrs, ","), "--metrics-listen=127.0.0.1:0",
			fmt.Sprintf("--regions=%d", cfg.Regions), "--split-bytes=0", "--merge-bytes=0",
			"--balance-interval=" + cfg.BalanceInterval.String(), "--wal-archive-interval=" + cfg.ArchiveInterval.String(),
			"--durability=" + mode}
		ch, err := childproc.Start(ctx, cfg.Bellows, fmt.Sprintf("store-%d", i), dir, args...)
		if err != nil {
			c.kill()
			return nil, err
		}
		c.children = append(c.children, ch)
		conn, err := grpc.NewClient(c.addrs[i], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			c.kill()
			return nil, err
		}
		c.conns = append(c.conns, conn)
	}
	return c, nil
}

// kill ends every store still running at once: a graceful stop (releasing
// every region, flushing) is not what is measured.
func (c *cluster) kill() {
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	for _, ch := range c.children {
		if ch != nil {
			ch.Kill()
		}
	}
}

// open are the regions store i serves open (an error: it did not answer).
func (c *cluster) open(ctx context.Context, i int) ([]string, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := kvpb.NewKVClient(c.conns[i]).Regions(cctx, &kvpb.RegionsRequest{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range resp.Regions {
		if r.Waiting == "" {
			out = append(out, r.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// awaitOpen waits until every region is open on exactly one store.
func (c *cluster) awaitOpen(ctx context.Context, regions int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		n, seen := 0, map[string]bool{}
		var last error
		for i := range c.conns {
			rs, err := c.open(ctx, i)
			if err != nil {
				last = err
				continue
			}
			for _, r := range rs {
				seen[r] = true
			}
			n += len(rs)
		}
		if n == regions && len(seen) == regions {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d regions open after %v (last error: %v)", len(seen), regions, within, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// RegionKey is a key of region r of n (the first-byte cut of --regions),
// unique per writer and sequence number.
func RegionKey(r, n, writer, seq int) []byte {
	return fmt.Appendf([]byte{byte(256*r/n + 1)}, "w%03d-%09d", writer, seq)
}

// valueOf is the value written under key, size bytes: the key, then filler
// that depends on it, so a read-back checks the value too.
func valueOf(key []byte, size int) []byte {
	v := make([]byte, size)
	n := copy(v, key)
	var h uint64 = 1469598103934665603
	for _, b := range key {
		h = (h ^ uint64(b)) * 1099511628211
	}
	for i := n; i < size; i++ {
		h = h*6364136223846793005 + 1442695040888963407
		v[i] = 'a' + byte(h>>59)
	}
	return v
}

// write is one client write: its key, when it started and ended (from the
// run's start), and where it was applied.
type write struct {
	key        []byte
	start, end time.Duration
	ok         bool
	region     string
}

// writers are the client's writers of one run: WritersPerRegion per
// region, each paced to its share of Rate and never catching up in a
// burst after a stall, each keeping the log of its writes.
type writers struct {
	t0     time.Time
	stop   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	logs   [][]write
	grace  time.Duration
}

func startWriters(ctx context.Context, cfg Config, cl *client.Client) *writers {
	n := cfg.Regions * cfg.WritersPerRegion
	interval := time.Duration(float64(time.Second) * float64(n) / float64(cfg.Rate))
	wctx, cancel := context.WithCancel(ctx)
	ws := &writers{t0: time.Now(), stop: make(chan struct{}), cancel: cancel, logs: make([][]write, n), grace: cfg.WriteTimeout}
	for w := range n {
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			region := w % cfg.Regions
			// Writers start spread over one interval, not in step.
			next := time.Duration(rand.Int64N(int64(interval)))
			for seq := 0; ; seq++ {
				if d := next - time.Since(ws.t0); d > 0 {
					select {
					case <-ws.stop:
						return
					case <-time.After(d):
					}
				}
				select {
				case <-ws.stop:
					return
				default:
				}
				key := RegionKey(region, cfg.Regions, w, seq)
				pctx, pcancel := context.WithTimeout(wctx, cfg.WriteTimeout)
				began := time.Since(ws.t0)
				r, err := cl.Put(pctx, key, valueOf(key, cfg.ValueBytes))
				ended := time.Since(ws.t0)
				pcancel()
				ws.logs[w] = append(ws.logs[w], write{key: key, start: began, end: ended, ok: err == nil, region: r.Region})
				next = max(next+interval, ended)
			}
		}()
	}
	return ws
}

// now is the time since the writers started.
func (ws *writers) now() time.Duration { return time.Since(ws.t0) }

// halt stops the writers, letting each finish its write for up to the
// write timeout (then cancelled: its outcome unknown, it is not counted as
// acknowledged), and returns every write by start time.
func (ws *writers) halt() []write {
	ws.once.Do(func() { close(ws.stop) })
	done := make(chan struct{})
	go func() { ws.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(ws.grace):
		ws.cancel()
		<-done
	}
	ws.cancel()
	var all []write
	for _, l := range ws.logs {
		all = append(all, l...)
	}
	slices.SortFunc(all, func(a, b write) int { return int(a.start - b.start) })
	return all
}

func runOnce(ctx context.Context, cfg Config, dir string, round int, mode string, victim int) (RunResult, error) {
	res := RunResult{Round: round, Mode: mode, Victim: victim, FencedMs: -1, MapMs: -1}
	c, err := startCluster(ctx, cfg, dir, mode)
	if err != nil {
		return res, err
	}
	defer c.kill()
	if err := c.awaitOpen(ctx, cfg.Regions, time.Minute); err != nil {
		return res, err
	}
	dial, cancel := context.WithTimeout(ctx, 30*time.Second)
	cl, err := client.New(dial, c.addrs, client.Options{})
	cancel()
	if err != nil {
		return res, err
	}
	defer cl.Close()

	ws := startWriters(ctx, cfg, cl)
	defer ws.halt()
	sleep := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	if err := sleep(cfg.Warmup + cfg.Steady); err != nil {
		return res, err
	}
	if res.Held, err = c.open(ctx, victim); err != nil {
		return res, fmt.Errorf("store-%d before its loss: %w", victim, err)
	}
	if len(res.Held) == 0 {
		return res, fmt.Errorf("store-%d serves no region before its loss", victim)
	}
	// The loss: the process and its volume.
	killed, killedWall := ws.now(), time.Now()
	c.children[victim].Kill()
	exited := ws.now()
	c.children[victim] = nil
	if err := os.RemoveAll(c.walDir(victim)); err != nil {
		return res, err
	}
	if err := sleep(cfg.After); err != nil {
		return res, err
	}
	all := ws.halt()
	ev := readEvents(c, victim, killedWall)
	res.FencedMs, res.MapMs = ev.fenced, ev.mapped
	res.measure(cfg, all, ev, killed, exited)

	// Every acknowledged write, read back.
	lost, err := readBack(ctx, cl, all, cfg.ValueBytes)
	if err != nil {
		return res, err
	}
	res.Lost = len(lost)
	for i, w := range lost {
		if res.LostByRegion == nil {
			res.LostByRegion = map[string]int{}
		}
		res.LostByRegion[w.region]++
		before := ms(killed - w.end)
		if i == 0 || before > res.LostOldestMs {
			res.LostOldestMs = before
		}
		if i == 0 || before < res.LostNewestMs {
			res.LostNewestMs = before
		}
	}
	return res, nil
}

// measure fills in the failover of each held region, the latency before
// the kill and after the failover, and the timeline, from the writes (by
// start time) and the survivors' log events.
func (res *RunResult) measure(cfg Config, all []write, ev events, killed, exited time.Duration) {
	lastBack, allBack := time.Duration(0), true
	for _, name := range res.Held {
		g := RegionFailover{Region: name, FirstWriteMs: -1, OpenMs: -1}
		if o, ok := ev.open[name]; ok {
			g.OpenMs, g.Replayed, g.NewOwner = o.ms, o.replayed, o.by
		}
		first := time.Duration(-1)
		for _, w := range all {
			if w.ok && w.region == name && w.end > exited && (first < 0 || w.end < first) {
				first = w.end
			}
		}
		if first >= 0 {
			g.FirstWriteMs = ms(first - killed)
			lastBack = max(lastBack, first)
		} else {
			allBack = false
		}
		res.Regions = append(res.Regions, g)
	}
	var steady, after []time.Duration
	for _, w := range all {
		if !w.ok {
			res.Failed++
			continue
		}
		res.Acked++
		switch {
		case w.start >= cfg.Warmup && w.start < killed:
			steady = append(steady, w.end-w.start)
		case allBack && w.start >= lastBack+time.Second:
			after = append(after, w.end-w.start)
		}
	}
	res.Steady = latencyOf(steady)
	if allBack && len(after) > 0 {
		l := latencyOf(after)
		res.After = &l
	}
	res.Timeline = timeline(all, killed, cfg.Warmup, res.Held)
}

// readBack reads every acknowledged write through the client and returns
// those that do not read back as written.
func readBack(ctx context.Context, cl *client.Client, all []write, valueBytes int) ([]write, error) {
	var acked []write
	for _, w := range all {
		if w.ok {
			acked = append(acked, w)
		}
	}
	var lost []write
	const chunk = 512
	for i := 0; i < len(acked); i += chunk {
		part := acked[i:min(i+chunk, len(acked))]
		keys := make([][]byte, len(part))
		for j, w := range part {
			keys[j] = w.key
		}
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		got, err := cl.BatchGet(rctx, keys)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("reading back the acknowledged writes: %w", err)
		}
		for j, g := range got {
			if !g.Found || string(g.Value) != string(valueOf(part[j].key, valueBytes)) {
				lost = append(lost, part[j])
			}
		}
	}
	return lost, nil
}

// latencyOf summarises durations.
func latencyOf(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	slices.Sort(d)
	ms := func(x time.Duration) float64 { return float64(x) / float64(time.Millisecond) }
	return Latency{Count: len(d), P50: ms(quantile(d, 0.50)), P99: ms(quantile(d, 0.99)), Max: ms(d[len(d)-1])}
}

// quantile of sorted d: the nearest rank.
func quantile(d []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(d))+0.5) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// timeline bins the writes from the warmup's end on, relative to the kill:
// their latency by start time, their acknowledgements by end time.
func timeline(all []write, killed, from time.Duration, held []string) []Bin {
	bin := func(t time.Duration) int { return int(math.Floor(float64(t-killed) / float64(BinWidth))) }
	lat := map[int][]time.Duration{}
	acks := map[int][2]int{}
	for _, w := range all {
		if w.start < from {
			continue
		}
		lat[bin(w.start)] = append(lat[bin(w.start)], w.end-w.start)
		if w.ok {
			a := acks[bin(w.end)]
			if slices.Contains(held, w.region) {
				a[0]++
			} else {
				a[1]++
			}
			acks[bin(w.end)] = a
		}
	}
	var idx []int
	for i := range lat {
		idx = append(idx, i)
	}
	for i := range acks {
		if _, ok := lat[i]; !ok {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	var out []Bin
	for _, i := range idx {
		l := latencyOf(lat[i])
		out = append(out, Bin{StartS: float64(i) * BinWidth.Seconds(), Count: l.Count, P50: l.P50, Max: l.Max,
			AckedHeld: acks[i][0], AckedOther: acks[i][1]})
	}
	return out
}

// events are what the survivors logged about the failover.
type events struct {
	fenced, mapped float64
	open           map[string]opened
}

type opened struct {
	ms       float64
	replayed int64
	by       string
}

var (
	logTime     = regexp.MustCompile(`^time=(\S+) `)
	logMsg      = regexp.MustCompile(` msg="([^"]*)"`)
	logRegion   = regexp.MustCompile(` region=(\S+)`)
	logReplayed = regexp.MustCompile(` replayed=(\d+)`)
	logStore    = regexp.MustCompile(` store=(\d+)`)
)

// readEvents reads the survivors' logs from the kill on: the victim's
// lease fenced, the map epoch moving its regions, each region taken over.
func readEvents(c *cluster, victim int, killed time.Time) events {
	ev := events{fenced: -1, mapped: -1, open: map[string]opened{}}
	for i := range c.addrs {
		if i == victim {
			continue
		}
		name := fmt.Sprintf("store-%d", i)
		f, err := os.Open(filepath.Join(c.dir, name+".log"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			l := sc.Text()
			tm, msg := logTime.FindStringSubmatch(l), logMsg.FindStringSubmatch(l)
			if tm == nil || msg == nil {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, tm[1])
			if err != nil || at.Before(killed.Truncate(time.Millisecond)) {
				continue
			}
			ms := float64(at.Sub(killed)) / float64(time.Millisecond)
			switch msg[1] {
			case "store's liveness lease ran out: fenced":
				if s := logStore.FindStringSubmatch(l); s != nil && s[1] == strconv.Itoa(victim) && (ev.fenced < 0 || ms < ev.fenced) {
					ev.fenced = ms
				}
			case "failed over the regions of dead stores":
				if ev.mapped < 0 || ms < ev.mapped {
					ev.mapped = ms
				}
			case "took over region from a dead store":
				r := logRegion.FindStringSubmatch(l)
				if r == nil {
					continue
				}
				var n int64
				if p := logReplayed.FindStringSubmatch(l); p != nil {
					n, _ = strconv.ParseInt(p[1], 10, 64)
				}
				if o, ok := ev.open[r[1]]; !ok || ms < o.ms {
					ev.open[r[1]] = opened{ms: ms, replayed: n, by: name}
				}
			}
		}
		_ = f.Close()
	}
	return ev
}
