package engine

import (
	"fmt"
	"strings"
	"time"
)

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

// Markdown renders the comparison table: per workload, both engines'
// throughput and latency and the Bellows/Pebble throughput ratio.
func Markdown(c Config, header string, bellows, pebble []Result, outsideCache int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Engine benchmark: Bellows vs Pebble\n\n%s\n\n", header)
	fmt.Fprintf(&b, "Keys %d × (%d B key, %d B value); %d ops per read/mixed workload, %d scans of %d keys; "+
		"%d client goroutines (fill-random: 1); Zipf θ=%.2f; memtable %d MiB and block cache %d MiB for each engine; "+
		"WAL without fsync per write for both (Bellows async mode, Pebble NoSync).\n\n",
		c.Keys, c.KeySize, c.ValueSize, c.Ops, c.ScanOps, c.ScanLen, c.Threads, c.Theta,
		c.Budget.MemtableBytes>>20, c.Budget.CacheBytes>>20)
	fmt.Fprintf(&b, "Not in the budget: Bellows holds its SST indexes and bloom filters (%.1f MiB at the end of this run) in memory outside its block cache; Pebble keeps its index and filter blocks inside its cache.\n\n", float64(outsideCache)/(1<<20))
	b.WriteString("| workload | Bellows ops/s | Pebble ops/s | ratio (Bellows/Pebble) | Bellows p50 ms | Pebble p50 ms | Bellows p99 ms | Pebble p99 ms | reads that found data (B / P) |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i := range bellows {
		be, pe := bellows[i], pebble[i]
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | **%.2f** | %s | %s | %s | %s | %s |\n",
			be.Workload, be.OpsPerSec(), pe.OpsPerSec(), be.OpsPerSec()/pe.OpsPerSec(),
			ms(be.P50), ms(pe.P50), ms(be.P99), ms(pe.P99), found(be, pe))
	}
	return b.String()
}

func found(be, pe Result) string {
	if be.Reads == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f%% / %.1f%%", 100*float64(be.Found)/float64(be.Reads), 100*float64(pe.Found)/float64(pe.Reads))
}
