package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/bellows-kv/bellows/client"
)

// regionHeader is the table header of a regions listing (`bellows kv
// regions`, `kubectl bellows regions`): a row per region and store serving
// it, as etcdctl endpoint status shows a row per member.
var regionHeader = []string{"REGION", "START", "END", "OWNER", "SIZE", "MEMSTORE", "WAL", "UNFLUSHED", "LOAD", "REQUESTS", "SSTS", "COMPACTION", "WARMUP"}

// regionTextHeader names the text format's columns: the table's, with the
// key range in one column.
var regionTextHeader = append([]string{"REGION", "RANGE"}, regionHeader[3:]...)

// regionDoc is a regions listing's JSON record: one per region and store,
// numbers unrounded.
type regionDoc struct {
	Name  string `json:"name"`
	Start string `json:"start"`
	End   string `json:"end"`
	// Owner is the store's name (its pod); Address, where it answered.
	Owner             string  `json:"owner"`
	Address           string  `json:"address,omitempty"`
	Waiting           string  `json:"waiting,omitempty"`
	FailingOverFrom   string  `json:"failing_over_from,omitempty"`
	DataBytes         int64   `json:"data_bytes"`
	MemstoreBytes     int64   `json:"memstore_bytes"`
	WALBytes          int64   `json:"wal_bytes"`
	OldestUnflushedMS int64   `json:"oldest_unflushed_ms"`
	RequestsPerSecond float64 `json:"requests_per_second"`
	Requests          uint64  `json:"requests"`
	SSTFiles          int     `json:"sst_files"`
	Compaction        string  `json:"compaction"`
	Worker            string  `json:"compaction_worker,omitempty"`
	WarmupProgress    float64 `json:"warmup_progress"`
	CachedRatio       float64 `json:"cached_ratio"`
}

// printRegions prints regions, a row per store reading of each. A region
// no store reported readings of (a store of an older version, or only
// known through a seed) still gets a row, with its owners' addresses.
func printRegions(p *printer, regions []client.Region) error {
	if p.format == "text" && len(regions) > 0 {
		// As kubectl does: the columns named, above the rows.
		if _, err := fmt.Fprintln(p.w, strings.Join(regionTextHeader, "\t")); err != nil {
			return err
		}
	}
	for _, g := range regions {
		stats := g.Stats
		if len(stats) == 0 {
			stats = []client.RegionStats{{Addr: strings.Join(g.Owners, ",")}}
		}
		for _, st := range stats {
			if err := printRegion(p, g, st); err != nil {
				return err
			}
		}
	}
	return p.flush()
}

func printRegion(p *printer, g client.Region, st client.RegionStats) error {
	owner := st.Store
	if owner == "" {
		owner = st.Addr
	}
	from := st.FailingOverFrom
	if owner == "" && g.FailingOverFrom != "" {
		// No store serves it: its owner is dead.
		owner, from = "(none)", g.FailingOverFrom
	}
	if owner == "" {
		owner = "(through the seeds)"
	}
	doc := regionDoc{Name: g.Name, Start: p.json(g.Start), End: p.json(g.End), Owner: owner, Address: st.Addr, Waiting: st.Waiting, FailingOverFrom: from,
		DataBytes: st.DataBytes, MemstoreBytes: st.MemstoreBytes, WALBytes: st.WALBytes, OldestUnflushedMS: st.OldestUnflushed.Milliseconds(),
		RequestsPerSecond: st.RequestsPerSecond, Requests: st.Requests, SSTFiles: st.SSTFiles,
		Compaction: st.Compaction.String(), Worker: st.Compaction.Worker, WarmupProgress: st.WarmupProgress, CachedRatio: st.CachedRatio}
	// Stores on one host share its name: the address tells them apart.
	if st.Store != "" && st.Addr != "" && st.Addr != st.Store {
		owner = st.Store + " (" + st.Addr + ")"
	}
	if from != "" && st.Waiting == "" && st.Store != "" {
		// Open at its owner, whose own lease ran out: it serves nothing.
		owner += " (liveness lease ran out: failing over)"
	}
	cells := []string{g.Name, p.table(g.Start), p.table(g.End), owner}
	switch {
	case from != "" && (st.Waiting != "" || st.Store == ""):
		doc.Compaction = ""
		cells = append(cells, "-", "-", "-", "-", "-", "-", "-", failingOverCell(from, st), "-")
	case st.Waiting != "":
		doc.Compaction = ""
		cells = append(cells, "-", "-", "-", "-", "-", "-", "-", "not open: "+st.Waiting, "-")
	case st.Store == "":
		// No readings: the store predates them, or only a seed answered.
		cells = append(cells, "-", "-", "-", "-", "-", "-", "-", "-", "-")
	default:
		cells = append(cells, bytesCell(st.DataBytes), bytesCell(st.MemstoreBytes), bytesCell(st.WALBytes), ageCell(st.OldestUnflushed),
			fmt.Sprintf("%.1f/s", st.RequestsPerSecond), fmt.Sprint(st.Requests), fmt.Sprint(st.SSTFiles), st.Compaction.String(),
			fmt.Sprintf("%.0f%%", 100*st.WarmupProgress))
	}
	span := fmt.Sprintf("[%q, %q)", g.Start, g.End)
	if p.hex {
		span = fmt.Sprintf("[%s, %s)", p.text(g.Start), p.text(g.End))
	}
	// The text format is the table's cells, tab-separated, with the range
	// in one field as a Go-quoted interval.
	text := strings.Join(append([]string{g.Name, span}, cells[3:]...), "\t") + "\n"
	return p.record(text, doc, cells...)
}

// failingOverCell is the state of a region failing over from store from,
// as the store of reading st sees it: its new owner taking it over, or no
// store serving it yet.
func failingOverCell(from string, st client.RegionStats) string {
	if st.Store != "" {
		return fmt.Sprintf("failing over from store %s: taking it over", from)
	}
	return fmt.Sprintf("failing over from store %s: no store serves it yet", from)
}

func bytesCell(n int64) string { return humanize.IBytes(uint64(max(n, 0))) }

// ageCell is how long ago the oldest unflushed write was made; "-" when
// every write is flushed.
func ageCell(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Second).String()
}
