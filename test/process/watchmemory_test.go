package process

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/internal/contract"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// A watcher that never reads costs its store at most the watch buffer, as
// the kernel measures the store process: two store processes take the
// same 96 MiB of writes, one of them with a watch stream nobody reads, and
// the watched one's peak resident memory (VmHWM) exceeds the other's by at
// most the buffer (contract.WatchBufferBytes) and a slack for two
// processes' garbage collections running at different times; the
// stream, read at last, ends with RESOURCE_EXHAUSTED naming where to
// resume. A store that kept every change for its watcher would hold the
// whole 96 MiB more.
func TestAWatcherThatNeverReadsCostsTheStoreProcessAtMostItsBuffer(t *testing.T) {
	const (
		valueBytes = 64 << 10
		written    = 96 << 20
		slack      = 24 << 20
	)
	dir := t.TempDir()
	config := filepath.Join(dir, "engine.yaml")
	// A small memstore flushes often and a small block cache holds little:
	// what the stores hold besides the buffer stays small, and so does the
	// difference their collections' timing makes (GOGC 25: the heap grows
	// a quarter past what is live before a collection).
	if err := os.WriteFile(config, []byte("blockCacheBytes: 8388608\nmemstore: {bytes: 4194304}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOGC", "25")
	store := func(name string) *proc {
		return start(t, name, "store", "--create-bucket", "--bucket=file://"+filepath.Join(dir, name, "bucket"),
			"--wal-dir="+filepath.Join(dir, name, "wal"), "--config="+config, "--regions=1")
	}
	watched, plain := store("watched"), store("plain")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stream, err := watched.kv().Watch(ctx, &kvpb.WatchRequest{ProgressIntervalMs: 10})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || first.ResolvedTs == 0 {
		t.Fatalf("the watch's first answer: %v, %v; want a resolved mark", first, err)
	}
	rng := rand.NewChaCha8([32]byte{49})
	value := make([]byte, valueBytes)
	for i := range written / valueBytes {
		_, _ = rng.Read(value) // incompressible, as the buffer holds it
		key := []byte(fmt.Sprintf("k%05d", i))
		for _, s := range []*proc{watched, plain} {
			if _, err := s.kv().Put(ctx, &kvpb.PutRequest{Key: key, Value: value}); err != nil {
				t.Fatalf("put %s to %s: %v", key, s.name, err)
			}
		}
	}
	peakWatched, peakPlain := peakRSS(t, watched), peakRSS(t, plain)
	t.Logf("peak resident memory: watched %d MiB, plain %d MiB, after %d MiB written to each", peakWatched>>20, peakPlain>>20, written>>20)
	if extra := peakWatched - peakPlain; extra > contract.WatchBufferBytes+slack {
		t.Fatalf("the watched store peaked %d MiB above the other: a watcher that does not read costs more than its buffer of %d MiB (and %d MiB of slack)",
			extra>>20, contract.WatchBufferBytes>>20, slack>>20)
	}
	for {
		_, err := stream.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "resume from resolved_ts") {
			t.Fatalf("the stream, read at last, ended with %v; want RESOURCE_EXHAUSTED naming where to resume", err)
		}
		break
	}
}

// peakRSS is the process's peak resident memory, as the kernel counts it
// (VmHWM in /proc/PID/status).
func peakRSS(t *testing.T, p *proc) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("reading %s's memory from /proc (process tests run on Linux): %v", p.name, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s's VmHWM %q: %v", p.name, rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in %s's status", p.name)
	return 0
}
