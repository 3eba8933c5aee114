package kubectl

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/client"
	kvpb "github.com/bellows-kv/bellows/proto/bellows/kv/v1"
)

// NoReadyStoreError: none of the cluster's storage pods is Ready, so none
// can be asked.
type NoReadyStoreError struct {
	Cluster, Namespace string
	Pods               []string // each with its phase
}

func (e *NoReadyStoreError) Error() string {
	if len(e.Pods) == 0 {
		return fmt.Sprintf("KVCluster %s/%s has no storage pods yet; `kubectl bellows status %s` says why", e.Namespace, e.Cluster, e.Cluster)
	}
	return fmt.Sprintf("no storage pod of KVCluster %s/%s is Ready (%s); `kubectl bellows status %s` says why",
		e.Namespace, e.Cluster, strings.Join(e.Pods, ", "), e.Cluster)
}

// Skipped is a storage pod the regions could not be read from, and why.
type Skipped struct{ Pod, Why string }

// Regions asks every Ready storage pod of c for its regions, concurrently,
// each through a port-forward, and returns the cluster's regions with each
// owner named by its pod. Pods not Ready, or not answering, are skipped
// (their regions are then missing or owned by none); with none answering,
// an error.
func (k *Kube) Regions(ctx context.Context, c *kvapi.KVCluster) ([]client.Region, []Skipped, error) {
	pods, err := k.StorePods(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	var ready []corev1.Pod
	var skipped []Skipped
	var states []string
	for _, p := range pods {
		states = append(states, p.Name+" "+podState(&p))
		if PodReady(&p) {
			ready = append(ready, p)
		} else {
			skipped = append(skipped, Skipped{p.Name, "not Ready (" + podState(&p) + ")"})
		}
	}
	if len(ready) == 0 {
		return nil, nil, &NoReadyStoreError{Cluster: c.Name, Namespace: c.Namespace, Pods: states}
	}
	answers := make([]*client.StoreAnswer, len(ready))
	fails := make([]error, len(ready))
	var wg sync.WaitGroup
	for i, p := range ready {
		wg.Go(func() {
			s, err := k.DialStore(ctx, c, p.Name)
			if err != nil {
				fails[i] = err
				return
			}
			defer s.Close()
			resp, err := kvpb.NewKVClient(s.Conn).Regions(ctx, &kvpb.RegionsRequest{})
			if err != nil {
				fails[i] = s.Explain(err)
				return
			}
			answers[i] = &client.StoreAnswer{Addr: p.Name, Resp: resp}
		})
	}
	wg.Wait()
	var got []client.StoreAnswer
	var errs []string
	for i, a := range answers {
		if a != nil {
			got = append(got, *a)
			continue
		}
		skipped = append(skipped, Skipped{ready[i].Name, fails[i].Error()})
		errs = append(errs, ready[i].Name+": "+fails[i].Error())
	}
	if len(got) == 0 {
		return nil, skipped, fmt.Errorf("no storage pod of KVCluster %s/%s answered: %s", c.Namespace, c.Name, strings.Join(errs, "; "))
	}
	slices.SortFunc(skipped, func(a, b Skipped) int { return strings.Compare(a.Pod, b.Pod) })
	return client.BuildRegions(got), skipped, nil
}

// RegionNotFoundError: no store lists the region; Regions are those they do.
type RegionNotFoundError struct {
	Region, Cluster string
	Regions         []string
}

func (e *RegionNotFoundError) Error() string {
	return fmt.Sprintf("KVCluster %s has no region %q; its regions are %s (`kubectl bellows regions %s` lists them)",
		e.Cluster, e.Region, strings.Join(e.Regions, ", "), e.Cluster)
}

// Owner is the pod serving region name among regions: the first owner
// whose region is open there (a region moving has two).
func Owner(c *kvapi.KVCluster, regions []client.Region, name string) (string, error) {
	var names []string
	for _, r := range regions {
		names = append(names, r.Name)
		if r.Name != name {
			continue
		}
		for _, st := range r.Stats {
			if st.Waiting == "" && slices.Contains(r.Owners, st.Addr) {
				return st.Addr, nil
			}
		}
		if len(r.Owners) > 0 {
			return r.Owners[0], nil
		}
	}
	return "", &RegionNotFoundError{Region: name, Cluster: c.Name, Regions: names}
}

// podState is the pod's phase, or the reason its container waits or ended
// (CrashLoopBackOff, ImagePullBackOff...), as kubectl get pods shows.
func podState(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return w.Reason
		}
		if t := cs.State.Terminated; t != nil && t.Reason != "" {
			return t.Reason
		}
	}
	if p.DeletionTimestamp != nil {
		return "Terminating"
	}
	return string(p.Status.Phase)
}
