package controllers

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
)

// leaf parses the certificate a TLS Secret holds.
func leaf(g Gomega, s *corev1.Secret) *x509.Certificate {
	block, _ := pem.Decode(s.Data[corev1.TLSCertKey])
	g.Expect(block).NotTo(BeNil(), "Secret %s holds no certificate", s.Name)
	cert, err := x509.ParseCertificate(block.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	return cert
}

// TestCertificatesAreIssuedMountedAndReissued: with the default TLS, the
// operator makes the namespace's CA and, from it, the stores' and the
// workers' node certificates, a client certificate per role and the
// monitoring one; the pods mount theirs; a deleted certificate is issued
// again, and one of a replaced CA too; a cluster with TLS Disabled gets
// none.
func TestCertificatesAreIssuedMountedAndReissued(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)

	pool := &kvapi.CompactionPool{}
	loadSample(t, "kv_v1alpha1_compactionpool.yaml", pool, ns)
	pool.Spec.Autoscaling.Mode = kvapi.AutoscalingDisabled
	cluster := &kvapi.KVCluster{}
	loadSample(t, "kv_v1alpha1_kvcluster.yaml", cluster, ns)
	g.Expect(k8sClient.Create(ctx, pool)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, cluster)).To(Succeed())

	get := func(g Gomega, name string) *corev1.Secret {
		s := &corev1.Secret{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
		return s
	}
	want := map[string]string{ // Secret → the role its certificate names
		"demo-store-tls": "node", "workers-worker-tls": "node", kvapi.MonitoringTLSSecretName: "read",
		"demo-client-read": "read", "demo-client-write": "write", "demo-client-admin": "admin",
	}
	var ca *tlsconfig.CA
	g.Eventually(func(g Gomega) {
		caSecret := get(g, kvapi.CASecretName)
		var err error
		ca, err = tlsconfig.ParseCA(caSecret.Data[specs.CACertKey], caSecret.Data[specs.CAKeyKey])
		g.Expect(err).NotTo(HaveOccurred())
		for name, role := range want {
			s := get(g, name)
			g.Expect(s.Type).To(Equal(corev1.SecretTypeTLS))
			g.Expect(s.Data[specs.CACertKey]).To(Equal(ca.PEM), name)
			cert := leaf(g, s)
			g.Expect(cert.Subject.Organization).To(Equal([]string{role}), name)
			pool := x509.NewCertPool()
			pool.AddCert(ca.Cert)
			_, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
			g.Expect(err).NotTo(HaveOccurred(), name)
			g.Expect(cert.NotAfter.Sub(cert.NotBefore)).To(Equal(contract.CertValidity), name)
		}
		g.Expect(leaf(g, get(g, "demo-store-tls")).DNSNames).To(ContainElement(tlsconfig.ServerName))
	}).Should(Succeed())
	// Owned by their cluster or pool (garbage-collected with it); the CA
	// and the monitoring certificate by nobody.
	g.Eventually(func(g Gomega) {
		g.Expect(ownedNames(g, ns, cluster, &corev1.SecretList{})).To(ConsistOf("demo-store-tls", "demo-client-read", "demo-client-write", "demo-client-admin",
			"demo-token-read", "demo-token-write", "demo-token-admin", "demo-tokens"))
	}).Should(Succeed())
	g.Expect(ownedNames(g, ns, pool, &corev1.SecretList{})).To(ConsistOf("workers-worker-tls"))
	g.Expect(get(g, kvapi.CASecretName).OwnerReferences).To(BeEmpty())

	// The pods mount their node certificate and are told where it is.
	sts := &appsv1.StatefulSet{}
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(cluster), sts)).To(Succeed())
	}).Should(Succeed())
	podTLS := func(spec corev1.PodSpec, secret string) {
		t.Helper()
		g.Expect(spec.Containers[0].Args).To(ContainElement("--tls-dir=" + contract.TLSMountPath))
		g.Expect(spec.Volumes).To(ContainElement(HaveField("VolumeSource.Secret.SecretName", secret)))
		g.Expect(spec.Containers[0].ReadinessProbe.HTTPGet.Scheme).To(Equal(corev1.URISchemeHTTPS))
	}
	podTLS(sts.Spec.Template.Spec, "demo-store-tls")
	dep := &appsv1.Deployment{}
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: pool.DeploymentName()}, dep)).To(Succeed())
	}).Should(Succeed())
	podTLS(dep.Spec.Template.Spec, "workers-worker-tls")

	// A bearer token per role, and the stores' tokens file holding their
	// hashes (never the tokens); a deleted token Secret makes a new token,
	// and the file follows.
	tokens := func(g Gomega) (map[string]string, string) {
		byRole := map[string]string{}
		for _, role := range kvapi.ClientRoles {
			s := get(g, cluster.TokenSecretName(role))
			g.Expect(s.Data[specs.CACertKey]).To(Equal(ca.PEM))
			byRole[role] = string(s.Data[specs.TokenKey])
			g.Expect(byRole[role]).To(HaveLen(52))
		}
		return byRole, string(get(g, cluster.TokensSecretName()).Data[contract.TokensFile])
	}
	var before map[string]string
	g.Eventually(func(g Gomega) {
		byRole, file := tokens(g)
		for role, tok := range byRole {
			g.Expect(file).To(ContainSubstring(role + " " + tlsconfig.HashToken(tok) + " demo-" + role + "\n"))
			g.Expect(file).NotTo(ContainSubstring(tok))
		}
		before = byRole
	}).Should(Succeed())
	g.Expect(sts.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--tokens-file=" + contract.TokensMountPath + "/" + contract.TokensFile))
	g.Expect(sts.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("VolumeSource.Secret.SecretName", cluster.TokensSecretName())))
	g.Expect(k8sClient.Delete(ctx, get(g, cluster.TokenSecretName("write")))).To(Succeed())
	g.Eventually(func(g Gomega) {
		byRole, file := tokens(g)
		g.Expect(byRole["write"]).NotTo(Equal(before["write"]))
		g.Expect(byRole["read"]).To(Equal(before["read"]))
		g.Expect(file).To(ContainSubstring(tlsconfig.HashToken(byRole["write"])))
		g.Expect(file).NotTo(ContainSubstring(tlsconfig.HashToken(before["write"])))
	}).Should(Succeed())

	// A deleted certificate is issued again, with a new serial.
	old := leaf(g, get(g, "demo-client-read"))
	g.Expect(k8sClient.Delete(ctx, get(g, "demo-client-read"))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(leaf(g, get(g, "demo-client-read")).SerialNumber).NotTo(Equal(old.SerialNumber))
	}).Should(Succeed())

	// A certificate of another CA (the CA was replaced, or someone wrote
	// over the Secret) is issued again, in place: the same object, so the
	// pods' volume follows without a restart.
	other, err := tlsconfig.NewCA("intruder", contract.CAValidity)
	g.Expect(err).NotTo(HaveOccurred())
	cert, key, err := other.Issue("intruder", tlsconfig.Node, nil, old.NotBefore, contract.CertValidity)
	g.Expect(err).NotTo(HaveOccurred())
	s := get(g, "demo-store-tls")
	uid := s.UID
	s.Data = map[string][]byte{specs.CACertKey: other.PEM, corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key}
	g.Expect(k8sClient.Update(ctx, s)).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := get(g, "demo-store-tls")
		g.Expect(s.UID).To(Equal(uid))
		g.Expect(bytes.Equal(s.Data[specs.CACertKey], ca.PEM)).To(BeTrue())
		g.Expect(leaf(g, s).Issuer.CommonName).To(Equal(ca.Cert.Subject.CommonName))
	}).Should(Succeed())

	// TLS Disabled: no certificates, no mount, plaintext probes.
	plain := &kvapi.KVCluster{}
	loadSample(t, "kv_v1alpha1_kvcluster.yaml", plain, ns)
	plain.Name = "plain"
	plain.Spec.TLS.Mode = kvapi.TLSDisabled
	g.Expect(k8sClient.Create(ctx, plain)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(plain), sts)).To(Succeed())
	}).Should(Succeed())
	g.Expect(sts.Spec.Template.Spec.Containers[0].Args).NotTo(ContainElement(HavePrefix("--tls-dir")))
	g.Expect(sts.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Scheme).To(Equal(corev1.URISchemeHTTP))
	g.Expect(ownedNames(g, ns, plain, &corev1.SecretList{})).To(BeEmpty())
	// Its pool has TLS: Degraded, saying so.
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(plain), plain)).To(Succeed())
		d := condition(plain.Status.Conditions, kvapi.ConditionDegraded)
		g.Expect(d.Reason).To(Equal(kvapi.ReasonTLSMismatch))
		g.Expect(d.Message).To(ContainSubstring(`tls is Disabled here and Operator in CompactionPool "workers"`))
	}).Should(Succeed())

	// The mode is immutable (retried over the operator's status writes).
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(plain), plain)).To(Succeed())
		plain.Spec.TLS.Mode = kvapi.TLSOperator
		g.Expect(k8sClient.Update(ctx, plain)).To(MatchError(ContainSubstring("tls.mode and tls.issuerRef are immutable")))
	}).Should(Succeed())
}

