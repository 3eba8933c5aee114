package process

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// remoteCacheTiny is engine.yaml for RemoteCache mode with a block cache so
// small that reads keep missing on the compaction's output, and so keep
// asking the worker, for the whole test.
const remoteCacheTiny = "warmup: {mode: RemoteCache}\nblockCacheBytes: 65536\n"

func remoteFetches(t *testing.T, s *proc, outcome string) float64 {
	return s.metric(t, `bellows_remote_block_fetches_total{outcome="`+outcome+`"}`)
}

// readers read random keys of want continuously, recording when each read
// completed and every read that failed or returned another value.
type readers struct {
	kv   kvpb.KVClient
	keys []string
	want map[string][]byte

	stop atomic.Bool
	wg   sync.WaitGroup

	mu    sync.Mutex
	done  []time.Time
	wrong []string
}

func startReaders(kv kvpb.KVClient, want map[string][]byte, clients int) *readers {
	r := &readers{kv: kv, want: want}
	for k := range want {
		r.keys = append(r.keys, k)
	}
	for c := range clients {
		r.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for !r.stop.Load() {
				k := r.keys[rng.IntN(len(r.keys))]
				got, err := r.kv.Get(context.Background(), &kvpb.GetRequest{Key: []byte(k)})
				now := time.Now()
				r.mu.Lock()
				switch {
				case err != nil:
					r.wrong = append(r.wrong, fmt.Sprintf("%s: %v", k, err))
				case !got.Found || !bytes.Equal(got.Value, r.want[k]):
					r.wrong = append(r.wrong, fmt.Sprintf("%s: found=%v, a different value", k, got.Found))
				default:
					r.done = append(r.done, now)
				}
				r.mu.Unlock()
			}
		})
	}
	return r
}

func (r *readers) completed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.done)
}

// longestGap stops the readers and returns the longest time in [from, to]
// in which no read completed.
func (r *readers) longestGap(from, to time.Time) time.Duration {
	r.stop.Store(true)
	r.wg.Wait()
	times := append([]time.Time{from}, r.done...)
	times = append(times, to)
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	var gap time.Duration
	for i := 1; i < len(times); i++ {
		if times[i-1].Before(from) || times[i].After(to) {
			continue
		}
		gap = max(gap, times[i].Sub(times[i-1]))
	}
	return gap
}

// A paused worker (SIGSTOP: a GC pause or a frozen VM look the same) must
// not stall RemoteCache reads: each miss waits one short deadline at most,
// then the worker's breaker sends misses to the bucket. After SIGCONT the
// breaker's retry finds the worker and misses are served from it again.
//
// A miss waits about RemoteBlockTimeout (300 ms) for the paused worker;
// maxGap leaves room for a loaded machine and stays far below the stall it
// guards against (a read waiting out gRPC's keepalive, 10 s + 5 s).
func TestPausedWorkerDoesNotStallRemoteCacheReads(t *testing.T) {
	const clients, paused, maxGap = 4, 16 * time.Second, 5 * time.Second
	dir := t.TempDir()
	bucket := "file://" + filepath.Join(dir, "bucket")
	w := start(t, "w1", "compactor", "--name=w1", "--cache-bytes=64MiB")
	s := startStoreWith(t, bucket, filepath.Join(dir, "wal"), "Required", remoteCacheTiny, w)
	want := load(t, s, 3, 150)
	if err := <-compactAsync(s); err != nil {
		t.Fatalf("compaction: %v", err)
	}

	r := startReaders(s.kv(), want, clients)
	// Reads miss on the new file and the worker serves them.
	okBefore := remoteFetches(t, s, "ok")
	waitFor(t, "reads served from the worker's memory", func() bool {
		return remoteFetches(t, s, "ok") > okBefore+20
	})

	timeoutsBefore := remoteFetches(t, s, "timeout")
	pid := w.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	// Keep it stopped past the store's keepalive (10s + 5s), while misses
	// go to the bucket; the breaker probes it on the way and fails again.
	waitFor(t, "the pause to outlast the keepalive", func() bool {
		return time.Since(stopped) > paused
	})
	during := r.completed()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	continued := time.Now()
	shortCircuits := remoteFetches(t, s, "short_circuit")
	failures := remoteFetches(t, s, "timeout") - timeoutsBefore + remoteFetches(t, s, "error")
	okAtResume := remoteFetches(t, s, "ok")

	// The breaker retries after its backoff and the worker serves again.
	waitFor(t, "the worker to serve reads again after SIGCONT", func() bool {
		return remoteFetches(t, s, "ok") > okAtResume+10
	})
	recovered := time.Since(continued)
	gap := r.longestGap(stopped, time.Now())

	t.Logf("paused %v: %d reads completed during the pause; longest gap %v; %v fetches short-circuited, %v failed; worker used again %v after SIGCONT",
		continued.Sub(stopped).Round(time.Millisecond), during, gap.Round(time.Millisecond), shortCircuits, failures, recovered.Round(time.Millisecond))
	if len(r.wrong) > 0 {
		t.Fatalf("%d reads failed or read a wrong value, e.g. %s", len(r.wrong), strings.Join(r.wrong[:min(5, len(r.wrong))], "; "))
	}
	if gap >= maxGap {
		t.Fatalf("no read completed for %v while the worker was paused, want < %v", gap, maxGap)
	}
	if shortCircuits == 0 {
		t.Fatal("no miss skipped the paused worker: the breaker never opened")
	}
	// Transitions are logged once each, naming the worker and the file.
	log := s.stderr.String()
	opened := strings.Count(log, "remote block reads from the worker failed")
	if opened == 0 || opened > int(failures) || !strings.Contains(log, "worker="+w.grpc) || !strings.Contains(log, "job="+region0+"/") {
		t.Fatalf("want one log line per opening of the breaker (%d, at most one per failure: %v), naming the worker %s and the job:\n%s", opened, failures, w.grpc, log)
	}
	if !strings.Contains(log, "the worker serves remote block reads again") {
		t.Fatalf("the breaker's closing was not logged:\n%s", log)
	}
	// One failure per probe: the first, and at least one retry during the
	// pause (the backoff is 5s): the worker was not switched off for good.
	if failures < 2 {
		t.Fatalf("%v failed fetches during a %v pause, want the first and at least one retry", failures, paused)
	}
}
