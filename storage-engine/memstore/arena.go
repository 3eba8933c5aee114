package memstore

import "sync"

// chunkSize is the unit in which key and value bytes are allocated. Chunks
// hold no pointers, so the garbage collector never scans them, and a write
// costs no allocation of its own for its bytes.
const chunkSize = 1 << 20

// loc names bytes in an arena: chunk index << 32 | offset. Flat segments
// index entries by loc, so their index holds no pointers either (the
// CellChunkMap of HBase's Accordion).
type loc uint64

func makeLoc(chunk, off int) loc { return loc(uint64(chunk)<<32 | uint64(off)) }
func (l loc) chunk() int         { return int(l >> 32) }
func (l loc) off() int           { return int(uint32(l)) }

// arena hands out byte slices carved from chunks it keeps in order; a
// slice's loc stays valid for as long as the chunks are kept.
type arena struct {
	mu     sync.Mutex
	chunks [][]byte
	fill   int // index of the chunk being filled; -1 before the first
}

func newArena() *arena { return &arena{fill: -1} }

func (a *arena) alloc(n int) ([]byte, loc) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n > chunkSize/4 {
		// A large value gets a chunk of its own; the chunk being filled
		// goes on filling.
		a.chunks = append(a.chunks, make([]byte, n))
		i := len(a.chunks) - 1
		return a.chunks[i], makeLoc(i, 0)
	}
	if a.fill < 0 || len(a.chunks[a.fill])+n > chunkSize {
		a.chunks = append(a.chunks, make([]byte, 0, chunkSize))
		a.fill = len(a.chunks) - 1
	}
	c := a.chunks[a.fill]
	off := len(c)
	a.chunks[a.fill] = c[:off+n]
	return a.chunks[a.fill][off : off+n : off+n], makeLoc(a.fill, off)
}

// all returns the chunks; a loc handed out before the call resolves in
// them.
func (a *arena) all() [][]byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.chunks
}
