// Package compaction chooses which SSTs of a region to merge and merges them.
//
// Selection is HBase's exploring policy over the region's files in age order;
// execution is a merge of the inputs that applies the retention rules. Both
// are independent of where the merge runs: a storage pod runs it locally, a
// compaction worker runs the same code for an offloaded job.
package compaction

import (
	"fmt"
	"slices"

	"github.com/bellows-kv/bellows/internal/contract"
)

// Policy configures minor-compaction selection (HBase's
// ExploringCompactionPolicy).
type Policy struct {
	// MinFiles is the fewest files a minor compaction merges.
	MinFiles int `json:"minFiles"`
	// MaxFiles is the most files a minor compaction merges.
	MaxFiles int `json:"maxFiles"`
	// Ratio: a window qualifies only if every file in it is at most Ratio
	// times the total size of the other files in the window.
	Ratio float64 `json:"ratio"`
	// MaxBytes caps the input size of a minor compaction; files larger than
	// this are never picked by a minor compaction.
	MaxBytes int64 `json:"maxBytes"`
}

// DefaultPolicy is the contract's (internal/contract): HBase's minimum and
// maximum file counts and ratio, and the paper's b as the size cap.
func DefaultPolicy() Policy {
	return Policy{
		MinFiles: contract.DefaultCompactionMinFiles, MaxFiles: contract.DefaultCompactionMaxFiles,
		Ratio: contract.DefaultCompactionRatio, MaxBytes: contract.DefaultCompactionMaxBytes,
	}
}

// Validate reports a policy that cannot select anything sensible.
func (p Policy) Validate() error {
	switch {
	case p.MinFiles < 2:
		return fmt.Errorf("compaction policy: minFiles is %d, must be at least 2", p.MinFiles)
	case p.MaxFiles < p.MinFiles:
		return fmt.Errorf("compaction policy: maxFiles %d is below minFiles %d", p.MaxFiles, p.MinFiles)
	case p.Ratio <= 0:
		return fmt.Errorf("compaction policy: ratio %v must be positive", p.Ratio)
	case p.MaxBytes <= 0:
		return fmt.Errorf("compaction policy: maxBytes %d must be positive", p.MaxBytes)
	}
	return nil
}

// SelectMinor returns the half-open window [start, end) of files (given by
// size, oldest first) that the exploring policy would compact, or ok=false.
//
// Windows are contiguous in age, so the region's files keep disjoint,
// ascending timestamp ranges after the compaction. Among the windows in
// ratio, the one with the most files wins, then the one with fewer bytes.
func SelectMinor(sizes []int64, p Policy) (start, end int, ok bool) {
	bestN, bestBytes := 0, int64(0)
	for s := 0; s < len(sizes); s++ {
		var total int64
		for e := s; e < len(sizes) && e-s < p.MaxFiles; e++ {
			if sizes[e] > p.MaxBytes {
				break
			}
			total += sizes[e]
			n := e - s + 1
			if n < p.MinFiles || total > p.MaxBytes || !inRatio(sizes[s:e+1], total, p.Ratio) {
				continue
			}
			if n > bestN || (n == bestN && total < bestBytes) {
				start, end, ok = s, e+1, true
				bestN, bestBytes = n, total
			}
		}
	}
	return start, end, ok
}

func inRatio(window []int64, total int64, ratio float64) bool {
	if len(window) < 2 {
		return true
	}
	for _, sz := range window {
		if float64(sz) > float64(total-sz)*ratio {
			return false
		}
	}
	return true
}

// EstimatePendingBytes is the input bytes of the minor compactions the
// policy would run, one after another, on files of these sizes (oldest
// first) if nothing else arrived: each selected window is merged into one
// file of the window's total size, and selection repeats until the policy
// selects nothing. It is this policy's counterpart of RocksDB's
// estimate-pending-compaction-bytes: the compaction debt a region owes,
// which grows when flushes outrun its compactions even while at most one
// compaction request per region is queued. Output sizes are taken as the
// inputs' total, an upper bound (merging drops overwritten versions).
func EstimatePendingBytes(sizes []int64, p Policy) int64 {
	files := slices.Clone(sizes)
	var pending int64
	// Each merge removes at least MinFiles-1 ≥ 1 file, so this ends.
	for {
		start, end, ok := SelectMinor(files, p)
		if !ok || end-start < 2 {
			return pending
		}
		var total int64
		for _, n := range files[start:end] {
			total += n
		}
		pending += total
		files = slices.Replace(files, start, end, total)
	}
}
