package process

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/pingcap/go-ycsb/pkg/prop"
	"github.com/pingcap/go-ycsb/pkg/util"

	"github.com/bellows-kv/bellows/bench/ycsb"
)

// The standard core workloads run unchanged through go-ycsb's client over
// the Bellows binding against a real store: every operation of every
// workload succeeds, each is counted, a loaded record reads back with all
// its fields, and workload E's scans return records in key order.
func TestYCSBCoreWorkloadsRunAgainstAStore(t *testing.T) {
	dir := t.TempDir()
	s := start(t, "store", "store", "--create-bucket", "--bucket=file://"+filepath.Join(dir, "bucket"), "--wal-dir="+filepath.Join(dir, "wal"),
		"--regions=4", "--offload=Disabled")
	c := newClient(t, s)
	const records, operations = 300, 400
	overrides := map[string]string{
		prop.RecordCount: strconv.Itoa(records), prop.OperationCount: strconv.Itoa(operations), prop.ThreadCount: "4",
	}
	ctx := context.Background()
	for _, w := range ycsb.Workloads {
		for _, load := range []bool{true, false} {
			p, err := ycsb.RunPhase(ctx, c, w, load, overrides, t.TempDir())
			if err != nil {
				t.Fatalf("workload %s (load %t): %v", w, load, err)
			}
			if err := p.Complete(overrides); err != nil {
				t.Fatal(err)
			}
		}
	}
	p, err := ycsb.Properties("a", overrides)
	if err != nil {
		t.Fatal(err)
	}
	db := ycsb.NewDB(c, p)
	row, err := db.Read(ctx, "usertable", "user"+fmt.Sprint(util.Hash64(0)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(row) != 10 {
		t.Fatalf("a loaded record has %d fields, want 10: %v", len(row), row)
	}
	rows, err := db.Scan(ctx, "usertable", "", 50, nil)
	if err != nil || len(rows) != 50 {
		t.Fatalf("scan of 50 records: %d, %v", len(rows), err)
	}
}
