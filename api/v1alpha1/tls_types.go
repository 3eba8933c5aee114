package v1alpha1

// TLSMode says where a KVCluster's or CompactionPool's pods get their
// certificates (docs/security.md §2).
// +kubebuilder:validation:Enum=Operator;CertManager;Disabled
type TLSMode string

const (
	// TLSOperator: the operator's CA of the namespace (Secret bellows-ca)
	// issues the pods' node certificates and the clients' certificates,
	// and renews them before they expire. Every port is TLS, and every
	// client must present a certificate (or a token) of the cluster.
	TLSOperator TLSMode = "Operator"
	// TLSCertManager: cert-manager issues the same certificates, into the
	// same Secrets, from the issuer tls.issuerRef names, and renews them.
	TLSCertManager TLSMode = "CertManager"
	// TLSDisabled: plaintext, and every client may do everything. Only
	// for a network where every pod is trusted.
	TLSDisabled TLSMode = "Disabled"
)

// TLSSpec is a KVCluster's or CompactionPool's transport security. A
// cluster and the pool it offloads to must agree: a store with TLS gives
// no job to a plaintext worker, and the other way round; and their
// certificates must come from the same CA.
// +kubebuilder:validation:XValidation:rule="self.mode == 'CertManager' ? has(self.issuerRef) : !has(self.issuerRef)",message="tls.issuerRef names the cert-manager issuer of tls.mode CertManager: give it with that mode, and only with it"
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="tls.mode and tls.issuerRef are immutable: during a rollout the cluster's pods would not trust each other (TLS and plaintext, or two CAs); create a new KVCluster or CompactionPool with the setting and restore a backup into it"
type TLSSpec struct {
	// Mode is Operator (the default: certificates from the operator's CA
	// of the namespace), CertManager (certificates from the cert-manager
	// issuer issuerRef names) or Disabled (plaintext).
	// +kubebuilder:default=Operator
	// +optional
	Mode TLSMode `json:"mode,omitempty"`

	// IssuerRef names the cert-manager Issuer or ClusterIssuer that signs
	// every certificate of this cluster or pool, with mode CertManager.
	// It must put the CA into the Secrets it writes (ca.crt), as a CA
	// issuer does; the clusters and pools that work together must name
	// the same one.
	// +optional
	IssuerRef *IssuerReference `json:"issuerRef,omitempty"`
}

// IssuerReference names a cert-manager issuer.
type IssuerReference struct {
	// Name of the Issuer (in the same namespace) or ClusterIssuer.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Kind is Issuer or ClusterIssuer.
	// +kubebuilder:default=Issuer
	// +kubebuilder:validation:Enum=Issuer;ClusterIssuer
	// +optional
	Kind string `json:"kind,omitempty"`
	// Group of the issuer's API: cert-manager.io, or an external
	// issuer's.
	// +kubebuilder:default=cert-manager.io
	// +optional
	Group string `json:"group,omitempty"`
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
