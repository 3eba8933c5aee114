package server

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/server/route"
)

// testKV serves region-000 [,g) open and region-002 [p,t) waiting for its
// previous owner, of the key space split at g, p and t; fwd turns forwarding
// on.
func testKV(t *testing.T, fwd bool) *KV {
	t.Helper()
	all, err := SplitAt([]string{"g", "p", "t"})
	if err != nil {
		t.Fatal(err)
	}
	kv := &KV{store: &Store{}}
	var live []*Assignment
	for _, sp := range (Owner{0, 2}).Owned(all) {
		live = append(live, &Assignment{Span: sp})
	}
	kv.store.snap.Store(newAssigned(live, nil))
	// resolve only asks whether a region is open; it never uses the engine.
	kv.store.Assignments()[0].eng.Store(new(region.Region))
	owned := error(&region.Error{Region: "region-002", Err: &manifest.OwnedError{Manifest: 7, Owner: "old pid 1", WALID: "w"}})
	kv.store.Assignments()[1].waiting.Store(&owned)
	if fwd {
		kv.fwd = &Forwarding{Spans: all}
	}
	return kv
}

// describe renders where a request was routed.
func describe(tg target, err error) string {
	switch {
	case err != nil:
		return fmt.Sprintf("error %v %q region=%q", status.Code(err), status.Convert(err).Message(), RegionOf(err))
	case tg.forward && tg.local != nil:
		return fmt.Sprintf("forward %s (assigned here, not open)", tg.remote.Name)
	case tg.forward:
		return "forward " + tg.remote.Name
	case tg.eng != nil:
		return "here " + tg.local.Name()
	}
	_, err = tg.engine()
	return fmt.Sprintf("here %s, not open: %v %q region=%q", tg.local.Name(), status.Code(err), status.Convert(err).Message(), RegionOf(err))
}

// Each request is routed once, to one of: this store's open region, its
// waiting region (answering why), or the owners of the key's region.
func TestResolveRoutesOnce(t *testing.T) {
	const notOpen = `not open yet, waiting for its owner to release it: region region-002: manifest: region is owned by another store: ` +
		`"old pid 1" (manifest 7, WAL w) has not released it, and its WAL may hold acknowledged writes that are in no SST; ` +
		`stop that store so it releases the region, reopen the region with that WAL, or force the takeover and forfeit them`
	const released = "region region-000: region: closed: released to another store"
	forwardedCtx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(route.ForwardedHeader, "1"))
	for _, c := range []struct {
		name string
		fwd  bool
		ctx  context.Context
		key  string
		want string
	}{
		{"open here", false, context.Background(), "a", "here region-000"},
		{"waiting here", false, context.Background(), "q", "here region-002, not open: Unavailable " + fmt.Sprintf("%q", notOpen) + ` region="region-002"`},
		{"elsewhere", false, context.Background(), "h", `error OutOfRange "key \"h\" is in no region this store serves (see Regions)" region=""`},
		{"empty key", false, context.Background(), "", `error InvalidArgument "region: key is empty" region=""`},
		{"forwarding: open here", true, context.Background(), "a", "here region-000"},
		{"forwarding: waiting here", true, context.Background(), "q", "forward region-002 (assigned here, not open)"},
		{"forwarding: elsewhere", true, context.Background(), "h", "forward region-001"},
		{"forwarding: last region", true, context.Background(), "zz", "forward region-003"},
		{"forwarding: empty key", true, context.Background(), "", `error InvalidArgument "region: key is empty" region=""`},
		{"forwarded here: elsewhere", true, forwardedCtx, "h", `error OutOfRange "key \"h\" is in no region this store serves (see Regions)" region=""`},
		{"forwarded here: waiting", true, forwardedCtx, "q", "here region-002, not open: Unavailable " + fmt.Sprintf("%q", notOpen) + ` region="region-002"`},
		{"released here", false, context.Background(), "a!", "here region-000, not open: Unavailable " + fmt.Sprintf("%q", released) + ` region="region-000"`},
		{"forwarding: released here", true, context.Background(), "a!", "forward region-000 (assigned here, not open)"},
		{"forwarded here: released", true, forwardedCtx, "a!", "here region-000, not open: Unavailable " + fmt.Sprintf("%q", released) + ` region="region-000"`},
	} {
		kv := testKV(t, c.fwd)
		if c.key == "a!" {
			// Being handed over (Store.Release).
			kv.store.Assignments()[0].released.Store(true)
			kv.store.Assignments()[0].eng.Store(nil)
		}
		if got := describe(kv.resolve(c.ctx, []byte(c.key))); got != c.want {
			t.Errorf("%s: resolve(%q) =\n  %s\nwant\n  %s", c.name, c.key, got, c.want)
		}
	}
}

func TestPrewriteKeysMustShareMutationZerosRegion(t *testing.T) {
	for _, c := range []struct {
		fwd  bool
		key  string
		want string
	}{
		{false, "b", ""},
		{false, "", `InvalidArgument "mutation 1: region: key is empty"`},
		{false, "q", `InvalidArgument "mutation 1: key \"q\" is in region region-002, mutation 0 in region-000; the keys of one region's prewrite or resolution fall in that region"`},
		{false, "h", `OutOfRange "mutation 1: key \"h\" is in no region this store serves (see Regions)"`},
		{true, "b", ""},
		{true, "h", `InvalidArgument "mutation 1: key \"h\" is in region region-001, mutation 0 in region-000; the keys of one region's prewrite or resolution fall in that region"`},
	} {
		kv := testKV(t, c.fwd)
		tg, err := kv.resolve(context.Background(), []byte("a"))
		if err != nil {
			t.Fatal(err)
		}
		// With forwarding on, mutation 0 in region-000, open here, is
		// still served here; to check the forwarded path's own check,
		// route the batch as if region-000 were another store's.
		if c.fwd {
			tg = target{forward: true, remote: kv.fwd.Spans[0]}
		}
		got := ""
		if err := kv.inRegion(1, []byte(c.key), tg); err != nil {
			got = fmt.Sprintf("%v %q", status.Code(err), status.Convert(err).Message())
		}
		if got != c.want {
			t.Errorf("forwarding=%t, mutation 1 key %q: got %s, want %s", c.fwd, c.key, got, c.want)
		}
	}
}

