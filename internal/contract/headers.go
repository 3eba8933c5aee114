package contract

// RequestIDHeader is the gRPC metadata key of a write's idempotency key: a
// store that already applied a write with the same key answers it with the
// first result instead of applying it again (storage-engine/server's
// dedupe.go says what that covers). The CLI and the Go client send one per
// logical write, the same on every retry.
const RequestIDHeader = "bellows-request-id"

// WriteConflictReason is the ErrorInfo reason (domain ErrorDomain) of the
// ABORTED status a CommitTxn answers on a write conflict; its metadata
// names the key (key_base64) and the conflicting commit (committed_ts).
const (
	WriteConflictReason = "WRITE_CONFLICT"
	ErrorDomain         = "bellows.kv.v1"
)

// ReadConflictReason is the ErrorInfo reason (domain ErrorDomain) of the
// ABORTED status a serializable CommitTxn answers when a key it read was
// written after its start, before it could commit; its metadata names the
// key (key_base64) and the conflicting commit or lock (committed_ts).
const ReadConflictReason = "READ_CONFLICT"

// TxnEndedReason is the ErrorInfo reason (domain ErrorDomain) of the
// FAILED_PRECONDITION a CommitTxn naming a txn_id answers when that
// transaction ended without a commit (rolled back, timed out, aborted):
// nothing of it was written, and it may be run again from BeginTxn.
const TxnEndedReason = "TXN_ENDED"

// SnapshotTooOldReason is the ErrorInfo reason (domain ErrorDomain) of the
// FAILED_PRECONDITION a read at a timestamp answers when the region's
// retention (the GC window retention.gcTTL, or retention.maxVersions > 0)
// may have dropped a version that
// read needs and no snapshot pinned it; its metadata gives the read's
// timestamp (read_ts) and the oldest exact one (exact_from_ts). A
// transaction that meets it may be run again from BeginTxn.
const SnapshotTooOldReason = "SNAPSHOT_TOO_OLD"

// RegionSplittingReason is the ErrorInfo reason (domain ErrorDomain) of the
// UNAVAILABLE a write gets while its region splits (docs/regions.md): retry
// it; the region map names the daughters once the split commits.
const RegionSplittingReason = "REGION_SPLITTING"

// ReadUncertainReason is the ErrorInfo reason (domain ErrorDomain) of the
// ABORTED a transaction's read (TxnGet, TxnScan) answers when the key has
// a version above the read's start but within its uncertainty limit
// (docs/clock.md); metadata ts is that version's timestamp. Begin again
// with min_start_ts = ts and the same uncertainty_limit.
const ReadUncertainReason = "READ_UNCERTAIN"

// ClockOffsetReason is the ErrorInfo reason (domain ErrorDomain) of the
// UNAVAILABLE a store answers while its clock is, or is not yet known to
// be, within the maximum offset of its peers', or when a request carries a
// timestamp too far ahead of its clock (docs/clock.md). Another store may
// serve; this one serves again once its clock is back within the bound.
const ClockOffsetReason = "CLOCK_OFFSET"

// LeaseExpiredReason is the ErrorInfo reason (domain ErrorDomain) of the
// UNAVAILABLE a store answers while its liveness lease has run out
// (docs/failover.md §3): it could not renew it, and its regions may have
// failed over to another store. Retry through the cluster's other stores.
const LeaseExpiredReason = "LEASE_EXPIRED"

// RegionFailingOverReason is the ErrorInfo reason (domain ErrorDomain) of
// the UNAVAILABLE a live store answers for a region whose owner has let its
// liveness lease run out (docs/failover.md §8): the region map has not
// given it to another store yet, or this store, its new owner, is taking
// it over. Metadata names the region (region) and the store whose lease ran
// out (store, its ordinal). Retry: the region is served again once its new
// owner has opened it, within seconds.
const RegionFailingOverReason = "REGION_FAILING_OVER"

// CreateIfAbsentProbePrefix is where a starting store writes the object it
// creates twice to check that the bucket honours create-if-absent writes
// (docs/failover.md §7); it deletes it afterwards.
const CreateIfAbsentProbePrefix = "probe/create-if-absent/"
