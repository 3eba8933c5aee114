package client

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/dustin/go-humanize"

	"github.com/bellows-kv/bellows/internal/contract"
)

// Errors a request fails with before anything is sent. Each is returned
// wrapped, naming the size and the limit; test with errors.Is.
var (
	// ErrEmptyKey: a write or read of the empty key, which no store
	// accepts.
	ErrEmptyKey = errors.New("bellows client: empty key")
	// ErrKeyTooLarge: a key longer than MaxKeyBytes.
	ErrKeyTooLarge = errors.New("bellows client: key too large")
	// ErrValueTooLarge: a value longer than MaxValueBytes.
	ErrValueTooLarge = errors.New("bellows client: value too large")
	// ErrBatchTooLarge: a batch whose keys and values together exceed
	// MaxBatchBytes.
	ErrBatchTooLarge = errors.New("bellows client: batch too large")
	// ErrInvalidRange: a scan whose start is after its end.
	ErrInvalidRange = errors.New("bellows client: invalid range")
)

// The limits a store enforces, checked by the client before it sends.
const (
	MaxKeyBytes   = contract.MaxKeyBytes
	MaxValueBytes = contract.MaxValueBytes
	MaxBatchBytes = contract.MaxBatchBytes
)

func checkKey(key []byte) error {
	if len(key) == 0 {
		return ErrEmptyKey
	}
	if len(key) > MaxKeyBytes {
		return fmt.Errorf("%w: %d bytes, the limit is %s (MaxKeyBytes)", ErrKeyTooLarge, len(key), limit(MaxKeyBytes))
	}
	return nil
}

func checkWrite(key, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if len(value) > MaxValueBytes {
		return fmt.Errorf("%w: %d bytes, the limit is %s (MaxValueBytes); store larger objects elsewhere and keep a reference, or split them over several keys",
			ErrValueTooLarge, len(value), limit(MaxValueBytes))
	}
	return nil
}

// checkBatch checks every mutation and the batch's size as the store
// counts it (keys and values).
func checkBatch(muts []Mutation) error {
	total := 0
	for i, m := range muts {
		if err := checkWrite(m.Key, m.Value); err != nil {
			return fmt.Errorf("mutation %d: %w", i, err)
		}
		if err := checkTTL(m.TTL, m.Delete, false); err != nil {
			return fmt.Errorf("mutation %d: %w", i, err)
		}
		total += len(m.Key) + len(m.Value)
		if m.TTL > 0 {
			total += 8 // the store keeps the time to live with the value
		}
	}
	if total > MaxBatchBytes {
		return fmt.Errorf("%w: %d bytes of keys and values, the limit is %s (MaxBatchBytes); split it into several batches",
			ErrBatchTooLarge, total, limit(MaxBatchBytes))
	}
	return nil
}

// checkRange refuses a scan of [start, end) with end before start; an
// empty end has no upper bound.
func checkRange(start, end []byte) error {
	if len(end) > 0 && bytes.Compare(start, end) > 0 {
		return fmt.Errorf("%w: start %q is after end %q (a scan covers [start, end))", ErrInvalidRange, start, end)
	}
	return nil
}

// limit is n bytes as a person reads it, e.g. 4.0 MiB (4194304 B).
func limit(n int) string { return fmt.Sprintf("%s (%d bytes)", humanize.IBytes(uint64(n)), n) }
