package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A region smaller than one memstore would split at every flush. The memstore
// size is defaulted before validation, so the message says when it is the default.
// +kubebuilder:validation:XValidation:rule=`!has(self.regions) || !has(self.regions.splitBytes) || !isQuantity(string(self.regions.splitBytes)) || !quantity(string(self.regions.splitBytes)).isGreaterThan(quantity('0')) || !has(self.engine) || !has(self.engine.memstore) || !has(self.engine.memstore.bytes) || !isQuantity(string(self.engine.memstore.bytes)) || quantity(string(self.regions.splitBytes)).compareTo(quantity(string(self.engine.memstore.bytes))) >= 0`,fieldPath=`.regions.splitBytes`,messageExpression=`'regions.splitBytes: ' + string(self.regions.splitBytes) + ' is below engine.memstore.bytes ' + string(self.engine.memstore.bytes) + (quantity(string(self.engine.memstore.bytes)).compareTo(quantity('128Mi')) == 0 ? ' (the default)' : '') + ', so a region would split at every flush of its memstore: set splitBytes to at least ' + string(self.engine.memstore.bytes) + ' (at most half the cacheBytes of the CompactionPool), leave it out to follow the pool, or write 0 to never split'`

// KVClusterSpec is the desired state of a Bellows cluster's storage pods.
//
// +kubebuilder:validation:XValidation:rule="self.engine.offload != 'Required' || has(self.compactionPoolRef)",message="engine.offload: Required needs a compactionPoolRef naming the CompactionPool that runs the compactions"
// +kubebuilder:validation:XValidation:rule=`!has(self.durability) || !has(self.durability.mode) || self.durability.mode != 'Bucket' || !has(self.walArchive) || !has(self.walArchive.interval) || !self.walArchive.interval.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') || duration(self.walArchive.interval) > duration('0s')`,fieldPath=`.durability.mode`,message="durability.mode: Bucket keeps the WAL in the bucket, which needs walArchive.interval above 0s (the stream's frontier is recorded at it): set walArchive.interval, e.g. 5s, or durability.mode Local"
type KVClusterSpec struct {
	// Replicas is the number of storage pods. Regions are spread over them.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// Image is the bellows container image (it runs `bellows store`).
	// Empty means the operator's default image: the operator's own version
	// (operator --default-image), so the pods match the operator that
	// manages them and an operator upgrade rolls them to its version.
	// Set it to pin a version.
	// +optional
	Image string `json:"image,omitempty"`

	// ImagePullPolicy of the storage pods.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`

	// Resources of the store container. When empty, the operator requests
	// what the engine settings imply: memory for the block cache, the
	// memstores of the regions a pod serves and the runtime (docs/defaults.md);
	// explicit limits below that are reported (condition ResourcesSufficient).
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Scheduling places the pods. When affinity and topologySpreadConstraints
	// are not set, the operator spreads the pods over nodes and zones
	// (preferred, so a single-node cluster still schedules them); set
	// `affinity: {}` or `topologySpreadConstraints: []` to opt out.
	// +optional
	Scheduling SchedulingSpec `json:"scheduling,omitzero"`

	// Storage is the per-pod volume that holds the write-ahead log.
	// +kubebuilder:default={size: "10Gi"}
	// Quantities are compared by value, so 20Gi rewritten as 20480Mi is the same size.
	// +kubebuilder:validation:XValidation:rule="has(self.size) == has(oldSelf.size) && (!has(self.size) || !isQuantity(string(self.size)) || !isQuantity(string(oldSelf.size)) || quantity(string(self.size)).compareTo(quantity(string(oldSelf.size))) == 0) && has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)",message="storage is immutable: the volume claim template of existing pods cannot change (the same size written in another unit is accepted)"
	// +optional
	Storage StorageSpec `json:"storage,omitzero"`

	// Bucket is where region files and manifests live.
	Bucket BucketSpec `json:"bucket"`

	// Bootstrap says how the cluster starts: empty (the default) in an
	// empty bucket, or from a backup (recovery). It is read only before the
	// first storage pod exists.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="bootstrap is immutable: it says how the cluster started"
	// +optional
	Bootstrap *BootstrapSpec `json:"bootstrap,omitempty"`

	// Regions is the cluster's first region layout (a count of equal
	// ranges, or explicit split keys) and when regions split from there.
	// count and splitKeys are immutable; splitBytes and splitQPS may change.
	// +kubebuilder:default={count: 1}
	// +kubebuilder:validation:XValidation:rule="(has(self.count) ? self.count : 1) == (has(oldSelf.count) ? oldSelf.count : 1) && (has(self.splitKeys) ? self.splitKeys : []) == (has(oldSelf.splitKeys) ? oldSelf.splitKeys : [])",message="regions.count and regions.splitKeys are immutable: they made the cluster's first regions, which split from there (the region map in the bucket says which exist now); set them back, tune regions.splitBytes or regions.splitQPS instead, or create a new KVCluster for another initial layout"
	// +optional
	Regions RegionsSpec `json:"regions,omitzero"`

	// Engine holds the storage engine's settings (written to the engine.yaml ConfigMap).
	// +kubebuilder:default={}
	// +optional
	Engine EngineSpec `json:"engine,omitzero"`

	// CompactionPoolRef names the CompactionPool, in the same namespace, that
	// runs this cluster's offloaded compactions.
	// +optional
	CompactionPoolRef *CompactionPoolReference `json:"compactionPoolRef,omitempty"`

	// Clock bounds how far apart the stores' clocks may be (docs/clock.md).
	// +kubebuilder:default={}
	// +optional
	Clock ClockSpec `json:"clock,omitzero"`

	// WALArchive ships each region's WAL to the bucket continuously, for
	// point-in-time restore and so that a lost volume loses at most one
	// interval of acknowledged writes (docs/backup.md).
	// +kubebuilder:default={}
	// +optional
	WALArchive WALArchiveSpec `json:"walArchive,omitzero"`

	// Durability says where a write is durable before it is acknowledged
	// (docs/failover.md).
	// +kubebuilder:default={mode: Bucket}
	// +optional
	Durability DurabilitySpec `json:"durability,omitzero"`

	// Failover is how the operator replaces a storage pod lost with its
	// node (docs/failover.md §6).
	// +kubebuilder:default={}
	// +optional
	Failover FailoverSpec `json:"failover,omitzero"`

	// TLS is the transport security of every port of the storage pods
	// (clients, peers, metrics) and of their calls to the workers.
	// +kubebuilder:default={mode: Operator}
	// +optional
	TLS TLSSpec `json:"tls,omitzero"`
}

