package client

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// rangeStore is a fake store serving the regions the test gives it, over
// a map shared with the other fake stores: enough to watch how BatchGet
// groups keys and DeleteRange walks a range.
type rangeStore struct {
	kvpb.UnimplementedKVServer
	addr  string
	peers *[]string
	data  *sync.Map // string → string

	mu      sync.Mutex
	regions []*kvpb.RegionInfo
	// maxResults, when > 0, bounds a BatchGet answer's results.
	maxResults int
	// failNext fails this many calls with UNAVAILABLE.
	failNext int
	// cutAfter > 0 breaks the next scan stream after that many pairs.
	cutAfter int
	calls    []string // "BatchGet a,b" or "DeleteRange a id"
}

func (s *rangeStore) Regions(context.Context, *kvpb.RegionsRequest) (*kvpb.RegionsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &kvpb.RegionsResponse{Regions: slices.Clone(s.regions), Peers: *s.peers}, nil
}

func (s *rangeStore) region(key []byte) *kvpb.RegionInfo {
	for _, r := range s.regions {
		if bytes.Compare(key, r.Start) >= 0 && (len(r.End) == 0 || bytes.Compare(key, r.End) < 0) {
			return r
		}
	}
	return nil
}

func (s *rangeStore) record(call string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, call)
	if s.failNext > 0 {
		s.failNext--
		return status.Error(codes.Unavailable, "scripted restart")
	}
	return nil
}

func (s *rangeStore) BatchGet(_ context.Context, req *kvpb.BatchGetRequest) (*kvpb.BatchGetResponse, error) {
	var ks []string
	for _, k := range req.Keys {
		ks = append(ks, string(k))
	}
	if err := s.record("BatchGet " + strings.Join(ks, ",")); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.region(req.Keys[0])
	resp := &kvpb.BatchGetResponse{}
	for i, k := range req.Keys {
		if r == nil || s.region(k) != r {
			return nil, status.Errorf(codes.OutOfRange, "key %d not in key 0's region", i)
		}
		if s.maxResults > 0 && len(resp.Results) == s.maxResults {
			break
		}
		v, ok := s.data.Load(string(k))
		res := &kvpb.GetResponse{Found: ok}
		if ok {
			res.Value = []byte(v.(string))
		}
		resp.Results = append(resp.Results, res)
	}
	return resp, nil
}

// DeleteRange deletes at most two keys a call.
func (s *rangeStore) DeleteRange(ctx context.Context, req *kvpb.DeleteRangeRequest) (*kvpb.DeleteRangeResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if err := s.record(fmt.Sprintf("DeleteRange %s %s", req.Start, md.Get(contract.RequestIDHeader))); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.region(req.Start)
	if r == nil {
		return nil, status.Error(codes.OutOfRange, "not here")
	}
	var keys []string
	s.data.Range(func(k, _ any) bool {
		kb := []byte(k.(string))
		if bytes.Compare(kb, req.Start) >= 0 && (len(req.End) == 0 || bytes.Compare(kb, req.End) < 0) && s.region(kb) == r {
			keys = append(keys, k.(string))
		}
		return true
	})
	slices.Sort(keys)
	resp := &kvpb.DeleteRangeResponse{Region: r.Name, CommitTs: 7}
	if len(keys) > 2 {
		resp.Resume = []byte(keys[2])
		keys = keys[:2]
	} else if len(r.End) > 0 && (len(req.End) == 0 || bytes.Compare(r.End, req.End) < 0) {
		resp.Resume = r.End
	}
	for _, k := range keys {
		s.data.Delete(k)
	}
	resp.Deleted = uint64(len(keys))
	return resp, nil
}

func (s *rangeStore) takeCalls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls
	s.calls = nil
	return c
}

