package specs

// TLS objects (docs/security.md §2): the Secrets the operator's CA issues,
// how pods mount them, and when a certificate is renewed. Issuing (keys,
// randomness) is the controller's; deciding and building is here.

import (
	"bytes"
	"cmp"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

const (
	tlsVolume    = "tls"
	tokensVolume = "tokens"
)

// Keys of the CA Secret and of a TLS Secret (as kubernetes.io/tls and
// cert-manager lay them out; internal/tlsconfig reads the same names).
const (
	CACertKey = "ca.crt"
	CAKeyKey  = "ca.key"
)

// BuildCASecret is the namespace's CA (kvapi.CASecretName). It has no
// owner: every cluster and pool of the namespace trusts it, and it must
// outlive each of them.
func BuildCASecret(namespace string, certPEM, keyPEM []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: kvapi.CASecretName, Namespace: namespace, Labels: namespaceTLSLabels(),
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{CACertKey: certPEM, CAKeyKey: keyPEM},
	}
}

// ClusterTLSSecretMeta is a certificate Secret a KVCluster owns: its
// stores' node certificate or a client certificate of a role.
func ClusterTLSSecretMeta(c *kvapi.KVCluster, name string) metav1.ObjectMeta {
	return clusterMeta(c, name)
}

// PoolTLSSecretMeta is a CompactionPool's workers' certificate Secret.
func PoolTLSSecretMeta(p *kvapi.CompactionPool) metav1.ObjectMeta {
	return poolMeta(p, p.WorkerTLSSecretName())
}

// MonitoringTLSSecretMeta is the namespace's monitoring client certificate
// (kvapi.MonitoringTLSSecretName). No owner: the ServiceMonitors of every
// cluster and pool of the namespace name it.
func MonitoringTLSSecretMeta(namespace string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: kvapi.MonitoringTLSSecretName, Namespace: namespace, Labels: namespaceTLSLabels()}
}

// BuildTLSSecret is a certificate Secret as a TLS directory reads it.
func BuildTLSSecret(meta metav1.ObjectMeta, caPEM, certPEM, keyPEM []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: meta,
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{CACertKey: caPEM, corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}
}

func namespaceTLSLabels() map[string]string {
	return map[string]string{contract.LabelName: contract.AppName, contract.LabelManagedBy: contract.ManagedBy,
		contract.LabelPartOf: contract.AppName, contract.LabelComponent: contract.ComponentCA}
}

// TokenKey is the key of the token in a token Secret.
const TokenKey = "token"

// BuildTokenSecret is a client's bearer token of a role, with the CA that
// verifies the stores (a client with a token needs no certificate).
func BuildTokenSecret(c *kvapi.KVCluster, role, token string, caPEM []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: clusterMeta(c, c.TokenSecretName(role)),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{TokenKey: []byte(token), CACertKey: caPEM},
	}
}

// BuildTokensSecret is the stores' tokens file: lines, one per token
// (tlsconfig.TokenLine), hashes only.
func BuildTokensSecret(c *kvapi.KVCluster, lines []string) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: clusterMeta(c, c.TokensSecretName()),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{contract.TokensFile: []byte(strings.Join(lines, "\n") + "\n")},
	}
	StampHash(s, s.Data)
	return s
}

// withTokens mounts the stores' tokens Secret (StoreArgs passes
// --tokens-file). Like a certificate, a changed file is re-read by the
// running store.
func withTokens(spec *corev1.PodSpec, secret string) {
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: tokensVolume, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: secret, DefaultMode: ptr.To(int32(0o440))},
	}})
	c := &spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: tokensVolume, MountPath: contract.TokensMountPath, ReadOnly: true})
}

