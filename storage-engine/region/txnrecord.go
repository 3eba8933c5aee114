package region

// The WAL record of transaction state (txnRecord): how a prewrite's locks,
// a resolution's versions and a primary's outcome become durable and
// visible (writeTxnRecord), and its encoding, which replay.go decodes.
//
// # Invariants
//
//   - A record is durable before its effects are applied: a lock before
//     Prewrite returns, a commit's versions before they are visible. The
//     flush of the memstore that was active when it was written carries it
//     into the manifest (txnRecs, manifestTxnState), and the WAL keeps its
//     segment until then (txnMinTS).
//   - Every record has its own timestamp L from the region's clock, in WAL
//     order like a batch's: FlushedTS and WAL truncation count L. A commit
//     moves the clock past its commit timestamp first, so no later write
//     of its keys gets an older timestamp than its versions.
//   - Applying a record is idempotent, so a replay may meet a record whose
//     effects the manifest already holds.
//
// # Lock order
//
// writeTxnRecord is called with the latches of every key the record names;
// it takes commitMu (commitRecord), releases it, then resolveMu around the
// versions and the state change (locks.go).

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"

	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/manifest"
)

// txnRecord is one WAL record of transaction state: locks added, locks
// removed, the versions a commit writes (at commitTS), an outcome decided,
// outcomes forgotten. Applying it is idempotent.
type txnRecord struct {
	locks    []manifest.TxnLock
	unlocks  []lockRef
	commitTS uint64
	versions []op // at commitTS
	// late: the versions commit locks left behind (CommitLeftLocks), as
	// they do if caller (a coordinator's request) has ended when they
	// apply. In memory only: a reopened region narrows no observation from
	// before it opened.
	late    bool
	caller  context.Context
	outcome *manifest.TxnOutcome
	forget  []lockRef // start timestamp and primary
}

type lockRef struct {
	key     []byte
	startTS uint64
}

// txnRecordFlag marks a WAL record as a txnRecord: a batch record starts
// with its timestamp, and timestamps (Unix nanoseconds) stay below 2^63.
const txnRecordFlag = uint64(1) << 63

func (rec *txnRecord) encodedLen() int {
	n := 8 + 5*10
	for _, l := range rec.locks {
		n += 4*10 + 1 + len(l.Key) + len(l.Primary) + len(l.Value)
	}
	for _, u := range rec.unlocks {
		n += 2*10 + len(u.key)
	}
	for _, o := range rec.versions {
		n += 1 + 2*10 + len(o.key) + len(o.value)
	}
	if rec.outcome != nil {
		n += 4*10 + 2 + len(rec.outcome.Primary) + len(rec.outcome.RequestID)
	}
	for _, f := range rec.forget {
		n += 2*10 + len(f.key)
	}
	return n + 3*10 + 1
}

func (rec *txnRecord) encode(buf []byte, ts uint64) []byte {
	putBytes := func(b []byte) {
		buf = binary.AppendUvarint(buf, uint64(len(b)))
		buf = append(buf, b...)
	}
	buf = binary.LittleEndian.AppendUint64(buf, txnRecordFlag|ts)
	buf = binary.AppendUvarint(buf, uint64(len(rec.locks)))
	for _, l := range rec.locks {
		putBytes(l.Key)
		putBytes(l.Primary)
		switch {
		case l.Delete:
			buf = append(buf, 1)
		case l.Expiring:
			buf = append(buf, 2)
		default:
			buf = append(buf, 0)
		}
		putBytes(l.Value)
		buf = binary.AppendUvarint(buf, l.StartTS)
		buf = binary.AppendVarint(buf, l.ExpiresAt)
	}
	buf = binary.AppendUvarint(buf, uint64(len(rec.unlocks)))
	for _, u := range rec.unlocks {
		putBytes(u.key)
		buf = binary.AppendUvarint(buf, u.startTS)
	}
	buf = binary.AppendUvarint(buf, rec.commitTS)
	buf = binary.AppendUvarint(buf, uint64(len(rec.versions)))
	for _, o := range rec.versions {
		buf = append(buf, byte(o.kind))
		putBytes(o.key)
		putBytes(o.value)
	}
	if rec.outcome != nil {
		buf = append(buf, 1)
		buf = binary.AppendUvarint(buf, rec.outcome.StartTS)
		putBytes(rec.outcome.Primary)
		buf = binary.AppendUvarint(buf, rec.outcome.CommitTS)
		buf = binary.AppendVarint(buf, rec.outcome.DecidedAt)
		putBytes([]byte(rec.outcome.RequestID))
		if rec.outcome.Resolved {
			buf = append(buf, 1)
		} else {
			buf = append(buf, 0)
		}
	} else {
		buf = append(buf, 0)
	}
	buf = binary.AppendUvarint(buf, uint64(len(rec.forget)))
	for _, f := range rec.forget {
		buf = binary.AppendUvarint(buf, f.startTS)
		putBytes(f.key)
	}
	return buf
}

