package controllers

// Certificates (docs/security.md §2). The operator keeps one CA per
// namespace, in the Secret bellows-ca, and issues from it every
// certificate a cluster or pool of the namespace uses: the stores' and the
// workers' node certificates, a client certificate per role per cluster,
// the namespace's monitoring certificate, and (in memory only) its own.
//
// Invariants:
//   - The operator creates the CA Secret once and never rewrites it.
//     Replacing it is the user's (docs/security.md); every certificate
//     whose ca.crt is not the current CA is then issued again
//     (specs.Renewal).
//   - A certificate Secret is updated in place, never deleted and created
//     again, so the volume of a running pod changes under its process,
//     which reloads it without a restart (internal/tlsconfig).
//
// Lock order: operatorCredentials.mu is a leaf.

import (
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;create;update

// certificates issues and renews the certificate Secrets of a namespace.
type certificates struct {
	client client.Client
	// apiReader confirms around the cache that a Secret is missing before
	// one is created: another reconciler may have just made it (nil: the
	// client).
	apiReader client.Reader
}

// get reads a Secret; NotFound is confirmed around the cache.
func (cs certificates) get(ctx context.Context, key client.ObjectKey, s *corev1.Secret) error {
	err := cs.client.Get(ctx, key, s)
	if apierrors.IsNotFound(err) && cs.apiReader != nil {
		err = cs.apiReader.Get(ctx, key, s)
	}
	return err
}

// namespaceCA returns the namespace's CA, creating it on first use.
func (cs certificates) namespaceCA(ctx context.Context, ns string) (*tlsconfig.CA, error) {
	var s corev1.Secret
	key := client.ObjectKey{Namespace: ns, Name: kvapi.CASecretName}
	err := cs.get(ctx, key, &s)
	if apierrors.IsNotFound(err) {
		ca, created, cerr := cs.createCA(ctx, ns)
		if cerr != nil || created {
			return ca, cerr
		}
		// Made meanwhile, by the pass of another cluster or pool of the
		// namespace: that one is the CA.
		err = cs.get(ctx, key, &s)
	}
	if err != nil {
		return nil, fmt.Errorf("get Secret %s/%s: %w", ns, kvapi.CASecretName, err)
	}
	ca, err := tlsconfig.ParseCA(s.Data[specs.CACertKey], s.Data[specs.CAKeyKey])
	if err != nil {
		return nil, fmt.Errorf("the Secret %s/%s: %w (it must hold ca.crt and ca.key, PEM)", ns, kvapi.CASecretName, err)
	}
	return ca, nil
}

// createCA makes the namespace's CA; created is false when a Secret of
// its name appeared meanwhile.
func (cs certificates) createCA(ctx context.Context, ns string) (ca *tlsconfig.CA, created bool, err error) {
	ca, err = tlsconfig.NewCA("bellows CA of namespace "+ns, contract.CAValidity)
	if err != nil {
		return nil, false, err
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return nil, false, err
	}
	err = cs.client.Create(ctx, specs.BuildCASecret(ns, ca.PEM, keyPEM))
	switch {
	case err == nil:
		return ca, true, nil
	case apierrors.IsAlreadyExists(err):
		return nil, false, nil
	}
	return nil, false, fmt.Errorf("create Secret %s/%s: %w", ns, kvapi.CASecretName, err)
}

// certificate is one Secret to keep issued.
type certificate struct {
	// meta is the Secret's name, namespace, labels and owner.
	meta metav1.ObjectMeta
	role tlsconfig.Role
	// name is the certificate's common name: who holds it.
	name string
}

func (c certificate) key() client.ObjectKey {
	return client.ObjectKey{Namespace: c.meta.Namespace, Name: c.meta.Name}
}

// ensure issues c when its Secret is missing or due (specs.Renewal), and
// returns when it is next due.
func (cs certificates) ensure(ctx context.Context, ca *tlsconfig.CA, c certificate) (time.Time, error) {
	now := time.Now()
	var live corev1.Secret
	err := cs.get(ctx, c.key(), &live)
	if err != nil && !apierrors.IsNotFound(err) {
		return time.Time{}, fmt.Errorf("get Secret %s: %w", c.key(), err)
	}
	if err == nil {
		if due, at, _ := specs.Renewal(live.Data, ca.PEM, c.role.String(), now); !due {
			return at, nil
		}
	}
	certPEM, keyPEM, ierr := ca.Issue(c.name, c.role, nil, now.Add(-time.Minute), contract.CertValidity)
	if ierr != nil {
		return time.Time{}, ierr
	}
	desired := specs.BuildTLSSecret(c.meta, ca.PEM, certPEM, keyPEM)
	if apierrors.IsNotFound(err) {
		err := cs.client.Create(ctx, desired)
		if apierrors.IsAlreadyExists(err) {
			// Made meanwhile (the monitoring certificate, by the pass of
			// another cluster or pool): the next pass checks it.
			return now.Add(time.Second), nil
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("create Secret %s: %w", c.key(), err)
		}
	} else {
		live.Data = desired.Data
		if live.Labels == nil {
			live.Labels = map[string]string{}
		}
		maps.Copy(live.Labels, desired.Labels)
		live.OwnerReferences = desired.OwnerReferences
		if err := cs.client.Update(ctx, &live); err != nil {
			return time.Time{}, fmt.Errorf("update Secret %s: %w", c.key(), err)
		}
	}
	_, at, _ := specs.Renewal(desired.Data, ca.PEM, c.role.String(), now)
	return at, nil
}

// ensureAll ensures the namespace's monitoring certificate and cs, and
// returns when the first of them is next due.
func (cs certificates) ensureAll(ctx context.Context, ns string, certs []certificate) (time.Time, error) {
	ca, err := cs.namespaceCA(ctx, ns)
	if err != nil {
		return time.Time{}, err
	}
	certs = append(certs, monitoringCertificate(ns))
	var next time.Time
	for _, c := range certs {
		at, err := cs.ensure(ctx, ca, c)
		if err != nil {
			return time.Time{}, err
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next, nil
}

// clusterCertificates are a KVCluster's: its stores' node certificate and
// a client certificate per role.
func clusterCertificates(c *kvapi.KVCluster) []certificate {
	certs := []certificate{{meta: specs.ClusterTLSSecretMeta(c, c.StoreTLSSecretName()), role: tlsconfig.Node, name: c.Name + "-store"}}
	for _, name := range kvapi.ClientRoles {
		role, err := tlsconfig.ParseRole(name)
		if err != nil {
			panic(err) // kvapi.ClientRoles are tlsconfig's role names
		}
		certs = append(certs, certificate{meta: specs.ClusterTLSSecretMeta(c, c.ClientTLSSecretName(name)), role: role, name: c.Name + "-" + name})
	}
	return certs
}

// poolCertificates are a CompactionPool's: its workers' node certificate.
func poolCertificates(p *kvapi.CompactionPool) []certificate {
	return []certificate{{meta: specs.PoolTLSSecretMeta(p), role: tlsconfig.Node, name: p.Name + "-worker"}}
}

// monitoringCertificate is the namespace's, for scraping /metrics.
func monitoringCertificate(ns string) certificate {
	return certificate{meta: specs.MonitoringTLSSecretMeta(ns), role: tlsconfig.Reader, name: "bellows-monitoring"}
}

// certificatesStep keeps the certificates of an owner with TLS issued: by
// the namespace's CA (asking for a pass when the first is due), or, with
// tls.mode CertManager, as cert-manager Certificates (cert-manager renews).
func certificatesStep[P pass](cs certificates, ch children, tls func(P) kvapi.TLSSpec, certs func(P) []certificate) step[P] {
	return step[P]{"certificates", func(ctx context.Context, p P) Result {
		spec := tls(p)
		switch spec.Mode {
		case kvapi.TLSDisabled:
			return Continue()
		case kvapi.TLSCertManager:
			return FailIf(cs.ensureCertManager(ctx, ch, p.owner(), *spec.IssuerRef, certs(p)))
		}
		next, err := cs.ensureAll(ctx, p.owner().GetNamespace(), certs(p))
		if err != nil {
			return Fail(err)
		}
		return Requeue(max(time.Until(next), time.Second))
	}}
}

// ensureCertManager keeps a cert-manager Certificate for each of certs,
// owned by owner, and the namespace's monitoring one (created once, owned
// by none, like the operator's).
func (cs certificates) ensureCertManager(ctx context.Context, ch children, owner client.Object, issuer kvapi.IssuerReference, certs []certificate) error {
	for _, c := range certs {
		if _, err := ensure(ctx, ch, owner, specs.BuildCertificate(c.meta, c.name, c.role.String(), issuer), updateCertificate); err != nil {
			return certManagerError(err)
		}
	}
	m := monitoringCertificate(owner.GetNamespace())
	mon := specs.BuildCertificate(m.meta, m.name, m.role.String(), issuer)
	if err := cs.client.Create(ctx, mon); err != nil && !apierrors.IsAlreadyExists(err) {
		return certManagerError(fmt.Errorf("create Certificate %s: %w", m.key(), err))
	}
	return nil
}

// certManagerError says what to do when cert-manager is not installed.
func certManagerError(err error) error {
	if meta.IsNoMatchError(err) || discovery.IsGroupDiscoveryFailedError(err) || strings.Contains(err.Error(), "no matches for kind") {
		return fmt.Errorf("tls.mode CertManager needs cert-manager, and the API server serves no %s: install cert-manager, or use tls.mode Operator: %w", specs.CertificateGVK, err)
	}
	return err
}

func updateCertificate(live, desired *unstructured.Unstructured) {
	live.Object["spec"] = desired.Object["spec"]
}

// clusterCAPEM is the CA of c's certificates: the namespace's, or (with
// cert-manager) the one cert-manager wrote into the stores' Secret; nil
// until it has.
func (cs certificates) clusterCAPEM(ctx context.Context, c *kvapi.KVCluster) ([]byte, error) {
	if c.Spec.TLS.Mode != kvapi.TLSCertManager {
		ca, err := cs.namespaceCA(ctx, c.Namespace)
		if err != nil {
			return nil, err
		}
		return ca.PEM, nil
	}
	var s corev1.Secret
	err := cs.get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.StoreTLSSecretName()}, &s)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s.Data[specs.CACertKey], nil
}

// operatorCredentials are the operator's own client certificates (role
// admin), one per namespace, issued in memory from the namespace's CA and
// never written anywhere: for its calls to the stores' Admin API and its
// scrapes of the pods' /metrics.
type operatorCredentials struct {
	mu   sync.Mutex
	byNS map[string]operatorCert
}

type operatorCert struct {
	caPEM   string
	cfg     *tls.Config
	renewAt time.Time
}

// operatorCertValidity is short: the certificate lives in memory only,
// and is issued again whenever the operator restarts.
const operatorCertValidity = 24 * time.Hour

// forMode is forNamespace, or with tls.mode CertManager (where the
// operator holds no CA key) the client certificate in the Secret secret,
// which cert-manager issued.
func (o *operatorCredentials) forMode(ctx context.Context, cs certificates, ns string, mode kvapi.TLSMode, secret string) (*tls.Config, error) {
	if mode != kvapi.TLSCertManager {
		return o.forNamespace(ctx, cs, ns)
	}
	var s corev1.Secret
	if err := cs.get(ctx, client.ObjectKey{Namespace: ns, Name: secret}, &s); err != nil {
		return nil, fmt.Errorf("the client certificate cert-manager issues into Secret %s/%s: %w", ns, secret, err)
	}
	return tlsconfig.ClientFromSecret(s.Data)
}

// forNamespace returns the operator's TLS client configuration for the
// pods of ns.
func (o *operatorCredentials) forNamespace(ctx context.Context, cs certificates, ns string) (*tls.Config, error) {
	ca, err := cs.namespaceCA(ctx, ns)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if c, ok := o.byNS[ns]; ok && c.caPEM == string(ca.PEM) && now.Before(c.renewAt) {
		return c.cfg, nil
	}
	certPEM, keyPEM, err := ca.Issue("bellows-operator", tlsconfig.Admin, nil, now.Add(-time.Minute), operatorCertValidity)
	if err != nil {
		return nil, err
	}
	cfg, err := tlsconfig.ClientFromPEM(ca.PEM, certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if o.byNS == nil {
		o.byNS = map[string]operatorCert{}
	}
	o.byNS[ns] = operatorCert{caPEM: string(ca.PEM), cfg: cfg, renewAt: now.Add(operatorCertValidity / 2)}
	return cfg, nil
}
