//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	bellowsclient "github.com/bellows-kv/bellows/client"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
)

// The clusters of the scenarios run with the default TLS: the harness
// reaches them as a user would, with the certificates the operator issued
// (the Secrets <cluster>-client-<role>, and bellows-monitoring-tls for
// /metrics), read through the API.

// secretTLS is a client TLS configuration from a certificate Secret the
// operator issued.
func secretTLS(ctx context.Context, c client.Reader, namespace, name string) (*tls.Config, error) {
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("the certificate Secret %s/%s: %w", namespace, name, err)
	}
	return tlsconfig.ClientFromSecret(s.Data)
}

// clientTLS waits for cluster's client certificate of role.
func (e *env) clientTLS(t *testing.T, cluster, role string) *tls.Config {
	t.Helper()
	var cfg *tls.Config
	name := cluster + "-client-" + role
	eventually(t, time.Minute, "the operator to issue "+name, func(ctx context.Context) (bool, string, error) {
		var err error
		cfg, err = secretTLS(ctx, e.c, ns, name)
		return err == nil, fmt.Sprint(err), nil
	})
	return cfg
}

// clientOptions are a Go client's options for cluster as role.
func (e *env) clientOptions(t *testing.T, cluster, role string) bellowsclient.Options {
	t.Helper()
	return bellowsclient.Options{DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(e.clientTLS(t, cluster, role)))}}
}

// metricsClients reads the pods' /metrics: HTTPS with the namespace's
// monitoring certificate for the pods that serve TLS.
var metricsClients struct {
	sync.Mutex
	byNS map[string]*http.Client
}

func metricsClient(ctx context.Context, c client.Reader, p *corev1.Pod) (*http.Client, error) {
	if !specs.PodServesTLS(p) {
		return http.DefaultClient, nil
	}
	metricsClients.Lock()
	defer metricsClients.Unlock()
	if hc := metricsClients.byNS[p.Namespace]; hc != nil {
		return hc, nil
	}
	cfg, err := secretTLS(ctx, c, p.Namespace, kvapi.MonitoringTLSSecretName)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	if metricsClients.byNS == nil {
		metricsClients.byNS = map[string]*http.Client{}
	}
	metricsClients.byNS[p.Namespace] = hc
	return hc, nil
}
