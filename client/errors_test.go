package client

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// TestLimitsAreCheckedBeforeSending: each request past a limit fails with
// its sentinel and names the limit, without a store (the seed is an address
// nothing listens on, so a request that got as far as sending would fail
// otherwise).
func TestLimitsAreCheckedBeforeSending(t *testing.T) {
	c := &Client{seeds: []string{"127.0.0.1:1"}, conns: nil, closed: true}
	c.table.Store(&table{})
	ctx := context.Background()
	big := bytes.Repeat([]byte("v"), MaxValueBytes+1)
	longKey := bytes.Repeat([]byte("k"), MaxKeyBytes+1)
	for _, tc := range []struct {
		name  string
		err   error
		want  error
		limit string
	}{
		{"put empty key", second(c.Put(ctx, nil, []byte("v"))), ErrEmptyKey, ""},
		{"put long key", second(c.Put(ctx, longKey, nil)), ErrKeyTooLarge, "64 KiB (65536 bytes) (MaxKeyBytes)"},
		{"put large value", second(c.Put(ctx, []byte("k"), big)), ErrValueTooLarge, "4.0 MiB (4194304 bytes) (MaxValueBytes)"},
		{"get empty key", third(c.Get(ctx, nil)), ErrEmptyKey, ""},
		{"get long key", third(c.GetAt(ctx, longKey, 1)), ErrKeyTooLarge, "MaxKeyBytes"},
		{"delete empty key", second(c.Delete(ctx, []byte{})), ErrEmptyKey, ""},
		{"batch large value", second(c.Batch(ctx, []Mutation{{Key: []byte("a")}, {Key: []byte("b"), Value: big}})), ErrValueTooLarge, "mutation 1"},
		{"batch too large", second(c.Batch(ctx, manyValues(MaxBatchBytes/MaxValueBytes+1))), ErrBatchTooLarge, "64 MiB (67108864 bytes) (MaxBatchBytes)"},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
			continue
		}
		if !strings.Contains(tc.err.Error(), tc.limit) {
			t.Errorf("%s: %q does not name the limit %q", tc.name, tc.err, tc.limit)
		}
	}
	// A value exactly at the limit passes the check (and reaches the
	// closed client).
	if _, err := c.Put(ctx, []byte("k"), big[:MaxValueBytes]); !errors.Is(err, ErrClosed) {
		t.Errorf("a value of MaxValueBytes: %v, want it sent (ErrClosed here)", err)
	}
}

func TestScanOfAnInvertedRangeFails(t *testing.T) {
	c := &Client{seeds: []string{"127.0.0.1:1"}, closed: true}
	c.table.Store(&table{})
	it := c.Scan(context.Background(), []byte("z"), []byte("a"), ScanOptions{})
	defer it.Close()
	if it.Next() || !errors.Is(it.Err(), ErrInvalidRange) {
		t.Fatalf("scan z a: Next, Err = %v, want ErrInvalidRange", it.Err())
	}
	// An empty end has no upper bound: not inverted.
	if err := checkRange([]byte("z"), nil); err != nil {
		t.Fatalf("scan z to the end: %v", err)
	}
}

func manyValues(n int) []Mutation {
	v := bytes.Repeat([]byte("v"), MaxValueBytes)
	muts := make([]Mutation, n)
	for i := range muts {
		muts[i] = Mutation{Key: []byte{'k', byte(i)}, Value: v}
	}
	return muts
}

func second[T any](_ T, err error) error        { return err }
func third[T, U any](_ T, _ U, err error) error { return err }
