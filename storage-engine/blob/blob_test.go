package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCreateIfAbsentAndRandomReads(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"file://" + t.TempDir(), "mem://"} {
		b, err := Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.WriteAll(ctx, "m/1", []byte("first"), true); err != nil {
			t.Fatal(err)
		}
		if err := b.WriteAll(ctx, "m/1", []byte("second"), true); !errors.Is(err, ErrExists) {
			t.Fatalf("%s: second create-if-absent write: %v, want ErrExists", u, err)
		}
		if d, _ := b.ReadAll(ctx, "m/1"); string(d) != "first" {
			t.Fatalf("%s: object was overwritten: %q", u, d)
		}
		o, err := b.OpenObject(ctx, "m/1")
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, 3)
		if _, err := o.ReadAt(p, 1); err != nil || string(p) != "irs" || o.Size() != 5 {
			t.Fatalf("%s: ReadAt = %q, %v, size %d", u, p, err, o.Size())
		}
		if _, err := o.ReadAt(make([]byte, 10), 2); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: short read past the end: %v", u, err)
		}
		o.Close()
		if _, err := b.ReadAll(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: missing object: %v", u, err)
		}
		list, err := b.List(ctx, "m/")
		if err != nil || len(list) != 1 || list[0].Key != "m/1" {
			t.Fatalf("%s: List = %v, %v", u, list, err)
		}
		if err := b.Delete(ctx, "m/1"); err != nil {
			t.Fatal(err)
		}
		if err := b.Delete(ctx, "m/1"); err != nil {
			t.Fatalf("deleting a missing object: %v", err)
		}
		b.Close()
	}
}

// Writers racing to create one object: exactly one succeeds and its bytes
// are the object's. (fileblob's own IfNotExist checks, then renames: two
// racers could both succeed, the later replacing the earlier, which broke
// the fencing of manifests and region maps on file buckets.)
func TestRacingCreatesHaveOneWinner(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"file://" + t.TempDir(), "mem://"} {
		b, err := Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		for round := range 50 {
			key := fmt.Sprintf("race/%d", round)
			var wg sync.WaitGroup
			wins := make([]bool, 8)
			for w := range wins {
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := b.WriteAll(ctx, key, []byte(fmt.Sprint("writer ", w)), true)
					if err != nil && !errors.Is(err, ErrExists) {
						t.Error(err)
					}
					wins[w] = err == nil
				}()
			}
			wg.Wait()
			var winners []int
			for w, ok := range wins {
				if ok {
					winners = append(winners, w)
				}
			}
			if len(winners) != 1 {
				t.Fatalf("%s round %d: writers %v all created %s, want exactly one", u, round, winners, key)
			}
			if d, _ := b.ReadAll(ctx, key); string(d) != fmt.Sprint("writer ", winners[0]) {
				t.Fatalf("%s round %d: the object holds %q, not the winner's", u, round, d)
			}
		}
		objs, err := b.List(ctx, "race/")
		if err != nil || len(objs) != 50 {
			t.Fatalf("%s: listed %d objects (%v), want the 50 created and no temporary file", u, len(objs), err)
		}
	}
}