// DurabilitySpec is where a write is durable before it is acknowledged.
type DurabilitySpec struct {
	// Mode (store --durability): Bucket, the default, acknowledges a write
	// once its group commit is in the region's WAL stream in the bucket:
	// losing a store's node or volume loses no acknowledged write (RPO 0),
	// and a write waits for one bucket PUT (about 1-3 ms on a MinIO in the
	// same network, 15-40 ms on S3 Standard or GCS). Local acknowledges
	// once the store's own WAL has it: faster on a slow bucket, but a lost
	// node or volume loses the writes the WAL archive had not shipped yet,
	// up to walArchive.interval of them (the RPO). A change rolls the
	// storage pods.
	// +kubebuilder:validation:Enum=Bucket;Local
	// +kubebuilder:default=Bucket
	// +optional
	Mode string `json:"mode,omitempty"`
}

// FailoverSpec is how the operator acts on a storage pod lost with its node.
// The store's regions do not wait for it: they move to other stores within
// seconds of its liveness lease running out, whatever its pod's state.
type FailoverSpec struct {
	// NodeLostAfter is how long a storage pod's node may stay NotReady or
	// unreachable before the operator replaces the pod: it force-deletes
	// it (no kubelet would run its grace period) and, in durability mode
	// Bucket, first deletes its PVC when the volume can be used on that
	// node alone, so that the pod comes back elsewhere with an empty
	// volume. Shorter replaces pods sooner after a node dies, and also
	// pods whose node is back after a shorter outage. A node that is not
	// Ready and tainted node.kubernetes.io/out-of-service (Kubernetes'
	// non-graceful node shutdown: a person declares the node shut down) is
	// lost at once.
	// Between 0s and 1h.
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') && duration(self) >= duration('0s') && duration(self) <= duration('1h0m0s')`,messageExpression=`!self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') ? 'failover.nodeLostAfter: "' + self + '" is not a duration; write a number with a unit, e.g. 30s or 2m' : duration(self) < duration('0s') ? 'failover.nodeLostAfter: ' + self + ' is negative; write how long a node may stay NotReady before its storage pod is replaced, e.g. 30s' : 'failover.nodeLostAfter: ' + self + ' is above the maximum 1h; write e.g. 30s, or taint a node that is shut down node.kubernetes.io/out-of-service to have its pods replaced at once'`
	// +optional
	NodeLostAfter Duration `json:"nodeLostAfter,omitempty"`
}

// WALArchiveSpec is the continuous WAL archive's setting.
type WALArchiveSpec struct {
	// Interval is how often each region ships its new WAL records to the
	// bucket (store --wal-archive-interval): the recovery point objective,
	// the most acknowledged writes a store's lost volume takes with it, and
	// how far behind now a point-in-time restore can reach. 0s turns the
	// archive off (and point-in-time restore with it). At most 1h. A change
	// rolls the storage pods.
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') && duration(self) >= duration('0s') && duration(self) <= duration('1h0m0s')`,messageExpression=`!self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') ? 'walArchive.interval: "' + self + '" is not a duration; write a number with a unit, e.g. 5s, or 0s to turn the archive off' : duration(self) < duration('0s') ? 'walArchive.interval: ' + self + ' is negative; write how often to ship the WAL, e.g. 5s, or 0s to turn the archive off' : 'walArchive.interval: ' + self + ' is above the maximum 1h: a lost volume would take up to that much of acknowledged writes with it; write e.g. 5s'`
	// +optional
	Interval Duration `json:"interval,omitempty"`
}

