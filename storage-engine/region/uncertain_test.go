package region

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// A read at S with limit L (docs/clock.md): a version in (S, L] fails it
// with an *UncertainError naming the version, by Get and by iterators in
// both directions, a tombstone as much as a value; one above L is the
// future and is not seen; without a limit nothing changes.
func TestReadsWithinTheUncertaintyWindowFail(t *testing.T) {
	r := openForTxns(t)
	mustPut(t, r, "a", "1")
	mustPut(t, r, "m", "1")
	in := mustPut(t, r, "b", "2")
	del, err := r.Delete([]byte("m"))
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, r, "z", "3")
	ctx := context.Background()
	readTS := in - 1
	limit := del // in and del within (readTS, limit]; after beyond it

	var ue *UncertainError
	if _, _, err := r.GetUncertain(ctx, []byte("b"), readTS, limit); !errors.As(err, &ue) || ue.TS != in || string(ue.Key) != "b" {
		t.Fatalf("Get of a key written within the window: %v, want an *UncertainError at %d", err, in)
	}
	if _, _, err := r.GetUncertain(ctx, []byte("m"), readTS, limit); !errors.As(err, &ue) || ue.TS != del {
		t.Fatalf("Get of a key deleted within the window: %v, want an *UncertainError at %d", err, del)
	}
	if v, ok, err := r.GetUncertain(ctx, []byte("a"), readTS, limit); err != nil || !ok || string(v) != "1" {
		t.Fatalf("Get of a key untouched in the window: %q %v %v", v, ok, err)
	}
	if _, ok, err := r.GetUncertain(ctx, []byte("z"), readTS, limit); err != nil || ok {
		t.Fatalf("Get of a key written after the limit: %v %v, want absent", ok, err)
	}
	if v, ok, err := r.GetUncertain(ctx, []byte("b"), readTS, 0); err != nil || ok {
		t.Fatalf("Get without a limit: %q %v %v, want the snapshot (absent)", v, ok, err)
	}
	for _, dir := range []string{"forward", "reverse"} {
		it, err := r.NewIteratorUncertain(ctx, nil, nil, readTS, limit)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		ok := it.First()
		if dir == "reverse" {
			ok = it.Last()
		}
		for ; ok; ok = map[bool]func() bool{true: it.Prev, false: it.Next}[dir == "reverse"]() {
			keys = append(keys, string(it.Key()))
		}
		err = it.Err()
		_ = it.Close()
		if !errors.As(err, &ue) || ue.ReadTS != readTS {
			t.Fatalf("%s scan over the window: keys %v, err %v; want an *UncertainError", dir, keys, err)
		}
		// Forward, "a" is live before "b"; reverse, "z" is beyond the
		// limit and not seen, and "m" (deleted in the window) stops it.
		if want := map[string]string{"forward": "[a]", "reverse": "[]"}[dir]; fmt.Sprint(keys) != want {
			t.Fatalf("%s scan returned %v before the uncertain key, want %s", dir, keys, want)
		}
	}
}
