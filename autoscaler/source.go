package autoscaler

import (
	"context"
	"crypto/tls"
	"time"
)

// Endpoint is one pod whose /metrics the autoscaler reads.
type Endpoint struct {
	// Pod is the pod's name.
	Pod string
	// Cluster is a store's KVCluster (namespace/name); empty for workers.
	Cluster string
	// URL of its metrics, e.g. http://10.0.0.7:9090/metrics, or https://
	// for a pod with TLS (read with Targets.TLS).
	URL string
}

// Targets are the pods behind one CompactionPool: its workers and the storage
// pods of the KVClusters that reference it.
type Targets struct {
	// Pool is namespace/name, the key under which a source may keep state
	// (previous counter values) between observations.
	Pool string
	// TLS is the client configuration for the https:// endpoints: a
	// certificate of the pods' CA (the operator's own).
	TLS     *tls.Config
	Workers []Endpoint
	Stores  []Endpoint
	// RegionCounts is each referencing cluster's region count as its
	// spec or status says: R for a cluster whose stores report none
	// (LiveRegions).
	RegionCounts map[string]int32
}

// Observation is what the metrics say about one pool at one time. A zero
// rate means "not measured"; the caller falls back to its last known value.
type Observation struct {
	// CompactionRate is c, the mean over the workers that report it (bytes/s).
	CompactionRate float64
	// TransferRate is w: bytes the workers streamed since the last
	// observation over the seconds they spent streaming them (bytes/s).
	TransferRate float64
	// CompactionSize is b, requested bytes / requested compactions since the
	// last observation (0 when nothing was requested meanwhile).
	CompactionSize float64
	// RequestRate is compactions requested per second summed over all stores
	// (the demand; T = RequestRate·t/R).
	RequestRate float64
	// DemandMeasured is false until two observations of the stores' counters
	// exist (a rate needs two points).
	DemandMeasured bool
	// Queued is the compactions queued on the stores now: requested and
	// not started (running ones are not queued). The backlog term is
	// charged only when it grew since the previous evaluation.
	Queued float64
	// DebtBytes is the compaction debt summed over the stores: bytes their
	// regions' policies want compacted and are not getting.
	DebtBytes float64
	// OldestWait is how long the oldest wanted compaction of any store has
	// waited to start (0: none waits).
	OldestWait time.Duration
	// InflightJobs is each worker's jobs in flight, by pod name.
	InflightJobs map[string]float64
	// ClusterRegions is each cluster's region count as its stores report
	// it (the largest: a store that has not seen the newest region map
	// reports fewer), by cluster.
	ClusterRegions map[string]float64
}

// LiveRegions is R: the sum over the clusters of the region count their
// stores report (regions split as data grows), or, for a cluster whose
// stores report none (not scraped yet, or from before the region map), the
// count its spec or status says.
func LiveRegions(counts map[string]int32, reported map[string]float64) int32 {
	var r int32
	for cluster, n := range counts {
		if v := reported[cluster]; v > 0 {
			n = int32(v)
		}
		r += n
	}
	return r
}

// Source observes a pool's metrics. Production scrapes pod endpoints over
// HTTP (Scraper); tests feed observations directly (SourceFunc).
type Source interface {
	Observe(ctx context.Context, t Targets) (Observation, error)
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context, t Targets) (Observation, error)

// Observe calls f.
func (f SourceFunc) Observe(ctx context.Context, t Targets) (Observation, error) { return f(ctx, t) }
