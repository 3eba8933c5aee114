package server

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/bellows-kv/bellows/storage-engine/offload"
)

// CompactErrorDomain is the Domain of the ErrorInfo an Admin Compact error
// carries when no worker started the job within the request's
// start_timeout_ms; its Reason is offload's (CACHE_FULL, STORE_BUSY,
// WORKERS_REFUSING, NO_WORKERS).
const CompactErrorDomain = "compaction.bellows.kv"

// notStartedStatus answers an Admin Compact that gave up waiting to start:
// RESOURCE_EXHAUSTED when it waits for room (every worker's cache is full,
// or the store's compaction slots are), UNAVAILABLE when no worker is
// usable, with the reason and the region as details so a client need not
// parse the message.
func notStartedStatus(region string, ns *offload.NotStartedError) error {
	code := codes.Unavailable
	if ns.Reason == offload.ReasonCacheFull || ns.Reason == offload.ReasonStoreBusy {
		code = codes.ResourceExhausted
	}
	st := status.Newf(code, "%s: compaction not started; nothing was installed: %v", region, ns)
	if d, err := st.WithDetails(
		&errdetails.ErrorInfo{Reason: ns.Reason, Domain: CompactErrorDomain, Metadata: map[string]string{"region": region}},
		&errdetails.ResourceInfo{ResourceType: RegionResourceType, ResourceName: region},
	); err == nil {
		st = d
	}
	return st.Err()
}