// TestCertManagerIssuesTheSameCertificates: with tls.mode CertManager the
// operator writes a cert-manager Certificate for each certificate its CA
// would issue (same Secret, name, role, uses, validity; the Secret labelled
// for the operator's cache), makes no CA of its own, and takes the CA for
// the tokens from what cert-manager writes. The issuer is required with
// the mode and refused without it.
func TestCertManagerIssuesTheSameCertificates(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(eventually)
	g.SetDefaultEventuallyPollingInterval(poll)
	ctx := context.Background()
	ns := newNamespace(t)

	cluster := validCluster(ns, "cm")
	cluster.Spec.TLS = kvapi.TLSSpec{Mode: kvapi.TLSCertManager}
	g.Expect(k8sClient.Create(ctx, cluster)).To(MatchError(ContainSubstring("tls.issuerRef names the cert-manager issuer of tls.mode CertManager")))
	cluster.Spec.TLS = kvapi.TLSSpec{Mode: kvapi.TLSOperator, IssuerRef: &kvapi.IssuerReference{Name: "ca"}}
	g.Expect(k8sClient.Create(ctx, cluster)).To(MatchError(ContainSubstring("tls.issuerRef names the cert-manager issuer")))

	_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{filepath.Join("testdata", "cert-manager-certificates-crd.yaml")}, ErrorIfPathMissing: true})
	g.Expect(err).NotTo(HaveOccurred())
	issuer := &kvapi.IssuerReference{Name: "ca", Kind: "ClusterIssuer"}
	pool := validPool(ns, "cm")
	pool.Spec.Autoscaling.Mode = kvapi.AutoscalingDisabled
	pool.Spec.TLS = kvapi.TLSSpec{Mode: kvapi.TLSCertManager, IssuerRef: issuer}
	cluster.Spec.TLS = kvapi.TLSSpec{Mode: kvapi.TLSCertManager, IssuerRef: issuer}
	cluster.Spec.CompactionPoolRef = &kvapi.CompactionPoolReference{Name: "cm"}
	g.Expect(k8sClient.Create(ctx, pool)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, cluster)).To(Succeed())

	want := map[string]string{"cm-store-tls": "node", "cm-worker-tls": "node", "cm-client-read": "read",
		"cm-client-write": "write", "cm-client-admin": "admin", kvapi.MonitoringTLSSecretName: "read"}
	g.Eventually(func(g Gomega) {
		for name, role := range want {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(specs.CertificateGVK)
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u)).To(Succeed(), name)
			spec := u.Object["spec"].(map[string]any)
			g.Expect(spec["secretName"]).To(Equal(name))
			g.Expect(spec["subject"]).To(Equal(map[string]any{"organizations": []any{role}}))
			g.Expect(spec["issuerRef"]).To(Equal(map[string]any{"name": "ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}))
			g.Expect(spec["duration"]).To(Equal(contract.CertValidity.String()))
			g.Expect(spec["secretTemplate"]).To(HaveKeyWithValue("labels", HaveKeyWithValue(contract.LabelManagedBy, contract.ManagedBy)))
			if role == "node" {
				g.Expect(spec["dnsNames"]).To(ContainElement(tlsconfig.ServerName))
				g.Expect(spec["usages"]).To(ContainElements("server auth", "client auth"))
			} else {
				g.Expect(spec["usages"]).NotTo(ContainElement("server auth"))
			}
		}
	}).Should(Succeed())
	// No CA of the operator's: cert-manager's issuer is the CA.
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: kvapi.CASecretName}, &corev1.Secret{})).To(MatchError(ContainSubstring("not found")))

	// cert-manager writes the stores' certificate: the tokens take its CA.
	ca, err := tlsconfig.NewCA("cert-manager's CA", contract.CAValidity)
	g.Expect(err).NotTo(HaveOccurred())
	cert, key, err := ca.Issue("cm-store", tlsconfig.Node, nil, time.Now(), contract.CertValidity)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k8sClient.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm-store-tls", Labels: map[string]string{contract.LabelManagedBy: contract.ManagedBy}},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{specs.CACertKey: ca.PEM, corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key},
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		for _, role := range kvapi.ClientRoles {
			s := &corev1.Secret{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster.TokenSecretName(role)}, s)).To(Succeed())
			g.Expect(s.Data[specs.CACertKey]).To(Equal(ca.PEM))
		}
		s := &corev1.Secret{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster.TokensSecretName()}, s)).To(Succeed())
	}).Should(Succeed())
	sts := &appsv1.StatefulSet{}
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(cluster), sts)).To(Succeed())
	}).Should(Succeed())
	g.Expect(sts.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("VolumeSource.Secret.SecretName", "cm-store-tls")))
}

