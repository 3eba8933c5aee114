package regionmap

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/regionmap/fencelog"
)

// counting is a bucket that counts the requests made through it and the
// keys its listings return.
type counting struct {
	fencelog.Bucket
	requests, listings, listed atomic.Int64
}

func (c *counting) ReadAll(ctx context.Context, key string) ([]byte, error) {
	c.requests.Add(1)
	return c.Bucket.ReadAll(ctx, key)
}

func (c *counting) WriteAll(ctx context.Context, key string, data []byte, ifNotExist bool) error {
	c.requests.Add(1)
	return c.Bucket.WriteAll(ctx, key, data, ifNotExist)
}

func (c *counting) Exists(ctx context.Context, key string) (bool, error) {
	c.requests.Add(1)
	return c.Bucket.Exists(ctx, key)
}

func (c *counting) Delete(ctx context.Context, key string) error {
	c.requests.Add(1)
	return c.Bucket.Delete(ctx, key)
}

func (c *counting) List(ctx context.Context, prefix string) ([]blob.ObjectInfo, error) {
	c.requests.Add(1)
	c.listings.Add(1)
	objs, err := c.Bucket.List(ctx, prefix)
	c.listed.Add(int64(len(objs)))
	return objs, err
}

// shortRetention runs the epochs' retention at d for the test, so that
// collection and the committers' guard against stale views play out in
// real time.
func shortRetention(t *testing.T, d time.Duration) {
	prev := epochRetention
	epochRetention = d
	t.Cleanup(func() { epochRetention = prev })
}

// numbers are the numbered objects under prefix, in order.
func numbers(t *testing.T, b *blob.Bucket, prefix string) []uint64 {
	t.Helper()
	objs, err := b.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var ns []uint64
	for _, o := range objs {
		if n, err := strconv.ParseUint(strings.TrimPrefix(o.Key, prefix), 10, 64); err == nil {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	return ns
}

// commitMany commits n epochs on top of b's newest map (bootstrapping
// one), each the successor of the last, and returns the last.
func commitMany(t *testing.T, b *blob.Bucket, n int) Map {
	t.Helper()
	ctx := context.Background()
	initial, _ := Initial([][]byte{[]byte("m")})
	m, err := Bootstrap(ctx, b, initial)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		next := m.clone()
		if err := Commit(ctx, b, m, &next); err != nil {
			t.Fatal(err)
		}
		m = next
	}
	return m
}

// history writes epochs 1 to n of a one-region map straight into b, as a
// long-lived cluster's commits leave them (Commit's head aside).
func history(t *testing.T, b *blob.Bucket, n uint64) {
	t.Helper()
	m, _ := Initial(nil)
	for m.Epoch = 1; m.Epoch <= n; m.Epoch++ {
		m.Committed = time.Now()
		data, _ := json.Marshal(m)
		if err := b.WriteAll(context.Background(), ObjectName(m.Epoch), data, true); err != nil {
			t.Fatal(err)
		}
	}
}

// A map of thousands of epochs loads in a handful of requests and no
// listing: the loader starts from the head a commit leaves and checks
// forward, however long the history.
func TestAThousandsLongHistoryLoadsInAFewRequests(t *testing.T) {
	ctx := context.Background()
	b := bucket(t)
	history(t, b, 3000)
	last := commitMany(t, b, 1)
	c := &counting{Bucket: b}
	m, err := load(ctx, c)
	if err != nil || m.Epoch != last.Epoch {
		t.Fatalf("loaded epoch %d, %v; want %d", m.Epoch, err, last.Epoch)
	}
	if n, l := c.requests.Load(), c.listed.Load(); n > 6 || l > 0 {
		t.Fatalf("loading the newest of %d epochs took %d requests and listed %d keys; want at most 6 and none", last.Epoch, n, l)
	}
	// Epochs committed since the head was written (their writer died
	// before writing it) cost a few existence checks more.
	for range 40 {
		next := m.clone()
		if err := Commit(ctx, b, m, &next); err != nil {
			t.Fatal(err)
		}
		m = next
	}
	if err := b.WriteAll(ctx, prefix+"head", []byte(strconv.FormatUint(last.Epoch, 10)), false); err != nil {
		t.Fatal(err)
	}
	c = &counting{Bucket: b}
	if got, err := load(ctx, c); err != nil || got.Epoch != m.Epoch {
		t.Fatalf("with the head 40 epochs behind: epoch %d, %v; want %d", got.Epoch, err, m.Epoch)
	}
	if n, l := c.requests.Load(), c.listed.Load(); n > 20 || l > 0 {
		t.Fatalf("with the head 40 epochs behind: %d requests, %d keys listed; want at most 20 and none", n, l)
	}
}

// After a collection the newest epoch is still the one loaded, commits go
// on from it, the bucket keeps only the newest few epochs, and an epoch
// collected reads as not found. A history written before heads were kept
// (no head) is listed once, and its collection leaves a head behind.
func TestTheNewestEpochIsFoundAfterCollection(t *testing.T) {
	ctx := context.Background()
	b := bucket(t)
	last := commitMany(t, b, 299)
	if err := b.Delete(ctx, prefix+"head"); err != nil {
		t.Fatal(err)
	}
	if m, err := Load(ctx, b); err != nil || m.Epoch != 300 {
		t.Fatalf("without a head: epoch %d, %v; want 300", m.Epoch, err)
	}
	later := time.Now().Add(2 * contract.DefaultMapEpochRetention)
	n, err := CollectEpochs(ctx, b, later, contract.DefaultMaxClockOffset, nil)
	if err != nil || n != 300-contract.DefaultFencingLogKeep {
		t.Fatalf("collected %d epochs, %v; want %d", n, err, 300-contract.DefaultFencingLogKeep)
	}
	if got := numbers(t, b, prefix); len(got) != contract.DefaultFencingLogKeep || got[len(got)-1] != 300 {
		t.Fatalf("epochs kept: %v", got)
	}
	c := &counting{Bucket: b}
	m, err := load(ctx, c)
	if err != nil || m.Epoch != 300 || !slices.EqualFunc(m.Region, last.Region, func(a, b Region) bool { return a.Name == b.Name }) {
		t.Fatalf("after the collection: epoch %d, %v", m.Epoch, err)
	}
	if l := c.listed.Load(); l > 0 {
		t.Fatalf("the collection left no head: the load listed %d keys", l)
	}
	if _, err := LoadEpoch(ctx, b, 100); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("a collected epoch: %v, want not found", err)
	}
	next := m.clone()
	if err := Commit(ctx, b, m, &next); err != nil || next.Epoch != 301 {
		t.Fatalf("committing on the newest after the collection: %d %v", next.Epoch, err)
	}
	// A second collection deletes only the epoch that commit took out of
	// the newest few.
	if n, err := CollectEpochs(ctx, b, later, contract.DefaultMaxClockOffset, nil); err != nil || n != 1 {
		t.Fatalf("second collection: %d, %v; want the one epoch past the newest %d", n, err, contract.DefaultFencingLogKeep)
	}
	if m, err := Load(ctx, b); err != nil || m.Epoch != 301 {
		t.Fatalf("newest %d, %v", m.Epoch, err)
	}
	// A head naming a collected epoch (its writer paused, then wrote it),
	// even with the floor gone, only sends the loader to a listing.
	if err := b.WriteAll(ctx, prefix+"head", []byte("5"), false); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, prefix+"floor"); err != nil {
		t.Fatal(err)
	}
	if m, err := Load(ctx, b); err != nil || m.Epoch != 301 {
		t.Fatalf("with a head naming a collected epoch: %d, %v", m.Epoch, err)
	}
}

