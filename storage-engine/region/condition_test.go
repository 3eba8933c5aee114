package region

import (
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/kv"
)

func condPut(r *Region, key, value string, c Condition) (uint64, error) {
	c.Key = []byte(key)
	return r.Apply(new(Batch).Put([]byte(key), []byte(value)).If(c))
}

// failedWith returns err's *ConditionFailedError, failing t if it is not one.
func failedWith(t *testing.T, err error) *ConditionFailedError {
	t.Helper()
	var f *ConditionFailedError
	if !errors.As(err, &f) || !errors.Is(err, ErrConditionFailed) {
		t.Fatalf("err = %v, want a *ConditionFailedError", err)
	}
	return f
}

// Each kind of condition commits when it holds and, when it does not,
// commits nothing and says what the key holds: its value and the version
// of its newest write, a tombstone's included.
func TestAConditionalWriteCommitsOnlyWhenItsConditionHolds(t *testing.T) {
	r := mustOpen(t, testOptions(t, t.TempDir()))
	defer r.Close()

	v1, err := condPut(r, "k", "a", Condition{Absent: true})
	if err != nil {
		t.Fatalf("put if absent on a new key: %v", err)
	}
	f := failedWith(t, func() error { _, err := condPut(r, "k", "b", Condition{Absent: true}); return err }())
	if !f.Found || string(f.Value) != "a" || f.Version != v1 {
		t.Fatalf("failed put-if-absent says %+v, want found a at %d", f, v1)
	}
	f = failedWith(t, func() error { _, err := condPut(r, "k", "b", Condition{Value: []byte("x")}); return err }())
	if string(f.Value) != "a" {
		t.Fatalf("failed put-if-value says %q, want a", f.Value)
	}
	v2, err := condPut(r, "k", "b", Condition{Value: []byte("a")})
	if err != nil || v2 <= v1 {
		t.Fatalf("put if value a: ts %d, %v; want a commit after %d", v2, err, v1)
	}
	f = failedWith(t, func() error { _, err := condPut(r, "k", "c", Condition{Version: v1}); return err }())
	if f.Version != v2 {
		t.Fatalf("failed put-if-version says version %d, want %d", f.Version, v2)
	}
	if _, err := condPut(r, "k", "c", Condition{Version: v2}); err != nil {
		t.Fatalf("put if version %d: %v", v2, err)
	}
	if v, ok, _ := r.Get([]byte("k"), kv.MaxTimestamp); !ok || string(v) != "c" {
		t.Fatalf("k = %q, %v; want c", v, ok)
	}

	// A conditional delete, then the tombstone's version when absent.
	cur, err := condPut(r, "k", "d", Condition{Value: []byte("c")})
	if err != nil {
		t.Fatal(err)
	}
	del, err := r.Apply(new(Batch).Delete([]byte("k")).If(Condition{Key: []byte("k"), Version: cur}))
	if err != nil {
		t.Fatalf("delete if version: %v", err)
	}
	f = failedWith(t, func() error { _, err := condPut(r, "k", "e", Condition{Value: []byte("d")}); return err }())
	if f.Found || f.Value != nil || f.Version != del {
		t.Fatalf("after the delete the condition saw %+v, want absent at the tombstone's version %d", f, del)
	}
	if _, err := condPut(r, "k", "e", Condition{Absent: true}); err != nil {
		t.Fatalf("put if absent after a delete: %v", err)
	}
	// A key never written: absent, no version.
	f = failedWith(t, func() error { _, err := condPut(r, "never", "x", Condition{Value: []byte("y")}); return err }())
	if f.Found || f.Version != 0 {
		t.Fatalf("a key never written: %+v", f)
	}
	// Versions in files read as those in memstores do.
	if err := r.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	f = failedWith(t, func() error { _, err := condPut(r, "k", "x", Condition{Absent: true}); return err }())
	if !f.Found || string(f.Value) != "e" {
		t.Fatalf("after a flush: %+v, want e", f)
	}
}

// A condition that is not exactly one kind, or on a key the batch does not
// write, is refused before anything is judged.
func TestAMalformedConditionIsRefused(t *testing.T) {
	r := mustOpen(t, testOptions(t, t.TempDir()))
	defer r.Close()
	for name, c := range map[string]Condition{
		"none":         {Key: []byte("k")},
		"two kinds":    {Key: []byte("k"), Absent: true, Version: 3},
		"another key":  {Key: []byte("other"), Absent: true},
		"value+absent": {Key: []byte("k"), Absent: true, Value: []byte{}},
	} {
		if _, err := r.Apply(new(Batch).Put([]byte("k"), []byte("v")).If(c)); !errors.Is(err, ErrInvalidCondition) {
			t.Errorf("%s: err = %v, want ErrInvalidCondition", name, err)
		}
	}
}

// Concurrent increments by compare-and-set lose none: every successful
// one is counted in the final value, because no write of the key commits
// between a condition's judgement and its write.
func TestConcurrentIncrementsByCompareAndSetLoseNone(t *testing.T) {
	r := mustOpen(t, testOptions(t, t.TempDir()))
	defer r.Close()
	if _, err := r.Put([]byte("n"), []byte("0")); err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done := 0; done < each; {
				v, ok, err := r.Get([]byte("n"), kv.MaxTimestamp)
				if err != nil || !ok {
					errs <- err
					return
				}
				n, _ := strconv.Atoi(string(v))
				_, err = condPut(r, "n", strconv.Itoa(n+1), Condition{Value: v})
				switch {
				case err == nil:
					done++
				case !errors.Is(err, ErrConditionFailed):
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if v, _, _ := r.Get([]byte("n"), kv.MaxTimestamp); string(v) != strconv.Itoa(workers*each) {
		t.Fatalf("n = %s after %d successful increments", v, workers*each)
	}
}