func TestUnsupportedSchemeNamesIt(t *testing.T) {
	_, err := Open(context.Background(), "ftp://host/x")
	if err == nil || !strings.Contains(err.Error(), `"ftp"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestReadHook(t *testing.T) {
	ctx := context.Background()
	b, err := Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.WriteAll(ctx, "k", []byte("hello world"), false); err != nil {
		t.Fatal(err)
	}
	var seen int
	stop := errors.New("stop")
	hooked := b.WithReadHook(func(_ context.Context, n int) error {
		seen += n
		if seen > 8 {
			return stop
		}
		return nil
	})
	o, err := hooked.OpenObject(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	buf := make([]byte, 5)
	if _, err := o.ReadAt(buf, 0); err != nil || string(buf) != "hello" || seen != 5 {
		t.Fatalf("first read: %q %v seen=%d", buf, err, seen)
	}
	if _, err := o.ReadAt(buf, 6); !errors.Is(err, stop) {
		t.Fatalf("second read should fail with the hook's error, got %v", err)
	}
	// The original bucket is unaffected.
	o2, err := b.OpenObject(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer o2.Close()
	if _, err := o2.ReadAt(buf, 6); err != nil || seen != 10 {
		t.Fatalf("unhooked read: %v seen=%d", err, seen)
	}
}

func TestCostModelTravelsInTheURLAndIsCharged(t *testing.T) {
	ctx := context.Background()
	u, err := WithCostModel("file://"+t.TempDir(), CostModel{Latency: 30 * time.Millisecond, Bandwidth: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got := b.Cost(); got.Latency != 30*time.Millisecond || got.Bandwidth != 1<<20 {
		t.Fatalf("cost model %+v", got)
	}
	if err := b.WriteAll(ctx, "x", make([]byte, 1<<19), false); err != nil {
		t.Fatal(err)
	}
	o, err := b.OpenObject(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	began := time.Now()
	if _, err := o.ReadAt(make([]byte, 1<<19), 0); err != nil {
		t.Fatal(err)
	}
	// 30ms + 512KiB at 1MiB/s = 530ms at least.
	if d := time.Since(began); d < 530*time.Millisecond {
		t.Fatalf("a modelled read took %v, less than the model's 530ms", d)
	}
	// A whole object's read is one GET too: 30ms + 512KiB at 1MiB/s.
	began = time.Now()
	if got, err := b.ReadAll(ctx, "x"); err != nil || len(got) != 1<<19 {
		t.Fatalf("ReadAll: %d bytes, %v", len(got), err)
	}
	if d := time.Since(began); d < 530*time.Millisecond {
		t.Fatalf("a modelled ReadAll took %v, less than the model's 530ms", d)
	}
	if _, err := Open(ctx, "file:///tmp/x?bellows_latency=soon"); err == nil || !strings.Contains(err.Error(), "bellows_latency") {
		t.Fatalf("bad latency accepted: %v", err)
	}
}

// The write latency travels in the URL with the rest of the model and is
// charged on every PUT: WriteAll (create-if-absent too, refused or not) and
// a streamed writer's Close, which makes the object visible only after it.
// Reads stay as the read model says; without it writes cost nothing.
func TestCostModelWriteLatencyTravelsInTheURLAndIsCharged(t *testing.T) {
	ctx := context.Background()
	model := CostModel{Latency: time.Millisecond, WriteLatency: 60 * time.Millisecond}
	u, err := WithCostModel("file://"+t.TempDir(), model)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(u, "bellows_write_latency=60ms") {
		t.Fatalf("URL %q does not carry the write latency", u)
	}
	b, err := Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got := b.Cost(); got != model {
		t.Fatalf("cost model %+v, want %+v", got, model)
	}
	if s := b.Cost().String(); !strings.Contains(s, "60ms per write") {
		t.Fatalf("String() = %q", s)
	}
	took := func(what string, f func() error) {
		t.Helper()
		began := time.Now()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if d := time.Since(began); d < 60*time.Millisecond {
			t.Fatalf("%s took %v, less than the model's 60ms per write", what, d)
		}
	}
	took("WriteAll", func() error { return b.WriteAll(ctx, "a", []byte("x"), false) })
	took("WriteAll if absent", func() error { return b.WriteAll(ctx, "b", []byte("x"), true) })
	took("a refused WriteAll if absent", func() error {
		if err := b.WriteAll(ctx, "b", []byte("y"), true); !errors.Is(err, ErrExists) {
			return fmt.Errorf("got %v, want ErrExists", err)
		}
		return nil
	})
	w, err := b.NewWriter(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("streamed")); err != nil {
		t.Fatal(err)
	}
	took("a writer's Close", w.Close)
	if got, err := b.ReadAll(ctx, "c"); err != nil || string(got) != "streamed" {
		t.Fatalf("the streamed object reads %q, %v", got, err)
	}
	// A cancelled write waits no longer and writes nothing.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.WriteAll(cctx, "d", []byte("x"), true); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled write: %v", err)
	}
	if ok, err := b.Exists(ctx, "d"); err != nil || ok {
		t.Fatalf("a cancelled write left its object: %v, %v", ok, err)
	}
	// Without a write latency a write waits for nothing, read model or not.
	plain, err := WithCostModel("file://"+t.TempDir(), CostModel{Latency: time.Second, Bandwidth: 1})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := Open(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	defer pb.Close()
	began := time.Now()
	if err := pb.WriteAll(ctx, "x", make([]byte, 1<<10), false); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 500*time.Millisecond {
		t.Fatalf("a write with no write latency modelled took %v", d)
	}
	if _, err := Open(ctx, "file:///tmp/x?bellows_write_latency=-1s"); err == nil || !strings.Contains(err.Error(), "bellows_write_latency") {
		t.Fatalf("bad write latency accepted: %v", err)
	}
}

// A file:// bucket writes each object's temporary file next to it, not in
// TMPDIR: on another mount the rename into place would fail, and a process
// killed mid-write would leave it there for good. List never shows one.
func TestFileBucketWritesTemporaryFilesBesideTheObject(t *testing.T) {
	ctx := context.Background()
	tmp, dir := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", tmp)
	b, err := Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.NewWriter(ctx, "regions/r/sst/000001.sst")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("half")); err != nil {
		t.Fatal(err)
	}
	// Mid-write, as a killed writer leaves it.
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Fatalf("a temporary file in TMPDIR: %v", left)
	}
	beside, _ := filepath.Glob(filepath.Join(dir, "regions/r/sst/000001.sst.*.tmp"))
	if len(beside) != 1 {
		t.Fatalf("temporary files beside the object: %v; want 1", beside)
	}
	if objs, err := b.List(ctx, "regions/"); err != nil || len(objs) != 0 {
		t.Fatalf("List mid-write: %v, %v; want nothing", objs, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if objs, err := b.List(ctx, "regions/"); err != nil || len(objs) != 1 || objs[0].Key != "regions/r/sst/000001.sst" {
		t.Fatalf("List after the write: %v, %v; want the object", objs, err)
	}
}

// A copy inside a bucket is the source's bytes under the new key, whatever
// happens to the source after (a file bucket links the file: the source's
// deletion or replacement leaves the copy as it was), through a prefixed
// view too; copying a missing object says so.
func TestCopyOutlivesAndIgnoresItsSource(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"file://" + t.TempDir(), "mem://"} {
		root, err := Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		b := root.Prefixed("regions/r1/")
		if err := b.WriteAll(ctx, "sst/1", []byte("one"), false); err != nil {
			t.Fatal(err)
		}
		if err := b.Copy(ctx, "backups/sst/1", "sst/1"); err != nil {
			t.Fatal(err)
		}
		if err := b.WriteAll(ctx, "sst/1", []byte("replaced"), false); err != nil {
			t.Fatal(err)
		}
		if d, err := b.ReadAll(ctx, "backups/sst/1"); err != nil || string(d) != "one" {
			t.Fatalf("%s: the copy after its source was replaced: %q, %v", u, d, err)
		}
		if err := b.Delete(ctx, "sst/1"); err != nil {
			t.Fatal(err)
		}
		if d, err := root.ReadAll(ctx, "regions/r1/backups/sst/1"); err != nil || string(d) != "one" {
			t.Fatalf("%s: the copy after its source was deleted: %q, %v", u, d, err)
		}
		if err := b.Copy(ctx, "backups/sst/2", "sst/missing"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: copying a missing object: %v, want ErrNotFound", u, err)
		}
		if list, err := b.List(ctx, "backups/"); err != nil || len(list) != 1 {
			t.Fatalf("%s: listing after the copies: %v, %v; want the one copy", u, list, err)
		}
		root.Close()
	}
}

// Dirs lists one level under a prefix, on a file bucket while writers fill
// the tree beneath it (each write renames a temporary file), and through a
// prefixed bucket; a prefix with nothing under it has no directories.
func TestDirsListsOneLevelWhileTheTreeBeneathIsWritten(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"file://" + t.TempDir(), "mem://"} {
		root, err := Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		b := root.Prefixed("top/")
		for _, k := range []string{"a/x/1", "a/y/2", "a/y/3", "a/z", "b/w/4"} {
			if err := b.WriteAll(ctx, k, []byte(k), true); err != nil {
				t.Fatal(err)
			}
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := b.WriteAll(ctx, fmt.Sprintf("a/x/part-%06d", i), []byte("p"), true); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		for range 50 {
			got, err := b.Dirs(ctx, "a/")
			if err != nil {
				t.Fatalf("%s: Dirs under a tree being written: %v", u, err)
			}
			if strings.Join(got, ",") != "x,y" {
				t.Fatalf("%s: Dirs(a/) = %v, want [x y]", u, got)
			}
		}
		close(stop)
		wg.Wait()
		if got, err := b.Dirs(ctx, ""); err != nil || strings.Join(got, ",") != "a,b" {
			t.Fatalf("%s: Dirs() = %v, %v, want [a b]", u, got, err)
		}
		if got, err := b.Dirs(ctx, "missing/"); err != nil || len(got) != 0 {
			t.Fatalf("%s: Dirs(missing/) = %v, %v, want none", u, got, err)
		}
	}
}
