// Package grpcmem holds what every gRPC server and client of Bellows shares
// about how messages and streams use memory.
package grpcmem

import (
	"runtime"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec Codec wraps
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// poolExponents are the buffer pool's tiers, powers of two from 256 B to
// 1 MiB. gRPC's default pool has tiers of 256 B, 4, 16 and 32 KiB and 1 MiB,
// and zeroes the whole buffer of the tier it hands out: a message just over
// 32 KiB (an SST block of the default 32 KiB that a compaction worker
// streams to a store's warmup, with its index and last key) took and
// cleared a 1 MiB buffer, and clearing was 6% of the store's CPU during a
// warmup (perf, bench/results/phases-control-60k.md's regime). With every
// power of two a message's buffer is less than twice its size.
var poolExponents = []uint8{8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}

// Pool is the buffer pool messages are read into.
var Pool = func() mem.BufferPool {
	p, err := mem.NewBinaryTieredBufferPool(poolExponents...)
	if err != nil {
		panic("grpcmem: " + err.Error())
	}
	return p
}()

// Codec is gRPC's proto codec, but reading a message into Pool. gRPC's
// own copies a message that arrived in several buffers (one per HTTP/2
// frame of 16 KiB) into a buffer of mem.DefaultBufferPool, whatever pool
// the connection was given (google.golang.org/grpc/encoding/proto,
// v1.83): every block a warmup streamed cleared a 1 MiB buffer.
var Codec encoding.CodecV2 = codec{encoding.GetCodecV2("proto")}

type codec struct{ encoding.CodecV2 }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(Pool)
	defer buf.Free()
	// proto.Unmarshal copies what it keeps: buf goes back to the pool.
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// DialOptions are the options every client connection of Bellows dials with.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		experimental.WithBufferPool(Pool),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(Codec)),
	}
}

// ServerOptions are the options every gRPC server of Bellows runs with.
//
// Stream workers: without them a server starts a goroutine per call, whose
// stack starts small and is copied each time the call's path outgrows it
// (runtime.morestack): 9% of a store's CPU serving point reads, in every
// phase of the Figure 7 run. A worker keeps its grown stack from one call
// to the next; a call that finds every worker busy still gets a goroutine
// of its own, so the count bounds nothing but the reuse.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		experimental.BufferPool(Pool),
		grpc.ForceServerCodecV2(Codec),
		grpc.NumStreamWorkers(uint32(streamWorkersPerCPU * runtime.GOMAXPROCS(0))),
	}
}

// streamWorkersPerCPU: calls wait (for a lock, a block from the bucket or a
// worker, a peer) as well as compute, so more than one per CPU are in
// flight at once.
const streamWorkersPerCPU = 4