// staleGets is a client whose first Get of each object answers NotFound,
// as a cache that has not yet seen what another pass created.
type staleGets struct {
	client.Client
	seen map[client.ObjectKey]bool
}

func (c *staleGets) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if !c.seen[key] {
		c.seen[key] = true
		return apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// TestACAMadeMeanwhileIsTheCA: when another pass created the namespace's
// CA between this pass's read and its create, this pass uses that CA, and
// a certificate created meanwhile is no error either.
func TestACAMadeMeanwhileIsTheCA(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	theirs, err := certificates{client: k8sClient}.namespaceCA(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	stale := certificates{client: &staleGets{Client: k8sClient, seen: map[client.ObjectKey]bool{}}}
	ours, err := stale.namespaceCA(ctx, ns)
	if err != nil {
		t.Fatalf("a CA created meanwhile: %v", err)
	}
	if !bytes.Equal(ours.PEM, theirs.PEM) {
		t.Errorf("the pass made a CA of its own instead of using the one made meanwhile")
	}
	mon := monitoringCertificate(ns)
	if _, err := (certificates{client: k8sClient}).ensure(ctx, theirs, mon); err != nil {
		t.Fatal(err)
	}
	if _, err := stale.ensure(ctx, theirs, mon); err != nil {
		t.Errorf("a certificate created meanwhile: %v", err)
	}
}
