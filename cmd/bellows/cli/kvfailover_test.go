package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/cmd/bellows/kubectl"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/liveness"
)

// failoverPair is two stores of one cluster, 4 regions split by first
// byte: store 0 runs (regions 0 and 2 are its own) and store 1 (regions 1
// and 3) let its liveness lease run out a minute ago; nothing listens at
// its address. No balancer runs, so its regions stay failing over until
// store 1 starts again (start).
type failoverPair struct {
	dir, bucket string
	addrs       [2]string
	peers       string
}

func newFailoverPair(t *testing.T) *failoverPair {
	t.Helper()
	dir := t.TempDir()
	p := &failoverPair{dir: dir, bucket: "file://" + filepath.Join(dir, "bucket"), addrs: [2]string{freeAddr(t), freeAddr(t)}}
	p.peers = p.addrs[0] + "," + p.addrs[1]
	if err := os.MkdirAll(filepath.Join(dir, "bucket"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := blob.Open(context.Background(), p.bucket)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := liveness.Renew(context.Background(), b, "1", "gone", liveness.Record{}, time.Now().Add(-time.Minute), time.Second); err != nil {
		t.Fatal(err)
	}
	p.start(t, 0)
	return p
}

// start runs store i.
func (p *failoverPair) start(t *testing.T, i int) {
	t.Helper()
	runStore(t, "--bucket="+p.bucket, "--wal-dir="+filepath.Join(p.dir, "wal", string(rune('0'+i))), "--listen="+p.addrs[i],
		"--region-owner="+string(rune('0'+i))+"/2", "--peers="+p.peers, "--balance-interval=0")
}

// A key of region-001 (the first byte from 64 to 127).
const failingKey = "\x41k"

// While store 1's regions fail over, kv says so: status lists them as
// failing over from store 1 and says why a store did not answer, regions
// shows them with no owner, and a put to one says, while it retries and
// when it gives up at --timeout, that the region is failing over, not
// gRPC's text.
func TestKVShowsARegionFailingOver(t *testing.T) {
	p := newFailoverPair(t)
	addr := p.addrs[0]

	stdout, _, err := kvRun{}.run(t, addr, "status")
	line := regexp.QuoteMeta(addr) + `\thealthy\t2 regions: region-000,region-002\t\d+ms\tfailing over: region-001, region-003 \(store 1's liveness lease ran out\)\n`
	if !regexp.MustCompile(line).MatchString(stdout) || !strings.Contains(stdout, p.addrs[1]+"\tunhealthy\tconnection refused") {
		t.Errorf("status:\n%s\nwant store 0 listing region-001 and region-003 failing over from store 1, and store 1 unhealthy", stdout)
	}
	if err == nil || !strings.Contains(err.Error(), "1 of 2 stores did not answer") || !strings.Contains(err.Error(), "its regions are failing over to the live stores") {
		t.Errorf("status: %v; want a store not answering, its regions failing over", err)
	}
	stdout, _, _ = kvRun{}.run(t, addr, "status", "-o", "json")
	var doc storeStatus
	if err := json.Unmarshal([]byte(strings.SplitN(stdout, "\n", 2)[0]), &doc); err != nil || len(doc.FailingOver) != 2 ||
		doc.FailingOver[0] != (failingOver{Region: "region-001", From: "1"}) {
		t.Errorf("status -o json: %+v, %v\n%s", doc, err, stdout)
	}

	regions := kv(t, addr, "regions")
	if !regexp.MustCompile(`(?m)^region-001\t.*\t\(none\)\t.*failing over from store 1: no store serves it yet`).MatchString(regions) {
		t.Errorf("regions:\n%s\nwant region-001 with no owner, failing over from store 1", regions)
	}

	_, stderr, err := kvRun{}.run(t, addr, "put", failingKey, "v", "--timeout", "2s")
	const failing = "region-001 is failing over (store 1's liveness lease ran out)"
	if !strings.Contains(stderr, failing+"; retrying\n") || strings.Count(stderr, "retrying") != 1 {
		t.Errorf("put's standard error %q; want %q once", stderr, failing+"; retrying")
	}
	want := failing + ", and its new owner did not serve it within --timeout 2s\n  hint: the cluster moves a dead store's regions to the live stores within seconds"
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "rpc error") {
		t.Errorf("put: %v\nwant %q", err, want)
	}
	if _, _, err := (kvRun{}).run(t, addr, "get", failingKey, "--timeout", "1s"); err == nil || !strings.HasPrefix(err.Error(), failing) {
		t.Errorf("get: %v; want %q", err, failing)
	}
}

// A put waits out a region failing over: it says so once on standard
// error and succeeds when the region's store serves it again.
func TestKVPutRidesThroughAFailover(t *testing.T) {
	p := newFailoverPair(t)
	var stderr syncBuffer
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, _, err := kvRun{stderr: &stderr}.run(t, p.addrs[0], "put", failingKey, "v", "--timeout", "60s")
		done <- result{out, err}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "region-001 is failing over") {
		if time.Now().After(deadline) {
			t.Fatalf("put said %q, not that region-001 is failing over", stderr.String())
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
	p.start(t, 1)
	got := <-done
	if got.err != nil || !strings.HasPrefix(got.out, "OK region-001") {
		t.Fatalf("put: %q, %v; want it applied in region-001 once store 1 serves it", got.out, got.err)
	}
	if v := kv(t, p.addrs[0], "get", failingKey); v != "v" {
		t.Fatalf("get = %q", v)
	}
}

// kubectl bellows status lists the regions the stores say are failing
// over, with the dead store's pod; or why the stores could not be asked.
func TestKubectlStatusShowsRegionsFailingOver(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := &kvapi.KVCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns"}}
	var out bytes.Buffer
	st := &kubectl.Status{Cluster: c, FailingOver: []kubectl.FailingOverRegion{
		{Region: "region-001", From: "1", Pod: "demo-1"}, {Region: "region-003", From: "1", Pod: "demo-1"}}}
	if err := printStatus(&out, "text", st, now); err != nil {
		t.Fatal(err)
	}
	got := squeeze(out.String())
	for _, want := range []string{
		"Failing over (their store's liveness lease ran out; the cluster moves them to live stores): REGION STATE FROM",
		"region-001 failing over store 1 (pod demo-1) region-003 failing over store 1 (pod demo-1)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := printStatus(&out, "text", &kubectl.Status{Cluster: c, RegionsUnread: "no storage pod answered"}, now); err != nil {
		t.Fatal(err)
	}
	if got := squeeze(out.String()); !strings.Contains(got, "Failing over: not known: the stores could not be asked: no storage pod answered") {
		t.Errorf("status with the stores not asked:\n%s", out.String())
	}
}

// squeeze reads runs of white space as one space, as a reader of aligned
// columns does.
func squeeze(s string) string { return strings.Join(strings.Fields(s), " ") }
