package offload

import (
	"fmt"
	"slices"
	"testing"
)

// Rendezvous order is deterministic, independent of list order, and removing
// a worker moves only the regions that preferred it.
func TestRendezvous(t *testing.T) {
	workers := []string{"10.0.0.1:7500", "10.0.0.2:7500", "10.0.0.3:7500", "10.0.0.4:7500"}
	rev := slices.Clone(workers)
	slices.Reverse(rev)
	first := map[string]int{}
	for i := range 400 {
		region := fmt.Sprintf("region-%03d", i)
		o := Rendezvous(region, workers)
		if !slices.Equal(o, Rendezvous(region, rev)) || len(o) != len(workers) {
			t.Fatalf("%s: order depends on the list order", region)
		}
		first[o[0]]++
		without := Rendezvous(region, workers[1:])
		if o[0] != workers[0] && without[0] != o[0] {
			t.Fatalf("%s moved from %s although only %s left", region, o[0], workers[0])
		}
		if !slices.Equal(without, slices.DeleteFunc(slices.Clone(o), func(w string) bool { return w == workers[0] })) {
			t.Fatalf("%s: removing a worker reordered the rest", region)
		}
	}
	for _, w := range workers {
		if first[w] < 50 { // 100 expected; a hash this skewed is broken
			t.Fatalf("worker %s preferred by only %d of 400 regions: %v", w, first[w], first)
		}
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": Preferred, "Required": Required, "Preferred": Preferred, "Disabled": Disabled} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Fatalf("ParseMode(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseMode("sometimes"); err == nil {
		t.Fatal("ParseMode accepted sometimes")
	}
}
