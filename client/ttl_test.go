package client

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/server"
)

// startOneStore serves one store holding every key, through a real gRPC
// server, and returns a client of it.
func startOneStore(t *testing.T) *Client {
	t.Helper()
	spans, err := server.SplitEvenly(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveKV(t, server.NewKV(openStore(t, openBucket(t), spans, server.StoreOptions{}), nil, nil))
	c, err := New(context.Background(), []string{addr}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Values written with WithTTL — by Put, CompareAndSet, Batch and a
// transaction — are read until their expiry and then, once the store's
// clock passes it, not at all; values without one stay.
func TestValuesWithATimeToLiveStopBeingRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := startOneStore(t)
	const short = 50 * time.Millisecond
	wrote := time.Now() // every commit is at or after it
	if _, err := c.Put(ctx, []byte("put"), []byte("v"), WithTTL(short)); err != nil {
		t.Fatal(err)
	}
	if r, err := c.CompareAndSet(ctx, []byte("cas"), IfAbsent(), []byte("v"), WithTTL(short)); err != nil || !r.Succeeded {
		t.Fatalf("compare-and-set: %+v, %v", r, err)
	}
	if _, err := c.Batch(ctx, []Mutation{{Key: []byte("batch"), Value: []byte("v"), TTL: short}, {Key: []byte("kept"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	txn, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	txn.Put([]byte("txn"), []byte("v"), WithTTL(short))
	txn.Put([]byte("long"), []byte("v"), WithTTL(time.Hour))
	if _, err := txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	expiring := []string{"put", "cas", "batch", "txn"}
	// Each is read until short after wrote at least (a loaded machine
	// may have passed that already: it must then read as nothing, below).
	for _, k := range append(expiring, "kept", "long") {
		before := time.Since(wrote) < short || k == "kept" || k == "long"
		if _, found, err := c.Get(ctx, []byte(k)); err != nil || (!found && before) {
			t.Fatalf("%s just after its write: found %t, %v", k, found, err)
		}
	}
	// Expiry follows the store's clock: await it.
	for _, k := range expiring {
		for {
			_, found, err := c.Get(ctx, []byte(k))
			if err != nil {
				t.Fatal(err)
			}
			if !found {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s still read %v after its write with a time to live of %v", k, time.Since(wrote), short)
			case <-time.After(5 * time.Millisecond): // polling the store's clock
			}
		}
	}
	got, err := c.ScanAll(ctx, nil, nil, ScanOptions{})
	if err != nil || len(got) != 2 || string(got[0].Key) != "kept" || string(got[1].Key) != "long" {
		t.Fatalf("scan after the expiries: %v, %v; want kept and long", got, err)
	}
}

// A time to live that is not positive, or one on a delete, is refused
// before anything is sent.
func TestAnInvalidTimeToLiveIsRefusedByTheClient(t *testing.T) {
	ctx := context.Background()
	c := startOneStore(t)
	for name, err := range map[string]error{
		"put, 0": func() error { _, err := c.Put(ctx, []byte("k"), []byte("v"), WithTTL(0)); return err }(),
		"put, negative": func() error {
			_, err := c.Put(ctx, []byte("k"), []byte("v"), WithTTL(-time.Second))
			return err
		}(),
		"batch delete": func() error {
			_, err := c.Batch(ctx, []Mutation{{Key: []byte("k"), Delete: true, TTL: time.Second}})
			return err
		}(),
		"transaction": func() error {
			txn, err := c.Begin(ctx)
			if err != nil {
				return err
			}
			txn.Put([]byte("k"), []byte("v"), WithTTL(0))
			_, err = txn.Commit(ctx)
			return err
		}(),
	} {
		if !errors.Is(err, ErrInvalidTTL) {
			t.Errorf("%s: %v; want ErrInvalidTTL", name, err)
		}
	}
	if _, found, err := c.Get(ctx, []byte("k")); err != nil || found {
		t.Fatalf("k after the refusals: found %t, %v", found, err)
	}
}

// A serializable read-modify-write of a value with a time to live is
// refused (ErrReadConflict) when the value expired between the read and
// the commit: the write conflict check sees no newer version of the key,
// the read's validation sees the expiry. Of a permanent value it commits.
func TestSerializableReadModifyWriteOfAnExpiringValue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := startOneStore(t)
	for _, ttl := range []time.Duration{0, time.Second} {
		key := []byte("counter-" + ttl.String())
		var opts []WriteOption
		if ttl > 0 {
			opts = append(opts, WithTTL(ttl))
		}
		if _, err := c.Put(ctx, key, []byte("1"), opts...); err != nil {
			t.Fatal(err)
		}
		txn, err := c.Begin(ctx, Serializable())
		if err != nil {
			t.Fatal(err)
		}
		if v, found, err := txn.Get(ctx, key); err != nil || !found || string(v) != "1" {
			t.Fatalf("ttl %v: the transaction's read: %q %t %v", ttl, v, found, err)
		}
		if ttl > 0 {
			for { // until the store reads the value as expired
				if _, found, err := c.Get(ctx, key); err != nil {
					t.Fatal(err)
				} else if !found {
					break
				}
			}
		}
		txn.Put(key, []byte("2"), opts...)
		_, err = txn.Commit(ctx)
		switch {
		case ttl == 0 && err != nil:
			t.Fatalf("a permanent value: %v", err)
		case ttl > 0 && !errors.Is(err, ErrReadConflict):
			t.Fatalf("a value that expired before the commit: %v, want ErrReadConflict", err)
		}
	}
}

// A time to live goes on the wire in whole milliseconds, rounded up, the
// longest duration included (no overflow into a short or negative one).
func TestTimeToLiveRoundsUpToAMillisecond(t *testing.T) {
	for _, c := range []struct {
		ttl  time.Duration
		want uint64
	}{
		{0, 0}, {-time.Second, 0}, {time.Nanosecond, 1}, {time.Millisecond, 1},
		{time.Millisecond + 1, 2}, {time.Hour, 3_600_000},
		{math.MaxInt64, math.MaxInt64/uint64(time.Millisecond) + 1},
	} {
		if got := ttlMs(c.ttl); got != c.want {
			t.Errorf("ttlMs(%v) = %d, want %d", c.ttl, got, c.want)
		}
	}
}
