package region

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/memstore"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

const (
	crashChildEnv = "BELLOWS_CRASH_CHILD"
	keysPerBatch  = 5
)

// walInBucket is the crash tests' third mode: the WAL in the bucket
// (durability mode Bucket), the volume deleted after every kill.
const walInBucket = "bucket"

func crashOptions(dir string, b *blob.Bucket, mode string, policy memstore.Policy) Options {
	o := crashRegionOptions(dir, b, policy)
	if mode == walInBucket {
		o.WALMode = wal.ModeAsync
		o.WALInBucket = true
		o.WALArchiveInterval = time.Second
		// The volume is lost after every kill: the next opener takes the
		// region over from the stream.
		o.ForceTakeover = true
		return o
	}
	o.WALMode, _ = wal.ParseMode(mode)
	return o
}

func crashRegionOptions(dir string, b *blob.Bucket, policy memstore.Policy) Options {
	return Options{
		// One version retained, so Eager and Adaptive drop the hot keys'
		// old versions and the WAL is truncated under them.
		Memstore:      MemstoreOptions{Policy: policy, ActiveFraction: 0.1, PipelineSegments: 2},
		Retention:     compaction.Retention{MaxVersions: 1},
		Name:          "crash",
		Bucket:        b,
		WALDir:        dir + "/wal",
		MemstoreBytes: 24 << 10, // small: flushes and compactions happen all the time
		SST:           sstable.WriterOptions{BlockSize: 1024, Compression: sstable.S2Compression},
		Compaction:    compaction.Policy{MinFiles: 2, MaxFiles: 6, Ratio: 2, MaxBytes: 1 << 30},
	}
}

// TestCrashChild is the writer process of TestCrashDurability; it does
// nothing unless started by it.
func TestCrashChild(t *testing.T) {
	spec := os.Getenv(crashChildEnv)
	if spec == "" {
		return
	}
	parts := strings.Split(spec, ",")
	dir, iter, mode := parts[0], parts[1], parts[2]
	policy := memstore.Policy(parts[3])
	ctx := context.Background()
	b, err := blob.Open(ctx, "file://"+dir+"/bucket")
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	r, err := Open(ctx, crashOptions(dir, b, mode, policy))
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	var outMu sync.Mutex
	say := func(s string) {
		outMu.Lock()
		out.WriteString(s + "\n")
		out.Flush() // one write(2) per line: the parent sees every ack before the kill
		outMu.Unlock()
	}
	say("READY")
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for seq := 0; ; seq++ {
				id := fmt.Sprintf("%s-%d-%06d", iter, w, seq)
				bt := new(Batch)
				for k := 0; k < keysPerBatch; k++ {
					bt.Put([]byte(fmt.Sprintf("b/%s/%d", id, k)), []byte(strings.Repeat(id, 8)))
				}
				// A hot key per writer, overwritten by every batch: its
				// old versions are what in-memory compaction drops.
				bt.Put([]byte(fmt.Sprintf("h/%d", w)), []byte(id))
				ts, err := r.Apply(bt)
				if err != nil {
					say("ERR " + err.Error())
					return
				}
				say(fmt.Sprintf("ACK %s %d", id, ts))
				if seq%97 == 0 && w == 0 {
					if _, err := r.Compact(ctx, seq%2 == 0); err != nil {
						say("ERR " + err.Error())
						return
					}
				}
			}
		}(w)
	}
	wg.Wait()
	os.Exit(3)
}

// TestCrashDurability kills a writing child process at random moments and
// checks after each kill that no batch is half-applied and, in sync mode,
// that every batch acknowledged in any earlier run is present. Async mode
// acknowledges before the write reaches the OS, so it may lose acknowledged
// batches, but only a suffix of commit order: if a batch survived, every
// batch committed before it survived too.
func TestCrashDurability(t *testing.T) {
	for _, mode := range []wal.Mode{wal.ModeSync, wal.ModeAsync} {
		for _, policy := range memstorePolicies {
			t.Run(mode.String()+"/"+string(policy), func(t *testing.T) {
				iterations := 25
				if policy != memstore.None {
					iterations = 10
				}
				if s := os.Getenv("BELLOWS_CRASH_ITERATIONS"); s != "" {
					iterations, _ = strconv.Atoi(s)
				}
				runCrashIterations(t, mode.String(), policy, iterations)
			})
		}
	}
}

// TestVolumeLossLosesNoAcknowledgedBatchWithTheWALInTheBucket: with the WAL
// in the bucket, a writer SIGKILLed at random moments whose WAL directory
// is then deleted (its node and volume lost) loses no acknowledged batch:
// the next opener takes the region over, fences the stream and replays it.
func TestVolumeLossLosesNoAcknowledgedBatchWithTheWALInTheBucket(t *testing.T) {
	for _, policy := range []memstore.Policy{memstore.None, memstore.Adaptive} {
		t.Run(string(policy), func(t *testing.T) {
			iterations := 8
			if s := os.Getenv("BELLOWS_CRASH_ITERATIONS"); s != "" {
				iterations, _ = strconv.Atoi(s)
			}
			runCrashIterations(t, walInBucket, policy, iterations)
		})
	}
}

