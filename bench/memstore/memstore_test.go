package memstore

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/exp/trace"
)

// tiny is a configuration that runs every policy on both distributions in
// seconds: a 1 MiB memstore flushed a few times per run.
//
// Its block cache is smaller than the one file the paced phase starts from
// (oneCachedFile), so the paced reader, whose every scan seeks into that
// file, must miss. A cache that holds the file leaves the paced phase with
// no miss unless its writes flush a new file, and Eager on Zipf keys never
// does: 10,000 puts to a hot set compacted in memory stay under 1 MiB. Nor
// does its full-speed phase make up for it: it flushes once, near the end
// of the writes, and in about 4 runs of 10 no read came after the flushed
// file was installed. Each of the 16 shards of 1 MiB holds 64 KiB, room
// for one data block (each a little over 32 KiB): at most 16 blocks, fewer
// than the Zipf run's file of some 6,500 keys (about 25 blocks) and the
// uniform run's (about 60).
func tiny() Config {
	c := Default()
	c.Keys = 20_000
	c.MemstoreBytes = 1 << 20
	c.Writes = 30_000
	c.PacedWrites = 10_000
	c.PacedWritesPerSec = 20_000
	c.Runs = 2
	c.ReadsPerSec = 1000
	c.CacheBytes = 1 << 20
	return c.Resolved()
}

func TestTinyRunEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark")
	}
	cfg := tiny()
	rep, err := Run(context.Background(), cfg, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := Write(out, Name, rep); err != nil {
		t.Fatal(err)
	}
	for _, f := range Files(Name) {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s not written: %v", f, err)
		}
	}

	// memstore.json has the issue's shape: config, and results with one
	// entry per policy and distribution carrying the issue's fields.
	b, err := os.ReadFile(filepath.Join(out, "memstore.json"))
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if keys := slices.Sorted(mapKeys(raw)); !slices.Equal(keys, []string{"config", "results"}) {
		t.Fatalf("top-level keys %v, want config and results", keys)
	}
	var results []map[string]any
	if err := json.Unmarshal(raw["results"], &results); err != nil {
		t.Fatal(err)
	}
	issueFields := []string{"policy", "distribution", "write_ops_per_s", "write_ratio_vs_none", "flushes_ratio_vs_none",
		"sst_bytes_ratio_vs_none", "get_p99_ratio_vs_none", "scan_ratio_vs_none", "gc_cpu_ratio_vs_none"}
	seen := map[string]bool{}
	for _, r := range results {
		for _, f := range issueFields {
			if _, ok := r[f]; !ok {
				t.Errorf("result %v lacks %q", r["policy"], f)
			}
		}
		seen[r["policy"].(string)+"/"+r["distribution"].(string)] = true
	}
	if len(results) != len(cfg.Policies)*len(cfg.Distributions) {
		t.Errorf("%d results, want %d", len(results), len(cfg.Policies)*len(cfg.Distributions))
	}
	for _, d := range cfg.Distributions {
		for _, p := range cfg.Policies {
			if !seen[p+"/"+d] {
				t.Errorf("no result for %s on %s", p, d)
			}
		}
	}

	back, err := ReadJSON(filepath.Join(out, "memstore.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range back.Results {
		if !(r.WriteOpsPerS > 0) {
			t.Errorf("%s/%s: write throughput %v", r.Policy, r.Distribution, r.WriteOpsPerS)
		}
		if len(r.Runs) != cfg.Runs {
			t.Errorf("%s/%s: %d runs, want %d", r.Policy, r.Distribution, len(r.Runs), cfg.Runs)
		}
		if r.WriteRatioVsNone == nil || (r.Policy == "None" && *r.WriteRatioVsNone != 1) {
			t.Errorf("%s/%s: write ratio vs None %v", r.Policy, r.Distribution, r.WriteRatioVsNone)
		}
		if r.Flushes < 1 || r.SSTBytes <= 0 || r.WALBytes <= 0 {
			t.Errorf("%s/%s: flushes %v, SST bytes %v, WAL bytes %v: the run did not reach disk", r.Policy, r.Distribution, r.Flushes, r.SSTBytes, r.WALBytes)
		}
		for _, run := range r.Runs {
			if run.Gets == 0 || run.Scans == 0 || run.ScanRows == 0 {
				t.Errorf("%s/%s round %d: %d gets, %d scans (%d rows): the reader did not run", r.Policy, r.Distribution, run.Round, run.Gets, run.Scans, run.ScanRows)
			}
			// The slowest read is at least the p99 of either kind.
			if run.ReadMaxMs < max(run.GetP99Ms, run.ScanP99Ms) || run.SlowReadMs < float64(run.SlowReads)*ms(slowReadAt) {
				t.Errorf("%s/%s round %d: slowest read %v ms against p99s %v and %v; %d slow reads of %v ms in all", r.Policy, r.Distribution, run.Round,
					run.ReadMaxMs, run.GetP99Ms, run.ScanP99Ms, run.SlowReads, run.SlowReadMs)
			}
			if run.PacedGets == 0 || !(run.PacedGetP99Ms > 0) {
				t.Errorf("%s/%s round %d: %d gets during the paced writes: the paced phase did not run", r.Policy, r.Distribution, run.Round, run.PacedGets)
			}
			// The paced phase holds its rate (with slack for a shared
			// machine) and does not run far below it.
			if run.PacedWriteOpsPerS > 1.2*float64(cfg.PacedWritesPerSec) {
				t.Errorf("%s/%s round %d: paced writes at %.0f/s, above the %d/s pace", r.Policy, r.Distribution, run.Round, run.PacedWriteOpsPerS, cfg.PacedWritesPerSec)
			}
			if want := cfg.Writes / cfg.PutsPerBatch * cfg.PutsPerBatch; run.Writes < want {
				t.Errorf("%s/%s round %d: %d writes at full speed, want at least %d", r.Policy, r.Distribution, run.Round, run.Writes, want)
			}
			if want := cfg.PacedWrites / cfg.PutsPerBatch * cfg.PutsPerBatch; run.PacedWrites < want {
				t.Errorf("%s/%s round %d: %d paced writes, want at least %d", r.Policy, r.Distribution, run.Round, run.PacedWrites, want)
			}
		}
		// The paced reader reads a file larger than the cache (tiny): a
		// paced phase without a miss did not count them.
		for _, run := range r.Runs {
			if !(run.PacedMissesPerKRead > 0) {
				t.Errorf("%s/%s round %d: no block-cache miss counted during the paced writes, whose file does not fit in the cache", r.Policy, r.Distribution, run.Round)
			}
		}
		// None flushes several times during its full-speed writes, and
		// each flushed file starts cold; other policies may flush only
		// once, after the reader's last read.
		if r.Policy == "None" && !slices.ContainsFunc(r.Runs, func(run RunResult) bool { return run.MissesPerKRead > 0 }) {
			t.Errorf("%s/%s: no block-cache miss counted during the full-speed writes of any run", r.Policy, r.Distribution)
		}
		switch r.Policy {
		case "None":
			if r.InMemoryFlushes != 0 {
				t.Errorf("None flushed in memory %v times", r.InMemoryFlushes)
			}
		case "Basic":
			if r.InMemoryFlushes == 0 || r.VersionsDropped != 0 {
				t.Errorf("Basic: %v in-memory flushes, %v versions dropped", r.InMemoryFlushes, r.VersionsDropped)
			}
		case "Eager":
			// Retention of one version on Zipf keys: the hot keys'
			// old versions go.
			if r.Distribution == Zipf && r.VersionsDropped == 0 {
				t.Errorf("Eager on Zipf dropped no version")
			}
		}
	}

	md, err := os.ReadFile(filepath.Join(out, "memstore.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{GoalBasicThroughput, GoalAdaptiveIO, GoalReads, "## Zipf", "## Uniform", "| Adaptive |",
		"**Regime:**", "misses /1k reads", "## Goals: met or missed", "there is nothing to drop"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("memstore.md lacks %q:\n%s", want, md)
		}
	}
	// Every goal is judged (met or missed), none left out: the get p99
	// goal once per reader phase.
	if n := strings.Count(string(md), "— **met**") + strings.Count(string(md), "— **missed**"); n != 4 {
		t.Errorf("%d goals judged, want 4:\n%s", n, md)
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestVerdictsFromNumbers(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	rep := Report{Config: Config{Distributions: []string{Zipf, Uniform}}, Results: []Result{
		{Policy: "None", Distribution: Zipf, GetP99RatioVsNone: f(1)},
		{Policy: "Basic", Distribution: Zipf, WriteRatioVsNone: f(1.3), GetP99RatioVsNone: f(1.05)},
		{Policy: "Adaptive", Distribution: Zipf, FlushesRatioVsNone: f(0.4), SSTBytesRatioVsNone: f(0.8), GetP99RatioVsNone: f(0.9)},
		{Policy: "Eager", Distribution: Uniform, GetP99RatioVsNone: f(1.2)},
	}}
	v := Verdicts(rep)
	if len(v) != 3 {
		t.Fatalf("%d verdicts", len(v))
	}
	if !v[0].Judged || !v[0].Met {
		t.Errorf("Basic at 1.30×: %+v", v[0])
	}
	if !v[1].Judged || v[1].Met || !strings.Contains(v[1].Measured, "SST bytes 0.80× (missed)") {
		t.Errorf("Adaptive with SST bytes at 0.80×: %+v", v[1])
	}
	if !v[2].Judged || v[2].Met || !strings.Contains(v[2].Measured, "uniform: worst Eager at 1.20×") {
		t.Errorf("Eager at 1.20× get p99 on uniform: %+v", v[2])
	}
	if got := ratio(0, 0); got == nil || *got != 1 {
		t.Errorf("ratio(0, 0) = %v, want 1", got)
	}
	if ratio(1, 0) != nil {
		t.Error("ratio(1, 0) is not null")
	}
	if s := spreadOf([]float64{4, 1, 3, 2, 5}); s.Median != 3 || s.Min != 1 || s.Max != 5 || s.Q1 != 2 || s.Q3 != 4 {
		t.Errorf("spread %+v", s)
	}
	if k := string(keyOf(nil, 42, 16)); k != "k000000000000042" {
		t.Errorf("key %q", k)
	}
}

func TestConfigValidate(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	if c.PutsPerBatch != 86 || c.RawBytes < 6*c.MemstoreBytes || c.MaxVersions != 1 || c.Runs < 5 {
		t.Errorf("default is not the issue's shape: %+v", c)
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.Policies = []string{"Basic"} },
		func(c *Config) { c.Policies = []string{"None", "Lazy"} },
		func(c *Config) { c.Distributions = []string{"latest"} },
		func(c *Config) { c.Theta = 1 },
		func(c *Config) { c.KeySize = 8 },
		func(c *Config) { c.TraceSlow = time.Millisecond }, // no --trace-dir
		func(c *Config) { c.IdleWriters, c.WriterYield = true, true },
	} {
		c := Default()
		bad(&c)
		if c.Validate() == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}

func TestSlowReadsCountsTheReadsAtOrAboveTheThreshold(t *testing.T) {
	ms := time.Millisecond
	longest, n, total := slowReads(5*ms, []time.Duration{ms, 5 * ms, 2 * ms}, []time.Duration{40 * ms, 4 * ms})
	if longest != 40 || n != 2 || total != 45 {
		t.Errorf("slowReads = %v ms longest, %d slow, %v ms in all; want 40, 2, 45", longest, n, total)
	}
	if longest, n, total := slowReads(5 * ms); longest != 0 || n != 0 || total != 0 {
		t.Errorf("no reads: %v, %d, %v", longest, n, total)
	}
}

// A slow read's signal writes a trace that holds what ran before it; a run
// with no slow read writes none.
func TestTraceSlowReadWritesTheRecorderAtTheFirstSlowRead(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{TraceDir: dir, TraceSlow: time.Millisecond}
	slow := make(chan struct{}, 1)
	stop, err := traceSlowRead(context.Background(), cfg, Zipf, "Basic", 3, slow)
	if err != nil {
		t.Fatal(err)
	}
	rd := reader{slow: slow, slowAt: cfg.TraceSlow}
	var cpu time.Duration
	rd.timed(&rd.gets, &cpu, time.Microsecond, 0) // fast: no signal
	select {
	case <-slow:
		t.Fatal("a fast read signalled")
	default:
	}
	done := make(chan struct{})
	go func() { // something for the trace to hold
		defer close(done)
		for i := 0; i < 1000; i++ {
			_ = strings.Repeat("x", i)
		}
	}()
	<-done
	rd.timed(&rd.scans, &cpu, 2*time.Millisecond, 0)
	rd.timed(&rd.scans, &cpu, 3*time.Millisecond, 0) // a second slow read must not block
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "zipf-Basic-3-slow.trace"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	events := 0
	for {
		if _, err := r.ReadEvent(); err != nil {
			break
		}
		events++
	}
	if events == 0 {
		t.Error("the slow-read trace holds no events")
	}

	// No slow read: no file.
	dir2 := t.TempDir()
	stop, err = traceSlowRead(context.Background(), Config{TraceDir: dir2, TraceSlow: time.Millisecond}, Zipf, "None", 1, make(chan struct{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir2); len(entries) != 0 {
		t.Errorf("a run without a slow read wrote %v", entries)
	}
}
