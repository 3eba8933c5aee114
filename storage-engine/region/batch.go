package region

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// Batch is a set of writes applied atomically with one commit timestamp.
type Batch struct {
	ops   []op
	bytes int
	req   *Request
	// cond, when set, makes the batch conditional (If).
	cond *Condition
	// badTTL is the first write with a time to live that is not
	// positive, refused by validate.
	badTTL error
	// data is room reserved by Grow for the ops' copied keys and values:
	// a batch of known size costs two allocations, not two per write (the
	// writes' garbage sets the pace of the GC, which stalls readers).
	// Grow starts a new buffer rather than growing this one, so the ops
	// carved from an earlier one keep their bytes.
	data []byte
}

// Request is the idempotency key of the request a batch applies (the
// server's dedupe table). The region writes it into the batch's WAL record,
// so a replay after a crash tells which requests the replayed writes
// applied (ReplayedRequests) and a retry of one is not applied twice.
type Request struct {
	ID          string
	Fingerprint uint64
}

// AppliedRequest is a replayed batch's Request and commit timestamp.
type AppliedRequest struct {
	Request
	CommitTS uint64
}

// WithRequest records req (nil: none) with the batch.
func (b *Batch) WithRequest(req *Request) *Batch {
	b.req = req
	return b
}

// If makes the batch commit only if c holds (compare-and-set; see
// Condition). c's key must be one of the batch's; key and value are copied.
func (b *Batch) If(c Condition) *Batch {
	c.Key = bytes.Clone(c.Key)
	if c.Value != nil {
		c.Value = append([]byte{}, c.Value...)
	}
	b.cond = &c
	return b
}

type op struct {
	kind  kv.Kind
	key   []byte
	value []byte
}

// Put adds a write of value to key. Key and value are copied.
func (b *Batch) Put(key, value []byte) *Batch {
	kvBytes := b.copyOf(key, value)
	b.ops = append(b.ops, op{kind: kv.KindSet, key: kvBytes[:len(key):len(key)], value: kvBytes[len(key):]})
	b.bytes += len(key) + len(value)
	return b
}

// PutExpiring adds a write of value to key that expires ttl after its
// commit timestamp (kv.KindSetExpiring): reads at or after that time see
// no value. ttl must be positive (ErrInvalidTTL). Key and value are copied.
func (b *Batch) PutExpiring(key, value []byte, ttl time.Duration) *Batch {
	stored := kv.ExpiringValue(ttl, value)
	kvBytes := b.copyOf(key, stored)
	b.ops = append(b.ops, op{kind: kv.KindSetExpiring, key: kvBytes[:len(key):len(key)], value: kvBytes[len(key):]})
	b.bytes += len(key) + len(stored)
	if ttl <= 0 && b.badTTL == nil {
		b.badTTL = fmt.Errorf("%w: the write of key %q has a time to live of %v; it must be positive", ErrInvalidTTL, key, ttl)
	}
	return b
}

// ErrInvalidTTL is a write whose time to live is not positive.
var ErrInvalidTTL = errors.New("region: invalid time to live")

// Delete adds a tombstone for key.
func (b *Batch) Delete(key []byte) *Batch {
	k := b.copyOf(key, nil)
	b.ops = append(b.ops, op{kind: kv.KindDelete, key: k})
	b.bytes += len(key)
	return b
}

// Grow reserves room for n more writes whose keys and values come to
// size bytes together, so that adding them allocates nothing more.
func (b *Batch) Grow(n, size int) *Batch {
	b.ops = slices.Grow(b.ops, n)
	if cap(b.data)-len(b.data) < size {
		b.data = make([]byte, 0, size)
	}
	return b
}

// copyOf copies key and value, adjacent, into the room Grow reserved, or
// else into one allocation of their own. The result's capacity ends with
// it: appending to an op's key or value cannot reach the next op's bytes.
func (b *Batch) copyOf(key, value []byte) []byte {
	n := len(key) + len(value)
	if n == 0 || cap(b.data)-len(b.data) < n {
		return append(append(make([]byte, 0, n), key...), value...)
	}
	at := len(b.data)
	b.data = append(append(b.data, key...), value...)
	return b.data[at:len(b.data):len(b.data)]
}

// Len is the number of writes in the batch.
func (b *Batch) Len() int { return len(b.ops) }

func (b *Batch) validate(maxValue, maxBatch int) error {
	if len(b.ops) == 0 {
		return ErrEmptyBatch
	}
	if b.bytes > maxBatch {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrBatchTooLarge, b.bytes, maxBatch)
	}
	if b.badTTL != nil {
		return b.badTTL
	}
	if b.cond != nil {
		if err := b.cond.validate(b); err != nil {
			return err
		}
	}
	for i, o := range b.ops {
		if err := validateKey(o.key); err != nil {
			return fmt.Errorf("batch op %d: %w", i, err)
		}
		n := len(o.value)
		if o.kind == kv.KindSetExpiring {
			n -= kv.TTLLen // the stored TTL is not the user's value
		}
		if n > maxValue {
			return fmt.Errorf("batch op %d: %w: %d bytes, limit %d", i, ErrValueTooLarge, n, maxValue)
		}
	}
	return nil
}

