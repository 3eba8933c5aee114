package wal

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkAppendThenSync appends 128 bytes to a growing file and makes
// them durable, with a full fsync and with fdatasync (syncData): the cost
// of one acknowledged write in ModeSync from one writer. Run both in one
// process; the ratio is what counts on a shared machine.
func BenchmarkAppendThenSync(b *testing.B) {
	rec := make([]byte, 128)
	for _, c := range []struct {
		name string
		sync func(*os.File) error
	}{
		{"fsync", (*os.File).Sync},
		{"fdatasync", syncData},
	} {
		b.Run(c.name, func(b *testing.B) {
			f, err := os.OpenFile(filepath.Join(b.TempDir(), "segment"), os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			for range b.N {
				if _, err := f.Write(rec); err != nil {
					b.Fatal(err)
				}
				if err := c.sync(f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
