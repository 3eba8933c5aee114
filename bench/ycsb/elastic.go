package ycsb

// The elastic benchmark of issue #26: a YCSB load into three `bellows
// store` processes that start with one region and split by size (the
// balancer spreading the daughters), against the same load into three
// stores pre-split to the count the elastic cluster ended with, which
// never split.

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pingcap/go-ycsb/pkg/prop"
	"github.com/pingcap/go-ycsb/pkg/util"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bellows-kv/bellows/bench/report"
	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/childproc"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// Goals of issue #26, stated before the run.
const (
	// ElasticGoalRegionSpread: every final region within ±25% of the mean
	// region size.
	ElasticGoalRegionSpread = 0.25
	// ElasticGoalStoreSpread: every store within ±15% of the mean bytes.
	ElasticGoalStoreSpread = 0.15
	// ElasticGoalThroughput: load throughput ≥ 0.9× the pre-split cluster's.
	ElasticGoalThroughput = 0.9
	// ElasticGoalP99: write p99 ≤ 1.5× the pre-split cluster's.
	ElasticGoalP99 = 1.5
	// ElasticGoalSplitUnavailable: the longest a key refuses writes during
	// a split.
	ElasticGoalSplitUnavailable = 100 * time.Millisecond
	// ElasticGoalMoveUnavailable: the longest a key is unavailable during
	// a move, beyond its flush.
	ElasticGoalMoveUnavailable = time.Second
)

// ElasticStores is the cluster's store count.
const ElasticStores = 3

// ElasticSplitDivisor: the split size is the expected data over it. A
// region splits in two at the split size S, so a uniform load's regions
// split in generations, 2^g regions of D/2^g each once the data D reaches
// 2^(g-1)·S; with S = D/12 the load ends with 16 regions of 0.75·S, half a
// generation from both neighbours (8 regions would need D < 8S, 32 would
// need D ≥ 16S).
const ElasticSplitDivisor = 12

// ElasticBytesPerRecord is a record's data as regions count it (their
// files' blocks plus memstore), measured on this build: a YCSB record of 10
// fields × 100 B, key included.
const ElasticBytesPerRecord = 1150

// ElasticConfig is what RunElastic runs.
type ElasticConfig struct {
	// Bellows is the bellows binary.
	Bellows string
	// Records loaded per run, Threads YCSB client threads, Pairs
	// interleaved (elastic, pre-split) pairs.
	Records, Threads, Pairs int
	// SplitBytes of the elastic cluster; 0: Records ×
	// ElasticBytesPerRecord / ElasticSplitDivisor.
	SplitBytes int64
	// Settle is how long, after a load, the stores are watched for their
	// bytes to come within the goal (the balancer still moving regions).
	Settle time.Duration
	// MergeAfter is the elastic stores' --merge-after (0: their default):
	// how long regions hold still before they merge or are re-cut.
	MergeAfter time.Duration
	// KeepDir, if set, is where the runs happen (stores' logs, WALs),
	// kept after the run for the logs' detail; else a temporary directory.
	KeepDir string
	// BalanceInterval, MaxMovesInFlight: the stores' flags (0: default).
	BalanceInterval  time.Duration
	MaxMovesInFlight int
	// Props are other YCSB properties, on top of workload a's.
	Props map[string]string
}