// ClockSpec is the cluster clock's assumption. It is one value for the whole
// cluster: every store reads with the same uncertainty window and checks its
// peers against the same bound.
type ClockSpec struct {
	// MaxOffset is the largest difference between two stores' clocks the
	// cluster tolerates (store --max-clock-offset): a transactional read
	// restarts on a version less than this far above its start, a region
	// opening after a move or restart waits this long before its first
	// write, and a store whose clock is beyond 80% of it from a majority of
	// its peers refuses requests. 0 turns these checks off, which is safe
	// with a single store only (condition ClockOffsetBounded). At most 10s.
	// A change rolls the storage pods.
	// +kubebuilder:default="250ms"
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') && duration(self) >= duration('0s') && duration(self) <= duration('10s')`,messageExpression=`!self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') ? 'clock.maxOffset: "' + self + '" is not a duration; write a number with a unit (ms, s), e.g. 250ms, or 0s to turn the clock checks off' : duration(self) < duration('0s') ? 'clock.maxOffset: ' + self + ' is negative; write the largest offset between the clocks of two stores, e.g. 250ms, or 0s to turn the clock checks off' : 'clock.maxOffset: ' + self + ' is above the maximum 10s: every region move or store restart would wait that long before its first write, and transactions would restart on every recent write; synchronize the clocks of the nodes instead (chrony or NTP keep them within milliseconds) and write e.g. 250ms'`
	// +optional
	MaxOffset Duration `json:"maxOffset,omitempty"`
}

// SchedulingSpec is where a role's pods may run.
type SchedulingSpec struct {
	// Affinity of the pods. Nil means the operator's default: a preferred
	// pod anti-affinity on kubernetes.io/hostname among the role's pods.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// TopologySpreadConstraints of the pods. Nil means the operator's
	// default: spread over topology.kubernetes.io/zone with maxSkew 1,
	// ScheduleAnyway.
	// +listType=atomic
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	// NodeSelector of the pods.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations of the pods.
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// StorageSpec is the persistent volume claim template of a storage pod.
type StorageSpec struct {
	// Size of each pod's WAL volume.
	// +kubebuilder:default="10Gi"
	// +kubebuilder:validation:XValidation:rule=`isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))`,messageExpression=`!isQuantity(string(self)) ? 'storage.size: "' + string(self) + '" is not a quantity; write bytes with a unit, e.g. 10Gi or 500Mi' : 'storage.size: ' + string(self) + ' must be greater than zero, e.g. 10Gi or 500Mi'`
	// +optional
	Size resource.Quantity `json:"size,omitzero"`

	// StorageClassName of the claim; the cluster default when empty.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// BootstrapSpec says how a new cluster starts.
type BootstrapSpec struct {
	// Recovery restores a backup into the cluster's bucket, which must be
	// empty, before any storage pod starts (a Job running bellows restore;
	// docs/backup.md). The stores then serve exactly what a read at the
	// backup's timestamp returned.
	// +optional
	Recovery *RecoverySpec `json:"recovery,omitempty"`
}

// RecoverySpec names a backup, or a time to restore to.
// +kubebuilder:validation:XValidation:rule="has(self.backup) != has(self.targetTime)",message="bootstrap.recovery: give exactly one of backup (a backup's ID, to restore its state) and targetTime (an RFC 3339 time, to restore the state at that time from the newest backup before it and the WAL archive)"
type RecoverySpec struct {
	// Backup is the backup's ID: a Backup's name, or an ID bellows backup
	// list shows.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	// +optional
	Backup string `json:"backup,omitempty"`
	// TargetTime restores the state at that time (RFC 3339, e.g.
	// 2026-11-27T10:42:00Z): the newest backup at or before it plus the
	// source's WAL archive up to it, one consistent snapshot across every
	// region. A time outside what the backups and the archive cover fails
	// the restore Job, naming what they cover (bellows backup window).
	// +kubebuilder:validation:Format=date-time
	// +optional
	TargetTime string `json:"targetTime,omitempty"`
	// SourceBucketURL is the bucket that holds the backup (the backed-up
	// cluster's spec.bucket.url). It is read with this cluster's bucket
	// credentials (spec.bucket.credentialsSecretRef).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^(file|s3|gs|azblob)://.+')",message="bootstrap.recovery.sourceBucketURL must start with one of the supported schemes file://, s3://, gs:// or azblob:// followed by a bucket or path"
	SourceBucketURL string `json:"sourceBucketURL"`
}

// BucketSpec locates the object store.
type BucketSpec struct {
	// URL of the bucket, as gocloud.dev/blob opens it: file:///path, s3://bucket,
	// gs://bucket or azblob://container.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^(file|s3|gs|azblob)://.+')",message="bucket.url must start with one of the supported schemes file://, s3://, gs:// or azblob:// followed by a bucket or path"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="bucket.url is immutable: the stores' regions live in the bucket it names; create a new KVCluster to use another bucket"
	URL string `json:"url"`

	// CredentialsSecretRef names a Secret whose keys become the store's
	// environment (e.g. AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).
	// +kubebuilder:validation:XValidation:rule=`has(self.name) && size(self.name) <= 253 && self.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')`,messageExpression=`!has(self.name) || self.name == '' ? 'bucket.credentialsSecretRef.name is empty: name the Secret with the bucket credentials, e.g. s3-credentials, or leave credentialsSecretRef out' : 'bucket.credentialsSecretRef.name: "' + self.name + '" is not a Secret name: use lowercase letters, digits, - and ., e.g. s3-credentials'`
	// +optional
	CredentialsSecretRef *corev1.LocalObjectReference `json:"credentialsSecretRef,omitempty"`
}

