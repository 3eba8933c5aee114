package ycsb

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pingcap/go-ycsb/pkg/prop"
)

// The stores' slog lines a split and a move leave, as `bellows store`
// writes them.
func TestParseStoreLogsFindsSplitsAndMoves(t *testing.T) {
	dir := t.TempDir()
	logs := []string{
		`time=2026-11-27T10:36:27.469Z level=INFO msg="split region" role=store region=region-000 reason=size key="\"usertable:user62\"" left=region-001 right=region-002 epoch=2 "writes refused for"=196.298454ms
time=2026-11-27T10:36:30.077Z level=INFO msg="released region" role=store region=region-001 took=294.084926ms
time=2026-11-27T10:36:41.193Z level=INFO msg="split region" role=store region=region-002 reason=size key="\"usertable:user63\"" left=region-003 right=region-004 epoch=4 "writes refused for"=70.1528ms
time=2026-11-27T10:40:00.000Z level=INFO msg="released region" role=store region=region-003 took=10ms
`,
		`time=2026-11-27T10:36:20.000Z level=INFO msg="claimed region after its owner released it" role=store region=region-000
time=2026-11-27T10:36:30.500Z level=INFO msg="claimed region after its owner released it" role=store region=region-001
time=2026-11-27T10:36:50.000Z level=INFO msg="split region" role=store region=region-009 reason=size key="\"k\"" left=a right=b epoch=9 "writes refused for"=1.5s
`,
	}
	var paths []string
	for i, l := range logs {
		p := filepath.Join(dir, "store-"+strconv.Itoa(i)+".log")
		if err := os.WriteFile(p, []byte(l), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	until, _ := time.Parse(time.RFC3339, "2026-11-27T10:36:45Z")
	ev, err := ParseStoreLogs(paths, until)
	if err != nil {
		t.Fatal(err)
	}
	// The split after until and the release at shutdown are left out; the
	// claim at start-up (no release before it) is no move.
	want := StoreEvents{Splits: 2, MaxSplitRefuse: 196298454 * time.Nanosecond, Moves: 1,
		MaxMove: 423*time.Millisecond + 294084926*time.Nanosecond, MaxRelease: 294084926 * time.Nanosecond, MaxClaim: 423 * time.Millisecond}
	if ev != want {
		t.Fatalf("events %+v, want %+v", ev, want)
	}
}

// The split keys cut the records into equal ranges of the keys the
// binding writes.
func TestYCSBSplitKeysCutTheRecordsEvenly(t *testing.T) {
	keys, err := YCSBSplitKeys(map[string]string{prop.RecordCount: "1000"}, 1000, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 || !slices.IsSorted(keys) || !strings.HasPrefix(keys[0], "usertable:user") {
		t.Fatalf("split keys %q", keys)
	}
	if got := spread([]int64{75, 100, 125}); got != 0.25 {
		t.Fatalf("spread %v, want 0.25", got)
	}
}
