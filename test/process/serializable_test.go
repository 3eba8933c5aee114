package process

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/internal/appendload"
	"github.com/bellows-kv/bellows/internal/sercheck"
)

// Serializable transactions across two store processes whose clocks are
// 180 ms apart (within the bound), each SIGKILLed and restarted in turn
// while six workers read pairs of keys in all four regions and scan a
// range, appending to what they read: the history has no dependency cycle
// (internal/sercheck, from the values, not the timestamps), commits whose
// outcome was lost in a crash counted once a read proves them.
func TestSerializableWithSkewedClocksThroughCrashes(t *testing.T) {
	stores, startStore := skewedCrashPair(t)
	c := newClient(t, stores[0], stores[1])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	keys := appendload.Keys{RangeStart: regionKey(1, "p"), RangeEnd: regionKey(1, "q")}
	for i := range bankRegions {
		keys.Pairs = append(keys.Pairs, regionKey(i, "a"))
	}
	for _, s := range []string{"p1", "p2", "p3"} {
		keys.Range = append(keys.Range, regionKey(1, s))
	}
	var commits atomic.Int64
	stop := make(chan struct{})
	type result struct {
		h   []sercheck.Txn
		st  appendload.Stats
		err error
	}
	done := make(chan result, 1)
	go func() {
		h, st, err := appendload.Run(ctx, c, keys, appendload.Options{Workers: 6, Seed: 7, Commits: &commits,
			Txn: []client.TxnOption{client.Serializable()}}, stop)
		done <- result{h, st, err}
	}()
	progress := func(why string) {
		before := commits.Load()
		waitFor(t, why, func() bool { return commits.Load() >= before+40 })
	}
	progress("commits before the crashes")
	for i := range stores {
		stores[i].kill()
		stores[i] = startStore(i)
		progress(fmt.Sprintf("commits after store %d's restart", i))
	}
	close(stop)
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	final, err := appendload.Final(ctx, c, keys)
	if err != nil {
		t.Fatal(err)
	}
	rep := sercheck.Check(append(res.h, final))
	for _, a := range rep.Anomalies {
		t.Error(a)
	}
	if rep.Edges["rw"] == 0 {
		t.Fatalf("no anti-dependency in the history (%+v, edges %v): nothing for serializability to order", res.st, rep.Edges)
	}
	t.Logf("%+v; checked %d committed transactions (%d of unknown outcome proven by a read), edges %v",
		res.st, rep.Committed, rep.ProvenUnknown, rep.Edges)
}