// RegionsSpec is the first layout, a count or a list of split keys (not
// both; neither is a count of 1), and the split settings. The layout makes
// only a new cluster's first region map: from then on regions split by size
// and by load, and the map in the bucket says which exist (docs/regions.md).
//
// +kubebuilder:validation:XValidation:rule="!has(self.count) || !has(self.splitKeys)",message="regions: count and splitKeys are both set; set one: remove count to cut the key space at splitKeys, or remove splitKeys to cut it into count even ranges"
type RegionsSpec struct {
	// Count splits the key space into this many regions, evenly by the
	// keys' first byte: at most 256 (contract.MaxRegionCount). Without
	// count and splitKeys, 1.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	// +optional
	Count *int32 `json:"count,omitempty"`

	// SplitKeys are the boundaries between regions (n keys make n+1 regions),
	// strictly increasing.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4095
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.isSorted()",message="regions.splitKeys must be strictly increasing"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.contains(','))",message="regions.splitKeys must not contain commas"
	// +kubebuilder:validation:XValidation:rule=`self.all(k, k != '')`,messageExpression=`'regions.splitKeys[%d]: "" (an empty key) is not a boundary, as every key sorts after it; remove it'.format([self.indexOf('')])`
	// +listType=set
	// +optional
	SplitKeys []string `json:"splitKeys,omitempty"`

	// SplitBytes: a region whose data (its files plus its memstore) passes
	// this size splits in two at the key that halves its bytes. Unset, it
	// is half the worker cache m of the compactionPoolRef's pool
	// (spec.cacheBytes / 2, at least engine.memstore.bytes), so that a
	// region's major compaction fits a worker with room for a second
	// (docs/regions.md); without a pool, 512Mi. 0 never splits. At least
	// engine.memstore.bytes; above the pool's cacheBytes the operator warns
	// (condition RegionsFitWorkers).
	// +kubebuilder:validation:XValidation:rule=`isQuantity(string(self)) && !quantity(string(self)).isLessThan(quantity('0'))`,messageExpression=`!isQuantity(string(self)) ? 'regions.splitBytes: "' + string(self) + '" is not a quantity; write bytes with a unit, e.g. 3Gi (at most half the cacheBytes of the CompactionPool), or 0 to never split' : 'regions.splitBytes: ' + string(self) + ' is negative; write a size such as 3Gi (at most half the cacheBytes of the CompactionPool), or 0 to never split'`
	// +optional
	SplitBytes *resource.Quantity `json:"splitBytes,omitempty"`

	// SplitQPS: a region serving more requests per second than this (over
	// the store's load window), and more than twice the median of its
	// store's regions, splits at a sampled key that halves its load. A
	// single hot key is never split. 0 never splits by load.
	// +kubebuilder:default=0
	// +kubebuilder:validation:XValidation:rule=`self >= 0`,messageExpression=`'regions.splitQPS: %d is negative; write requests per second, e.g. 3000, or 0 to never split by load'.format([self])`
	// +optional
	SplitQPS *int32 `json:"splitQPS,omitempty"`

	// MergeBytes: two adjacent regions of one store merge when each holds
	// less than this, together less than half splitBytes, each serves
	// under a quarter of splitQPS (when set), for the stores' merge wait
	// (10m). Unset, a quarter of splitBytes; 0 never merges.
	// +kubebuilder:validation:XValidation:rule=`isQuantity(string(self)) && !quantity(string(self)).isLessThan(quantity('0'))`,messageExpression=`!isQuantity(string(self)) ? 'regions.mergeBytes: "' + string(self) + '" is not a quantity; write bytes with a unit, e.g. 128Mi (a quarter of splitBytes is the default), or 0 to never merge' : 'regions.mergeBytes: ' + string(self) + ' is negative; write a size such as 128Mi, or 0 to never merge'`
	// +optional
	MergeBytes *resource.Quantity `json:"mergeBytes,omitempty"`

	// MaxMovesInFlight bounds the region moves the balancer keeps under
	// way at once, cluster-wide (docs/regions.md §4).
	// +kubebuilder:default=2
	// +kubebuilder:validation:XValidation:rule=`self >= 1 && self <= 64`,messageExpression=`'regions.maxMovesInFlight: %d is out of range; write 1 to 64 (2 is the default)'.format([self])`
	// +optional
	MaxMovesInFlight *int32 `json:"maxMovesInFlight,omitempty"`

	// BalanceMinBytes: the least gap from the mean bytes per store the
	// balancer moves regions for, whatever its tolerance (±15%): a move
	// costs its region a flush and a cold cache. Unset, 64Mi.
	// +kubebuilder:validation:XValidation:rule=`isQuantity(string(self)) && !quantity(string(self)).isLessThan(quantity('0'))`,messageExpression=`!isQuantity(string(self)) ? 'regions.balanceMinBytes: "' + string(self) + '" is not a quantity; write bytes with a unit, e.g. 64Mi' : 'regions.balanceMinBytes: ' + string(self) + ' is negative; write a size such as 64Mi, or 0 to balance any gap'`
	// +optional
	BalanceMinBytes *resource.Quantity `json:"balanceMinBytes,omitempty"`

	// RecutTolerancePercent: once the cluster's data and two adjacent
	// regions have held their size for the stores' merge wait, the
	// balancer merges and splits them again at their byte median when one
	// is further than this percentage from the mean region size
	// (docs/regions.md, "Evening sizes out"). 0 never re-cuts; so does
	// mergeBytes 0 (a re-cut merges first).
	// +kubebuilder:default=20
	// +kubebuilder:validation:XValidation:rule=`self >= 0 && self <= 99`,messageExpression=`'regions.recutTolerancePercent: %d is out of range; write 0 to 99 (20 is the default; 0 never re-cuts)'.format([self])`
	// +optional
	RecutTolerancePercent *int32 `json:"recutTolerancePercent,omitempty"`
}

