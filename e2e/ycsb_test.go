//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/pingcap/go-ycsb/pkg/prop"

	"github.com/bellows-kv/bellows/bench/ycsb"
	bellows "github.com/bellows-kv/bellows/client"
)

// ycsbThroughTheService: the standard YCSB core workloads A–F (go-ycsb's
// workload, generators and measurement, over the Bellows binding of
// bench/ycsb) load and run against the cluster with the Go client seeded
// only with the KVCluster's client Service (its ClusterIP, as a client in
// the cluster reaches it; kube-proxy routes it on this node). Every
// operation of every phase succeeds and is counted.
func (e *env) ycsbThroughTheService(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	seed := e.serviceSeed(t, ctx)
	c, err := bellows.New(ctx, []string{seed}, e.clientOptions(t, clusterName, "write"))
	if err != nil {
		t.Fatalf("client seeded with the Service %s: %v", seed, err)
	}
	defer c.Close()
	const records, operations = 500, 1000
	overrides := map[string]string{
		prop.RecordCount: strconv.Itoa(records), prop.OperationCount: strconv.Itoa(operations), prop.ThreadCount: "4",
	}
	for _, w := range ycsb.Workloads {
		// Each workload its own table: its runs read its own load.
		overrides[prop.TableName] = "ycsb" + w
		for _, load := range []bool{true, false} {
			p, err := ycsb.RunPhase(ctx, c, w, load, overrides, t.TempDir())
			if err != nil {
				t.Fatalf("workload %s (load %t): %v", w, load, err)
			}
			if err := p.Complete(overrides); err != nil {
				t.Fatal(err)
			}
			var ops []string
			for _, o := range p.Ops {
				ops = append(ops, fmt.Sprintf("%s %d (p99 %dµs)", o.Op, o.Count, o.P99Us))
			}
			t.Logf("workload %s %s through %s: %.0f ops/s; %v", w, p.Phase, seed, p.Throughput(), ops)
		}
	}
}
