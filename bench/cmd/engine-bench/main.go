// Command engine-bench runs the engine workloads against Bellows and Pebble
// in one process, one engine after the other on fresh directories, and
// writes a Markdown report with the Bellows/Pebble ratio per workload.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/bellows-kv/bellows/bench/engine"
)

func main() {
	var c engine.Config
	out := flag.String("out", "bench/results/engine.md", "report file")
	dir := flag.String("dir", "", "working directory (default: a temporary directory)")
	flag.IntVar(&c.Keys, "keys", 1_000_000, "keys loaded by fill-random")
	flag.IntVar(&c.KeySize, "key-size", 16, "key bytes")
	flag.IntVar(&c.ValueSize, "value-size", 100, "value bytes")
	flag.IntVar(&c.Ops, "ops", 400_000, "operations per read or mixed workload")
	flag.IntVar(&c.ScanOps, "scan-ops", 100_000, "scans in the scan workload")
	flag.IntVar(&c.ScanLen, "scan-len", 20, "keys per scan")
	flag.IntVar(&c.Threads, "threads", 2, "client goroutines for read and mixed workloads")
	flag.Float64Var(&c.Theta, "theta", 0.99, "Zipf skew")
	flag.Uint64Var(&c.Seed, "seed", 42, "workload seed")
	memtable := flag.Int64("memtable-mib", 32, "memtable budget per engine (MiB)")
	cache := flag.Int64("cache-mib", 64, "block cache budget per engine (MiB)")
	pebbleFirst := flag.Bool("pebble-first", false, "run Pebble before Bellows (to check order effects)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the Bellows run to this file")
	flag.Parse()
	c.Budget = engine.Budget{MemtableBytes: *memtable << 20, CacheBytes: *cache << 20}
	if c.Keys <= 0 || c.Ops <= 0 || c.Threads <= 0 || c.KeySize < 8 {
		log.Fatal("engine-bench: -keys, -ops and -threads must be positive and -key-size at least 8")
	}
	work := *dir
	if work == "" {
		d, err := os.MkdirTemp("", "engine-bench-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(d)
		work = d
	}
	progress := func(s string) { fmt.Fprintln(os.Stderr, s) }

	runPebble := func() []engine.Result {
		p, err := engine.OpenPebble(filepath.Join(work, "pebble"), c.Budget)
		if err != nil {
			log.Fatal(err)
		}
		pr, err := engine.Workloads(p, c, progress)
		if err != nil {
			log.Fatal(err)
		}
		p.Close()
		return pr
	}
	var pr []engine.Result
	if *pebbleFirst {
		pr = runPebble()
	}
	b, err := engine.OpenBellows(filepath.Join(work, "bellows"), c.Budget)
	if err != nil {
		log.Fatal(err)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
	}
	br, err := engine.Workloads(b, c, progress)
	if err != nil {
		log.Fatal(err)
	}
	pprof.StopCPUProfile()
	outside := b.OutsideCacheBytes()
	b.Close()
	if !*pebbleFirst {
		pr = runPebble()
	}
	header := fmt.Sprintf("Run %s on %s/%s, %d CPUs, %s. Command: `make bench-engine` (`go run ./bench/cmd/engine-bench %s`).",
		time.Now().UTC().Format(time.RFC3339), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), argsString())
	report := engine.Markdown(c, header, br, pr, outside)
	fmt.Print(report)
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
		log.Fatal(err)
	}
}

func argsString() string {
	s := ""
	for i, a := range os.Args[1:] {
		if i > 0 {
			s += " "
		}
		s += a
	}
	return s
}