// CompactionPoolReference names a CompactionPool in the same namespace.
type CompactionPoolReference struct {
	// Name of the CompactionPool.
	// +kubebuilder:validation:XValidation:rule=`size(self) <= 53 && self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')`,messageExpression=`'compactionPoolRef.name must name a CompactionPool: "' + self + '" is not a pool name (lowercase letters, digits and -, starting with a letter, at most 53 characters), e.g. workers'`
	Name string `json:"name"`
}

// MemstorePolicy is the Accordion in-memory compaction policy.
// +kubebuilder:validation:Enum=None;Basic;Eager;Adaptive
type MemstorePolicy string

// OffloadMode decides where compactions run.
// +kubebuilder:validation:Enum=Required;Preferred;Disabled
type OffloadMode string

// WarmupMode is how a store warms its block cache after a compaction.
// +kubebuilder:validation:Enum=None;Offload;RemoteCache;PreSwitch;Incremental;ThrottledIncremental;WriteThrough
type WarmupMode string

// SyncMode is the WAL durability mode.
// +kubebuilder:validation:Enum=sync;async
type SyncMode string

// EngineSpec holds the storage engine settings.
type EngineSpec struct {
	// +kubebuilder:default={}
	// +optional
	Memstore MemstoreSpec `json:"memstore,omitzero"`

	// BlockCacheBytes is the block cache budget per store pod.
	// +kubebuilder:default="1Gi"
	// +kubebuilder:validation:XValidation:rule=`isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))`,messageExpression=`!isQuantity(string(self)) ? 'engine.blockCacheBytes: "' + string(self) + '" is not a quantity; write bytes with a unit, e.g. 1Gi or 512Mi' : 'engine.blockCacheBytes: ' + string(self) + ' must be greater than zero, e.g. 1Gi or 512Mi'`
	// +optional
	BlockCacheBytes resource.Quantity `json:"blockCacheBytes,omitzero"`

	// +kubebuilder:default={minFiles: 3, maxFiles: 10, ratio: "1.2", maxBytes: "4Gi"}
	// +optional
	Compaction CompactionPolicySpec `json:"compaction,omitzero"`

	// Offload: Required (wait for a worker), Preferred (fall back to a local
	// compaction) or Disabled (always local).
	// +kubebuilder:default=Preferred
	// +optional
	Offload OffloadMode `json:"offload,omitempty"`

	// +kubebuilder:default={mode: Incremental}
	// +optional
	Warmup WarmupSpec `json:"warmup,omitzero"`

	// Retention: which old versions compactions (on disk and in memory)
	// may drop.
	// +optional
	Retention RetentionSpec `json:"retention,omitzero"`

	// SyncMode: sync fsyncs the WAL before acknowledging; async acknowledges after an interval.
	// +kubebuilder:default=sync
	// +optional
	SyncMode SyncMode `json:"syncMode,omitempty"`
}

