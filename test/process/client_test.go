package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/client"
)

// newClient is a Go client seeded with the given stores' addresses.
func newClient(t *testing.T, seeds ...*proc) *client.Client {
	t.Helper()
	var addrs []string
	for _, s := range seeds {
		addrs = append(addrs, s.grpc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, addrs, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// awaitOwners refreshes c until each of the 4 regions has exactly one owner,
// one of want, and returns region name → owner.
func awaitOwners(t *testing.T, c *client.Client, want ...*proc) map[string]string {
	t.Helper()
	addrs := map[string]bool{}
	for _, p := range want {
		addrs[p.grpc] = true
	}
	var got map[string]string
	waitFor(t, "the client to learn one owner per region", func() bool {
		if err := c.Refresh(context.Background()); err != nil {
			return false
		}
		got = map[string]string{}
		for _, r := range c.Regions() {
			if len(r.Owners) == 1 && addrs[r.Owners[0]] {
				got[r.Name] = r.Owners[0]
			}
		}
		return len(got) == 4
	})
	return got
}

func forwardedTotal(t *testing.T, stores ...*proc) float64 {
	t.Helper()
	var n float64
	for _, s := range stores {
		for _, op := range []string{"get", "put", "delete", "batch", "scan"} {
			n += s.metric(t, fmt.Sprintf(`bellows_kv_forwarded_total{op=%q}`, op))
		}
	}
	return n
}

// The client, seeded with one of two stores, learns the other from its
// Regions answer and sends every request straight to the owner of its key's
// region: no store forwards anything. Scans run across regions in key order,
// with a limit that crosses a region boundary; a batch applies atomically,
// in one region or across two stores' regions at one timestamp.
func TestClientRoutesEachRequestToItsOwner(t *testing.T) {
	ctx := context.Background()
	bucket := "file://" + t.TempDir()
	addrA, addrB := freeAddr(t), freeAddr(t)
	peers := addrA + "," + addrB
	a := startPeerStore(t, "store-a", bucket, t.TempDir(), addrA, "0/2", peers)
	b := startPeerStore(t, "store-b", bucket, t.TempDir(), addrB, "1/2", peers)
	c := newClient(t, a)
	owners := awaitOwners(t, c, a, b)
	if got := slices.Compact(slices.Sorted(maps.Values(owners))); !slices.Equal(got, slices.Sorted(slices.Values([]string{addrA, addrB}))) {
		t.Fatalf("owners %v: want both stores", owners)
	}

	m := model{}
	for i := range 4 {
		for j := range 50 {
			k, v := regionKey(i, fmt.Sprintf("k%03d", j)), fmt.Sprintf("v-%d-%d", i, j)
			res, err := c.Put(ctx, k, []byte(v))
			if err != nil {
				t.Fatalf("put %q: %v", k, err)
			}
			if res.Region != regionName(i) || res.CommitTS == 0 {
				t.Fatalf("put %q: applied in %s at %d, want %s at a timestamp", k, res.Region, res.CommitTS, regionName(i))
			}
			m[string(k)] = v
		}
	}
	for k, v := range m {
		got, found, err := c.Get(ctx, []byte(k))
		if err != nil || !found || string(got) != v {
			t.Fatalf("get %q = %q, %t, %v; want %q", k, got, found, err, v)
		}
	}
	keys := m.sorted()
	scan := func(start, end []byte, limit int) []string {
		t.Helper()
		kvs, err := c.ScanAll(ctx, start, end, client.ScanOptions{Limit: limit})
		if err != nil {
			t.Fatalf("scan [%q, %q) limit %d: %v", start, end, limit, err)
		}
		var out []string
		for _, kv := range kvs {
			if m[string(kv.Key)] != string(kv.Value) {
				t.Fatalf("scan: %q = %q, want %q", kv.Key, kv.Value, m[string(kv.Key)])
			}
			out = append(out, string(kv.Key))
		}
		return out
	}
	if got := scan(nil, nil, 0); !slices.Equal(got, keys) {
		t.Fatalf("whole scan: %d keys, want %d in order", len(got), len(keys))
	}
	if got := scan(nil, nil, 70); !slices.Equal(got, keys[:70]) {
		t.Fatalf("scan limit 70 (across region-000 → region-001): %d keys, want the first 70 in order", len(got))
	}
	from, to := regionKey(1, "k010"), regionKey(3, "k005")
	var want []string
	for _, k := range keys {
		if k >= string(from) && k < string(to) {
			want = append(want, k)
		}
	}
	if got := scan(from, to, 0); !slices.Equal(got, want) {
		t.Fatalf("scan [%q, %q): %d keys, want %d in order", from, to, len(got), len(want))
	}

	res, err := c.Batch(ctx, []client.Mutation{
		{Key: regionKey(2, "batch-1"), Value: []byte("b1")},
		{Key: regionKey(2, "k000"), Delete: true},
	})
	if err != nil || res.Region != regionName(2) {
		t.Fatalf("batch in region-002: %+v, %v", res, err)
	}
	if v, found, err := c.Get(ctx, regionKey(2, "batch-1")); err != nil || !found || string(v) != "b1" {
		t.Fatalf("after the batch: %q %t %v", v, found, err)
	}
	if _, found, err := c.Get(ctx, regionKey(2, "k000")); err != nil || found {
		t.Fatalf("after the batch's delete: found %t, %v", found, err)
	}
	// A batch across two regions (of two stores) commits in both, at one
	// timestamp.
	across, err := c.Batch(ctx, []client.Mutation{{Key: regionKey(0, "x"), Value: []byte("x")}, {Key: regionKey(1, "y"), Value: []byte("y")}})
	if err != nil || across.Region != regionName(0) {
		t.Fatalf("batch across region-000 and region-001: %+v, %v; want committed, mutation 0's region", across, err)
	}
	for _, k := range [][]byte{regionKey(0, "x"), regionKey(1, "y")} {
		if _, version, found, err := c.GetVersion(ctx, k); err != nil || !found || version != across.CommitTS {
			t.Fatalf("%q after the batch across regions: found %t at %d, %v; want the batch's commit %d", k, found, version, err, across.CommitTS)
		}
	}
	if _, err := c.Delete(ctx, regionKey(3, "k001")); err != nil {
		t.Fatal(err)
	}
	if _, found, err := c.Get(ctx, regionKey(3, "k001")); err != nil || found {
		t.Fatalf("after delete: found %t, %v", found, err)
	}

	if n := forwardedTotal(t, a, b); n != 0 {
		t.Fatalf("the stores forwarded %v calls: the client did not route to the owners", n)
	}

	// With store-b gone, a read of its region retries until the caller's
	// deadline and then says both: the deadline, and what the stores
	// answered.
	b.kill()
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, _, err = c.Get(short, regionKey(1, "k000"))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "last answer: rpc error: code = Unavailable") {
		t.Fatalf("get from a region whose store is down: %v; want the deadline and the last UNAVAILABLE", err)
	}
}

// A workload through the client rides through a region moving between two
// stores (the old owner terminated, its replacement claims its regions) and a
// store killed and restarted: every operation completes within its
// deadline, without the caller retrying, and every acknowledged write reads
// back, through gets and a scan of the whole key space.
func TestClientFollowsRegionMovesAndRestarts(t *testing.T) {
	bucket := "file://" + t.TempDir()
	addrA, addrB, addrC := freeAddr(t), freeAddr(t), freeAddr(t)
	walA := t.TempDir()
	peers := addrA + "," + addrB + "," + addrC
	a := startPeerStore(t, "store-a", bucket, walA, addrA, "0/2", peers)
	b := startPeerStore(t, "store-b", bucket, t.TempDir(), addrB, "1/2", peers)
	c := newClient(t, a)

	var (
		mu       sync.Mutex
		acked    = model{}
		perRegn  [4]int
		failures []string
		wg       sync.WaitGroup
	)
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				i := n % 4
				k, v := regionKey(i, fmt.Sprintf("w%d-%06d", w, n)), fmt.Sprintf("v%d-%d", w, n)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				_, err := c.Put(ctx, k, []byte(v))
				var got []byte
				var found bool
				if err == nil {
					got, found, err = c.Get(ctx, k)
					if err == nil && (!found || string(got) != v) {
						err = fmt.Errorf("read back %q, found %t; want %q", got, found, v)
					}
				}
				cancel()
				mu.Lock()
				if err != nil {
					failures = append(failures, fmt.Sprintf("%q: %v", k, err))
				} else {
					acked[string(k)] = v
					perRegn[i]++
				}
				mu.Unlock()
			}
		})
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	progress := func(what string, more int, regions ...int) {
		t.Helper()
		mu.Lock()
		base := perRegn
		mu.Unlock()
		waitFor(t, what, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, i := range regions {
				if perRegn[i] < base[i]+more {
					return false
				}
			}
			return true
		})
	}

	progress("writes to every region", 50, 0, 1, 2, 3)
	// store-b's replacement, on another address and volume: store-b
	// releases its regions as it terminates, and store-c, a new
	// incarnation of ordinal 1, claims them.
	b.terminate()
	cStore := startPeerStore(t, "store-c", bucket, t.TempDir(), addrC, "1/2", peers)
	waitFor(t, "store-c to claim store-b's regions", func() bool { return cStore.metric(t, "bellows_regions") == 2 })
	progress("writes to the moved regions at their new owner", 50, 1, 3)
	a.kill()
	a = startPeerStore(t, "store-a", bucket, walA, addrA, "0/2", peers)
	progress("writes to store-a's regions after its restart", 50, 0, 2)
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(failures) > 0 {
		t.Fatalf("%d operations failed (of %d acknowledged), first: %s", len(failures), len(acked), failures[0])
	}
	owners := awaitOwners(t, c, a, cStore)
	for _, i := range []int{1, 3} {
		if owners[regionName(i)] != addrC {
			t.Errorf("%s: owner %s, want store-c %s", regionName(i), owners[regionName(i)], addrC)
		}
	}
	kvs, err := c.ScanAll(context.Background(), nil, nil, client.ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := model{}
	for _, kv := range kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	if !maps.Equal(got, acked) {
		t.Fatalf("scan after the move and the restart: %d keys, want the %d acknowledged", len(got), len(acked))
	}
	if !slices.IsSortedFunc(kvs, func(x, y client.KeyValue) int { return bytes.Compare(x.Key, y.Key) }) {
		t.Fatalf("scan not in key order")
	}
	t.Logf("%d writes acknowledged and read back: %v per region", len(acked), perRegn)
}

