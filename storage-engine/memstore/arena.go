package memstore

import "sync"

// chunkSize is the unit in which key and value bytes are allocated. Chunks
// hold no pointers, so the garbage collector never scans them, and a write
// costs no allocation of its own for its bytes.
const chunkSize = 1 << 20

// arena hands out byte slices carved from shared chunks.
type arena struct {
	mu    sync.Mutex
	chunk []byte
}

func (a *arena) alloc(n int) []byte {
	if n > chunkSize/4 {
		return make([]byte, n)
	}
	a.mu.Lock()
	if len(a.chunk)+n > cap(a.chunk) {
		a.chunk = make([]byte, 0, chunkSize)
	}
	off := len(a.chunk)
	a.chunk = a.chunk[:off+n]
	b := a.chunk[off : off+n : off+n]
	a.mu.Unlock()
	return b
}