// RetentionSpec says which old versions compactions may drop.
type RetentionSpec struct {
	// GCTTL is the history kept: every read at a timestamp up to gcTTL
	// old is exact; a version superseded longer ago is dropped by
	// compactions, in memory (Eager, Adaptive) and on disk, unless an open
	// snapshot (a transaction's pinned start) reads it, and a read older
	// than gcTTL is refused as SNAPSHOT_TOO_OLD. 0 (the default) keeps
	// every version; otherwise at least 1s.
	// +kubebuilder:default="0s"
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') && (duration(self) == duration('0s') || duration(self) >= duration('1s'))`,messageExpression=`!self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') ? 'engine.retention.gcTTL: "' + self + '" is not a duration; ' + (self.matches('[0-9]d') ? 'use hours, e.g. 24h for a day' : 'write a number with a unit (h, m, s), e.g. 10s or 10m') : 'engine.retention.gcTTL: ' + self + ' is below the minimum 1s: reads a clock offset old would be refused; e.g. 10m, or 0s to keep every version'`
	// +optional
	GCTTL Duration `json:"gcTTL,omitempty"`

	// MaxVersions > 0 bounds versions by count instead of gcTTL: at most
	// this many newest versions of each key are kept, and every version an
	// open snapshot reads; a read below the newest data is exact only at a
	// pinned snapshot. 0: no count bound (gcTTL decides).
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxVersions int32 `json:"maxVersions,omitempty"`
}

// MemstoreSpec configures the memstore: Accordion's in-memory compaction
// policy (docs/memstore.md) and the budgets.
type MemstoreSpec struct {
	// Policy: None (one skiplist flushed whole), Basic (flat segments whose
	// indexes are merged; the default), Eager (in-memory compaction at
	// every in-memory flush) or Adaptive (compaction when redundancy is
	// measured high). Eager and Adaptive drop only what retention lets go:
	// under the default retention (every version kept) they act as Basic
	// (docs/memstore.md).
	// +kubebuilder:default=Basic
	// +optional
	Policy MemstorePolicy `json:"policy,omitempty"`

	// Bytes is the memstore budget per region, at least 1Mi.
	// +kubebuilder:default="128Mi"
	// +kubebuilder:validation:XValidation:rule=`isQuantity(string(self)) && quantity(string(self)).compareTo(quantity('1Mi')) >= 0`,messageExpression=`!isQuantity(string(self)) ? 'engine.memstore.bytes: "' + string(self) + '" is not a quantity; write bytes with a unit, e.g. 128Mi or 64Mi' : 'engine.memstore.bytes: ' + string(self) + ' is below the minimum 1Mi: a smaller memstore flushes a file every few writes; e.g. 128Mi'`
	// +optional
	Bytes resource.Quantity `json:"bytes,omitzero"`

	// MaxWALBytes bounds each region's WAL: past it the memstore is
	// flushed so the WAL can be truncated, which bounds recovery. At least
	// bytes; when empty, twice bytes.
	// +kubebuilder:validation:XValidation:rule=`isQuantity(string(self)) && quantity(string(self)).compareTo(quantity('1Mi')) >= 0`,messageExpression=`!isQuantity(string(self)) ? 'engine.memstore.maxWALBytes: "' + string(self) + '" is not a quantity; write bytes with a unit, e.g. 256Mi' : 'engine.memstore.maxWALBytes: ' + string(self) + ' is below the minimum 1Mi, e.g. 256Mi'`
	// +optional
	MaxWALBytes resource.Quantity `json:"maxWALBytes,omitzero"`

	// MaxWALAge flushes a region whose oldest unflushed write is this old,
	// however little its memstore holds, so a slowly written region's WAL
	// does not reach back indefinitely. At least 10s.
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') && duration(self) >= duration('10s')`,messageExpression=`!self.matches('^[-+]?(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|ms|s|m|h))+)$') ? 'engine.memstore.maxWALAge: "' + self + '" is not a duration; ' + (self.matches('[0-9]d') ? 'use hours, e.g. 24h for a day' : 'write a number with a unit (h, m, s), e.g. 1h or 30m') : 'engine.memstore.maxWALAge: ' + self + ' is below the minimum 10s: a region would flush a file every few writes; e.g. 1h'`
	// +optional
	MaxWALAge Duration `json:"maxWALAge,omitempty"`

	// MaxStoreWALBytes caps the WAL of all of a store's regions together:
	// past it the regions with the oldest unflushed writes are flushed
	// first, which bounds a restart's replay however many regions the store
	// holds. At least bytes; when empty, the store's memstore budget (its
	// regions × bytes).
	// +kubebuilder:validation:XValidation:rule=`isQuantity(string(self)) && quantity(string(self)).compareTo(quantity('1Mi')) >= 0`,messageExpression=`!isQuantity(string(self)) ? 'engine.memstore.maxStoreWALBytes: "' + string(self) + '" is not a quantity; write bytes with a unit, e.g. 1Gi' : 'engine.memstore.maxStoreWALBytes: ' + string(self) + ' is below the minimum 1Mi, e.g. 1Gi'`
	// +optional
	MaxStoreWALBytes resource.Quantity `json:"maxStoreWALBytes,omitzero"`
}

