package v1alpha1

import (
	"strconv"
	"time"
)

// Questions a KVCluster answers about itself: the names of the objects the
// operator makes for it, and its switches. The controllers and the pure
// builders (controllers/specs) ask the object instead of spelling names out.

// StatefulSetName is the storage pods' StatefulSet.
func (c *KVCluster) StatefulSetName() string { return c.Name }

// PodName is the storage pod with the given StatefulSet ordinal.
func (c *KVCluster) PodName(ordinal int32) string {
	return c.StatefulSetName() + "-" + strconv.Itoa(int(ordinal))
}

// EngineConfigMapName is the ConfigMap holding engine.yaml.
func (c *KVCluster) EngineConfigMapName() string { return c.Name + "-engine" }

// HeadlessServiceName is the Service that gives each storage pod a stable DNS
// name; the stores find their peers through its EndpointSlices.
func (c *KVCluster) HeadlessServiceName() string { return c.Name + "-headless" }

// ClientServiceName is the clients' entry point.
func (c *KVCluster) ClientServiceName() string { return c.Name }

// PodDisruptionBudgetName is the storage pods' PodDisruptionBudget.
func (c *KVCluster) PodDisruptionBudgetName() string { return c.Name }

// StoreIdentityName names the storage pods' ServiceAccount and its Role and
// RoleBinding.
func (c *KVCluster) StoreIdentityName() string { return c.Name + "-store" }

// ServiceMonitorName is the ServiceMonitor that scrapes the storage pods.
func (c *KVCluster) ServiceMonitorName() string { return c.Name + "-store" }

// NetworkPolicyName is the NetworkPolicy that says who may reach the
// storage pods' ports.
func (c *KVCluster) NetworkPolicyName() string { return c.Name + "-store" }

// CompactorServiceName is the Service in front of the referenced
// CompactionPool's workers; ok is false without a compactionPoolRef.
func (c *KVCluster) CompactorServiceName() (name string, ok bool) {
	if c.Spec.CompactionPoolRef == nil {
		return "", false
	}
	return CompactorServiceName(c.Spec.CompactionPoolRef.Name), true
}

// StoreTLSSecretName is the Secret holding the storage pods' node
// certificate (ca.crt, tls.crt, tls.key), mounted at contract.TLSMountPath.
func (c *KVCluster) StoreTLSSecretName() string { return c.Name + "-store-tls" }

// ClientTLSSecretName is the Secret holding a client certificate of role
// (one of ClientRoles) for this cluster.
func (c *KVCluster) ClientTLSSecretName(role string) string { return c.Name + "-client-" + role }

// TokenSecretName is the Secret holding a bearer token of role (one of
// ClientRoles) for this cluster, and the CA that verifies its stores.
func (c *KVCluster) TokenSecretName(role string) string { return c.Name + "-token-" + role }

// TokensSecretName is the Secret the stores read their tokens from: a
// hash, a role and a name per token (store --tokens-file).
func (c *KVCluster) TokensSecretName() string { return c.Name + "-tokens" }

// IsPaused reports whether the operator must leave the cluster and its
// children alone (the paused annotation).
func (c *KVCluster) IsPaused() bool { return isPaused(c.Annotations) }

// MaxKVClusterNameLength is the longest cluster name whose children get
// valid names and labels. The tightest limit is the StatefulSet's revision
// label: its controller labels every pod
// controller-revision-hash=<StatefulSet name>-<hash>, where the hash is a
// 32-bit FNV hash written in decimal and letter-encoded, up to 10 characters
// (ControllerRevisionName and HashControllerRevision in
// k8s.io/kubernetes/pkg/controller/history), and a label value has at most
// 63 characters: 63 - 1 - 10 = 52. The others leave more room: the pods
// <name>-<ordinal> (ordinal < 100: spec.replicas ≤ 100) are hostnames and
// the statefulset.kubernetes.io/pod-name label (63 - 3 = 60); the headless
// Service <name>-headless is a DNS-1035 label (63 - 9 = 54); the name is the
// app.kubernetes.io/instance label (63). The CRD's rule on metadata.name
// (kvcluster_types.go) says 52 too (a test checks it).
const MaxKVClusterNameLength = 63 - len("-") - statefulSetRevisionHashLength

// statefulSetRevisionHashLength is the longest hash the StatefulSet
// controller appends to the revision label: the decimal digits of a uint32.
const statefulSetRevisionHashLength = len("4294967295")

// LargestMaxClockOffset bounds spec.clock.maxOffset (the CRD's rule says the
// same; a test checks it). A region that opens after a move or a restart
// waits the offset out before its first write, and a transaction restarts on
// every version within it above its start: past a few seconds the bound costs
// more than the skew it tolerates, and a node that far off has a broken clock
// to fix, not a bound to raise.
const LargestMaxClockOffset = 10 * time.Second

// MaxClockOffset is spec.clock.maxOffset of a defaulted cluster, parsed and
// within its bounds. The CRD rejects the rest, so an error only happens to a
// cluster stored before its rule existed; the reconciler reports it on that
// cluster (InvalidSpec) and leaves its pods as they are.
func (s *KVClusterSpec) MaxClockOffset() (time.Duration, error) {
	return s.Clock.MaxOffset.within("spec.clock.maxOffset", LargestMaxClockOffset)
}

// LargestNodeLostAfter bounds spec.failover.nodeLostAfter (the CRD's rule
// says the same).
const LargestNodeLostAfter = time.Hour

// NodeLostAfter is spec.failover.nodeLostAfter of a defaulted cluster,
// parsed and within its bounds. The CRD rejects the rest, so an error only
// happens to a cluster stored before its rule existed; the reconciler
// reports it on that cluster (InvalidSpec).
func (s *KVClusterSpec) NodeLostAfter() (time.Duration, error) {
	return s.Failover.NodeLostAfter.within("spec.failover.nodeLostAfter", LargestNodeLostAfter)
}

// LargestWALArchiveInterval bounds spec.walArchive.interval (the CRD's rule
// says the same).
const LargestWALArchiveInterval = time.Hour

// WALArchiveIntervalOrDefault is spec.walArchive.interval parsed, or the
// default when it fails (the CRD rejects what is not a duration within
// 0s..1h): for the builders.
func (s *KVClusterSpec) WALArchiveIntervalOrDefault() time.Duration {
	d, err := s.WALArchive.Interval.Parse()
	if err != nil || d < 0 || d > LargestWALArchiveInterval {
		return DefaultWALArchiveInterval
	}
	return d
}

// MaxClockOffsetOrDefault is MaxClockOffset, or the default when it fails:
// for the builders, which have no error to return. The reconciler builds
// nothing for a cluster whose MaxClockOffset fails, so only a cluster no
// reconciler checked (or one built in Go without SetDefaults) gets the
// fallback.
func (s *KVClusterSpec) MaxClockOffsetOrDefault() time.Duration {
	if d, err := s.MaxClockOffset(); err == nil {
		return d
	}
	return DefaultMaxClockOffset
}