func validateKey(k []byte) error {
	if len(k) == 0 {
		return ErrEmptyKey
	}
	if len(k) > MaxKeySize {
		return fmt.Errorf("%w: %d bytes", ErrKeyTooLarge, len(k))
	}
	return nil
}

// dedupe drops every op that a later op of the same batch overrides: all
// ops share one timestamp, so a key can have only one version in the batch.
// The survivors keep their order. It sorts the ops' indexes by key rather
// than filling a map of the keys: a batch of a hundred writes costs no
// allocation, where the map cost one per key.
func (b *Batch) dedupe() {
	n := len(b.ops)
	if n < 2 {
		return
	}
	var room [128]int32
	idx := room[:0]
	if n > len(room) {
		idx = make([]int32, 0, n)
	}
	for i := range n {
		idx = append(idx, int32(i))
	}
	slices.SortFunc(idx, func(x, y int32) int {
		if c := bytes.Compare(b.ops[x].key, b.ops[y].key); c != 0 {
			return c
		}
		return cmp.Compare(x, y)
	})
	// An op is overridden when the next in key order (a later one, as
	// ties order by index) has its key.
	var overridden []bool
	for i := 1; i < n; i++ {
		if bytes.Equal(b.ops[idx[i-1]].key, b.ops[idx[i]].key) {
			if overridden == nil {
				overridden = make([]bool, n)
			}
			overridden[idx[i-1]] = true
		}
	}
	if overridden == nil {
		return
	}
	out := b.ops[:0]
	for i, o := range b.ops {
		if !overridden[i] {
			out = append(out, o)
		}
	}
	b.ops = out
}

// encodedLen bounds the size of the encoded batch.
func (b *Batch) encodedLen() int {
	n := 8 + 10 + b.bytes + len(b.ops)*21
	if b.req != nil {
		n += 10 + len(b.req.ID) + 8
	}
	return n
}

// requestRecordFlag marks a batch record that carries its Request after
// the timestamp (timestamps stay below 2^62 until the year 2116;
// txnRecordFlag is the bit above).
const requestRecordFlag = uint64(1) << 62

// encode appends the WAL record to buf: ts (with requestRecordFlag if the
// batch has a Request, then the request's id and fingerprint), count, then
// (kind, key, value) per op.
func (b *Batch) encode(buf []byte, ts uint64) []byte {
	if b.req == nil {
		buf = binary.LittleEndian.AppendUint64(buf, ts)
	} else {
		buf = binary.LittleEndian.AppendUint64(buf, ts|requestRecordFlag)
		buf = binary.AppendUvarint(buf, uint64(len(b.req.ID)))
		buf = append(buf, b.req.ID...)
		buf = binary.LittleEndian.AppendUint64(buf, b.req.Fingerprint)
	}
	buf = binary.AppendUvarint(buf, uint64(len(b.ops)))
	for _, o := range b.ops {
		buf = append(buf, byte(o.kind))
		buf = binary.AppendUvarint(buf, uint64(len(o.key)))
		buf = append(buf, o.key...)
		buf = binary.AppendUvarint(buf, uint64(len(o.value)))
		buf = append(buf, o.value...)
	}
	return buf
}

var errBadRecord = errors.New("region: malformed WAL batch record")

func decodeBatch(rec []byte) (uint64, *Batch, error) {
	if len(rec) < 8 {
		return 0, nil, errBadRecord
	}
	ts := binary.LittleEndian.Uint64(rec)
	p := rec[8:]
	readBytes := func() ([]byte, bool) {
		l, m := binary.Uvarint(p)
		if m <= 0 || uint64(len(p)-m) < l {
			return nil, false
		}
		v := p[m : m+int(l)]
		p = p[m+int(l):]
		return v, true
	}
	var req *Request
	if ts&requestRecordFlag != 0 {
		ts &^= requestRecordFlag
		id, ok := readBytes()
		if !ok || len(p) < 8 {
			return 0, nil, errBadRecord
		}
		req = &Request{ID: string(id), Fingerprint: binary.LittleEndian.Uint64(p)}
		p = p[8:]
	}
	n, m := binary.Uvarint(p)
	if m <= 0 {
		return 0, nil, errBadRecord
	}
	p = p[m:]
	b := &Batch{ops: make([]op, 0, n), req: req}
	for i := uint64(0); i < n; i++ {
		if len(p) < 1 {
			return 0, nil, errBadRecord
		}
		kind := kv.Kind(p[0])
		p = p[1:]
		k, ok1 := readBytes()
		v, ok2 := readBytes()
		if !ok1 || !ok2 || (kind != kv.KindSet && kind != kv.KindDelete && kind != kv.KindSetExpiring) ||
			(kind == kv.KindSetExpiring && kv.ValidExpiring(v) != nil) {
			return 0, nil, errBadRecord
		}
		b.ops = append(b.ops, op{kind: kind, key: k, value: v})
	}
	return ts, b, nil
}