// The minFiles/maxFiles message names the default of a side the user may not
// have written: defaults are applied before validation, so the rule cannot
// tell (TestCRDMessagesNameTheDefaults).
//
// +kubebuilder:validation:XValidation:rule=`!has(self.minFiles) || !has(self.maxFiles) || self.minFiles <= self.maxFiles`,fieldPath=`.minFiles`,messageExpression=`'engine.compaction.minFiles %d%s is greater than maxFiles %d%s: lower minFiles, or set maxFiles to at least %d'.format([self.minFiles, self.minFiles == 3 ? ' (the default)' : '', self.maxFiles, self.maxFiles == 10 ? ' (the default)' : '', self.minFiles])`

// CompactionPolicySpec is the exploring/ratio minor compaction policy.
type CompactionPolicySpec struct {
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=100
	// +optional
	MinFiles int32 `json:"minFiles,omitempty"`

	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxFiles int32 `json:"maxFiles,omitempty"`

	// Ratio of the exploring policy, a decimal such as "1.2".
	// +kubebuilder:default="1.2"
	// +kubebuilder:validation:XValidation:rule=`self.matches('^[0-9]+([.][0-9]+)?$') && double(self) > 0.0`,messageExpression=`!self.matches('^[0-9]+([.][0-9]+)?$') ? 'engine.compaction.ratio: "' + self + '" is not a decimal number; write one such as "1.2"' : 'engine.compaction.ratio: "' + self + '" must be greater than 0, e.g. "1.2"'`
	// +kubebuilder:validation:MaxLength=16
	// +optional
	Ratio string `json:"ratio,omitempty"`

	// MaxBytes caps the input size of a minor compaction.
	// +kubebuilder:default="4Gi"
	// +kubebuilder:validation:XValidation:rule=`isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))`,messageExpression=`!isQuantity(string(self)) ? 'engine.compaction.maxBytes: "' + string(self) + '" is not a quantity; write bytes with a unit, e.g. 4Gi or 512Mi' : 'engine.compaction.maxBytes: ' + string(self) + ' must be greater than zero, e.g. 4Gi or 512Mi'`
	// +optional
	MaxBytes resource.Quantity `json:"maxBytes,omitzero"`
}

