package compaction

import (
	"fmt"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

func vs(spec ...string) []version {
	var out []version
	for _, s := range spec {
		var ts uint64
		var kind string
		fmt.Sscanf(s, "%1s%d", &kind, &ts)
		k := kv.KindSet
		if kind == "D" {
			k = kv.KindDelete
		}
		out = append(out, version{key: kv.InternalKey{UserKey: []byte("k"), TS: ts, Kind: k}})
	}
	return out
}

func spec(v []version) string {
	s := ""
	for _, x := range v {
		if x.key.Kind == kv.KindDelete {
			s += fmt.Sprintf("D%d ", x.key.TS)
		} else {
			s += fmt.Sprintf("S%d ", x.key.TS)
		}
	}
	return s
}

func TestRetain(t *testing.T) {
	cases := []struct {
		name  string
		in    []version
		snaps []uint64
		opts  MergeOptions
		want  string
	}{
		{"keep all", vs("S5", "D4", "S3"), nil, MergeOptions{}, "S5 D4 S3 "},
		{"one version", vs("S5", "D4", "S3"), nil, MergeOptions{Retention: Retention{MaxVersions: 1}}, "S5 "},
		{"snapshot pins an old version", vs("S5", "D4", "S3"), []uint64{3}, MergeOptions{Retention: Retention{MaxVersions: 1}}, "S5 S3 "},
		{"snapshot between versions", vs("S5", "S3", "S1"), []uint64{4}, MergeOptions{Retention: Retention{MaxVersions: 1}}, "S5 S3 "},
		{"minor keeps a newest tombstone", vs("D5", "S3"), nil, MergeOptions{Retention: Retention{MaxVersions: 1}}, "D5 "},
		{"major drops a tombstone with nothing below", vs("D5", "S3"), nil, MergeOptions{Major: true, Retention: Retention{MaxVersions: 1}}, ""},
		{"major keeps a tombstone a snapshot needs above a value", vs("S6", "D5", "S3"), []uint64{3, 5}, MergeOptions{Major: true, Retention: Retention{MaxVersions: 1}}, "S6 D5 S3 "},
		{"major drops trailing tombstones only", vs("S6", "D5"), []uint64{5}, MergeOptions{Major: true, Retention: Retention{MaxVersions: 1}}, "S6 "},
		{"snapshot older than every version", vs("S6"), []uint64{2}, MergeOptions{Retention: Retention{MaxVersions: 1}}, "S6 "},
	}
	for _, c := range cases {
		snaps := append([]uint64(nil), c.snaps...)
		// retain wants snapshots newest first
		for i, j := 0, len(snaps)-1; i < j; i, j = i+1, j-1 {
			snaps[i], snaps[j] = snaps[j], snaps[i]
		}
		if len(snaps) > 1 && snaps[0] < snaps[1] {
			t.Fatalf("%s: test snapshots must be listed oldest first", c.name)
		}
		if got := spec(retain(c.in, snaps, c.opts)); got != c.want {
			t.Errorf("%s: got %q want %q", c.name, got, c.want)
		}
	}
}