// ElasticRun is one load into one cluster.
type ElasticRun struct {
	Pair int `json:"pair"`
	// Mode is "elastic" (one region, --split-bytes) or "presplit"
	// (--split-keys, --split-bytes=0).
	Mode       string  `json:"mode"`
	SplitBytes int64   `json:"split_bytes"`
	SplitKeys  int     `json:"split_keys,omitempty"`
	Seconds    float64 `json:"seconds"`
	OpsPerS    float64 `json:"ops_per_s"`
	Errors     int64   `json:"errors"`
	InsertP50  int64   `json:"insert_p50_us"`
	InsertP99  int64   `json:"insert_p99_us"`
	// InsertMax is the longest insert the client measured, retries
	// included: an upper bound on any key's unavailability to a writer.
	InsertMax int64 `json:"insert_max_us"`
	// AtLoadEnd and Settled are the layout when the load ended (read once
	// no region is mid-move, LayoutAfter seconds after it) and after
	// the settle watch (SettledAfter after the load; the full Settle if
	// the stores never came within the goal).
	AtLoadEnd    Layout  `json:"at_load_end"`
	LayoutAfter  float64 `json:"at_load_end_after_s"`
	Settled      Layout  `json:"settled"`
	SettledAfter float64 `json:"settled_after_s"`
	// From the stores' logs: splits and their longest write refusal
	// ("split region ... writes refused for"), moves (a region released by
	// one store and claimed by another) and the longest from the start of
	// a release to the claim.
	Splits           int     `json:"splits"`
	MaxSplitRefuseMs float64 `json:"max_split_refuse_ms"`
	Moves            int     `json:"moves"`
	MaxMoveMs        float64 `json:"max_move_ms"`
	MaxReleaseMs     float64 `json:"max_release_ms"`
	MaxClaimMs       float64 `json:"max_claim_after_release_ms"`
	// Merges and their longest write refusal ("merged regions ... writes
	// refused for"), and re-cuts ("re-cut regions"), each one merge and
	// one split.
	Merges           int     `json:"merges"`
	MaxMergeRefuseMs float64 `json:"max_merge_refuse_ms"`
	Recuts           int     `json:"recuts"`
}

// Layout is the cluster's regions at one moment.
type Layout struct {
	Regions     int     `json:"regions"`
	RegionBytes []int64 `json:"region_bytes"`
	StoreBytes  []int64 `json:"store_bytes"`
	StoreCounts []int   `json:"store_regions"`
	// Waiting are regions open nowhere (mid-move), left out of the rest.
	Waiting int `json:"waiting"`
	// RegionSpread and StoreSpread are the largest |x/mean − 1|.
	RegionSpread float64 `json:"region_spread"`
	StoreSpread  float64 `json:"store_spread"`
}

// ElasticReport is elastic.json.
type ElasticReport struct {
	Command string `json:"command"`
	report.Provenance
	Regime string       `json:"regime"`
	Config string       `json:"config"`
	Runs   []ElasticRun `json:"runs"`
	// Findings are what the runs' logs and layouts show about the misses,
	// written after the run (bellows-bench ycsb --elastic-render).
	Findings []string `json:"findings,omitempty"`
}

// spread is the largest |x/mean − 1| of v.
func spread(v []int64) float64 {
	if len(v) == 0 {
		return 0
	}
	var sum float64
	for _, x := range v {
		sum += float64(x)
	}
	mean := sum / float64(len(v))
	if mean == 0 {
		return 0
	}
	var s float64
	for _, x := range v {
		s = max(s, math.Abs(float64(x)/mean-1))
	}
	return s
}

// YCSBSplitKeys are the keys (as the Bellows binding writes them) that cut
// the first records records of workload props into n ranges of equal
// record counts: go-ycsb's hashed insert order spreads keys
// "<table>:<prefix><fnv64(i)>", which share a prefix, so only keys from the
// distribution itself divide them.
func YCSBSplitKeys(overrides map[string]string, records, n int) ([]string, error) {
	p, err := Properties("a", overrides)
	if err != nil {
		return nil, err
	}
	table := p.GetString(prop.TableName, prop.TableNameDefault)
	prefix := p.GetString(prop.KeyPrefix, prop.KeyPrefixDefault)
	pad := p.GetInt64(prop.ZeroPadding, prop.ZeroPaddingDefault)
	ordered := p.GetString(prop.InsertOrder, prop.InsertOrderDefault) == "ordered"
	start := p.GetInt64(prop.InsertStart, prop.InsertStartDefault)
	keys := make([]string, records)
	for i := range keys {
		k := start + int64(i)
		if !ordered {
			k = util.Hash64(k)
		}
		keys[i] = string(rowKey(table, fmt.Sprintf("%s%0[3]*[2]d", prefix, k, pad)))
	}
	slices.Sort(keys)
	var out []string
	for j := 1; j < n; j++ {
		out = append(out, keys[j*records/n])
	}
	return out, nil
}

// elasticCluster is three store processes sharing a file:// bucket.
type elasticCluster struct {
	dir      string
	addrs    []string
	children []*childproc.Child
	conns    []*grpc.ClientConn
}

