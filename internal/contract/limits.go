package contract

// Request size limits. The client checks them before sending (so a too
// large value fails with its name and the limit, not with gRPC's "message
// larger than max"), the store passes them to its regions, and the gRPC
// message limit is derived from them so that any request within them fits
// in one message.
const (
	// MaxKeyBytes is the largest key; a key must also be non-empty.
	MaxKeyBytes = 64 << 10
	// MaxValueBytes is the largest value of one write.
	MaxValueBytes = 4 << 20
	// MaxBatchBytes bounds one atomic batch (and a transaction's writes
	// in one region): the sum of its keys' and values' sizes.
	MaxBatchBytes = 64 << 20
	// MaxMessageBytes is the largest gRPC message a store receives and a
	// client (or a forwarding store) accepts: the largest batch and its
	// framing. gRPC's own default, 4 MiB, is smaller than one value of
	// MaxValueBytes with its key.
	MaxMessageBytes = MaxBatchBytes + 1<<20
)
