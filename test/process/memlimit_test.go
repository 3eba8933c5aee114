package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bellows-kv/bellows/internal/contract"
	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
	"github.com/bellows-kv/bellows/storage-engine/kv"
	"github.com/bellows-kv/bellows/storage-engine/sstable"
)

// A worker's pod has m + its overhead of memory (controllers/specs). A job
// of b = m whose output the worker keeps leaves m of live heap at its end,
// and without a soft limit Go's GC lets the heap grow to twice that before
// it collects: past the pod's limit, and the kernel kills the worker with
// the job done but not delivered. The worker sets its Go memory limit from
// its container's (contract.GoMemoryLimitRatio): here, in a memory cgroup
// of m + 48 MiB, a job of about m whose inputs, and then its kept output,
// are larger than the memory the worker has left completes (its inputs
// stream through; a buffer sized to them, as jobs once had, does not fit),
// nothing in the cgroup is OOM-killed, and the runtime's soft limit is the
// cgroup's share. With the limit 16 MiB lower the kernel kills the worker
// mid-job whether or not the Go limit is set: the output written through
// the file:// bucket's page cache is charged to the cgroup too.
func TestAWorkerKeepsAJobOfItsWholeCacheWithinItsContainersMemory(t *testing.T) {
	const (
		m        = 128 << 20
		overhead = 48 << 20
		inputs   = 2
		perInput = m / inputs * 15 / 16 // the whole job within m, as admission needs
		value    = 1 << 10
	)
	procs := memoryCgroup(t, m+overhead)
	dir := t.TempDir()
	var keys []string
	rng := rand.NewChaCha8([32]byte{7})
	for f := range inputs {
		name := fmt.Sprintf("in-%d.sst", f)
		out, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		bw := bufio.NewWriterSize(out, 1<<20)
		w := sstable.NewWriter(bw, sstable.WriterOptions{Compression: sstable.S2Compression, ExpectedKeys: perInput / value})
		v := make([]byte, value)
		for k := range perInput / value {
			_, _ = rng.Read(v) // incompressible: the output is as large as the inputs
			// Distinct keys per input: nothing is dropped, the output is b.
			if err := w.Add(kv.InternalKey{UserKey: fmt.Appendf(nil, "key-%d-%07d", f, k), TS: 1, Kind: kv.KindSet}, v); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(bw.Flush(), out.Close()); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, name)
	}
	// The worker joins the cgroup before it starts, so that it reads its
	// limit at start as a pod's container does.
	joinCgroup := []string{"sh", "-c", `echo $$ > "$0" && exec "$@"`, procs}
	w := startVia(t, "worker", joinCgroup, "compactor", "--name=w", fmt.Sprintf("--cache-bytes=%d", m))
	ctx := context.Background()
	stream, err := w.worker().Compact(ctx, &compactionpb.CompactRequest{JobId: "big", BucketUrl: "file://" + dir, KeepOutput: true,
		Job: &compactionpb.Job{Region: "r", Inputs: keys, Output: "out.sst", Merge: &compactionpb.MergeOptions{Major: true},
			Sst: &compactionpb.SSTOptions{Compression: uint32(sstable.S2Compression)}}})
	if err != nil {
		t.Fatal(err)
	}
	var done *compactionpb.CompactEvent_Done
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the job failed (the worker's exit: %v): %v", exitOf(w), err)
		}
		if d := ev.GetDone(); d != nil {
			done = d
		}
	}
	if done == nil || done.OutputBlocks == 0 || done.OutputSize < m*7/8 {
		t.Fatalf("the job's Done: %+v; want an output of about %d MiB kept", done, m>>20)
	}
	if exitOf(w) != "running" {
		t.Fatalf("the worker exited after the job: %s", exitOf(w))
	}
	// The runtime's soft limit follows the container's.
	want := contract.GoMemoryLimitRatio * float64(m+overhead)
	if got := w.metric(t, "go_gc_gomemlimit_bytes"); math.Abs(got-want) > 1<<20 {
		t.Fatalf("the worker's Go memory limit is %.0f MiB, want %.0f MiB (%v of its cgroup's %d MiB)", got/(1<<20), want/(1<<20),
			contract.GoMemoryLimitRatio, (m+overhead)>>20)
	}
	if kills := cgroupOOMKills(t, procs); kills != 0 {
		t.Fatalf("the kernel killed %d processes in the worker's cgroup", kills)
	}
	t.Logf("job of %d MiB, output %d MiB kept in %d blocks, in a cgroup of %d MiB: no OOM kill",
		done.InputBytes>>20, done.OutputSize>>20, done.OutputBlocks, (m+overhead)>>20)
}

// memoryCgroup makes a cgroup (v2, or v1's memory controller) limited to
// limit bytes, removed when the test ends, and returns its cgroup.procs.
func memoryCgroup(t *testing.T, limit int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("making a memory cgroup needs root: run the process tests as root, as CI does")
	}
	name := fmt.Sprintf("bellows-test-%d", os.Getpid())
	var dir, limitFile string
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		dir, limitFile = filepath.Join("/sys/fs/cgroup", name), "memory.max"
	} else if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		dir, limitFile = filepath.Join("/sys/fs/cgroup/memory", name), "memory.limit_in_bytes"
	} else {
		t.Fatal("no cgroup memory controller at /sys/fs/cgroup (v2, or v1's memory)")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("making cgroup %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		t.Fatalf("limiting cgroup %s: %v", dir, err)
	}
	if limitFile == "memory.max" {
		// No swap to spill to: the limit is the memory.
		_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0o644)
	}
	return filepath.Join(dir, "cgroup.procs")
}

// cgroupOOMKills is how many processes the kernel's OOM killer has killed
// in the cgroup whose cgroup.procs is procs (v2: memory.events; v1:
// memory.oom_control).
func cgroupOOMKills(t *testing.T, procs string) int {
	t.Helper()
	dir := filepath.Dir(procs)
	for _, f := range []string{"memory.events", "memory.oom_control"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
	}
	t.Fatalf("no oom_kill count in %s", dir)
	return 0
}

// exitOf says whether p has exited, and how.
func exitOf(p *proc) string {
	select {
	case <-p.exited:
		return p.cmd.ProcessState.String()
	default:
		return "running"
	}
}
