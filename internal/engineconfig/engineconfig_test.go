package engineconfig

import (
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	in := Config{
		Memstore:        Memstore{Policy: "Adaptive", Bytes: 128 << 20},
		BlockCacheBytes: 1 << 30,
		Compaction:      Compaction{MinFiles: 3, MaxFiles: 10, Ratio: 1.2, MaxBytes: 4 << 30},
		Offload:         "Preferred",
		Warmup:          Warmup{Mode: "ThrottledIncremental", RateBytesPerSecond: 8_000_000},
		SyncMode:        "sync",
	}
	data, err := Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"memstore:", "policy: Adaptive", "blockCacheBytes: 1073741824", "ratio: 1.2", "offload: Preferred", "rateBytesPerSecond: 8000000", "syncMode: sync"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("engine.yaml lacks %q:\n%s", want, data)
		}
	}
	out, err := Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Fatalf("round trip: got %+v, want %+v", out, in)
	}
}

func TestUnknownKeyRejected(t *testing.T) {
	if _, err := Unmarshal([]byte("memstore: {policy: None}\nbogus: 1\n")); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("want an error naming the unknown key, got %v", err)
	}
}
