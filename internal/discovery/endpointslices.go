// Package discovery finds compaction workers and peer stores inside
// Kubernetes: the ready endpoints of a Service (the CompactionPool's, the
// KVCluster's headless one), read from its EndpointSlices. It lives outside
// storage-engine/, which imports no Kubernetes packages; the store command
// hands it to the offload executor as a Discovery and to the router as its
// peer list.
package discovery

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// EndpointSlices lists the ready endpoints of one Service from an informer
// cache, so a placement decision costs no API call and follows scale-ups,
// scale-downs and draining workers as the endpoints controller reports them.
type EndpointSlices struct {
	namespace, service, port string
	lister                   listersv1.EndpointSliceNamespaceLister
}

// ParseService splits "namespace/name".
func ParseService(s string) (namespace, name string, err error) {
	ns, n, ok := strings.Cut(s, "/")
	if !ok || ns == "" || n == "" || strings.Contains(n, "/") {
		return "", "", fmt.Errorf("service %q: want NAMESPACE/NAME", s)
	}
	return ns, n, nil
}

// StartEndpointSlices watches the EndpointSlices of namespace/service and
// returns once its cache has synced (or ctx ends). portName is the Service
// port whose number workers listen on ("grpc").
func StartEndpointSlices(ctx context.Context, cfg *rest.Config, namespace, service, portName string) (*EndpointSlices, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	selector := labels.Set{discoveryv1.LabelServiceName: service}.String()
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 10*time.Minute,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	inf := factory.Discovery().V1().EndpointSlices()
	lister := inf.Lister()
	informer := inf.Informer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil, fmt.Errorf("discovery: EndpointSlices of %s/%s did not sync: %w", namespace, service, ctx.Err())
	}
	return &EndpointSlices{namespace: namespace, service: service, port: portName, lister: lister.EndpointSlices(namespace)}, nil
}

// Compactors returns host:port of every ready, not terminating endpoint,
// sorted. A draining worker is terminating: it gets no new jobs.
func (d *EndpointSlices) Compactors() []string { return d.Endpoints() }

// Endpoints returns host:port of every ready, not terminating endpoint,
// sorted.
func (d *EndpointSlices) Endpoints() []string {
	sl, err := d.lister.List(labels.Set{discoveryv1.LabelServiceName: d.service}.AsSelector())
	if err != nil {
		return nil
	}
	return Addresses(sl, d.port)
}

// Addresses extracts host:port of the serving endpoints of slices.
func Addresses(sl []*discoveryv1.EndpointSlice, portName string) []string {
	var out []string
	for _, s := range sl {
		port := int32(0)
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == portName && p.Port != nil {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			c := ep.Conditions
			if (c.Ready != nil && !*c.Ready) || (c.Terminating != nil && *c.Terminating) || len(ep.Addresses) == 0 {
				continue
			}
			out = append(out, net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(port))))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ReadyHostnames are the hostnames of the endpoints whose pod is Ready and
// not terminating (a StatefulSet pod's endpoint carries its pod name as
// hostname; the targetRef's name stands in when it has none), sorted.
func (d *EndpointSlices) ReadyHostnames() []string {
	sl, err := d.lister.List(labels.Set{discoveryv1.LabelServiceName: d.service}.AsSelector())
	if err != nil {
		return nil
	}
	return Hostnames(sl)
}

// Hostnames extracts the hostnames of the endpoints of slices whose pod is
// Ready and not terminating. The condition read is serving, not ready: a
// Service with publishNotReadyAddresses (the stores' headless one) has every
// endpoint ready, while serving is the pod's Ready condition; ready stands
// in when serving is unset.
func Hostnames(sl []*discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range sl {
		for _, ep := range s.Endpoints {
			c := ep.Conditions
			podReady := c.Serving
			if podReady == nil {
				podReady = c.Ready
			}
			if (podReady != nil && !*podReady) || (c.Terminating != nil && *c.Terminating) {
				continue
			}
			switch {
			case ep.Hostname != nil && *ep.Hostname != "":
				out = append(out, *ep.Hostname)
			case ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" && ep.TargetRef.Name != "":
				out = append(out, ep.TargetRef.Name)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