func runCrashIterations(t *testing.T, mode string, policy memstore.Policy, iterations int) {
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)
	acked := map[string]uint64{} // batch id → commit timestamp
	for it := 0; it < iterations; it++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,%s,%s", crashChildEnv, dir, it, mode, policy))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		// Kill after a random number of acknowledgements, so the kill lands
		// at a random point of writing, flushing or compacting.
		killAfter := 20 + rng.IntN(600)
		n := 0
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "ACK "):
				f := strings.Fields(line)
				ts, _ := strconv.ParseUint(f[2], 10, 64)
				acked[f[1]] = ts
				n++
			case strings.HasPrefix(line, "ERR "):
				t.Fatalf("iteration %d: child failed: %s", it, line)
			}
			if n == killAfter {
				_ = cmd.Process.Signal(syscall.SIGKILL)
			}
		}
		_ = cmd.Wait()
		if n < killAfter {
			t.Fatalf("iteration %d: child exited after %d acks, before the kill", it, n)
		}
		checkCrashState(t, dir, mode, policy, acked, it)
	}
}

func checkCrashState(t *testing.T, dir string, mode string, policy memstore.Policy, acked map[string]uint64, it int) {
	t.Helper()
	ctx := context.Background()
	if mode == walInBucket {
		if err := os.RemoveAll(dir + "/wal"); err != nil {
			t.Fatal(err)
		}
	}
	b, err := blob.Open(ctx, "file://"+dir+"/bucket")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(ctx, crashOptions(dir, b, mode, policy))
	if err != nil {
		t.Fatalf("iteration %d: reopen after kill: %v", it, err)
	}
	defer r.Close()
	defer checkHotKeys(t, r, acked, it)
	rows, err := r.Scan([]byte("b/"), []byte("b0"), 0, kv.MaxTimestamp)
	if err != nil {
		t.Fatalf("iteration %d: scan: %v", it, err)
	}
	perBatch := map[string]int{}
	for _, row := range rows {
		k := string(row.Key)
		id := k[2:strings.LastIndexByte(k, '/')]
		if string(row.Value) != strings.Repeat(id, 8) {
			t.Fatalf("iteration %d: key %s has a wrong value %q", it, k, row.Value)
		}
		perBatch[id]++
	}
	for id, c := range perBatch {
		if c != keysPerBatch {
			t.Fatalf("iteration %d: batch %s is half-applied: %d of %d keys", it, id, c, keysPerBatch)
		}
	}
	if mode != wal.ModeAsync.String() {
		for id := range acked {
			if perBatch[id] == 0 {
				t.Fatalf("iteration %d: acknowledged batch %s was lost", it, id)
			}
		}
		return
	}
	// Async: the lost acknowledged batches are all newer than every
	// surviving one. Forget the lost ones: later runs reuse no ids.
	firstLost := ^uint64(0)
	for id, ts := range acked {
		if perBatch[id] == 0 {
			firstLost = min(firstLost, ts)
		}
	}
	for id, ts := range acked {
		if perBatch[id] > 0 && ts > firstLost {
			t.Fatalf("iteration %d: batch %s (ts %d) survived but an older acknowledged batch (ts %d) was lost", it, id, ts, firstLost)
		}
		if perBatch[id] == 0 {
			delete(acked, id)
		}
	}
}

// checkHotKeys checks each writer's hot key (deferred, so after the batch
// checks have forgotten lost async batches): its value names a batch that
// survived, and no acknowledged surviving batch of that writer has a newer
// timestamp, so the newest version was kept though its old ones were
// dropped in memory and their WAL truncated.
func checkHotKeys(t *testing.T, r *Region, acked map[string]uint64, it int) {
	t.Helper()
	if t.Failed() {
		return
	}
	rows, err := r.Scan([]byte("h/"), []byte("h0"), 0, kv.MaxTimestamp)
	if err != nil {
		t.Fatalf("iteration %d: scan of hot keys: %v", it, err)
	}
	newest := map[string]uint64{} // writer → newest surviving acked ts
	for id, ts := range acked {
		w := strings.Split(id, "-")[1]
		newest[w] = max(newest[w], ts)
	}
	seen := map[string]bool{}
	for _, row := range rows {
		w := strings.TrimPrefix(string(row.Key), "h/")
		seen[w] = true
		id := string(row.Value)
		_, ok, err := r.Get([]byte(fmt.Sprintf("b/%s/0", id)), kv.MaxTimestamp)
		if err != nil || !ok {
			t.Fatalf("iteration %d: hot key %s names batch %s, which did not survive (%v)", it, row.Key, id, err)
		}
		if ts, ok := acked[id]; ok && ts < newest[w] {
			t.Fatalf("iteration %d: hot key %s holds batch %s (ts %d), older than acknowledged batch ts %d of the same writer", it, row.Key, id, ts, newest[w])
		}
	}
	for w := range newest {
		if !seen[w] {
			t.Fatalf("iteration %d: writer %s's hot key is gone", it, w)
		}
	}
}