// WarmupSpec selects the warmup mode.
//
// +kubebuilder:validation:XValidation:rule="self.mode != 'ThrottledIncremental' || (has(self.rateBytesPerSecond) && self.rateBytesPerSecond > 0)",message="engine.warmup.rateBytesPerSecond must be a positive rate when mode is ThrottledIncremental"
type WarmupSpec struct {
	// +kubebuilder:default=Incremental
	// +optional
	Mode WarmupMode `json:"mode,omitempty"`

	// RateBytesPerSecond bounds the warmup transfer rate (ThrottledIncremental).
	// +kubebuilder:validation:Minimum=0
	// +optional
	RateBytesPerSecond *int64 `json:"rateBytesPerSecond,omitempty"`
}

// KVClusterStatus is the observed state of a KVCluster.
type KVClusterStatus struct {
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Replicas is the number of storage pods the StatefulSet has.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// ReadyReplicas is the number of Ready storage pods.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// UpdatedReplicas is the number of pods running the current spec.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`

	// Regions is the number of regions of the layout.
	// +optional
	Regions int32 `json:"regions,omitempty"`
	// RegionAssignment says which regions each storage pod serves.
	// +listType=map
	// +listMapKey=pod
	// +optional
	RegionAssignment []RegionAssignment `json:"regionAssignment,omitempty"`

	// Conditions: Ready, Progressing, Degraded.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RegionAssignment is the set of regions one pod serves.
type RegionAssignment struct {
	// Pod name.
	Pod string `json:"pod"`
	// Regions as a compact list of indices and ranges, e.g. "0,3,6".
	Regions string `json:"regions,omitzero"`
	// Count of regions.
	Count int32 `json:"count"`
}

// The name rules keep the name and labels of every child of the cluster
// valid (MaxKVClusterNameLength).
//
// +kubebuilder:validation:XValidation:rule=`size(self.metadata.name) <= 52`,messageExpression=`'metadata.name: "%s" has %d characters; a KVCluster name may have at most 52, as its pods carry the label controller-revision-hash=<name>-<10-character hash> of at most 63: choose a shorter name'.format([self.metadata.name, size(self.metadata.name)])`
// +kubebuilder:validation:XValidation:rule=`self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')`,messageExpression=`'metadata.name: "' + self.metadata.name + '" cannot name the Services of the cluster: use lowercase letters, digits and -, starting with a letter, e.g. orders'`

// KVCluster is a Bellows storage cluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=kvc;kvcluster,categories=bellows
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Regions",type=integer,JSONPath=`.status.regions`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.compactionPoolRef.name`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type KVCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   KVClusterSpec   `json:"spec"`
	Status KVClusterStatus `json:"status,omitempty"`
}

// KVClusterList is a list of KVClusters.
//
// +kubebuilder:object:root=true
type KVClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KVCluster `json:"items"`
}
