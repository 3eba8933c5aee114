package controllers

// Bearer tokens (docs/security.md §3): for clients that cannot hold a
// certificate, the operator keeps a token per role per cluster in the
// Secrets <cluster>-token-<role>, and the stores' tokens file (hashes, roles
// and names) in <cluster>-tokens, which they mount and re-read when it
// changes. A token is made once; deleting its Secret makes a new one, and
// the old one stops working as soon as the stores read the new file.

import (
	"bytes"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
)

// ensureTokens keeps c's token Secrets and returns the stores' tokens file
// lines.
func (cs certificates) ensureTokens(ctx context.Context, c *kvapi.KVCluster, caPEM []byte) ([]string, error) {
	var lines []string
	for _, name := range kvapi.ClientRoles {
		role, err := tlsconfig.ParseRole(name)
		if err != nil {
			return nil, err
		}
		key := client.ObjectKey{Namespace: c.Namespace, Name: c.TokenSecretName(name)}
		var live corev1.Secret
		err = cs.get(ctx, key, &live)
		token := string(live.Data[specs.TokenKey])
		switch {
		case apierrors.IsNotFound(err):
			token = tlsconfig.NewToken()
			if err := cs.client.Create(ctx, specs.BuildTokenSecret(c, name, token, caPEM)); err != nil {
				return nil, fmt.Errorf("create Secret %s: %w", key, err)
			}
		case err != nil:
			return nil, fmt.Errorf("get Secret %s: %w", key, err)
		case token == "" || !bytes.Equal(live.Data[specs.CACertKey], caPEM):
			// Emptied by hand, or the CA was replaced: a token (new if
			// none) and the current CA.
			if token == "" {
				token = tlsconfig.NewToken()
			}
			live.Data = specs.BuildTokenSecret(c, name, token, caPEM).Data
			if err := cs.client.Update(ctx, &live); err != nil {
				return nil, fmt.Errorf("update Secret %s: %w", key, err)
			}
		}
		line, err := tlsconfig.TokenLine(role, token, c.Name+"-"+name)
		if err != nil {
			return nil, fmt.Errorf("the token in Secret %s: %w (delete the Secret and the operator makes a new one)", key, err)
		}
		lines = append(lines, line)
	}
	return lines, nil
}

// tokensStep keeps a cluster with TLS's tokens and the stores' tokens file.
func (r *KVClusterReconciler) tokensStep(ch children) step[*kvPass] {
	return step[*kvPass]{"tokens", func(ctx context.Context, p *kvPass) Result {
		if !p.cluster.Spec.TLS.TLSEnabled() {
			return Continue()
		}
		cs := r.certificates()
		caPEM, err := cs.clusterCAPEM(ctx, p.cluster)
		if err != nil {
			return Fail(err)
		}
		if len(caPEM) == 0 {
			// cert-manager has not written the stores' certificate yet
			// (the pods wait for it too).
			return Requeue(tokensRecheck)
		}
		lines, err := cs.ensureTokens(ctx, p.cluster, caPEM)
		if err != nil {
			return Fail(err)
		}
		_, err = ensure(ctx, ch, p.cluster, specs.BuildTokensSecret(p.cluster, lines), updateSecretData)
		return FailIf(err)
	}}
}

// tokensRecheck is how soon a pass looks again for the CA cert-manager
// writes with the stores' certificate.
const tokensRecheck = 5 * time.Second

func updateSecretData(live, desired *corev1.Secret) { live.Data = desired.Data }
