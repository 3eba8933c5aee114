package process

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
	"github.com/bellows-kv/bellows/storage-engine/server"
)

// mover is a client of a region that is moving between two stores: each
// call goes to the stores in turn until one answers (the old owner answers
// UNAVAILABLE once it hands the region over, then refuses connections; the
// new one answers UNAVAILABLE until it has claimed it).
type mover struct{ stores []*proc }

func (m mover) call(f func(context.Context, kvpb.KVClient) error) error {
	var err error
	for _, s := range m.stores {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = f(ctx, s.kv())
		cancel()
		if err == nil {
			return nil
		}
	}
	return err
}

// probes records when a read of the region succeeded.
type probes struct {
	mu sync.Mutex
	ok []time.Time
}

func (p *probes) add(t time.Time) {
	p.mu.Lock()
	p.ok = append(p.ok, t)
	p.mu.Unlock()
}

func (p *probes) since(t time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, at := range p.ok {
		if at.After(t) {
			n++
		}
	}
	return n
}

// longestGap is the longest time between two successful probes, and when
// it began.
func (p *probes) longestGap() (time.Duration, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var gap time.Duration
	var from time.Time
	for i := 1; i < len(p.ok); i++ {
		if d := p.ok[i].Sub(p.ok[i-1]); d > gap {
			gap, from = d, p.ok[i-1]
		}
	}
	return gap, from
}

// moveSlack bounds, beyond the release, how long the move may take: about a
// second on a quiet machine; the rest is room for a loaded one (CI runs other
// packages' tests beside these processes). It stays well under half the
// ~12 s the compaction would run, which is what separates aborting it from
// waiting for it.
const moveSlack = 4 * time.Second

var releasedLine = regexp.MustCompile(`msg="released region" (?:\S+ )*region=` + region0 + ` took=(\S+)`)