// `bellows kv` is the client on the command line: seeded with one store, it
// writes and reads keys of the other's regions, scans in key order, lists
// each region's owner, and sends Admin calls to the region's owner.
func TestKVCommandUsesTheClient(t *testing.T) {
	bucket := "file://" + t.TempDir()
	addrA, addrB := freeAddr(t), freeAddr(t)
	peers := addrA + "," + addrB
	a := startPeerStore(t, "store-a", bucket, t.TempDir(), addrA, "0/2", peers)
	b := startPeerStore(t, "store-b", bucket, t.TempDir(), addrB, "1/2", peers)
	owners := awaitOwners(t, newClient(t, a), a, b)
	kv := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(binary, append([]string{"kv", "--addr", addrA}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("bellows kv %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	for i := range 4 {
		k := string(regionKey(i, "cli"))
		if out := kv("put", k, fmt.Sprintf("v%d", i)); !strings.HasPrefix(out, "OK "+regionName(i)+" ts=") {
			t.Fatalf("put %q: %q", k, out)
		}
		if out := kv("get", k); out != fmt.Sprintf("v%d", i) { // piped: the value exactly
			t.Fatalf("get %q: %q", k, out)
		}
	}
	var want strings.Builder
	for i := range 4 {
		k := string(regionKey(i, "cli"))
		if i != 1 { // \x01cli, \x81cli and \xc1cli are not text: quoted
			k = strconv.Quote(k)
		}
		fmt.Fprintf(&want, "%s\tv%d\n", k, i)
	}
	if out := kv("scan"); out != want.String() {
		t.Fatalf("scan: %q, want %q", out, want.String())
	}
	regions := kv("regions")
	for name, owner := range owners {
		if !regexp.MustCompile(`(?m)^` + name + `\t.*\(` + regexp.QuoteMeta(owner) + `\)\t`).MatchString(regions) {
			t.Fatalf("regions does not name %s's owner %s:\n%s", name, owner, regions)
		}
	}
	// region-001 is store-b's: the Admin call goes there, not to the seed.
	if out := kv("flush", regionName(1)); out != "OK flushed "+regionName(1)+"\n" {
		t.Fatalf("flush: %q", out)
	}
	if n := b.metric(t, `bellows_region_sst_files{region="region-001"}`); n != 1 {
		t.Fatalf("store-b's region-001 after the flush: %v SST files, want 1", n)
	}
	if n := forwardedTotal(t, a, b); n != 0 {
		t.Fatalf("the stores forwarded %v calls: bellows kv did not route to the owners", n)
	}
}
