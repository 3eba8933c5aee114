package txn

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/time/rate"

	"github.com/bellows-kv/bellows/bench/report"
	"github.com/bellows-kv/bellows/storage-engine/blob"
	"github.com/bellows-kv/bellows/storage-engine/compaction"
	"github.com/bellows-kv/bellows/storage-engine/memstore"
	"github.com/bellows-kv/bellows/storage-engine/region"
	"github.com/bellows-kv/bellows/storage-engine/server"
	"github.com/bellows-kv/bellows/storage-engine/wal"
)

// The recovery measurement (LogBase §3.6: recovery bounded by checkpoints).
//
// Regime: the one where a WAL grows without bound unless something bounds
// it. A store of RecoveryRegions regions, RecoveryMemstoreBytes each (the
// memstore budget is their product), policy Eager with one version kept,
// takes a steady stream of overwrites of a hot key set that fits in the
// memstores, plus one cold key per region written once at the start. Eager
// in-memory compaction keeps the memstores from filling, so nothing flushes
// by size, and the cold keys hold every WAL segment since the start. Without
// a bound the WAL, and so a restart's replay, grows with uptime; with the
// defaults (each region's WAL ≤ 2 × its memstore, the store's ≤ the budget,
// age ≤ 1 h) it stays flat.
//
// A writer process (a child: the crash is a real SIGKILL) writes for an
// uptime, is killed, and the store is then opened RecoveryOpens times from
// the same WAL (Close does not flush, so each open replays the same WAL):
// the median of OpenStore's duration is recovery_s.
const (
	RecoveryRegions       = 4
	RecoveryMemstoreBytes = 32 << 20
	RecoveryHotKeys       = 2000 // per region: 2 MB of 1 KB values
	RecoveryOpens         = 3
)

// RecoveryWriterCommand is the hidden subcommand the measurement starts as
// its writer process (bellows-bench txn recovery-writer).
const RecoveryWriterCommand = "recovery-writer"

// recoveryOptions are the store's options in both modes; unbounded lifts
// every WAL bound out of reach.
func recoveryOptions(ctx context.Context, dir string, unbounded bool) (server.StoreOptions, error) {
	b, err := blob.Open(ctx, "file://"+filepath.Join(dir, "bucket"))
	if err != nil {
		return server.StoreOptions{}, err
	}
	o := server.StoreOptions{
		WALRoot: filepath.Join(dir, "wal"),
		Region: region.Options{Bucket: b, WALMode: wal.ModeAsync, MemstoreBytes: RecoveryMemstoreBytes,
			Memstore:              region.MemstoreOptions{Policy: memstore.Eager},
			Retention:             compaction.Retention{MaxVersions: 1},
			DisableAutoCompaction: true},
	}
	if unbounded {
		o.Region.MaxWALBytes = 1 << 50
		o.MaxStoreWALBytes = 1 << 50
		o.MaxWALAge = 1000 * time.Hour
	}
	return o, nil
}

func recoveryKey(region, i int) []byte {
	// The region's first byte (SplitEvenly splits by it), then the index.
	k := make([]byte, 9)
	k[0] = byte(256*region/RecoveryRegions) + 1
	binary.BigEndian.PutUint64(k[1:], uint64(i))
	return k
}

// RunRecoveryWriter is the writer process: it opens the store in dir,
// writes one cold key per region, prints "writing", then overwrites hot
// keys at bytesPerSecond (1 KB values) until it is killed.
func RunRecoveryWriter(ctx context.Context, dir string, unbounded bool, bytesPerSecond int) error {
	o, err := recoveryOptions(ctx, dir, unbounded)
	if err != nil {
		return err
	}
	spans, err := server.SplitEvenly(RecoveryRegions)
	if err != nil {
		return err
	}
	s, err := server.OpenStore(ctx, spans, o)
	if err != nil {
		return err
	}
	defer s.Close()
	engines := make([]*region.Region, RecoveryRegions)
	for i, a := range s.Assignments() {
		if engines[i], err = a.Engine(); err != nil {
			return err
		}
		if _, err := engines[i].Put(recoveryKey(i, 1<<40), []byte("cold")); err != nil {
			return err
		}
	}
	fmt.Println("writing")
	value := make([]byte, 1000)
	lim := rate.NewLimiter(rate.Limit(bytesPerSecond/len(value)), 100)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for {
				if err := lim.Wait(ctx); err != nil {
					return
				}
				reg := rng.IntN(RecoveryRegions)
				if _, err := engines[reg].Put(recoveryKey(reg, rng.IntN(RecoveryHotKeys)), value); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// recoveryRun starts a writer in dir, kills it after uptime, and opens the
// store RecoveryOpens times.
func recoveryRun(ctx context.Context, self string, dir string, unbounded bool, uptime time.Duration, bytesPerSecond int) (Recovery, error) {
	defer os.RemoveAll(dir)
	args := []string{"txn", RecoveryWriterCommand, "--dir", dir, "--rate", fmt.Sprint(bytesPerSecond)}
	if unbounded {
		args = append(args, "--unbounded")
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return Recovery{}, err
	}
	if err := cmd.Start(); err != nil {
		return Recovery{}, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "writing" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return Recovery{}, fmt.Errorf("recovery writer did not start writing (%q): %v", line, err)
	}
	// The uptime is what is measured against, not a synchronisation.
	select {
	case <-time.After(uptime):
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if ctx.Err() != nil {
		return Recovery{}, ctx.Err()
	}
	walBytes, err := dirBytes(filepath.Join(dir, "wal"))
	if err != nil {
		return Recovery{}, err
	}
	rec := Recovery{UptimeS: uptime.Seconds(), WALBytes: walBytes, Bounded: !unbounded}
	spans, err := server.SplitEvenly(RecoveryRegions)
	if err != nil {
		return rec, err
	}
	var times []float64
	for range RecoveryOpens {
		o, err := recoveryOptions(ctx, dir, unbounded)
		if err != nil {
			return rec, err
		}
		// Keep the WAL bound from flushing before the store is closed:
		// the next open must replay the same WAL.
		o.WALBoundInterval = time.Hour
		s, err := server.OpenStore(ctx, spans, o)
		if err != nil {
			return rec, err
		}
		times = append(times, s.Recovered().Seconds())
		var replayed int64
		s.Open(func(_ *server.Assignment, e *region.Region) { replayed += e.Recovery().ReplayedBytes })
		rec.ReplayedBytes = replayed
		if err := s.Close(); err != nil {
			return rec, err
		}
	}
	rec.RecoveryS = report.Median(times)
	rec.RecoveryMinS, rec.RecoveryMaxS = slices.Min(times), slices.Max(times)
	return rec, nil
}

// dirBytes is the size of the files under dir.
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n += info.Size()
		return nil
	})
	return n, err
}
