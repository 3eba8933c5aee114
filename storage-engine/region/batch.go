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
func (b *Batch) encodedLen() int { return 8 + 10 + b.bytes + len(b.ops)*21 }

// encode appends the WAL record to buf: ts, count, then (kind, key, value)
// per op.
func (b *Batch) encode(buf []byte, ts uint64) []byte {
	buf = binary.LittleEndian.AppendUint64(buf, ts)
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
	n, m := binary.Uvarint(p)
	if m <= 0 {
		return 0, nil, errBadRecord
	}
	p = p[m:]
	b := &Batch{ops: make([]op, 0, n)}
	readBytes := func() ([]byte, bool) {
		l, m := binary.Uvarint(p)
		if m <= 0 || uint64(len(p)-m) < l {
			return nil, false
		}
		v := p[m : m+int(l)]
		p = p[m+int(l):]
		return v, true
	}
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
