package specs

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
)

// TestRenewal: a certificate is issued again when it is missing, of
// another CA, of another role, or 2/3 through its life, and otherwise
// not before then.
func TestRenewal(t *testing.T) {
	ca, err := tlsconfig.NewCA("test", time.Hour*24*365)
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlsconfig.NewCA("other", time.Hour*24*365)
	if err != nil {
		t.Fatal(err)
	}
	issued := time.Now().Truncate(time.Second)
	secret := func(ca *tlsconfig.CA, role tlsconfig.Role) map[string][]byte {
		cert, key, err := ca.Issue("x", role, nil, issued, contract.CertValidity)
		if err != nil {
			t.Fatal(err)
		}
		return BuildTLSSecret(ClusterTLSSecretMeta(defaultedCluster(), "x"), ca.PEM, cert, key).Data
	}
	renewAt := issued.Add(contract.CertValidity / 3 * 2)
	for _, tc := range []struct {
		name string
		data map[string][]byte
		role string
		now  time.Time
		due  bool
		why  string
	}{
		{"missing", map[string][]byte{}, "node", issued, true, "holds no certificate"},
		{"fresh", secret(ca, tlsconfig.Node), "node", issued.Add(time.Hour), false, ""},
		{"just before 2/3", secret(ca, tlsconfig.Node), "node", renewAt.Add(-time.Second), false, ""},
		{"at 2/3", secret(ca, tlsconfig.Node), "node", renewAt, true, "2/3 of its validity"},
		{"another role", secret(ca, tlsconfig.Reader), "write", issued, true, "does not name the role write"},
		{"another CA", secret(other, tlsconfig.Node), "node", issued, true, "not the namespace's CA"},
		{"another CA's certificate under this ca.crt", func() map[string][]byte {
			d := secret(other, tlsconfig.Node)
			d[CACertKey] = ca.PEM
			return d
		}(), "node", issued, true, "not signed by the namespace's CA"},
		{"no key", func() map[string][]byte {
			d := secret(ca, tlsconfig.Node)
			delete(d, corev1.TLSPrivateKeyKey)
			return d
		}(), "node", issued, true, "holds no certificate and key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			due, at, why := Renewal(tc.data, ca.PEM, tc.role, tc.now)
			if due != tc.due || !strings.Contains(why, tc.why) {
				t.Fatalf("due %v (%q), want %v (%q)", due, why, tc.due, tc.why)
			}
			if !due && !at.Equal(renewAt) {
				t.Errorf("next due at %s, want 2/3 of its life: %s", at, renewAt)
			}
		})
	}
}
