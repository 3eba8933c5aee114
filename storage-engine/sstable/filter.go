package sstable

import (
	"math"

	"github.com/cespare/xxhash/v2"
)

// A format 2 file keeps one bloom filter per partition, tested in place in
// the block cache's copy:
//
//	filter := bits uint8(probes)
//
// The probes are double hashing of the key's 64-bit xxhash
// (Kirsch–Mitzenmacher): position j is (h1 + j·h2) mod m with h1 and h2
// its low and high halves. A format 1 file's one filter is bits-and-blooms'
// encoding, decoded when the file is opened.

// keyHash is the hash a filter stores for a user key.
func keyHash(userKey []byte) uint64 { return xxhash.Sum64(userKey) }

// bitsPerKey is the filter density that gives false-positive rate p.
func bitsPerKey(p float64) int {
	return max(1, int(math.Ceil(-math.Log(p)/(math.Ln2*math.Ln2))))
}

// appendFilter appends the filter of the keys with hashes hs.
func appendFilter(dst []byte, hs []uint64, bitsPerKey int) []byte {
	nBytes := max((len(hs)*bitsPerKey+7)/8, 8)
	probes := min(max(int(float64(bitsPerKey)*math.Ln2), 1), 30)
	start := len(dst)
	dst = append(dst, make([]byte, nBytes+1)...)
	bits := dst[start : start+nBytes]
	m := uint64(nBytes) * 8
	for _, h := range hs {
		h1, h2 := h&0xffffffff, h>>32
		for j := range uint64(probes) {
			p := (h1 + j*h2) % m
			bits[p/8] |= 1 << (p % 8)
		}
	}
	dst[start+nBytes] = byte(probes)
	return dst
}

// filterMayContain reports whether the key of hash h may be in filter f.
// A malformed filter answers yes: it can only cost a read.
func filterMayContain(f []byte, h uint64) bool {
	if len(f) < 2 {
		return true
	}
	bits, probes := f[:len(f)-1], uint64(f[len(f)-1])
	m := uint64(len(bits)) * 8
	h1, h2 := h&0xffffffff, h>>32
	for j := range probes {
		p := (h1 + j*h2) % m
		if bits[p/8]&(1<<(p%8)) == 0 {
			return false
		}
	}
	return true
}
