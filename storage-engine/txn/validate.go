package txn

// A serializable transaction's read validation (docs/transactions.md,
// "Serializable"). Snapshot isolation already makes a committed
// transaction's writes atomic at its commit timestamp and refuses two
// overlapping writers of a key. What it allows is a transaction whose reads
// were overwritten between its start and its commit (write skew, and with
// scans, phantoms). Validating the reads at the commit timestamp closes
// that gap, as CockroachDB's read refresh does: after the prewrite, with the
// commit timestamp chosen and before the commit point, each region holding
// a read
//
//  1. is made readable at the commit timestamp (region.ReadableAt): its
//     clock passes it, so no later commit there gets a timestamp at or
//     below it, and every commit at or below it is visible;
//  2. is read at the start timestamp with an uncertainty window up to the
//     commit timestamp: a version in (start, commit] of a read key, or in
//     a read range, fails the commit (READ_CONFLICT); so does another
//     transaction's lock there (it may commit at or below the commit
//     timestamp) that resolving does not clear, and a value read live at
//     the start that expires at or before the commit
//     (region.Uncertainty.LiveThrough): a read at the commit would not
//     return it. The transaction's own locks, named by its start and
//     primary key, are passed (region.Uncertainty.Own).
//
// Then every read of the transaction returns what a read at the commit
// timestamp would, and its writes commit at that timestamp: it is as if it
// ran alone there. Read-only transactions read one snapshot and need none
// of this.

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"strconv"

	"golang.org/x/sync/errgroup"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/region"
)

// ReadConflictStatus is ABORTED for a read a serializable transaction made
// at startTS that a commit at committedTS overwrote: reason READ_CONFLICT,
// naming the key and the commit.
func ReadConflictStatus(key []byte, startTS, committedTS uint64) error {
	return readConflict(key, committedTS, "serializable transaction started at %d: key %q, which it read, was written at %d, before the transaction could commit: run it again",
		startTS, key, committedTS)
}

// readExpiredStatus is ABORTED READ_CONFLICT for a value a serializable
// transaction read at startTS that expires at expiry, before the commit
// at commitTS; committed_ts is the expiry.
func readExpiredStatus(key []byte, startTS, expiry, commitTS uint64) error {
	return readConflict(key, expiry, "serializable transaction started at %d: the value of key %q it read expires at %d, before the transaction's commit at %d: run it again",
		startTS, key, expiry, commitTS)
}

func readConflict(key []byte, committedTS uint64, format string, args ...any) error {
	st := status.Newf(codes.Aborted, format, args...)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: contract.ReadConflictReason, Domain: contract.ErrorDomain, Metadata: map[string]string{
		"key_base64":   base64.StdEncoding.EncodeToString(key),
		"committed_ts": strconv.FormatUint(committedTS, 10),
	}}); err == nil {
		st = d
	}
	return st.Err()
}

// validateReads validates reads (spans of keys) of the transaction
// started at startTS with primary key primary for a commit at commitTS, in every region they
// cover, in parallel.
func (c *Coordinator) validateReads(ctx context.Context, startTS, commitTS uint64, primary []byte, reads []*kvpb.KeySpan) error {
	type group struct {
		region Region
		spans  []*kvpb.KeySpan
	}
	var groups []*group
	byName := map[string]*group{}
	for _, sp := range reads {
		from := sp.Start
		if len(from) == 0 {
			from = []byte{0} // the empty key is no key: the same keys
		}
		for {
			r, err := c.store.Route(ctx, from)
			if err != nil {
				return err
			}
			_, rEnd := r.Bounds()
			piece := &kvpb.KeySpan{Start: from, End: sp.End}
			if len(rEnd) > 0 && (len(sp.End) == 0 || bytes.Compare(rEnd, sp.End) < 0) {
				piece.End = rEnd
			}
			g := byName[r.Name()]
			if g == nil {
				g = &group{region: r}
				byName[r.Name()] = g
				groups = append(groups, g)
			}
			g.spans = append(g.spans, piece)
			if len(piece.End) == 0 || bytes.Equal(piece.End, sp.End) {
				break
			}
			from = piece.End
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, grp := range groups {
		g.Go(func() error {
			return c.ValidateReads(gctx, grp.region, &kvpb.ValidateReadsRequest{StartTs: startTS, CommitTs: commitTS, Primary: primary, Reads: grp.spans})
		})
	}
	return g.Wait()
}

// ValidateReads validates req's reads, all in region r, here or at r's
// owners (see the top of this file).
func (c *Coordinator) ValidateReads(ctx context.Context, r Region, req *kvpb.ValidateReadsRequest) error {
	if p := r.Peer(); p != nil {
		return p.ValidateReads(ctx, req)
	}
	e, err := r.Engine()
	if err != nil {
		return err
	}
	if err := e.ReadableAt(req.CommitTs); err != nil {
		return r.Status(err)
	}
	u := region.Uncertainty{Limit: req.CommitTs, Own: region.TxnID{StartTS: req.StartTs, Primary: req.Primary}, LiveThrough: req.CommitTs}
	// Never waiting for another transaction, which could be waiting for
	// this one's locks: a lock still being committed ends the validation.
	err = c.resolver.withLocks(ctx, r, func() error {
		for _, sp := range req.Reads {
			if err := validateSpan(ctx, e, sp, req.StartTs, u); err != nil {
				return err
			}
		}
		return nil
	}, false)
	var ue *region.UncertainError
	if errors.As(err, &ue) {
		return ReadConflictStatus(ue.Key, req.StartTs, ue.TS)
	}
	var ee *region.ExpiredError
	if errors.As(err, &ee) {
		return readExpiredStatus(ee.Key, req.StartTs, ee.Expiry, req.CommitTs)
	}
	var le *region.LockedError
	if errors.As(err, &le) {
		// A transaction still running holds a lock on a read key: it may
		// commit at or below this commit.
		return ReadConflictStatus(le.Key, req.StartTs, le.Lock.StartTS)
	}
	if err != nil {
		return r.Status(err)
	}
	return nil
}

// validateSpan reads sp in e at startTS with uncertainty u: an
// *UncertainError names a version in the window, an *ExpiredError a value
// that does not live through it.
func validateSpan(ctx context.Context, e *region.Region, sp *kvpb.KeySpan, startTS uint64, u region.Uncertainty) error {
	if isOneKey(sp) {
		_, _, err := e.GetUncertain(ctx, sp.Start, startTS, u)
		return err
	}
	it, err := e.NewIteratorUncertain(ctx, sp.Start, sp.End, startTS, u)
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		// Nothing to do with the pairs: the window is checked at every
		// version the iteration meets (Err).
	}
	return it.Err()
}

// isOneKey reports whether sp is one key's: [k, k+"\x00").
func isOneKey(sp *kvpb.KeySpan) bool {
	return len(sp.End) == len(sp.Start)+1 && sp.End[len(sp.Start)] == 0 && bytes.HasPrefix(sp.End, sp.Start)
}
