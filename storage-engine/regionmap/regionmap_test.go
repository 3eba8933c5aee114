package regionmap

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/bellows-kv/bellows/storage-engine/blob"
)

func bucket(t *testing.T) *blob.Bucket {
	t.Helper()
	b, err := blob.Open(context.Background(), "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestInitialNamesAndSlotsMatchTheFixedRegions(t *testing.T) {
	m, err := Initial([][]byte{[]byte("g"), []byte("p")})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range m.Region {
		got = append(got, r.Name+"@"+string(r.Start))
		if r.Slot != int(r.ID) {
			t.Errorf("%s in slot %d", r.Name, r.Slot)
		}
	}
	if strings.Join(got, " ") != "region-000@ region-001@g region-002@p" {
		t.Fatalf("initial map %v: the names the regions had before the map, so an existing bucket keeps them", got)
	}
	for key, want := range map[string]string{"": "region-000", "f": "region-000", "g": "region-001", "o": "region-001", "p": "region-002", "zzz": "region-002"} {
		if r := m.Find([]byte(key)); r.Name != want {
			t.Errorf("Find(%q) = %s, want %s", key, r.Name, want)
		}
	}
}

// A split replaces the parent by two daughters in its slot, named by new
// ids, deriving from the parent's final manifest; the parent's name is
// retired for good.
func TestSplitKeepsTheMapValidAndTheSlot(t *testing.T) {
	m, _ := Initial([][]byte{[]byte("m")})
	next, err := m.Split("region-001", []byte("t"), 42)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range next.Region {
		got = append(got, r.Name)
	}
	if strings.Join(got, " ") != "region-000 region-002 region-003" {
		t.Fatalf("after the split: %v", got)
	}
	l, _ := next.ByName("region-002")
	r, _ := next.ByName("region-003")
	if string(l.Start) != "m" || string(l.End) != "t" || string(r.Start) != "t" || r.End != nil {
		t.Fatalf("daughters [%q,%q) [%q,%q)", l.Start, l.End, r.Start, r.End)
	}
	if l.Slot != 1 || r.Slot != 1 || l.Parent == nil || *l.Parent != (Parent{"region-001", 42}) {
		t.Fatalf("daughters %+v %+v: want slot 1 and parent region-001 at manifest 42", l, r)
	}
	if _, ok := next.ByName("region-001"); ok {
		t.Fatal("the parent is still live")
	}
	for _, bad := range []struct {
		name, key, want string
	}{
		{"region-001", "u", "no region region-001"},
		{"region-002", "m", "not strictly inside"},
		{"region-002", "t", "not strictly inside"},
		{"region-003", "a", "not strictly inside"},
	} {
		if _, err := next.Split(bad.name, []byte(bad.key), 1); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Split(%s, %q): %v, want an error saying %q", bad.name, bad.key, err, bad.want)
		}
	}
	// A retired name can never come back.
	revived := next.clone()
	revived.Region[0].Name = "region-001"
	if err := revived.Validate(); err == nil {
		t.Fatal("a map reviving a retired name validated")
	}
}

func TestValidateRefusesGapsOverlapsAndUnboundedMiddles(t *testing.T) {
	good, _ := Initial([][]byte{[]byte("g"), []byte("p")})
	for name, mutate := range map[string]func(m *Map){
		"gap":              func(m *Map) { m.Region[1].Start = []byte("h") },
		"first not empty":  func(m *Map) { m.Region[0].Start = []byte("a") },
		"last bounded":     func(m *Map) { m.Region[2].End = []byte("z") },
		"unbounded middle": func(m *Map) { m.Region[1].End = nil },
		"duplicate id":     func(m *Map) { m.Region[1].ID = 0 },
		"id past next":     func(m *Map) { m.Region[1].ID = 9 },
		"duplicate name":   func(m *Map) { m.Region[1].Name = "region-000" },
		"empty range":      func(m *Map) { m.Region[1].End = []byte("g"); m.Region[2].Start = []byte("g") },
		"no regions":       func(m *Map) { m.Region = nil },
	} {
		m := good.clone()
		mutate(&m)
		if err := m.Validate(); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
}

// Of writers holding the same epoch, exactly one commits the next; the
// others are fenced and see the winner's map when they reload.
func TestConcurrentCommitsAreFenced(t *testing.T) {
	ctx := context.Background()
	b := bucket(t)
	initial, _ := Initial([][]byte{[]byte("m")})
	m, err := Bootstrap(ctx, b, initial)
	if err != nil || m.Epoch != 1 {
		t.Fatalf("bootstrap: epoch %d, %v", m.Epoch, err)
	}
	again, err := Bootstrap(ctx, b, Map{})
	if err != nil || again.Epoch != 1 || len(again.Region) != 2 {
		t.Fatalf("a second bootstrap must load epoch 1, got %+v %v", again, err)
	}
	var wg sync.WaitGroup
	wins := make(chan string, 2)
	for _, name := range []string{"region-000", "region-001"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := map[string]string{"region-000": "f", "region-001": "t"}[name]
			next, err := m.Split(name, []byte(key), 7)
			if err != nil {
				t.Error(err)
				return
			}
			switch err := Commit(ctx, b, m, &next); {
			case err == nil:
				wins <- name
			case !errors.Is(err, ErrFenced):
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	close(wins)
	var won []string
	for w := range wins {
		won = append(won, w)
	}
	if len(won) != 1 {
		t.Fatalf("%d writers committed epoch 2, want exactly 1", len(won))
	}
	got, err := Load(ctx, b)
	if err != nil || got.Epoch != 2 {
		t.Fatalf("newest: epoch %d, %v", got.Epoch, err)
	}
	if _, ok := got.ByName(won[0]); ok {
		t.Fatalf("the winner's split of %s is not in the newest map", won[0])
	}
	if ok, _ := Committed(ctx, b, 3); ok {
		t.Fatal("epoch 3 exists")
	}
}