func startElasticCluster(ctx context.Context, cfg ElasticConfig, dir string, extra ...string) (*elasticCluster, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c := &elasticCluster{dir: dir}
	for range ElasticStores {
		a, err := childproc.ReserveAddr()
		if err != nil {
			return nil, err
		}
		c.addrs = append(c.addrs, a)
	}
	for i := range ElasticStores {
		args := []string{"store", "--create-bucket", "--bucket=file://" + filepath.Join(dir, "bucket"),
			"--wal-dir=" + filepath.Join(dir, fmt.Sprintf("wal-%d", i)), "--offload=Disabled",
			fmt.Sprintf("--region-owner=%d/%d", i, ElasticStores), "--listen=" + c.addrs[i],
			"--peers=" + strings.Join(c.addrs, ","), "--metrics-listen=127.0.0.1:0"}
		if cfg.BalanceInterval > 0 {
			args = append(args, "--balance-interval="+cfg.BalanceInterval.String())
		}
		if cfg.MergeAfter > 0 {
			args = append(args, "--merge-after="+cfg.MergeAfter.String())
		}
		if cfg.MaxMovesInFlight > 0 {
			args = append(args, fmt.Sprintf("--max-moves-in-flight=%d", cfg.MaxMovesInFlight))
		}
		ch, err := childproc.Start(ctx, cfg.Bellows, fmt.Sprintf("store-%d", i), dir, append(args, extra...)...)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.children = append(c.children, ch)
		conn, err := grpc.NewClient(c.addrs[i], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			c.stop()
			return nil, err
		}
		c.conns = append(c.conns, conn)
	}
	return c, nil
}

func (c *elasticCluster) stop() {
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	for _, ch := range c.children {
		ch.Stop()
	}
}

func (c *elasticCluster) logs() []string {
	var out []string
	for _, ch := range c.children {
		out = append(out, ch.Log)
	}
	return out
}

// layout asks every store for the regions it serves open.
func (c *elasticCluster) layout(ctx context.Context) (Layout, error) {
	var l Layout
	for i, conn := range c.conns {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := kvpb.NewKVClient(conn).Regions(cctx, &kvpb.RegionsRequest{})
		cancel()
		if err != nil {
			return l, fmt.Errorf("store-%d Regions: %w", i, err)
		}
		var bytes int64
		n := 0
		for _, r := range resp.Regions {
			if r.Waiting != "" {
				l.Waiting++
				continue
			}
			l.RegionBytes = append(l.RegionBytes, r.DataBytes)
			bytes += r.DataBytes
			n++
		}
		l.StoreBytes = append(l.StoreBytes, bytes)
		l.StoreCounts = append(l.StoreCounts, n)
	}
	slices.Sort(l.RegionBytes)
	l.Regions = len(l.RegionBytes)
	l.RegionSpread, l.StoreSpread = spread(l.RegionBytes), spread(l.StoreBytes)
	return l, nil
}

// RunElastic runs cfg.Pairs pairs, elastic then pre-split, in work.
func RunElastic(ctx context.Context, cfg ElasticConfig, work string, progress func(string)) ([]ElasticRun, error) {
	overrides := map[string]string{
		prop.RecordCount:    strconv.Itoa(cfg.Records),
		prop.OperationCount: strconv.Itoa(cfg.Records),
		prop.ThreadCount:    strconv.Itoa(cfg.Threads),
	}
	for k, v := range cfg.Props {
		overrides[k] = v
	}
	splitBytes := cfg.SplitBytes
	if splitBytes <= 0 {
		splitBytes = int64(cfg.Records) * ElasticBytesPerRecord / ElasticSplitDivisor
	}
	var runs []ElasticRun
	for pair := range cfg.Pairs {
		e, err := runElasticOnce(ctx, cfg, overrides, filepath.Join(work, fmt.Sprintf("elastic-%d", pair)), pair, splitBytes, nil)
		if err != nil {
			return runs, err
		}
		progress(fmt.Sprintf("pair %d elastic: %.0f ops/s, p99 %d µs, %d regions (spread %.2f), stores %v (spread %.2f, %.2f after %.0fs), %d splits (max %.0f ms), %d moves (max %.0f ms)",
			pair, e.OpsPerS, e.InsertP99, e.AtLoadEnd.Regions, e.AtLoadEnd.RegionSpread, e.AtLoadEnd.StoreBytes, e.AtLoadEnd.StoreSpread, e.Settled.StoreSpread, e.SettledAfter,
			e.Splits, e.MaxSplitRefuseMs, e.Moves, e.MaxMoveMs))
		runs = append(runs, e)
		keys, err := YCSBSplitKeys(overrides, cfg.Records, max(e.AtLoadEnd.Regions, 1))
		if err != nil {
			return runs, err
		}
		p, err := runElasticOnce(ctx, cfg, overrides, filepath.Join(work, fmt.Sprintf("presplit-%d", pair)), pair, 0, keys)
		if err != nil {
			return runs, err
		}
		progress(fmt.Sprintf("pair %d presplit: %.0f ops/s, p99 %d µs, %d regions, stores %v, %d moves (max %.0f ms)",
			pair, p.OpsPerS, p.InsertP99, p.AtLoadEnd.Regions, p.AtLoadEnd.StoreBytes, p.Moves, p.MaxMoveMs))
		runs = append(runs, p)
		_ = os.RemoveAll(filepath.Join(work, fmt.Sprintf("elastic-%d", pair), "bucket"))
		_ = os.RemoveAll(filepath.Join(work, fmt.Sprintf("presplit-%d", pair), "bucket"))
	}
	return runs, nil
}

