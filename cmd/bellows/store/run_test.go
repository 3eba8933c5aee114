package store

import "testing"

// A new owner is ready when its pod, <statefulset>-<ordinal>, is among the
// ready endpoints' hostnames; another StatefulSet's pod of the same ordinal
// does not count.
func TestReadyOrdinalsArePodNames(t *testing.T) {
	ready := readyOrdinals("kv", func() []string { return []string{"kv-0", "kv-2", "kvx-1", "other-1"} })
	for ord, want := range map[int]bool{0: true, 1: false, 2: true, 3: false} {
		if got := ready(ord); got != want {
			t.Errorf("ready(%d) = %v, want %v", ord, got, want)
		}
	}
}
