package changefeed

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/regionmap"
	"github.com/bellows-kv/bellows/storage-engine/walarchive"
)

// The resolved mark is the lowest, over the regions that meet the feed's
// range, of each region's newest frontier (a region moved has an older,
// final stream beside its owner's); a region of the range without a
// stream holds it back.
func TestTheMarkIsTheLowestNewestFrontierOfTheRegionsInRange(t *testing.T) {
	m := regionmap.Map{Region: []regionmap.Region{
		{Name: "region-000", Start: nil, End: []byte("g")},
		{Name: "region-001", Start: []byte("g"), End: []byte("p")},
		{Name: "region-002", Start: []byte("p")},
	}}
	streams := []walarchive.Stream{
		{Region: "region-000", WALID: "a", TS: 50, Final: true}, {Region: "region-000", WALID: "b", TS: 80},
		{Region: "region-001", WALID: "a", TS: 60},
		{Region: "region-002", WALID: "c", TS: 40},
		{Region: "region-009", WALID: "a", TS: 10, Final: true}, // retired: no longer in the map
	}
	for _, c := range []struct {
		start, end string
		want       uint64
	}{
		{"", "", 40}, {"h", "o", 60}, {"a", "h", 60}, {"a", "g", 80}, {"p", "", 40}, {"o", "pa", 40},
	} {
		var end []byte
		if c.end != "" {
			end = []byte(c.end)
		}
		f := New(nil, Options{Start: []byte(c.start), End: end})
		got, err := f.mark(m, streams)
		if err != nil || got != c.want {
			t.Errorf("[%q, %q): mark %d (%v), want %d", c.start, c.end, got, err, c.want)
		}
	}
	f := New(nil, Options{})
	if _, err := f.mark(m, streams[:3]); !errors.Is(err, ErrNoArchive) {
		t.Errorf("a region with no stream: %v, want ErrNoArchive", err)
	}
}

// A checkpoint is replaced whole and read back; a file that holds no
// timestamp is refused with an error naming it, not read as 0 (the whole
// archive again).
func TestCheckpointSavesAndLoads(t *testing.T) {
	c := Checkpoint{Path: filepath.Join(t.TempDir(), "pos")}
	if _, found, err := c.Load(); found || err != nil {
		t.Fatalf("no file: found %t, %v", found, err)
	}
	for _, ts := range []uint64{7, 1796332753924203916} {
		if err := c.Save(ts); err != nil {
			t.Fatal(err)
		}
		if got, found, err := c.Load(); got != ts || !found || err != nil {
			t.Fatalf("saved %d, loaded %d (found %t, %v)", ts, got, found, err)
		}
	}
	if err := os.WriteFile(c.Path, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Load(); !errors.Is(err, ErrCheckpointDamaged) {
		t.Fatalf("a checkpoint of 0: %v, want ErrCheckpointDamaged", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(c.Path))
	if len(entries) != 1 {
		t.Errorf("the checkpoint's directory holds %d files, want the checkpoint alone (no temporary left)", len(entries))
	}
}