func runElasticOnce(ctx context.Context, cfg ElasticConfig, overrides map[string]string, dir string, pair int, splitBytes int64, splitKeys []string) (ElasticRun, error) {
	run := ElasticRun{Pair: pair, Mode: "elastic", SplitBytes: splitBytes}
	extra := []string{fmt.Sprintf("--split-bytes=%d", splitBytes)}
	if splitKeys != nil {
		run.Mode, run.SplitKeys = "presplit", len(splitKeys)
		if len(splitKeys) > 0 {
			extra = append(extra, "--split-keys="+strings.Join(splitKeys, ","))
		}
	} else {
		extra = append(extra, "--regions=1")
	}
	c, err := startElasticCluster(ctx, cfg, dir, extra...)
	if err != nil {
		return run, err
	}
	defer c.stop()
	dial, cancel := context.WithTimeout(ctx, 30*time.Second)
	cl, err := client.New(dial, c.addrs, client.Options{})
	cancel()
	if err != nil {
		return run, err
	}
	defer cl.Close()
	ph, err := RunPhase(ctx, cl, "a", true, overrides, dir)
	if err != nil {
		return run, err
	}
	loaded := time.Now()
	run.Seconds, run.OpsPerS, run.Errors = ph.Took.Seconds(), ph.Throughput(), ph.Errors()
	for _, o := range ph.Ops {
		if o.Op == "INSERT" {
			run.InsertP50, run.InsertP99, run.InsertMax = o.P50Us, o.P99Us, o.MaxUs
		}
	}
	// A region mid-move is open nowhere: the layout is read once every
	// region is open again (or after 30 s, with the ones still moving
	// left out).
	for {
		if run.AtLoadEnd, err = c.layout(ctx); err != nil {
			return run, err
		}
		if run.AtLoadEnd.Waiting == 0 || time.Since(loaded) > 30*time.Second {
			break
		}
		select {
		case <-ctx.Done():
			return run, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	run.LayoutAfter = time.Since(loaded).Seconds()
	run.Settled = run.AtLoadEnd
	// Settled: the stores within their goal and, once re-cuts evened
	// them out, the regions within theirs.
	for (run.Settled.StoreSpread > ElasticGoalStoreSpread || run.Settled.RegionSpread > ElasticGoalRegionSpread || run.Settled.Waiting > 0) &&
		time.Since(loaded) < cfg.Settle {
		select {
		case <-ctx.Done():
			return run, ctx.Err()
		case <-time.After(2 * time.Second):
		}
		if run.Settled, err = c.layout(ctx); err != nil {
			return run, err
		}
	}
	run.SettledAfter = time.Since(loaded).Seconds()
	// Only what happened before now counts: stopping the stores releases
	// every region (claimed by nobody).
	until := time.Now()
	ev, err := ParseStoreLogs(c.logs(), until)
	if err != nil {
		return run, err
	}
	run.Splits, run.MaxSplitRefuseMs = ev.Splits, ms(ev.MaxSplitRefuse)
	run.Moves, run.MaxMoveMs, run.MaxReleaseMs, run.MaxClaimMs = ev.Moves, ms(ev.MaxMove), ms(ev.MaxRelease), ms(ev.MaxClaim)
	run.Merges, run.MaxMergeRefuseMs, run.Recuts = ev.Merges, ms(ev.MaxMergeRefuse), ev.Recuts
	return run, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// StoreEvents are what the stores' logs say about splits and moves.
type StoreEvents struct {
	Splits         int
	MaxSplitRefuse time.Duration
	// Moves are claims that follow a release of the same region by
	// another store; MaxMove is the longest from the release's start to
	// the claim, MaxRelease the longest release (its flush included).
	Moves      int
	MaxMove    time.Duration
	MaxRelease time.Duration
	// MaxClaim is the longest from a release's end to the claim: a move's
	// unavailability beyond its release (flush, manifest commit).
	MaxClaim time.Duration
	// Merges and the longest a merge refused writes; Recuts.
	Merges         int
	MaxMergeRefuse time.Duration
	Recuts         int
}

var (
	logTime    = regexp.MustCompile(`^time=(\S+) `)
	logRegion  = regexp.MustCompile(` region=(\S+)`)
	logRefused = regexp.MustCompile(`"writes refused for"=(\S+)`)
	logTook    = regexp.MustCompile(` took=(\S+)`)
)

// ParseStoreLogs reads the stores' slog text logs (one per store) up to
// until.
func ParseStoreLogs(paths []string, until time.Time) (StoreEvents, error) {
	var ev StoreEvents
	type release struct {
		store      int
		start, end time.Time
	}
	type claim struct {
		store  int
		at     time.Time
		region string
	}
	releases := map[string][]release{}
	var claims []claim
	for i, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return ev, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			m := logTime.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, m[1])
			if err != nil || at.After(until) {
				continue
			}
			region := ""
			if r := logRegion.FindStringSubmatch(line); r != nil {
				region = r[1]
			}
			// refused is the line's "writes refused for" duration, ok
			// false when it has none.
			refused := func() (d time.Duration, ok bool, err error) {
				r := logRefused.FindStringSubmatch(line)
				if r == nil {
					return 0, false, nil
				}
				d, err = time.ParseDuration(r[1])
				if err != nil {
					return 0, false, fmt.Errorf("%s: %q: %w", path, line, err)
				}
				return d, true, nil
			}
			switch {
			case strings.Contains(line, `msg="re-cut regions"`):
				ev.Recuts++
			case strings.Contains(line, `msg="merged regions"`):
				d, ok, err := refused()
				if err != nil {
					return ev, err
				}
				if ok {
					ev.Merges++
					ev.MaxMergeRefuse = max(ev.MaxMergeRefuse, d)
				}
			case strings.Contains(line, `msg="split region"`):
				d, ok, err := refused()
				if err != nil {
					return ev, err
				}
				if ok {
					ev.Splits++
					ev.MaxSplitRefuse = max(ev.MaxSplitRefuse, d)
				}
			case strings.Contains(line, `msg="released region"`):
				r := logTook.FindStringSubmatch(line)
				if r == nil {
					continue
				}
				d, err := time.ParseDuration(r[1])
				if err != nil {
					return ev, fmt.Errorf("%s: %q: %w", path, line, err)
				}
				releases[region] = append(releases[region], release{store: i, start: at.Add(-d), end: at})
			case strings.Contains(line, `msg="claimed region after its owner released it"`):
				claims = append(claims, claim{store: i, at: at, region: region})
			}
		}
		err = sc.Err()
		_ = f.Close()
		if err != nil {
			return ev, err
		}
	}
	for _, c := range claims {
		var last *release
		for j, r := range releases[c.region] {
			if r.store != c.store && !r.end.After(c.at) && (last == nil || r.end.After(last.end)) {
				last = &releases[c.region][j]
			}
		}
		if last == nil {
			continue // a claim at start-up, not a move
		}
		ev.Moves++
		ev.MaxMove = max(ev.MaxMove, c.at.Sub(last.start))
		ev.MaxRelease = max(ev.MaxRelease, last.end.Sub(last.start))
		ev.MaxClaim = max(ev.MaxClaim, c.at.Sub(last.end))
	}
	return ev, nil
}