// An engine error is named after its region once, by type: the engine's own
// region.Error is kept, anything else is wrapped; the status carries the
// region as a detail.
func TestRegionErrNamesTheRegionOnce(t *testing.T) {
	a := &Assignment{Span: Span{Name: "region-007"}}
	for _, c := range []struct {
		err      error
		code     codes.Code
		msg      string
		inRegion string
	}{
		{region.ErrKeyTooLarge, codes.InvalidArgument, "region region-007: region: key exceeds 64 KiB", "region-007"},
		{&region.Error{Region: "region-007", Err: fmt.Errorf("compaction: %w", context.Canceled)}, codes.Canceled, "region region-007: compaction: context canceled", "region-007"},
		{&region.Error{Region: "region-007", Err: fmt.Errorf("%w: released", region.ErrCompactionAborted)}, codes.Aborted, "region region-007: region: compaction aborted: released", "region-007"},
		{&region.Error{Region: "region-007", Err: region.ErrReleasing}, codes.Unavailable, "region region-007: region: closed: released to another store", "region-007"},
		{&region.Error{Region: "region-007", Err: fmt.Errorf("%w (manifest 9 exists)", region.ErrFenced)}, codes.FailedPrecondition,
			"region region-007: " + manifest.ErrFenced.Error() + " (manifest 9 exists)", "region-007"},
		// The region's name inside the text (a file name) is not taken
		// for the region being named.
		{errors.New("sstable regions/region-007/sst/1.sst: corrupt"), codes.Internal, "region region-007: sstable regions/region-007/sst/1.sst: corrupt", "region-007"},
		{status.Error(codes.Unavailable, "from elsewhere"), codes.Unavailable, "from elsewhere", ""},
		{&region.SnapshotTooOldError{Region: "region-007", ReadTS: 5, ExactFrom: 9}, codes.FailedPrecondition,
			"region region-007: snapshot too old: a read at 5 may miss versions its retention dropped (retention.gcTTL or retention.maxVersions); reads at 9 or later are exact", "region-007"},
	} {
		err := regionErr(a, c.err)
		if status.Code(err) != c.code || status.Convert(err).Message() != c.msg || RegionOf(err) != c.inRegion {
			t.Errorf("regionErr(%v) = %v %q region=%q; want %v %q region=%q", c.err,
				status.Code(err), status.Convert(err).Message(), RegionOf(err), c.code, c.msg, c.inRegion)
		}
	}
	if err := regionErr(a, nil); err != nil {
		t.Errorf("regionErr(nil) = %v", err)
	}
	// A client tells snapshot-too-old by its reason, not by the text.
	err := regionErr(a, &region.SnapshotTooOldError{Region: "region-007", ReadTS: 5, ExactFrom: 9})
	var info *errdetails.ErrorInfo
	for _, d := range status.Convert(err).Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	if info == nil || info.Reason != contract.SnapshotTooOldReason || info.Metadata["read_ts"] != "5" || info.Metadata["exact_from_ts"] != "9" {
		t.Errorf("snapshot too old: ErrorInfo %v; want reason %s with read_ts 5 and exact_from_ts 9", info, contract.SnapshotTooOldReason)
	}
}

// A forwarded request's error is the owner's when it names the region (by
// its detail); anything else, a transport error say, gets the region and the
// peer added.
func TestPeerErrNamesRegionAndPeerOnce(t *testing.T) {
	sp := Span{Name: "region-001"}
	owners := regionStatus(codes.FailedPrecondition, "region-001", "region region-001: fenced")
	if got := peerErr(sp, "10.0.0.2:7400", owners); got != owners {
		t.Errorf("the owner's own error was rewritten: %v", got)
	}
	for _, c := range []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{status.Error(codes.Unavailable, "connection refused"), codes.Unavailable, "region-001 at store 10.0.0.2:7400: connection refused"},
		// Naming the region in the text only is not naming it.
		{status.Error(codes.Unavailable, "region-0010 is gone"), codes.Unavailable, "region-001 at store 10.0.0.2:7400: region-0010 is gone"},
		{regionStatus(codes.Unavailable, "region-002", "region region-002: closed"), codes.Unavailable, "region-001 at store 10.0.0.2:7400: region region-002: closed"},
	} {
		got := peerErr(sp, "10.0.0.2:7400", c.err)
		if status.Code(got) != c.code || status.Convert(got).Message() != c.msg || RegionOf(got) != "region-001" {
			t.Errorf("peerErr(%v) = %v %q region=%q; want %v %q region=region-001", c.err,
				status.Code(got), status.Convert(got).Message(), RegionOf(got), c.code, c.msg)
		}
	}
	if peerErr(sp, "x", nil) != nil {
		t.Error("peerErr(nil) is not nil")
	}
}
