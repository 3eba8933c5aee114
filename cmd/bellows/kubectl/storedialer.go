package kubectl

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// StoreDialer lets the Go client reach every store of a cluster from
// outside it: the addresses the client learns (a region's owners, as the
// stores name each other: a pod's DNS name under the headless Service, or
// its IP) are each dialled through a port-forward to that pod, opened on
// first use and kept until Close. The client then routes each request to
// its region's owner as it does inside the cluster.
type StoreDialer struct {
	kube    *Kube
	cluster string
	pods    []corev1.Pod
	creds   credentials.TransportCredentials

	mu       sync.Mutex
	forwards map[string]string // pod → local address
	stops    []func()
}

// StoreDialer connects to c's storage pods that are Ready (with the
// cluster's admin client certificate when it serves TLS, as DialStore).
func (k *Kube) StoreDialer(ctx context.Context, c *kvapi.KVCluster) (*StoreDialer, error) {
	pods, err := k.StorePods(ctx, c)
	if err != nil {
		return nil, err
	}
	var ready []corev1.Pod
	var states []string
	for _, p := range pods {
		states = append(states, p.Name+" "+podState(&p))
		if PodReady(&p) {
			ready = append(ready, p)
		}
	}
	if len(ready) == 0 {
		return nil, &NoReadyStoreError{Cluster: c.Name, Namespace: c.Namespace, Pods: states}
	}
	creds, err := k.transportCredentials(ctx, c)
	if err != nil {
		return nil, err
	}
	return &StoreDialer{kube: k, cluster: c.Name, pods: ready, creds: creds, forwards: map[string]string{}}, nil
}

// Seeds are the addresses to give the client: each Ready pod's.
func (d *StoreDialer) Seeds() []string {
	out := make([]string, len(d.pods))
	for i, p := range d.pods {
		out[i] = net.JoinHostPort(p.Name, fmt.Sprint(contract.StoreGRPCPort))
	}
	return out
}

// DialOptions are the client's: the transport credentials. Its dialer
// (client.Options.Dialer) is Dial, which is given the stores' names
// unresolved: they resolve in the cluster only.
func (d *StoreDialer) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithTransportCredentials(d.creds)}
}

// Close ends the port-forwards.
func (d *StoreDialer) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, stop := range d.stops {
		stop()
	}
	d.stops, d.forwards = nil, map[string]string{}
}

// Dial connects to the pod that addr (a store's address as the stores
// name each other) names, through its port-forward.
func (d *StoreDialer) Dial(ctx context.Context, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	pod, ok := PodOfHost(host, d.pods)
	if !ok {
		names := make([]string, len(d.pods))
		for i, p := range d.pods {
			names[i] = p.Name
		}
		return nil, fmt.Errorf("the address %s names no Ready storage pod of KVCluster %s (%s)", addr, d.cluster, strings.Join(names, ", "))
	}
	local, err := d.forward(ctx, pod)
	if err != nil {
		return nil, err
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", local)
}

// forward is the local address of pod's port-forward, opened once.
func (d *StoreDialer) forward(ctx context.Context, pod string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if local, ok := d.forwards[pod]; ok {
		return local, nil
	}
	// The forward outlives the dial that opened it: the client dials
	// again through it after a reconnect.
	local, stop, _, err := d.kube.Forward(context.WithoutCancel(ctx), pod, contract.StoreGRPCPort)
	if err != nil {
		return "", err
	}
	d.forwards[pod] = local
	d.stops = append(d.stops, stop)
	return local, nil
}

// PodOfHost is the pod among pods that host names: its name, the first
// label of its DNS name (pod.headless-service.namespace.svc...), or one of
// its IPs.
func PodOfHost(host string, pods []corev1.Pod) (string, bool) {
	label, _, _ := strings.Cut(host, ".")
	for _, p := range pods {
		if p.Name == label || p.Status.PodIP == host || slices.ContainsFunc(p.Status.PodIPs, func(ip corev1.PodIP) bool { return ip.IP == host }) {
			return p.Name, true
		}
	}
	return "", false
}
