package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// versionedModel is every acknowledged version of every key, by commit
// timestamp: what a read at any timestamp must answer (retention keeps
// every version by default).
type versionedModel map[string][]modelVersion

type modelVersion struct {
	ts      uint64
	value   string
	deleted bool
}

func (m versionedModel) at(key string, ts uint64) (string, bool) {
	vs := m[key]
	for i := len(vs) - 1; i >= 0; i-- {
		if vs[i].ts <= ts {
			return vs[i].value, !vs[i].deleted
		}
	}
	return "", false
}

func (m versionedModel) record(key string, ts uint64, value string, deleted bool) {
	m[key] = append(m[key], modelVersion{ts, value, deleted})
}

// A randomized model test of splits and merges: puts, deletes,
// single-region batches, reads at the newest and at past timestamps, and
// scans, interleaved with splits by size and by a random key, merges of
// two adjacent regions, flushes, compactions (major, and minor: a merged
// region's first is a major one) and store restarts, each step checked
// against a model of every acknowledged version. Seeds: BELLOWS_SEED, else
// a fixed few.
func TestRandomSplitsAnswerLikeTheModel(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	if s := os.Getenv("BELLOWS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seeds = []uint64{n}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { runSplitModel(t, seed, 800) })
	}
}

func runSplitModel(t *testing.T, seed uint64, steps int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, seed))
	c := newMapCluster(t)
	s := c.open(t, 0)
	kv := NewKV(s, nil, nil)
	model := versionedModel{}
	var stamps []uint64 // commit timestamps seen, for historical reads
	key := func() string { return fmt.Sprintf("k%04d", rng.IntN(600)) }
	ok := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("seed %d: %s: %v", seed, what, err)
		}
	}
	splits, merges, restarts := 0, 0, 0
	for step := range steps {
		switch op := rng.IntN(100); {
		case op < 40:
			k, v := key(), fmt.Sprintf("v%d-%0200d", step, step)
			res, err := kv.Put(ctx, &kvpb.PutRequest{Key: []byte(k), Value: []byte(v)})
			ok("put", err)
			model.record(k, res.CommitTs, v, false)
			stamps = append(stamps, res.CommitTs)
		case op < 48:
			k := key()
			res, err := kv.Delete(ctx, &kvpb.DeleteRequest{Key: []byte(k)})
			ok("delete", err)
			model.record(k, res.CommitTs, "", true)
			stamps = append(stamps, res.CommitTs)
		case op < 55:
			// A batch within the first key's region.
			first := key()
			span := s.Route([]byte(first)).Span
			ks := []string{first}
			for range 4 {
				if k := key(); span.Contains([]byte(k)) && !slices.Contains(ks, k) {
					ks = append(ks, k)
				}
			}
			req := &kvpb.BatchRequest{}
			for _, k := range ks {
				req.Mutations = append(req.Mutations, &kvpb.Mutation{Op: kvpb.Mutation_OP_PUT, Key: []byte(k), Value: []byte(fmt.Sprintf("b%d-%s", step, k))})
			}
			res, err := kv.Batch(ctx, req)
			ok("batch", err)
			for _, k := range ks {
				model.record(k, res.CommitTs, fmt.Sprintf("b%d-%s", step, k), false)
			}
			stamps = append(stamps, res.CommitTs)
		case op < 70:
			k := key()
			var ts *uint64
			if len(stamps) > 0 && rng.IntN(2) == 0 {
				at := stamps[rng.IntN(len(stamps))]
				ts = &at
			}
			res, err := kv.Get(ctx, &kvpb.GetRequest{Key: []byte(k), ReadTs: ts})
			ok("get", err)
			want, found := model.at(k, ^uint64(0))
			if ts != nil {
				want, found = model.at(k, *ts)
			}
			if res.Found != found || string(res.Value) != want {
				t.Fatalf("seed %d step %d: get %s at %v = %q (found %v), model %q (found %v)", seed, step, k, ts, res.Value, res.Found, want, found)
			}
		case op < 80:
			a, b := key(), key()
			if a > b {
				a, b = b, a
			}
			sink := &scanSink{ctx: ctx}
			ok("scan", kv.Scan(&kvpb.ScanRequest{Start: []byte(a), End: []byte(b)}, sink))
			var want []string
			for k := range model {
				if _, found := model.at(k, ^uint64(0)); found && k >= a && k < b {
					want = append(want, k)
				}
			}
			slices.Sort(want)
			if !slices.Equal(sink.keys, want) {
				t.Fatalf("seed %d step %d: scan [%s, %s) = %d keys, model %d", seed, step, a, b, len(sink.keys), len(want))
			}
		case op < 86:
			as := s.Assignments()
			name := as[rng.IntN(len(as))].Name()
			var err error
			if rng.IntN(2) == 0 {
				_, err = s.Split(ctx, name)
			} else {
				_, err = s.SplitAt(ctx, name, []byte(key()))
			}
			// A region too small to halve, or a key not strictly
			// inside it, is refused and left whole.
			if err == nil {
				splits++
			}
		case op < 91:
			// Two adjacent regions (by key order, as the assignment
			// lists them) merge.
			as := s.Assignments()
			if len(as) < 2 {
				break
			}
			i := rng.IntN(len(as) - 1)
			before := s.Merges()
			_, err := s.Merge(ctx, as[i].Name(), as[i+1].Name())
			ok("merge", err)
			merges++
			if s.Merges() != before+1 {
				t.Fatalf("seed %d step %d: Merges() = %d after one more merge than %d", seed, step, s.Merges(), before)
			}
		case op < 94:
			for _, a := range s.Assignments() {
				if e, err := a.Engine(); err == nil {
					ok("flush", e.Flush(ctx))
				}
			}
		case op < 97:
			as := s.Assignments()
			if e, err := as[rng.IntN(len(as))].Engine(); err == nil {
				_, err := e.Compact(ctx, rng.IntN(2) == 0)
				ok("compact", err)
			}
		default:
			ok("close", s.Close())
			s = c.open(t, 0)
			kv = NewKV(s, nil, nil)
			restarts++
		}
	}
	// Everything once more, after a last restart.
	ok("close", s.Close())
	s = c.open(t, 0)
	kv = NewKV(s, nil, nil)
	for k := range model {
		want, found := model.at(k, ^uint64(0))
		res, err := kv.Get(ctx, &kvpb.GetRequest{Key: []byte(k)})
		ok("final get", err)
		if res.Found != found || string(res.Value) != want {
			t.Fatalf("seed %d: final get %s = %q (found %v), model %q (found %v)", seed, k, res.Value, res.Found, want, found)
		}
	}
	if splits == 0 || merges == 0 {
		t.Fatalf("seed %d: %d splits and %d merges succeeded in %d steps: the test did not exercise both", seed, splits, merges, steps)
	}
	t.Logf("seed %d: %d steps, %d splits, %d merges, %d restarts, %d regions", seed, steps, splits, merges, restarts, len(s.Assignments()))
}