// A region moves between stores in about a second plus its flush, even while
// a long offloaded compaction of it runs: on SIGTERM the old owner stops
// serving the region, aborts the compaction (its Admin Compact call answers
// ABORTED at once, the worker drops the job), flushes and releases the
// region, and the next owner, watching the manifest, claims it. A steady
// write load loses no acknowledged write, and a probe of the region every
// 50ms is never without an answer for longer than moveSlack plus the
// release.
func TestRegionMovesInAboutASecondDuringALongCompaction(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bucket := "file://" + filepath.Join(dir, "bucket")
	// 50KB/s over ~600 KiB of input: the job would run for ~12s.
	const rate = 50_000
	c := start(t, "compactor", "compactor", "--name=compactor", "--cache-bytes=64MiB", fmt.Sprintf("--compaction-rate-limit=%dB/s", rate))
	old := start(t, "store-old", append(storeArgs(t, bucket, filepath.Join(dir, "wal-old"), "Required", ""), "--compactors="+c.grpc)...)
	want := load(t, old, 4, 150)
	var inputBytes int64
	for _, f := range checkManifest(t, bucket, region0).Files {
		inputBytes += f.Size
	}
	jobTime := time.Duration(float64(inputBytes) / rate * float64(time.Second))

	cur := startNamedStore(t, "store-new", bucket, filepath.Join(dir, "wal-new"))
	if n := cur.metric(t, "bellows_regions_waiting"); n != 1 {
		t.Fatalf("new store: %v regions waiting, want 1", n)
	}
	m := mover{stores: []*proc{old, cur}}

	// A steady write load and a probe every 50ms, until stopped.
	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		ackedMu sync.Mutex
		acked   = map[string][]byte{}
		p       probes
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond) // pacing, not synchronisation
		defer tick.Stop()
		for i := 0; !stop.Load(); <-tick.C {
			k, v := fmt.Sprintf("w-%06d", i), make([]byte, 256)
			_, _ = rand.Read(v)
			err := m.call(func(ctx context.Context, kv kvpb.KVClient) error {
				_, err := kv.Put(ctx, &kvpb.PutRequest{Key: []byte(k), Value: v})
				return err
			})
			if err == nil {
				ackedMu.Lock()
				acked[k] = v
				ackedMu.Unlock()
				i++
			}
		}
	}()
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for ; !stop.Load(); <-tick.C {
			err := m.call(func(ctx context.Context, kv kvpb.KVClient) error {
				resp, err := kv.Get(ctx, &kvpb.GetRequest{Key: []byte("bulk-00-0000")})
				if err == nil && !resp.Found {
					err = fmt.Errorf("bulk-00-0000 not found")
				}
				return err
			})
			if err == nil {
				p.add(time.Now())
			}
		}
	}()
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	waitFor(t, "the load and the probe to run against the owner", func() bool { return p.since(time.Time{}) >= 10 })

	// A major compaction of the region, throttled on the worker.
	type compactAnswer struct {
		err error
		at  time.Time
	}
	compacted := make(chan compactAnswer, 1)
	go func() {
		_, err := old.admin().Compact(ctx, &kvpb.CompactRequest{Region: region0, Major: true})
		compacted <- compactAnswer{err, time.Now()}
	}()
	waitFor(t, "the job in flight on the worker", func() bool {
		st := c.status(t)
		return st.InflightJobs == 1 && st.CacheUsedBytes > 0
	})
	jobSeen := time.Now()

	sigterm := time.Now()
	old.terminate()
	exited := time.Since(sigterm)
	if !strings.Contains(old.stderr.String(), ` msg="released regions" `) {
		t.Fatalf("old store did not release its region:\n%s", old.stderr.String())
	}
	rel := releasedLine.FindStringSubmatch(old.stderr.String())
	if rel == nil {
		t.Fatalf("old store logged no release time for %s:\n%s", region0, old.stderr.String())
	}
	release, err := time.ParseDuration(rel[1])
	if err != nil {
		t.Fatal(err)
	}

	// The Admin Compact call was answered when the region left, long
	// before the job would have finished, saying that nothing was
	// installed.
	var answer compactAnswer
	select {
	case answer = <-compacted:
	case <-time.After(10 * time.Second):
		t.Fatal("the Admin Compact call was not answered")
	}
	says := region0 + " was released by this store while its compaction ran; nothing was installed"
	if status.Code(answer.err) != codes.Aborted || server.RegionOf(answer.err) != region0 || !strings.Contains(status.Convert(answer.err).Message(), says) {
		t.Fatalf("Admin Compact during the release: want ABORTED about %s saying %q, got %v", region0, says, answer.err)
	}
	abortedAfter := answer.at.Sub(sigterm)
	if abortedAfter > moveSlack+release || answer.at.After(jobSeen.Add(jobTime/2)) {
		t.Fatalf("Admin Compact answered %v after SIGTERM (release %v), the job would have run until %v after it",
			abortedAfter, release, jobSeen.Add(jobTime).Sub(sigterm))
	}
	waitFor(t, "the worker to abort the job and free its memory", func() bool {
		st := c.status(t)
		return st.InflightJobs == 0 && st.CacheUsedBytes == 0
	})
	if n := c.metric(t, `bellows_compactor_jobs_total{result="aborted"}`); n != 1 {
		t.Fatalf("aborted jobs on the worker: %v, want 1", n)
	}

	waitFor(t, "the new store to claim the released region", func() bool {
		return cur.metric(t, "bellows_regions_waiting") == 0 && cur.metric(t, "bellows_regions") == 1
	})
	claimed := time.Now()
	waitFor(t, "the probe to succeed 20 times at the new owner", func() bool { return p.since(claimed) >= 20 })
	stop.Store(true)
	wg.Wait()

	gap, from := p.longestGap()
	t.Logf("job: %d input bytes at %d B/s, ~%v; Admin Compact answered ABORTED %v after SIGTERM", inputBytes, rate, jobTime.Round(time.Millisecond), abortedAfter.Round(time.Millisecond))
	t.Logf("release (abort, flush, released manifest) took %v; old store exited %v after SIGTERM", release, exited.Round(time.Millisecond))
	t.Logf("longest interval without a successful probe: %v, from %v after SIGTERM; %d writes acknowledged",
		gap.Round(time.Millisecond), from.Sub(sigterm).Round(time.Millisecond), len(acked))
	if limit := moveSlack + release; gap >= limit {
		t.Fatalf("the region was unreadable for %v, want under %v (%v + the release)", gap, limit, moveSlack)
	}

	// Nothing acknowledged is lost, and the manifest names only files that
	// exist: the inputs, not the aborted output.
	for k, v := range acked {
		want[k] = v
	}
	checkData(t, cur, want)
	if man := checkManifest(t, bucket, region0); man.Released {
		t.Fatalf("manifest %d: the new owner's claim should not be marked released", man.Number)
	}
}
