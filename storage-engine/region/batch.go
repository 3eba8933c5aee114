package region

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

// Batch is a set of writes applied atomically with one commit timestamp.
type Batch struct {
	ops   []op
	bytes int
	req   *Request
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

type op struct {
	kind  kv.Kind
	key   []byte
	value []byte
}

// Put adds a write of value to key. Key and value are copied.
func (b *Batch) Put(key, value []byte) *Batch {
	b.ops = append(b.ops, op{kind: kv.KindSet, key: append([]byte{}, key...), value: append([]byte{}, value...)})
	b.bytes += len(key) + len(value)
	return b
}

// Delete adds a tombstone for key.
func (b *Batch) Delete(key []byte) *Batch {
	b.ops = append(b.ops, op{kind: kv.KindDelete, key: append([]byte{}, key...)})
	b.bytes += len(key)
	return b
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
	for i, o := range b.ops {
		if err := validateKey(o.key); err != nil {
			return fmt.Errorf("batch op %d: %w", i, err)
		}
		if len(o.value) > maxValue {
			return fmt.Errorf("batch op %d: %w: %d bytes, limit %d", i, ErrValueTooLarge, len(o.value), maxValue)
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
func (b *Batch) dedupe() {
	if len(b.ops) < 2 {
		return
	}
	last := make(map[string]int, len(b.ops))
	for i, o := range b.ops {
		last[string(o.key)] = i
	}
	if len(last) == len(b.ops) {
		return
	}
	out := b.ops[:0]
	for i, o := range b.ops {
		if last[string(o.key)] == i {
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
		if !ok1 || !ok2 || (kind != kv.KindSet && kind != kv.KindDelete) {
			return 0, nil, errBadRecord
		}
		b.ops = append(b.ops, op{kind: kind, key: k, value: v})
	}
	return ts, b, nil
}
