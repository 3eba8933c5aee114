package kubectl

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/bellows-kv/bellows/internal/contract"
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

// DialStore connects to the store's gRPC port in pod.
func (k *Kube) DialStore(ctx context.Context, pod string) (*Store, error) {
	addr, stop, diag, err := k.Forward(ctx, pod, contract.StoreGRPCPort)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(contract.MaxMessageBytes)))
	if err != nil {
		stop()
		return nil, err
	}
	return &Store{Pod: pod, Conn: conn, stop: stop, diag: diag}, nil
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
