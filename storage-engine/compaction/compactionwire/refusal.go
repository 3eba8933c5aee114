package compactionwire

import (
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// A worker refuses a job larger than its whole cache (m) with
// RESOURCE_EXHAUSTED, like a job that waits for room, plus this ErrorInfo:
// the store must not wait for room that will never come.
const (
	RefusalDomain         = "compaction.bellows.kv"
	ReasonLargerThanCache = "JOB_LARGER_THAN_CACHE"
	metaCacheBytes        = "cache_bytes"
)

// LargerThanCacheDetail is the ErrorInfo of such a refusal.
func LargerThanCacheDetail(cacheBytes int64) *errdetails.ErrorInfo {
	return &errdetails.ErrorInfo{Reason: ReasonLargerThanCache, Domain: RefusalDomain,
		Metadata: map[string]string{metaCacheBytes: strconv.FormatInt(cacheBytes, 10)}}
}

// LargerThanCache reports whether err is a refusal of a job larger than the
// worker's whole cache, and the cache's size.
func LargerThanCache(err error) (cacheBytes int64, ok bool) {
	for _, d := range status.Convert(err).Details() {
		if ei, is := d.(*errdetails.ErrorInfo); is && ei.Domain == RefusalDomain && ei.Reason == ReasonLargerThanCache {
			n, perr := strconv.ParseInt(ei.Metadata[metaCacheBytes], 10, 64)
			return n, perr == nil
		}
	}
	return 0, false
}