var errBadTxnRecord = errors.New("region: malformed WAL transaction record")

// isTxnRecord reports whether a WAL record is a txnRecord.
func isTxnRecord(rec []byte) bool {
	return len(rec) >= 8 && binary.LittleEndian.Uint64(rec)&txnRecordFlag != 0
}

func decodeTxnRecord(p []byte) (uint64, *txnRecord, error) {
	if !isTxnRecord(p) {
		return 0, nil, errBadTxnRecord
	}
	ts := binary.LittleEndian.Uint64(p) &^ txnRecordFlag
	p = p[8:]
	bad := false
	uv := func() uint64 {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			bad = true
			return 0
		}
		p = p[n:]
		return v
	}
	sv := func() int64 {
		v, n := binary.Varint(p)
		if n <= 0 {
			bad = true
			return 0
		}
		p = p[n:]
		return v
	}
	bs := func() []byte {
		l := uv()
		if bad || uint64(len(p)) < l {
			bad = true
			return nil
		}
		b := bytes.Clone(p[:l])
		p = p[l:]
		return b
	}
	byt := func() byte {
		if len(p) < 1 {
			bad = true
			return 0
		}
		b := p[0]
		p = p[1:]
		return b
	}
	rec := &txnRecord{}
	for n := uv(); !bad && n > 0; n-- {
		l := manifest.TxnLock{Key: bs(), Primary: bs()}
		switch byt() {
		case 0:
		case 1:
			l.Delete = true
		case 2:
			l.Expiring = true
		default:
			// A kind this version does not know: committing it as a
			// plain value would write what no one asked for.
			bad = true
		}
		l.Value = bs()
		if l.Expiring && kv.ValidExpiring(l.Value) != nil {
			bad = true
		}
		l.StartTS, l.ExpiresAt = uv(), sv()
		rec.locks = append(rec.locks, l)
	}
	for n := uv(); !bad && n > 0; n-- {
		rec.unlocks = append(rec.unlocks, lockRef{key: bs(), startTS: uv()})
	}
	rec.commitTS = uv()
	for n := uv(); !bad && n > 0; n-- {
		o := op{kind: kv.Kind(byt()), key: bs(), value: bs()}
		if o.kind != kv.KindSet && o.kind != kv.KindDelete && (o.kind != kv.KindSetExpiring || kv.ValidExpiring(o.value) != nil) {
			bad = true
		}
		rec.versions = append(rec.versions, o)
	}
	if byt() == 1 {
		rec.outcome = &manifest.TxnOutcome{StartTS: uv(), Primary: bs(), CommitTS: uv(), DecidedAt: sv(), RequestID: string(bs()), Resolved: byt() == 1}
	}
	for n := uv(); !bad && n > 0; n-- {
		rec.forget = append(rec.forget, lockRef{startTS: uv(), key: bs()})
	}
	if bad {
		return 0, nil, errBadTxnRecord
	}
	return ts, rec, nil
}

// writeTxnRecord makes rec durable, adds its versions to the memstore at
// rec.commitTS and applies it to the region's transaction state, in that
// order. The caller holds the latches of every key rec names. It returns
// the record's timestamp L.
func (r *Region) writeTxnRecord(rec *txnRecord) (uint64, error) {
	// The clock moves past the commit timestamp first (floor), so no later
	// write of these keys gets an older timestamp than their committed
	// version.
	ts, seg, err := r.commitRecord(rec.commitTS, rec.encodedLen(), rec.encode, func(mt *memTable, ts uint64) {
		mt.txnRecs = append(mt.txnRecs, rec)
		mt.txnMinTS.CompareAndSwap(0, ts)
	})
	if err != nil {
		return 0, err
	}
	if len(rec.versions) > 0 {
		r.txnVersions.Store(true)
	}
	// Versions, then the locks' removal, excluded from the reads' lock
	// checks (acquireUnlocked).
	r.resolveMu.Lock()
	for _, o := range rec.versions {
		seg.Add(kv.InternalKey{UserKey: o.key, TS: rec.commitTS, Kind: o.kind}, o.value)
	}
	r.feeds.publish(rec.versions, rec.commitTS)
	r.txn.apply(rec)
	if len(rec.versions) > 0 && (rec.late || (rec.caller != nil && rec.caller.Err() != nil)) {
		r.noteLateCommit(ts, rec.commitTS)
	}
	r.resolveMu.Unlock()
	seg.EndWrite()
	r.vis.done(ts)
	if len(rec.versions) > 0 {
		r.stats.recordWrite(len(rec.versions))
	}
	return ts, nil
}