// A committer whose view is an epoch the collection has since deleted
// (it loaded the map, then paused past the retention while others
// committed) is fenced, though the number after its view is free again:
// exactly as before epochs were deleted. So is a commit of a first epoch
// into a bucket whose first epochs are collected.
func TestAStaleCommitterCannotCommitIntoACollectedEpoch(t *testing.T) {
	shortRetention(t, 300*time.Millisecond)
	ctx := context.Background()
	b := bucket(t)
	stale := commitMany(t, b, 9)
	newest := commitMany(t, b, 40)
	// The stale view's age is what is under test: real time must pass.
	time.Sleep(epochRetention + 100*time.Millisecond)
	if n, err := CollectEpochs(ctx, b, time.Now(), 0, nil); err != nil || n != 50-contract.DefaultFencingLogKeep {
		t.Fatalf("collected %d epochs, %v", n, err)
	}
	if ok, _ := Committed(ctx, b, stale.Epoch+1); ok {
		t.Fatal("the epoch after the stale view was not collected: the test tests nothing")
	}
	next := stale.clone()
	if err := Commit(ctx, b, stale, &next); !errors.Is(err, ErrFenced) {
		t.Fatalf("the stale committer committed epoch %d: %v; want ErrFenced", next.Epoch, err)
	}
	if ok, _ := Committed(ctx, b, stale.Epoch+1); ok {
		t.Error("the fenced commit's object stays in the bucket")
	}
	initial, _ := Initial(nil)
	if err := Commit(ctx, b, Map{}, &initial); !errors.Is(err, ErrFenced) {
		t.Fatalf("a first epoch committed into a collected history: %v; want ErrFenced", err)
	}
	if m, err := Load(ctx, b); err != nil || m.Epoch != newest.Epoch {
		t.Fatalf("newest %d, %v; want %d", m.Epoch, err, newest.Epoch)
	}
}

