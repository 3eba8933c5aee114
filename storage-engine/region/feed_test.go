package region

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func changesAfter(t *testing.T, r *Region, start, end []byte, after uint64) []string {
	t.Helper()
	var got []string
	if err := FeedOf(r).Changes(context.Background(), start, end, after, func(c Change) error {
		got = append(got, changeString(c))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func changeString(c Change) string {
	if c.Delete {
		return fmt.Sprintf("%s@%d:deleted", c.Key, c.TS)
	}
	return fmt.Sprintf("%s@%d=%s", c.Key, c.TS, c.Value)
}

// The catch-up scan returns every version after a timestamp in the range,
// each key's oldest first, from the memstore and from files, deletes and
// transactions' commits included; a subscription registered before a
// write gets it as it is added.
func TestChangesAfterATimestampAndLive(t *testing.T) {
	r := openForTxns(t)
	before := mustPut(t, r, "a", "0")
	a1 := mustPut(t, r, "a", "1")
	b1 := mustPut(t, r, "b", "1")
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	a2 := mustPut(t, r, "a", "2")
	del, err := r.Delete([]byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, r, "z", "outside")
	want := []string{
		fmt.Sprintf("a@%d=1", a1), fmt.Sprintf("a@%d=2", a2),
		fmt.Sprintf("b@%d=1", b1), fmt.Sprintf("b@%d:deleted", del),
	}
	if got := changesAfter(t, r, []byte("a"), []byte("c"), before); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("changes after %d: %v, want %v", before, got, want)
	}

	sub, err := FeedOf(r).Subscribe([]byte("a"), []byte("c"), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	startTS := r.opts.Clock.Now()
	prep := prewrite(t, r, startTS, "b", time.Minute, "b", "txn")
	if resolved, err := FeedOf(r).ResolvedTS(); err != nil || resolved >= startTS {
		t.Fatalf("resolved %d with a lock started at %d: %v; want below the lock", resolved, startTS, err)
	}
	c3 := mustPut(t, r, "c", "outside the subscription")
	commitTS := max(c3, prep) + 1
	if err := r.CommitLocks(context.Background(), startTS, commitTS, keys("b"), true, ""); err != nil {
		t.Fatal(err)
	}
	if resolved, err := FeedOf(r).ResolvedTS(); err != nil || resolved < commitTS {
		t.Fatalf("resolved %d after the commit at %d: %v", resolved, commitTS, err)
	}
	got, err := sub.Take()
	if err != nil || len(got) != 1 || changeString(got[0]) != fmt.Sprintf("b@%d=txn", commitTS) {
		t.Fatalf("live: %v %v, want b's commit at %d", got, err, commitTS)
	}
}

// A subscription whose consumer does not take what it is given ends with
// *FeedOverflowError once its buffer is full, and the writes go on; the
// region's close ends the others with ErrClosed.
func TestASubscriptionThatFallsBehindEnds(t *testing.T) {
	r := openForTxns(t)
	slow, err := FeedOf(r).Subscribe(nil, nil, 4096)
	if err != nil {
		t.Fatal(err)
	}
	other, err := FeedOf(r).Subscribe(nil, nil, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		mustPut(t, r, fmt.Sprintf("k%03d", i), "a value of some length")
	}
	var overflow *FeedOverflowError
	if got, err := slow.Take(); len(got) != 0 || !errors.As(err, &overflow) {
		t.Fatalf("the slow subscription: %d changes, %v; want its end by overflow", len(got), err)
	}
	if got, err := other.Take(); len(got) != 200 || err != nil {
		t.Fatalf("the other: %d changes, %v", len(got), err)
	}
	_ = r.Close()
	<-other.Ended()
	if _, err := other.Take(); !errors.Is(err, ErrClosed) {
		t.Fatalf("after the region closed: %v, want ErrClosed", err)
	}
}
