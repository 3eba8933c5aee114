package v1alpha1

// TLSMode says where a KVCluster's or CompactionPool's pods get their
// certificates (docs/security.md §2).
// +kubebuilder:validation:Enum=Operator;Disabled
type TLSMode string

const (
	// TLSOperator: the operator's CA of the namespace (Secret bellows-ca)
	// issues the pods' node certificates and the clients' certificates,
	// and renews them before they expire. Every port is TLS, and every
	// client must present a certificate (or a token) of the cluster.
	TLSOperator TLSMode = "Operator"
	// TLSDisabled: plaintext, and every client may do everything. Only
	// for a network where every pod is trusted.
	TLSDisabled TLSMode = "Disabled"
)

// TLSSpec is a KVCluster's or CompactionPool's transport security. A
// cluster and the pool it offloads to must agree: a store with TLS gives
// no job to a plaintext worker, and the other way round.
type TLSSpec struct {
	// Mode is Operator (the default: certificates from the operator's CA)
	// or Disabled (plaintext). It is immutable: switching a running
	// cluster would split it into TLS and plaintext pods for the length
	// of the rollout, which cannot forward to each other.
	// +kubebuilder:default=Operator
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="tls.mode is immutable: during a rollout the cluster's TLS and plaintext pods could not reach each other; create a new KVCluster or CompactionPool with the mode and restore a backup into it"
	// +optional
	Mode TLSMode `json:"mode,omitempty"`
}

// TLSEnabled says whether the pods serve and dial TLS. An empty mode (an
// object stored before the field existed and not yet defaulted) is the
// default, Operator.
func (t TLSSpec) TLSEnabled() bool { return t.Mode != TLSDisabled }

// CASecretName is the Secret holding the operator's CA of a namespace: its
// certificate and key. Every cluster and pool of the namespace trusts it,
// so a pool's workers accept the jobs of every cluster there that uses it.
const CASecretName = "bellows-ca"

// MonitoringTLSSecretName is the namespace's client certificate for
// scraping the pods' /metrics (role read): the ServiceMonitors name it. It
// has no owner, like the CA.
const MonitoringTLSSecretName = "bellows-monitoring-tls"

// TLS client roles, as a certificate's organization names them
// (internal/tlsconfig); each has a client Secret per cluster.
var ClientRoles = []string{"read", "write", "admin"}
