package kubectl

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
	"github.com/bellows-kv/bellows/internal/tlsconfig"
)

// Forward forwards a local port to port of the pod through the API server,
// as `kubectl port-forward` does (WebSockets, falling back to SPDY), so the
// plugin reaches a store without a route to pod IPs. It returns the local
// address; stop ends the forward; diag is what the forwarder logged (why a
// connection through it failed).
func (k *Kube) Forward(ctx context.Context, pod string, port int) (addr string, stop func(), diag func() string, err error) {
	url := k.Core.CoreV1().RESTClient().Post().Resource("pods").Namespace(k.Namespace).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(k.Config)
	if err != nil {
		return "", nil, nil, err
	}
	dialer := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	if ws, err := portforward.NewSPDYOverWebsocketDialerForStreaming(url, k.Config); err == nil {
		dialer = portforward.NewFallbackDialerForStreaming(ws, dialer, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}
	stopCh, ready := make(chan struct{}), make(chan struct{})
	errOut := &syncWriter{w: &bytes.Buffer{}}
	fw, err := portforward.NewOnAddressesForStreaming(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stopCh, ready, nil, errOut)
	if err != nil {
		return "", nil, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	var once sync.Once
	stop = func() { once.Do(func() { close(stopCh) }) }
	select {
	case <-ready:
	case err := <-done:
		if err == nil {
			err = fmt.Errorf("the forward ended at once")
		}
		return "", nil, nil, fmt.Errorf("port-forward to pod %s port %d: %w", pod, port, err)
	case <-ctx.Done():
		stop()
		return "", nil, nil, fmt.Errorf("port-forward to pod %s port %d: %w", pod, port, ctx.Err())
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		stop()
		return "", nil, nil, fmt.Errorf("port-forward to pod %s: no local port (%v)", pod, err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))), stop, errOut.String, nil
}

// Store is a gRPC connection to a store pod's KV and Admin services, over a
// port-forward.
type Store struct {
	Pod  string
	Conn *grpc.ClientConn
	stop func()
	diag func() string
}

// Explain adds to err of a call to the store what the forward logged, if
// anything: a call that failed for the forward says so.
func (s *Store) Explain(err error) error {
	if d := s.diag(); err != nil && d != "" {
		return fmt.Errorf("%w (port-forward to %s: %s)", err, s.Pod, d)
	}
	return err
}

// Close ends the connection and its forward.
func (s *Store) Close() {
	_ = s.Conn.Close()
	s.stop()
}

// DialStore connects to the store's gRPC port in pod, a storage pod of c:
// with TLS, with the cluster's admin client certificate, which the user's
// Kubernetes credentials must be allowed to read (the Secret
// <cluster>-client-admin): whoever may read it may administer the cluster.
func (k *Kube) DialStore(ctx context.Context, c *kvapi.KVCluster, pod string) (*Store, error) {
	transport, err := k.transportCredentials(ctx, c)
	if err != nil {
		return nil, err
	}
	addr, stop, diag, err := k.Forward(ctx, pod, contract.StoreGRPCPort)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(transport),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(contract.MaxMessageBytes)))
	if err != nil {
		stop()
		return nil, err
	}
	return &Store{Pod: pod, Conn: conn, stop: stop, diag: diag}, nil
}

// transportCredentials are a connection's to c's stores: TLS with the
// cluster's admin client certificate when c serves TLS, else plaintext.
func (k *Kube) transportCredentials(ctx context.Context, c *kvapi.KVCluster) (credentials.TransportCredentials, error) {
	if !c.Spec.TLS.TLSEnabled() {
		return insecure.NewCredentials(), nil
	}
	cfg, err := k.clientTLS(ctx, c)
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}

// clientTLS reads the cluster's admin client certificate.
func (k *Kube) clientTLS(ctx context.Context, c *kvapi.KVCluster) (*tls.Config, error) {
	name := c.ClientTLSSecretName("admin")
	var s corev1.Secret
	if err := k.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("the cluster's admin client certificate (Secret %s/%s): %w", c.Namespace, name, err)
	}
	cfg, err := tlsconfig.ClientFromSecret(s.Data)
	if err != nil {
		return nil, fmt.Errorf("the Secret %s/%s: %w", c.Namespace, name, err)
	}
	return cfg, nil
}

// syncWriter collects what the forwarder logs from its goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.TrimSpace(s.w.String())
}
