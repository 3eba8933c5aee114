package grpcmem

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	compactionpb "github.com/bellows-kv/bellows/proto/bellows/compaction/v1"
)

// A message is read into a buffer of the pool's next tier up: under twice
// its size, where gRPC's default pool gave anything over 32 KiB (an SST
// block with its header) a 1 MiB buffer to clear.
func TestPoolGivesAMessageABufferUnderTwiceItsSize(t *testing.T) {
	for _, n := range []int{300, 5000, 33 << 10, 100 << 10, 600 << 10} {
		buf := Pool.Get(n)
		if len(*buf) != n || cap(*buf) >= 2*n {
			t.Errorf("Get(%d): len %d cap %d, want len %d and cap under %d", n, len(*buf), cap(*buf), n, 2*n)
		}
		Pool.Put(buf)
	}
}

// The codec reads a message that arrived in several buffers, as a block
// streamed in 16 KiB HTTP/2 frames does, and what it returns does not
// alias the pooled buffer it read from.
func TestCodecReadsAMessageSplitAcrossFrames(t *testing.T) {
	stored := bytes.Repeat([]byte("0123456789abcdef"), 33<<10/16)
	want := &compactionpb.Block{Index: 7, Offset: 1 << 20, Length: uint64(len(stored)), LastUserKey: []byte("user42"), Stored: stored}
	wire, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var frames mem.BufferSlice
	for off := 0; off < len(wire); off += 16 << 10 {
		frames = append(frames, mem.SliceBuffer(wire[off:min(off+16<<10, len(wire))]))
	}
	if len(frames) < 3 {
		t.Fatalf("%d frames: the message must span several", len(frames))
	}
	got := &compactionpb.Block{}
	if err := Codec.Unmarshal(frames, got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("read back a different block: index %d, %d stored bytes", got.Index, len(got.Stored))
	}
	// The next read reuses the pooled buffer: the block must not change.
	junk := Pool.Get(len(wire))
	for i := range *junk {
		(*junk)[i] = 0xff
	}
	Pool.Put(junk)
	if !bytes.Equal(got.Stored, stored) {
		t.Fatal("the block read aliases the pool's buffer")
	}
	if Codec.Name() != "proto" {
		t.Fatalf("codec named %q: a peer without it would not read our messages as proto", Codec.Name())
	}
}
