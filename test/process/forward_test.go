package process

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/childproc"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/server"
)

// freeAddr reserves a port for a store that must be named in its peer's
// --peers before it starts (below the ephemeral range: childproc.ReserveAddr).
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := childproc.ReserveAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// startPeerStore is one of two stores splitting 4 regions (--region-owner
// owner), given the same --peers list, itself included.
func startPeerStore(t *testing.T, name, bucket, walDir, addr, owner, peers string) *proc {
	return start(t, name, "store", "--create-bucket", "--bucket="+bucket, "--wal-dir="+walDir, "--regions=4",
		"--region-owner="+owner, "--offload=Disabled", "--listen="+addr, "--peers="+peers,
		// The tests place regions by slot: no balancer moves them.
		"--balance-interval=0")
}

// regionKey is a key of region i of 4 (regions split the key space by first byte).
func regionKey(i int, s string) []byte { return append([]byte{byte(64*i + 1)}, s...) }

func regionName(i int) string { return fmt.Sprintf("region-%03d", i) }

// model is what the whole key space must hold.
type model map[string]string

func (m model) sorted() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func scanAll(t *testing.T, s *proc, req *kvpb.ScanRequest) []*kvpb.KeyValue {
	t.Helper()
	stream, err := s.kv().Scan(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var out []*kvpb.KeyValue
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("scan [%q, %q) limit %d through %s: %v", req.Start, req.End, req.Limit, s.name, err)
		}
		out = append(out, resp.Pairs...)
	}
}

// checkScan compares a scan with the model's keys in [start, end), at most limit.
func checkScan(t *testing.T, s *proc, m model, start, end []byte, limit int) {
	t.Helper()
	var want []string
	for _, k := range m.sorted() {
		if k >= string(start) && (end == nil || k < string(end)) && (limit == 0 || len(want) < limit) {
			want = append(want, k)
		}
	}
	got := scanAll(t, s, &kvpb.ScanRequest{Start: start, End: end, Limit: uint32(limit)})
	var keys []string
	for _, kv := range got {
		keys = append(keys, string(kv.Key))
		if string(kv.Value) != m[string(kv.Key)] {
			t.Errorf("scan through %s: %q = %q, want %q", s.name, kv.Key, kv.Value, m[string(kv.Key)])
		}
	}
	if !slices.Equal(keys, want) {
		t.Fatalf("scan [%q, %q) limit %d through %s:\n got %q\nwant %q", start, end, limit, s.name, keys, want)
	}
}

