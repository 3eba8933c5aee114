package regionmap

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
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
	if l.Slot != 1 || r.Slot != 1 || !reflect.DeepEqual(l.Parents, []Parent{{"region-001", 42}}) || !reflect.DeepEqual(r.Parents, l.Parents) {
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

// A merge replaces two adjacent regions by one over both ranges, named by a
// new id, in the left one's slot, deriving from both parents' final
// manifests in key order; both names are retired for good.
func TestMergeKeepsTheMapValid(t *testing.T) {
	m, _ := Initial([][]byte{[]byte("g"), []byte("p")})
	next, err := m.Merge("region-001", "region-002", 7, 9)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range next.Region {
		got = append(got, r.Name)
	}
	if strings.Join(got, " ") != "region-000 region-003" || next.NextID != 4 {
		t.Fatalf("after the merge: %v, next id %d", got, next.NextID)
	}
	mr, _ := next.ByName("region-003")
	if string(mr.Start) != "g" || mr.End != nil || mr.Slot != 1 {
		t.Fatalf("merged region [%q, %q) in slot %d, want [g, ∞) in the left parent's slot 1", mr.Start, mr.End, mr.Slot)
	}
	if want := []Parent{{"region-001", 7}, {"region-002", 9}}; !reflect.DeepEqual(mr.Parents, want) {
		t.Fatalf("parents %+v, want %+v", mr.Parents, want)
	}
	if !slices.Equal(next.Retired, []string{"region-001", "region-002"}) {
		t.Fatalf("retired %v", next.Retired)
	}
	if r := next.Find([]byte("h")); r.Name != "region-003" {
		t.Fatalf("Find(h) = %s", r.Name)
	}
	// The first region merges with the merged one: [""", ∞) again.
	all, err := next.Merge("region-000", "region-003", 1, 2)
	if err != nil || len(all.Region) != 1 || len(all.Region[0].Start) != 0 || all.Region[0].End != nil || all.Region[0].Slot != 0 {
		t.Fatalf("merging the last two: %+v %v", all.Region, err)
	}
	for _, bad := range []struct {
		left, right, want string
	}{
		{"region-001", "region-003", "no region region-001"},
		{"region-000", "region-009", "no region region-009"},
		{"region-008", "region-009", "neither is a live region"},
		{"region-003", "region-000", "name the left region first"},
		{"region-000", "region-000", "with itself"},
	} {
		if _, err := next.Merge(bad.left, bad.right, 1, 1); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Merge(%s, %s): %v, want an error saying %q", bad.left, bad.right, err, bad.want)
		}
	}
	three, _ := Initial([][]byte{[]byte("g"), []byte("p")})
	_, err = three.Merge("region-000", "region-002", 1, 1)
	if err == nil || !strings.Contains(err.Error(), "not adjacent") || !strings.Contains(err.Error(), "region-000") || !strings.Contains(err.Error(), "region-002") {
		t.Fatalf("merging regions with one between: %v, want a refusal naming both", err)
	}
	// A map naming a live region as a parent is invalid.
	bad := next.clone()
	bad.Region[1].Parents = []Parent{{"region-000", 1}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "still live") {
		t.Fatalf("a map with a live parent: %v", err)
	}
}

// A map written before merges were built names a split's parent in a
// "parent" object: it still loads, with that parent as the one of Parents.
func TestMapsWithTheOldParentFieldStillLoad(t *testing.T) {
	ctx := context.Background()
	b := bucket(t)
	old := `{"epoch":2,"nextID":3,"regions":[` +
		`{"id":1,"name":"region-001","start":"","end":"bQ==","slot":0,"parent":{"name":"region-000","manifest":12}},` +
		`{"id":2,"name":"region-002","start":"bQ==","slot":0,"parent":{"name":"region-000","manifest":12}}],` +
		`"retired":["region-000"]}`
	if err := b.WriteAll(ctx, ObjectName(2), []byte(old), true); err != nil {
		t.Fatal(err)
	}
	m, err := Load(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range m.Region {
		if want := []Parent{{"region-000", 12}}; !reflect.DeepEqual(r.Parents, want) {
			t.Fatalf("%s: parents %+v, want %+v", r.Name, r.Parents, want)
		}
	}
	// Written again, it uses the new field only, and reads back the same.
	next, err := m.Merge("region-001", "region-002", 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := Commit(ctx, b, m, &next); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(next)
	if strings.Contains(string(data), `"parent"`) {
		t.Fatalf("a new map writes the old field: %s", data)
	}
	again, err := Load(ctx, b)
	if err != nil || again.Epoch != 3 || !reflect.DeepEqual(again.Region, next.Region) {
		t.Fatalf("reloaded %+v %v, want %+v", again, err, next)
	}
}