// Renewal says whether the certificate a TLS Secret holds must be issued
// again now, why, and otherwise when it will be due. It is due when it is
// missing or unreadable, was issued by another CA than caPEM (the CA was
// replaced), names another role than role, or has lived
// CertRenewNumerator/CertRenewDenominator of its validity.
func Renewal(data map[string][]byte, caPEM []byte, role string, now time.Time) (due bool, at time.Time, why string) {
	block, _ := pem.Decode(data[corev1.TLSCertKey])
	if block == nil || len(data[corev1.TLSPrivateKeyKey]) == 0 {
		return true, now, "it holds no certificate and key"
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return true, now, "its certificate does not parse"
	}
	if !bytes.Equal(data[CACertKey], caPEM) {
		return true, now, "its ca.crt is not the namespace's CA"
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return true, now, "the namespace's CA does not parse"
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, CurrentTime: cert.NotBefore.Add(time.Second)}); err != nil {
		return true, now, "its certificate is not signed by the namespace's CA"
	}
	if len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != role {
		return true, now, "its certificate does not name the role " + role
	}
	life := cert.NotAfter.Sub(cert.NotBefore)
	at = cert.NotBefore.Add(life / contract.CertRenewDenominator * contract.CertRenewNumerator)
	if !now.Before(at) {
		return true, now, "it has lived 2/3 of its validity (until " + cert.NotAfter.UTC().Format(time.RFC3339) + ")"
	}
	return false, at, ""
}

// withTLS mounts secret at contract.TLSMountPath in the pod's only
// container (StoreArgs and PoolArgs pass --tls-dir), and probes the metrics port with HTTPS. A
// renewed certificate reaches the running pods through the volume (the
// processes reload it), so nothing about it enters the pod template.
func withTLS(spec *corev1.PodSpec, secret string) {
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: tlsVolume, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: secret, DefaultMode: ptr.To(int32(0o440))},
	}})
	c := &spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: tlsVolume, MountPath: contract.TLSMountPath, ReadOnly: true})
	for _, get := range []*corev1.HTTPGetAction{c.ReadinessProbe.HTTPGet, c.LivenessProbe.HTTPGet, lifecycleGet(c)} {
		if get != nil {
			get.Scheme = corev1.URISchemeHTTPS
		}
	}
}

// PodServesTLS says whether a store's or worker's pod runs with
// --tls-dir: during a rollout that switches, some pods do and some not.
func PodServesTLS(pod *corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--"+contract.FlagTLSDir+"=") {
				return true
			}
		}
	}
	return false
}

func lifecycleGet(c *corev1.Container) *corev1.HTTPGetAction {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return nil
	}
	return c.Lifecycle.PreStop.HTTPGet
}

// CertificateGVK is cert-manager's Certificate. The operator writes them as
// unstructured objects, for tls.mode CertManager only.
var CertificateGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}

// BuildCertificate is the cert-manager Certificate that makes, in the Secret
// meta names, the certificate the operator's CA would issue there: the same
// name (cn), role (organization), uses, key and validity, so the pods and
// clients read it the same way. Its Secret carries the operator's labels
// (the operator reads only Secrets so labelled).
func BuildCertificate(meta metav1.ObjectMeta, cn, role string, issuer kvapi.IssuerReference) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(CertificateGVK)
	u.SetName(meta.Name)
	u.SetNamespace(meta.Namespace)
	u.SetLabels(meta.Labels)
	u.SetOwnerReferences(meta.OwnerReferences)
	labels := map[string]any{}
	for k, v := range meta.Labels {
		labels[k] = v
	}
	usages := []any{"digital signature", "client auth"}
	spec := map[string]any{
		"secretName":     meta.Name,
		"secretTemplate": map[string]any{"labels": labels},
		"commonName":     cn,
		"subject":        map[string]any{"organizations": []any{role}},
		"privateKey":     map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
		"duration":       contract.CertValidity.String(),
		"renewBefore":    (contract.CertValidity / contract.CertRenewDenominator * (contract.CertRenewDenominator - contract.CertRenewNumerator)).String(),
		"issuerRef":      map[string]any{"name": issuer.Name, "kind": cmp.Or(issuer.Kind, "Issuer"), "group": cmp.Or(issuer.Group, "cert-manager.io")},
	}
	if role == "node" {
		usages = append(usages, "server auth")
		spec["dnsNames"] = []any{contract.TLSServerName, "localhost"}
		spec["ipAddresses"] = []any{"127.0.0.1", "::1"}
	}
	spec["usages"] = usages
	u.Object["spec"] = spec
	StampHash(u, spec)
	return u
}