func TestForwardingServesEveryRegionThroughEitherStore(t *testing.T) {
	bucket := "file://" + t.TempDir()
	addrA, addrB := freeAddr(t), freeAddr(t)
	walA, walB := t.TempDir(), t.TempDir()
	peers := addrA + "," + addrB
	a := startPeerStore(t, "store-a", bucket, walA, addrA, "0/2", peers)
	b := startPeerStore(t, "store-b", bucket, walB, addrB, "1/2", peers)
	owners := []*proc{a, b, a, b} // region i is served by ordinal i mod 2
	ctx := context.Background()
	m := model{}

	for _, entry := range []*proc{a, b} {
		t.Run("through "+entry.name, func(t *testing.T) {
			// Every region's keys, written and read through entry only.
			for i := range 4 {
				for j := range 5 {
					k := regionKey(i, fmt.Sprintf("%s-%d", entry.name, j))
					v := "v-" + string(k)
					resp, err := entry.kv().Put(ctx, &kvpb.PutRequest{Key: k, Value: []byte(v)})
					if err != nil {
						t.Fatalf("put %q (%s) through %s: %v", k, regionName(i), entry.name, err)
					}
					if resp.Region != regionName(i) {
						t.Fatalf("put %q: region %s, want %s", k, resp.Region, regionName(i))
					}
					m[string(k)] = v
				}
			}
			for k, v := range m {
				for _, s := range []*proc{entry, owners[int(k[0])/64]} {
					g, err := s.kv().Get(ctx, &kvpb.GetRequest{Key: []byte(k)})
					if err != nil || !g.Found || string(g.Value) != v {
						t.Fatalf("get %q through %s = %q, %t, %v; want %q", k, s.name, g.GetValue(), g.GetFound(), err, v)
					}
				}
			}
			remote := 1 // a region entry does not serve
			if entry == b {
				remote = 2
			}
			gone := regionKey(remote, entry.name+"-0")
			if _, err := entry.kv().Delete(ctx, &kvpb.DeleteRequest{Key: gone}); err != nil {
				t.Fatalf("delete %q through %s: %v", gone, entry.name, err)
			}
			delete(m, string(gone))
			if g, err := entry.kv().Get(ctx, &kvpb.GetRequest{Key: gone}); err != nil || g.Found {
				t.Fatalf("get deleted %q through %s: found=%t, %v", gone, entry.name, g.GetFound(), err)
			}

			// Scans across all regions, in key order, with and without a
			// limit, and starting and ending inside regions.
			checkScan(t, entry, m, nil, nil, 0)
			for _, limit := range []int{1, 4, 7, 12, 1000} {
				checkScan(t, entry, m, nil, nil, limit)
			}
			checkScan(t, entry, m, regionKey(0, entry.name+"-2"), regionKey(3, entry.name+"-1"), 0)
			checkScan(t, entry, m, regionKey(1, entry.name+"-3"), nil, 6)

			// A batch to a remote region is applied atomically by its owner:
			// at the commit timestamp every mutation is visible, just before
			// it none.
			k1, k2, old := regionKey(remote, entry.name+"-b1"), regionKey(remote, entry.name+"-b2"), regionKey(remote, entry.name+"-1")
			br, err := entry.kv().Batch(ctx, &kvpb.BatchRequest{Mutations: []*kvpb.Mutation{
				{Op: kvpb.Mutation_OP_PUT, Key: k1, Value: []byte("b1")},
				{Op: kvpb.Mutation_OP_PUT, Key: k2, Value: []byte("b2")},
				{Op: kvpb.Mutation_OP_DELETE, Key: old},
			}})
			if err != nil {
				t.Fatalf("batch in %s through %s: %v", regionName(remote), entry.name, err)
			}
			if br.Region != regionName(remote) {
				t.Fatalf("batch applied in %s, want %s", br.Region, regionName(remote))
			}
			before, at := br.CommitTs-1, br.CommitTs
			for _, c := range []struct {
				key   []byte
				ts    uint64
				found bool
			}{{k1, before, false}, {k2, before, false}, {old, before, true}, {k1, at, true}, {k2, at, true}, {old, at, false}} {
				g, err := entry.kv().Get(ctx, &kvpb.GetRequest{Key: c.key, ReadTs: &c.ts})
				if err != nil || g.Found != c.found {
					t.Fatalf("get %q at %d (batch committed at %d): found=%t, %v; want found=%t", c.key, c.ts, at, g.GetFound(), err, c.found)
				}
			}
			m[string(k1)], m[string(k2)] = "b1", "b2"
			delete(m, string(old))

			// A batch the owner rejects applies none of its mutations.
			bad := regionKey(remote, entry.name+"-bad")
			_, err = entry.kv().Batch(ctx, &kvpb.BatchRequest{Mutations: []*kvpb.Mutation{
				{Op: kvpb.Mutation_OP_PUT, Key: bad, Value: []byte("x")},
				{Op: kvpb.Mutation_OP_UNSPECIFIED, Key: regionKey(remote, entry.name+"-bad2")},
			}})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("batch with an invalid op: %v, want INVALID_ARGUMENT", err)
			}
			if g, err := owners[remote].kv().Get(ctx, &kvpb.GetRequest{Key: bad}); err != nil || g.Found {
				t.Fatalf("rejected batch's put of %q is visible on the owner: found=%t, %v", bad, g.GetFound(), err)
			}
			// A batch spanning two regions is forwarded to mutation 0's
			// owner, which commits it in both.
			across, err := entry.kv().Batch(ctx, &kvpb.BatchRequest{Mutations: []*kvpb.Mutation{
				{Op: kvpb.Mutation_OP_PUT, Key: regionKey(remote, "x"), Value: []byte("x")},
				{Op: kvpb.Mutation_OP_PUT, Key: regionKey(3-remote, "x"), Value: []byte("x")},
			}})
			if err != nil || across.Region != regionName(remote) {
				t.Fatalf("batch across regions: %v, %v; want committed, region %s", across, err, regionName(remote))
			}
			m[string(regionKey(remote, "x"))] = "x"
			m[string(regionKey(3-remote, "x"))] = "x"
			checkScan(t, entry, m, nil, nil, 0)

			if n := entry.metric(t, `bellows_kv_forwarded_total{op="put"}`); n < 10 {
				t.Fatalf("%s forwarded %v puts, want ≥ 10 (two remote regions × 5 keys)", entry.name, n)
			}
		})
	}

	// A forwarded request is never forwarded again: the store answers from
	// its own regions only.
	fwd := metadata.AppendToOutgoingContext(ctx, "bellows-forwarded", "1")
	if _, err := b.kv().Get(fwd, &kvpb.GetRequest{Key: regionKey(0, "x")}); status.Code(err) != codes.OutOfRange {
		t.Fatalf("forwarded get of another store's region: %v, want OUT_OF_RANGE", err)
	}
	stream, err := b.kv().Scan(fwd, &kvpb.ScanRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.OutOfRange {
		t.Fatalf("forwarded scan of the whole key space at one store: %v, want OUT_OF_RANGE", err)
	}

	// No store serves b's regions: a's answer names the region.
	b.kill()
	key := regionKey(1, "a-store-1")
	_, err = a.kv().Get(ctx, &kvpb.GetRequest{Key: key})
	if status.Code(err) != codes.Unavailable || server.RegionOf(err) != "region-001" {
		t.Fatalf("get %q with its store down: %v (region %q), want UNAVAILABLE about region-001", key, err, server.RegionOf(err))
	}
	if g, err := a.kv().Get(ctx, &kvpb.GetRequest{Key: regionKey(2, "store-a-1")}); err != nil || !g.Found {
		t.Fatalf("a's own region-002 with b down: found=%t, %v", g.GetFound(), err)
	}

	// b back (its WAL, its address): a finds it again on the next miss.
	b = startPeerStore(t, "store-b", bucket, walB, addrB, "1/2", peers)
	waitFor(t, "a to forward to the restarted b", func() bool {
		g, err := a.kv().Get(ctx, &kvpb.GetRequest{Key: regionKey(1, "store-b-2")})
		return err == nil && g.Found && bytes.Equal(g.Value, []byte("v-"+string(regionKey(1, "store-b-2"))))
	})
	checkScan(t, a, m, nil, nil, 0)
}