// startRangeStores starts n fake stores listing each other as peers,
// store i serving regions[i], and a client seeded with the first.
func startRangeStores(t *testing.T, data map[string]string, regions ...[]*kvpb.RegionInfo) (*Client, []*rangeStore) {
	t.Helper()
	var m sync.Map
	for k, v := range data {
		m.Store(k, v)
	}
	peers := new([]string)
	var stores []*rangeStore
	for _, rs := range regions {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := &rangeStore{addr: lis.Addr().String(), peers: peers, data: &m, regions: rs}
		srv := grpc.NewServer()
		kvpb.RegisterKVServer(srv, s)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		*peers = append(*peers, s.addr)
		stores = append(stores, s)
	}
	c, err := New(bounded(t), []string{stores[0].addr}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, stores
}

func render(res []GetResult) string {
	var out []string
	for _, r := range res {
		v := "-"
		if r.Found {
			v = string(r.Value)
		}
		out = append(out, string(r.Key)+"="+v)
	}
	return strings.Join(out, " ")
}

func bkeys(ks ...string) [][]byte {
	out := make([][]byte, len(ks))
	for i, k := range ks {
		out[i] = []byte(k)
	}
	return out
}

// One call per region, to its owner, the results in the keys' order.
func TestBatchGetGroupsKeysByRegion(t *testing.T) {
	c, s := startRangeStores(t, map[string]string{"a": "1", "b": "2", "n": "3", "z": "4"},
		[]*kvpb.RegionInfo{{Name: "region-000", End: []byte("m")}},
		[]*kvpb.RegionInfo{{Name: "region-001", Start: []byte("m")}})
	res, err := c.BatchGet(bounded(t), bkeys("z", "a", "x", "b", "n", "a"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := render(res), "z=4 a=1 x=- b=2 n=3 a=1"; got != want {
		t.Fatalf("BatchGet = %s, want %s", got, want)
	}
	if got, want := s[0].takeCalls(), []string{"BatchGet a,b,a"}; !slices.Equal(got, want) {
		t.Fatalf("store 0 calls %q, want %q", got, want)
	}
	if got, want := s[1].takeCalls(), []string{"BatchGet z,x,n"}; !slices.Equal(got, want) {
		t.Fatalf("store 1 calls %q, want %q", got, want)
	}
	if _, err := c.BatchGet(bounded(t), bkeys("a", "")); err == nil || !strings.Contains(err.Error(), "key 1") {
		t.Fatalf("BatchGet of an empty key: %v", err)
	}
}

// A region that split since the client learned the table: the call
// spanning both halves fails OUT_OF_RANGE, the client refreshes and
// regroups, and an answer holding the first keys only is completed.
func TestBatchGetRegroupsAfterASplitAndCompletesPartialAnswers(t *testing.T) {
	c, s := startRangeStores(t, map[string]string{"a": "1", "b": "2", "n": "3", "z": "4"},
		[]*kvpb.RegionInfo{{Name: "region-000"}}, nil)
	s[0].mu.Lock()
	s[0].regions = []*kvpb.RegionInfo{{Name: "region-000", End: []byte("m")}}
	s[0].maxResults = 1
	s[0].mu.Unlock()
	s[1].mu.Lock()
	s[1].regions = []*kvpb.RegionInfo{{Name: "region-001", Start: []byte("m")}}
	s[1].mu.Unlock()
	res, err := c.BatchGet(bounded(t), bkeys("a", "z", "b", "n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := render(res), "a=1 z=4 b=2 n=3"; got != want {
		t.Fatalf("BatchGet = %s, want %s", got, want)
	}
	// OUT_OF_RANGE (z is not in region-000 any more), then the
	// region-000 keys one answer at a time.
	if got, want := s[0].takeCalls(), []string{"BatchGet a,z,b,n", "BatchGet a,b", "BatchGet b"}; !slices.Equal(got, want) {
		t.Fatalf("store 0 calls %q, want %q", got, want)
	}
	if got, want := s[1].takeCalls(), []string{"BatchGet z,n"}; !slices.Equal(got, want) {
		t.Fatalf("store 1 calls %q, want %q", got, want)
	}
}

// DeleteRange follows resume through batches and regions; each call has its
// own idempotency key, the same on its retries.
func TestDeleteRangeFollowsResumeAcrossRegions(t *testing.T) {
	data := map[string]string{}
	for _, k := range []string{"a", "b", "c", "d", "e", "n", "o", "z"} {
		data[k] = "v"
	}
	c, s := startRangeStores(t, data,
		[]*kvpb.RegionInfo{{Name: "region-000", End: []byte("m")}},
		[]*kvpb.RegionInfo{{Name: "region-001", Start: []byte("m")}})
	s[0].mu.Lock()
	s[0].failNext = 1
	s[0].mu.Unlock()
	res, err := c.DeleteRange(bounded(t), []byte("b"), []byte("y"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 6 || len(res.Commits) != 3 || res.Commits[2].Region != "region-001" {
		t.Fatalf("DeleteRange [b, y) = %+v, want 6 deleted in 3 commits, the last in region-001", res)
	}
	calls := s[0].takeCalls()
	if len(calls) != 3 || calls[0] != calls[1] || !strings.HasPrefix(calls[0], "DeleteRange b [") || !strings.HasPrefix(calls[2], "DeleteRange d [") || calls[2][len("DeleteRange d"):] == calls[0][len("DeleteRange b"):] {
		t.Fatalf("store 0 calls %q: want b twice with one id (a retry), then d with another", calls)
	}
	if got := s[1].takeCalls(); len(got) != 1 || !strings.HasPrefix(got[0], "DeleteRange m ") {
		t.Fatalf("store 1 calls %q, want one from m", got)
	}
	var left []string
	s[0].data.Range(func(k, _ any) bool { left = append(left, k.(string)); return true })
	slices.Sort(left)
	if got := strings.Join(left, " "); got != "a z" {
		t.Fatalf("left %q, want a z", got)
	}
	res, err = c.DeletePrefix(bounded(t), []byte("z"))
	if err != nil || res.Deleted != 1 {
		t.Fatalf("DeletePrefix z = %+v, %v", res, err)
	}
	if _, err := c.DeleteRange(bounded(t), []byte("b"), []byte("a")); err == nil {
		t.Fatal("an inverted range was accepted")
	}
}