// Committers (some pausing between their load and their commit for up to
// twice the retention), loaders and collections, all at once: no epoch
// is committed twice, no loader sees the map go back or fails, and the
// newest map is the last commit's.
func TestCommittersLoadersAndCollectionsRacing(t *testing.T) {
	shortRetention(t, 250*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := bucket(t)
	commitMany(t, b, 0)
	var (
		mu        sync.Mutex
		committed = map[uint64]time.Time{} // epoch → its commit's time
		// unverified are the commits that could not tell whether they
		// were first (paused half the retention): they may be.
		unverified = map[uint64]time.Time{}
		twice      []uint64
		fenced     atomic.Int64
		strays     atomic.Int64
		pausedDone atomic.Int64 // commits of the pausing committers that ran
		wg         sync.WaitGroup
	)
	run := func(f func(r *rand.Rand) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(rand.Uint64(), 0))
			for ctx.Err() == nil {
				if err := f(r); err != nil && ctx.Err() == nil {
					t.Error(err)
					cancel()
				}
			}
		}()
	}
	commit := func(pause time.Duration) func(*rand.Rand) error {
		return func(r *rand.Rand) error {
			m, err := Load(ctx, b)
			if err != nil {
				return err
			}
			if pause > 0 {
				// The pause is the test's subject: a committer stalled
				// between its load and its commit.
				time.Sleep(time.Duration(r.Int64N(int64(pause))))
				defer pausedDone.Add(1)
			}
			next := m.clone()
			switch err := Commit(ctx, b, m, &next); {
			case errors.Is(err, ErrFenced):
				fenced.Add(1)
				if errors.Is(err, fencelog.ErrTaken) {
					// Commit passes fencelog's error on only when the
					// number was free: collected under its view.
					strays.Add(1)
				}
			case errors.Is(err, fencelog.ErrUnverified):
				mu.Lock()
				unverified[next.Epoch] = next.Committed
				mu.Unlock()
			case err != nil:
				return err
			default:
				mu.Lock()
				if _, dup := committed[next.Epoch]; dup {
					twice = append(twice, next.Epoch)
				}
				committed[next.Epoch] = next.Committed
				mu.Unlock()
			}
			return nil
		}
	}
	for range 3 {
		run(commit(0))
	}
	for range 2 {
		run(commit(2 * epochRetention))
	}
	for range 2 {
		var last uint64
		run(func(*rand.Rand) error {
			m, err := Load(ctx, b)
			if err == nil && m.Epoch < last {
				err = errors.New("a load went back from epoch " + strconv.FormatUint(last, 10) + " to " + strconv.FormatUint(m.Epoch, 10))
			}
			last = m.Epoch
			return err
		})
	}
	for range 2 {
		run(func(*rand.Rand) error {
			_, err := CollectEpochs(ctx, b, time.Now(), 0, nil)
			time.Sleep(5 * time.Millisecond) // a collector's pace, not synchronisation
			return err
		})
	}
	// Until the pausing committers have committed over the collections a
	// few times each, among many others' commits and some fenced ones.
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := len(committed)
		mu.Unlock()
		if pausedDone.Load() >= 6 && n >= 100 && fenced.Load() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s: %d paused commits, %d commits, %d fenced", pausedDone.Load(), n, fenced.Load())
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	cancel()
	wg.Wait()
	if len(twice) > 0 {
		t.Fatalf("epochs committed twice: %v", twice)
	}
	m, err := Load(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	at, ok := committed[m.Epoch]
	if !ok {
		at, ok = unverified[m.Epoch]
	}
	if !ok || !at.Equal(m.Committed) {
		t.Fatalf("the newest epoch %d (committed %v) is not a reported commit (%v, %v)", m.Epoch, m.Committed, at, ok)
	}
	if len(committed) < 50 || fenced.Load() == 0 {
		t.Fatalf("%d commits, %d fenced: too few to test anything", len(committed), fenced.Load())
	}
	t.Logf("%d commits, %d fenced (%d into collected numbers), %d unverified; epochs kept: %d",
		len(committed), fenced.Load(), strays.Load(), len(unverified), len(numbers(t, b, prefix)))
}

// Collection keeps every epoch from the one it is told to keep from (the
// oldest backup's), however old, and asks for it only when something is
// old enough to go.
func TestCollectionKeepsEpochsFromTheOneItIsGiven(t *testing.T) {
	ctx := context.Background()
	b := bucket(t)
	commitMany(t, b, 59)
	later := time.Now().Add(2 * contract.DefaultMapEpochRetention)
	asked := 0
	from := func(context.Context) (uint64, error) { asked++; return 25, nil }
	if n, err := CollectEpochs(ctx, b, time.Now(), 0, from); err != nil || n != 0 || asked != 0 {
		t.Fatalf("nothing old: deleted %d, %v, asked %d times", n, err, asked)
	}
	if n, err := CollectEpochs(ctx, b, later, 0, from); err != nil || n != 24 {
		t.Fatalf("deleted %d, %v; want the 24 below epoch 25", n, err)
	}
	if got := numbers(t, b, prefix); len(got) != 36 || got[0] != 25 {
		t.Fatalf("epochs kept: %v, want 25 to 60", got)
	}
	if m, err := LoadEpoch(ctx, b, 25); err != nil || m.Epoch != 25 {
		t.Fatalf("the kept epoch: %v", err)
	}
}
