package contract

// Ports the pods listen on and the operator points Services and probes at.
const (
	StoreGRPCPort       = 7400
	CompactorGRPCPort   = 7500
	MetricsPort         = 9090 // store and compactor: /metrics, /healthz, /readyz (and /drain on a compactor)
	OperatorMetricsPort = 8080 // the operator: /metrics, /healthz, /readyz, over TLS
)

// Port names on containers and Services. Discovery of workers and peers
// selects EndpointSlice ports by these names.
const (
	PortNameGRPC    = "grpc"
	PortNameMetrics = "metrics"
)

// HTTP paths on the metrics port.
const (
	PathMetrics = "/metrics"
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
	// PathDrain is a compactor's preStop hook: stop taking jobs and answer
	// once the running ones finished and stores fetched and released their
	// outputs, or the drain timeout passed.
	PathDrain = "/drain"
)

// Paths inside a store pod.
const (
	// WALMountPath is where the WAL volume is mounted.
	WALMountPath = "/var/lib/bellows/wal"
	// ConfigMountDir is where the engine ConfigMap is mounted.
	ConfigMountDir = "/etc/bellows"
	// EngineConfigFile is the key of engine.yaml in the ConfigMap and its
	// file name in ConfigMountDir.
	EngineConfigFile = "engine.yaml"
	// TLSServerName is the name every node certificate carries and every
	// client verifies, whatever address it dialled (internal/tlsconfig).
	TLSServerName = "bellows-node"
	// TLSMountPath is where a pod's node certificate Secret is mounted
	// (--tls-dir). Not under ConfigMountDir: that is the ConfigMap's
	// read-only volume, where no mount point can be made.
	TLSMountPath = "/etc/bellows-tls"
	// TokensMountPath is where a store's tokens Secret is mounted; its
	// file TokensFile is --tokens-file.
	TokensMountPath = "/etc/bellows-tokens"
	TokensFile      = "tokens"
	// EngineConfigPath is the file `bellows store --config` reads in a pod.
	EngineConfigPath = ConfigMountDir + "/" + EngineConfigFile
)

// ImageUID is the non-root user (and group) of the bellows image; pods run
// as it.
const ImageUID = int64(65532)

// BucketMarker is the object at the root of a bucket that says a Bellows
// cluster lives there; a store writes it when it creates the cluster.
const BucketMarker = "bellows-cluster.json"

// RestoreMarker is the object at the root of a bucket a restore is writing
// (bellows restore): written first and removed last, so a store refuses a
// bucket whose restore has not finished, or crashed.
const RestoreMarker = "bellows-restoring.json"
