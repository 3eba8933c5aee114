// Package compactionwire converts compaction jobs and results to and from
// the bellows.compaction.v1 protobuf messages. Both ends of the Compact RPC
// use it: the store's offload executor encodes jobs and decodes results, a
// compaction worker (package compactor) the reverse, so a field added to
// compaction.Job or compaction.Result is added here once.
package compactionwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// JobToProto encodes a job for the wire; JobFromProto is its inverse.
func JobToProto(j compaction.Job) *compactionpb.Job {
	return &compactionpb.Job{
		Region: j.Region,
		Inputs: j.Inputs,
		Output: j.Output,
		Start:  j.Start,
		End:    j.End,
		Merge: &compactionpb.MergeOptions{
			Major:                j.Merge.Major,
			RetentionMaxVersions: int32(j.Merge.Retention.MaxVersions),
			Snapshots:            j.Merge.Snapshots,
			Horizon:              j.Merge.Horizon,
		},
		Sst: &compactionpb.SSTOptions{
			BlockSize:          int64(j.SST.BlockSize),
			Compression:        uint32(j.SST.Compression),
			BloomFalsePositive: j.SST.BloomFalsePositive,
			ExpectedKeys:       uint64(j.SST.ExpectedKeys),
			FormatVersion:      formatOnTheWire(j.SST.FormatVersion),
			PartitionBytes:     int64(j.SST.PartitionBytes),
		},
	}
}

// formatOnTheWire is the format a job asks for, never 0: a worker reads 0
// as format 1, what a store that predates format 2 reads.
func formatOnTheWire(v uint32) uint32 {
	if v == 0 {
		return sstable.FormatVersion
	}
	return v
}

// JobFromProto decodes and validates a job from the wire.
func JobFromProto(p *compactionpb.Job) (compaction.Job, error) {
	switch {
	case p == nil:
		return compaction.Job{}, errors.New("job is missing")
	case p.Region == "":
		return compaction.Job{}, errors.New("job has no region")
	case len(p.Inputs) == 0:
		return compaction.Job{}, errors.New("job has no inputs")
	case p.Output == "":
		return compaction.Job{}, errors.New("job has no output key")
	}
	j := compaction.Job{Region: p.Region, Inputs: p.Inputs, Output: p.Output, Start: p.Start, End: p.End}
	if len(j.End) == 0 {
		j.End = nil // unbounded: no range ends at the empty key
	} else if bytes.Compare(j.Start, j.End) >= 0 {
		return compaction.Job{}, fmt.Errorf("job range [%q, %q) is empty", j.Start, j.End)
	}
	if m := p.Merge; m != nil {
		if m.RetentionMaxVersions < 0 {
			return compaction.Job{}, errors.New("job retention maxVersions is negative")
		}
		j.Merge = compaction.MergeOptions{
			Major:     m.Major,
			Retention: compaction.Retention{MaxVersions: int(m.RetentionMaxVersions)},
			Snapshots: m.Snapshots,
			Horizon:   m.Horizon,
		}
	}
	if s := p.Sst; s != nil {
		if s.Compression > uint32(sstable.S2Compression) {
			return compaction.Job{}, errors.New("job names an unknown compression")
		}
		format := s.FormatVersion
		if format == 0 {
			format = sstable.FormatVersion1
		}
		if format != sstable.FormatVersion1 && format != sstable.FormatVersion {
			return compaction.Job{}, fmt.Errorf("job asks for sstable format %d; this worker writes %d and %d", s.FormatVersion, sstable.FormatVersion1, sstable.FormatVersion)
		}
		if s.PartitionBytes < 0 {
			return compaction.Job{}, errors.New("job partition bytes are negative")
		}
		j.SST = sstable.WriterOptions{
			BlockSize:          int(s.BlockSize),
			Compression:        sstable.Compression(s.Compression),
			BloomFalsePositive: s.BloomFalsePositive,
			ExpectedKeys:       uint(s.ExpectedKeys),
			FormatVersion:      format,
			PartitionBytes:     int(s.PartitionBytes),
		}
	}
	return j, nil
}

// ResultFromDone rebuilds the compaction result a Done event describes.
func ResultFromDone(d *compactionpb.CompactEvent_Done) (compaction.Result, error) {
	res := compaction.Result{
		Empty:      d.Empty,
		Size:       d.OutputSize,
		InputBytes: d.InputBytes,
		Stats: compaction.MergeStats{
			InputVersions:   d.InputVersions,
			OutputVersions:  d.OutputVersions,
			DroppedVersions: d.DroppedVersions,
			DroppedDeletes:  d.DroppedDeletes,
			DroppedExpired:  d.DroppedExpired,
		},
	}
	if !d.Empty {
		if err := json.Unmarshal(d.PropsJson, &res.Props); err != nil {
			return compaction.Result{}, fmt.Errorf("decoding output properties: %w", err)
		}
	}
	return res, nil
}

// DoneFromResult describes a finished job's result, whose output has blocks
// data blocks, as a Done event; ResultFromDone is its inverse.
func DoneFromResult(res compaction.Result, blocks int) (*compactionpb.CompactEvent_Done, error) {
	d := &compactionpb.CompactEvent_Done{
		Empty:           res.Empty,
		OutputSize:      res.Size,
		InputBytes:      res.InputBytes,
		InputVersions:   res.Stats.InputVersions,
		OutputVersions:  res.Stats.OutputVersions,
		DroppedVersions: res.Stats.DroppedVersions,
		DroppedDeletes:  res.Stats.DroppedDeletes,
		DroppedExpired:  res.Stats.DroppedExpired,
		OutputBlocks:    uint32(blocks),
	}
	if !res.Empty {
		props, err := json.Marshal(res.Props)
		if err != nil {
			return nil, err
		}
		d.PropsJson = props
	}
	return d, nil
}
