package compactionwire

import (
	"reflect"
	"testing"

	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

func TestJobRoundTrips(t *testing.T) {
	job := compaction.Job{
		Region: "region-003",
		Inputs: []string{"regions/region-003/sst/000001-000004.sst", "regions/region-003/sst/000001-000005.sst"},
		Output: "regions/region-003/sst/000001-000006.sst",
		Merge: compaction.MergeOptions{
			Major:     true,
			Retention: compaction.Retention{MaxVersions: 3},
			Snapshots: []uint64{17, 42},
			Horizon:   40,
		},
		SST: sstable.WriterOptions{BlockSize: 4096, Compression: sstable.S2Compression, BloomFalsePositive: 0.02, ExpectedKeys: 1000,
			FormatVersion: sstable.FormatVersion, PartitionBytes: 2048},
		// A split's daughter: the worker must drop its sibling's keys.
		Start: []byte("user5000"),
		End:   []byte("user7500"),
	}
	for _, end := range [][]byte{job.End, nil} {
		job.End = end
		got, err := JobFromProto(JobToProto(job))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, job) {
			t.Fatalf("round trip:\n got  %+v\n want %+v", got, job)
		}
	}
}

// A store that predates format 2 sends no format: its worker writes
// format 1, which it can read. A store sends its format, never 0.
func TestAJobWithoutAFormatIsWrittenInFormat1(t *testing.T) {
	old := &compactionpb.Job{Region: "r", Inputs: []string{"in"}, Output: "out", Sst: &compactionpb.SSTOptions{BlockSize: 4096}}
	j, err := JobFromProto(old)
	if err != nil || j.SST.FormatVersion != sstable.FormatVersion1 {
		t.Fatalf("a job without a format: %v, format %d; want format 1", err, j.SST.FormatVersion)
	}
	sent := JobToProto(compaction.Job{Region: "r", Inputs: []string{"in"}, Output: "out"})
	if sent.Sst.FormatVersion != sstable.FormatVersion {
		t.Fatalf("a store's job asks for format %d; want %d", sent.Sst.FormatVersion, sstable.FormatVersion)
	}
}

func TestJobFromProtoRefusesIncompleteJobs(t *testing.T) {
	ok := func() *compactionpb.Job {
		return &compactionpb.Job{Region: "r", Inputs: []string{"in"}, Output: "out"}
	}
	for _, c := range []struct {
		name string
		job  *compactionpb.Job
		want string
	}{
		{"missing", nil, "job is missing"},
		{"no region", func() *compactionpb.Job { j := ok(); j.Region = ""; return j }(), "job has no region"},
		{"no inputs", func() *compactionpb.Job { j := ok(); j.Inputs = nil; return j }(), "job has no inputs"},
		{"no output", func() *compactionpb.Job { j := ok(); j.Output = ""; return j }(), "job has no output key"},
		{"negative retention", func() *compactionpb.Job {
			j := ok()
			j.Merge = &compactionpb.MergeOptions{RetentionMaxVersions: -1}
			return j
		}(), "job retention maxVersions is negative"},
		{"unknown compression", func() *compactionpb.Job {
			j := ok()
			j.Sst = &compactionpb.SSTOptions{Compression: uint32(sstable.S2Compression) + 1}
			return j
		}(), "job names an unknown compression"},
		{"unknown format", func() *compactionpb.Job {
			j := ok()
			j.Sst = &compactionpb.SSTOptions{FormatVersion: 9}
			return j
		}(), "job asks for sstable format 9; this worker writes 1 and 2"},
		{"negative partition bytes", func() *compactionpb.Job {
			j := ok()
			j.Sst = &compactionpb.SSTOptions{FormatVersion: 2, PartitionBytes: -1}
			return j
		}(), "job partition bytes are negative"},
		{"empty range", func() *compactionpb.Job {
			j := ok()
			j.Start, j.End = []byte("m"), []byte("c")
			return j
		}(), `job range ["m", "c") is empty`},
	} {
		if _, err := JobFromProto(c.job); err == nil || err.Error() != c.want {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

func TestResultRoundTrips(t *testing.T) {
	for _, res := range []compaction.Result{
		{Empty: true, InputBytes: 100, Stats: compaction.MergeStats{InputVersions: 4, DroppedVersions: 4, DroppedDeletes: 2}},
		{
			Size: 5000, InputBytes: 9000,
			Props: sstable.Properties{Entries: 10, Deletions: 1, MinTS: 3, MaxTS: 99, Smallest: []byte("a"), Largest: []byte("z"), DataBlocks: 2},
			Stats: compaction.MergeStats{InputVersions: 12, OutputVersions: 10, DroppedVersions: 2, DroppedDeletes: 1},
		},
	} {
		done, err := DoneFromResult(res, 2)
		if err != nil {
			t.Fatal(err)
		}
		if done.OutputBlocks != 2 {
			t.Fatalf("OutputBlocks = %d, want 2", done.OutputBlocks)
		}
		got, err := ResultFromDone(done)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, res) {
			t.Fatalf("round trip:\n got  %+v\n want %+v", got, res)
		}
	}
}
